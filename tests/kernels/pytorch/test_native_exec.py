"""kernels/pytorch/native_exec.py on CPU: a ``topocoll`` group on 2 spawned ranks whose native
executor runs over the emulated share backend of the MPI tests (shared memory for CUDA IPC, each
launch interpreted in its process): all_reduce, broadcast, reduce, all_gather_into_tensor and
reduce_scatter_tensor on float32, bfloat16, int64 and uint8 equal gloo's results bit for bit,
each one native launch (``_native_jobs.shm_job``); memory a peer cannot map refused on every
rank; the routing decision; the local reasons."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")


@pytest.mark.parametrize("family", ["all_reduce:sum", "all_reduce:max", "broadcast", "reduce",
                                    "all_gather_into_tensor", "reduce_scatter_tensor"])
def test_each_call_runs_as_one_native_launch_and_equals_gloo(shm_results, family):
    from _torch_dist import checked, merged
    # 2 ranks x (6 calls x 4 dtypes x 3 sizes + 2 protocols x 2 dtypes x 2 calls + 2)
    assert checked(shm_results, "shm") == 2 * (6 * 4 * 3 + 8 + 2)
    assert not merged(shm_results, "shm:" + family)


def test_a_native_call_costs_three_socket_rounds_two_syncs_one_export_and_no_store_access(shm_results):
    """The host side of a repeated native all_reduce (``_native_jobs._per_call_counts``): the
    agreement, entry and exit all-gathers (3 messages per peer), the stream synchronised before
    and after the launch, the one buffer of an in-place call exported once, one launch, and
    nothing asked of the store (a store access per call would cost milliseconds on a real GPU)."""
    from _torch_dist import merged
    assert all("percall:native" in res for res in shm_results)
    assert not merged(shm_results, "percall")


@pytest.mark.parametrize("protocol", ["ll", "simple"])
def test_the_plan_entrys_protocol_reaches_the_native_path_and_equals_gloo(shm_results, protocol):
    from _torch_dist import merged
    assert all(f"shm:protocol:{protocol}" in res for res in shm_results)
    assert not merged(shm_results, f"shm:protocol:{protocol}")


def test_unshareable_memory_is_refused_on_every_rank_and_the_group_goes_on(shm_results):
    from _torch_dist import merged
    assert all("shm:unshareable" in res and "shm:after" in res for res in shm_results)
    assert not merged(shm_results, "shm:unshareable") and not merged(shm_results, "shm:after")


def test_the_data_path_follows_the_route_and_the_executor():
    from kernels.pytorch.calls import data_path
    assert data_path("nccl", True) == "nccl"                       # plan.json says NCCL and it can run
    assert data_path("best:ring (cost model)", True) == "native"
    assert data_path("results/plan.json:ring", False) == "host"


def test_local_reasons_name_the_setting(monkeypatch):
    from kernels.pytorch.native_exec import ENV, local_reason
    monkeypatch.setenv(ENV, "never")
    assert local_reason() == f"{ENV}=never"
    monkeypatch.setenv(ENV, "auto")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:64, expandable_segments:True")
    assert local_reason().startswith("PYTORCH_ALLOC_CONF sets expandable_segments:true")
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:False")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync")
    assert local_reason().startswith("PYTORCH_CUDA_ALLOC_CONF sets backend:cudamallocasync")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    monkeypatch.delenv("PYTORCH_ALLOC_CONF")
    try:
        import cupy  # noqa: F401
        assert local_reason() == ""
    except ImportError:
        assert "CuPy" in local_reason()


def test_a_group_that_cannot_run_natively_says_why_and_takes_the_host_path(monkeypatch):
    import torch

    from kernels.pytorch.native_exec import ENV, NativeExecutor
    monkeypatch.setenv(ENV, "never")
    ex = NativeExecutor(group=None, rank=0, size=1)                  # one rank: no message travels
    assert not ex.takes(torch.zeros(3))                               # CPU tensors never go native
    emulated = NativeExecutor(group=None, rank=0, size=1, backend=object())
    assert emulated.takes(torch.zeros(3, dtype=torch.bfloat16)) and emulated.takes(torch.zeros(3, dtype=torch.uint8))
    assert not emulated.takes(torch.zeros(3, dtype=torch.int16)) and not emulated.takes(torch.zeros(3, dtype=torch.bool))
    x = torch.arange(4.0)
    assert ex.run(None, x, x, 4, "sum") is False and ex.why_not == f"rank 0: {ENV}=never"
    assert ex.launches == 0 and x.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_the_phase_clock_puts_each_step_of_a_call_in_its_phase(monkeypatch):
    """TorchCudaShareBackend's steps timed on its clock (CuPy's calls replaced by naps of known
    length on a virtual clock, so that a loaded machine cannot stretch them): the synchronisation
    before a launch is input_sync, the one after it device; per call µs are the sums over the
    calls, and ``other`` is what the phases leave of ``total``."""
    import types

    from kernels.mpi.native_cuda import CudaShareBackend
    from kernels.pytorch import native_exec
    from kernels.pytorch.native_exec import PhaseClock, TorchCudaShareBackend
    now = [100.0]                                         # seconds on the virtual clock

    def nap(s):
        now[0] += s
    monkeypatch.setattr(native_exec, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    naps = {"export": 0.002, "launch": 0.001}
    for name, s in naps.items():
        monkeypatch.setattr(CudaShareBackend, name, lambda self, *a, s=s, **k: nap(s))
    syncs = iter([0.002, 0.008] * 3)                      # before the launch, after it
    monkeypatch.setattr(CudaShareBackend, "synchronize", lambda self: nap(next(syncs)))
    fake_cp = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=None))
    be = TorchCudaShareBackend(PhaseClock(), ipc=types.SimpleNamespace(cp=fake_cp))
    clock = be.clock
    for _ in range(3):                                    # one call: sync, 2 exports, launch, sync
        t0 = now[0]
        be.synchronize()
        be.export(None, "send")
        be.export(None, "recv")
        be.launch(None, {}, graph=False)
        be.synchronize()
        nap(0.003)                                        # the runner's own work
        clock.calls += 1
        clock.add("total", t0)
    per = clock.per_call_us()
    want = {"input_sync": 2000, "export": 4000, "launch": 1000, "device": 8000, "other": 3000}
    for phase, us in want.items():
        assert abs(per[phase] - us) < 1e-3, (phase, per)
    assert abs(sum(per[k] for k in want) - per["total"]) < 1e-6
    clock.reset()
    assert clock.per_call_us() == {"other": 0.0}

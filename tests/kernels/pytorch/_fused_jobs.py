"""The job of test_fused.py (run on spawned ranks by ``_torch_dist.run_job``): a small CPU
all_reduce sends one message per peer (header and data together) where it took two, its results
equal gloo's bit for bit, and every mismatch found in that one round raises the same one-line
error on every rank with every rank's tensor untouched, after which the group goes on in step.

Mismatches: ranks that disagree on the element count (every rank's data rides with its header,
of different lengths); a rank whose call is too large to carry its data (a header alone) while
the others' headers carry theirs; a rank that sends its header alone for the same call (the
one-round path switched off on that rank only: the headers then differ only in the bytes that
follow them); a rank whose tensor fails the local checks while the others send data."""

from __future__ import annotations

from datetime import timedelta

from _torch_jobs import Recorder, bits_equal, ints


def _expect_everywhere(rec: Recorder, name: str, cls: str, fn, tensor, text: str) -> None:
    """``fn()`` raises ``cls`` whose message holds ``text``; ``tensor`` is bit for bit as before."""
    before = tensor.clone()
    try:
        fn()
        rec.check(name, False, "no error raised")
    except RuntimeError as e:
        rec.check(name, type(e).__name__ == cls and text in str(e), f"{type(e).__name__}: {e}")
        rec.out.setdefault("__messages__", {})[name] = str(e)
    rec.check(name + ":untouched", bits_equal(tensor, before), f"{tensor.reshape(-1)[:4].tolist()} was "
              f"{before.reshape(-1)[:4].tolist()}")


def _in_step(rec: Recorder, name: str, rank: int, n: int) -> None:
    """After a refused call, the next all_reduce is right on every rank (the ranks are in step)."""
    import torch
    import torch.distributed as dist
    x = torch.full((5,), float(rank + 1))
    dist.all_reduce(x)
    rec.check(name + ":in_step", x.tolist() == [n * (n + 1) / 2] * 5, str(x.tolist()))


def _messages_per_call(rec: Recorder, pg, rank: int, n: int, gloo) -> None:
    """Ten all_reduces of every dtype the suite uses, up to 1 MiB (one-shot without a plan on CPU
    tensors up to there, kernels.pytorch.host_cost): n - 1 messages each (one per peer), results
    equal gloo's; a call too large to ride with its header takes the schedule's own messages."""
    import torch
    import torch.distributed as dist

    from kernels.pytorch.agreement import DATA_BYTES_MAX
    mesh = pg._mesh
    for dtype in ("float32", "bfloat16", "int64", "uint8"):
        size = getattr(torch, dtype).itemsize
        for numel in (1, 7, 1024, (64 << 10) // size, (1 << 20) // size):
            x = ints(dtype, (numel,), 11 * rank + numel, 0, 8)
            ref = x.clone()
            before = mesh.frames_sent
            for _ in range(10):
                dist.all_reduce(x, op=dist.ReduceOp.MAX)
            sent = mesh.frames_sent - before
            dist.all_reduce(ref, op=dist.ReduceOp.MAX, group=gloo)
            rec.check("fused:messages", sent == 10 * (n - 1), f"{dtype} x {numel}: {sent} messages in 10 calls")
            rec.check("fused:equal", bits_equal(x, ref) and pg.runner.last_path == "host", f"{dtype} x {numel}")
    big = torch.ones(DATA_BYTES_MAX // 4 + 1)
    before = mesh.frames_sent
    dist.all_reduce(big)
    rec.check("fused:large_takes_two_rounds", mesh.frames_sent - before > n - 1 and bool((big == n).all()),
              f"{mesh.frames_sent - before} messages")


def _mismatches(rec: Recorder, pg, rank: int, n: int) -> None:
    import torch
    import torch.distributed as dist

    import kernels.pytorch.calls as calls
    from kernels.pytorch.agreement import DATA_BYTES_MAX
    last = n - 1
    x = torch.arange(8, dtype=torch.float32) + rank
    counts = torch.zeros(9) if rank == last else x
    _expect_everywhere(rec, "fused:count", "CollectiveMismatch", lambda: dist.all_reduce(counts), counts,
                       f"elements per block: rank 0 has 8, rank {last} has 9")
    _in_step(rec, "fused:count", rank, n)
    big = torch.zeros(DATA_BYTES_MAX // 4 + 1) if rank == last else x      # too large: its header travels alone
    _expect_everywhere(rec, "fused:too_large", "CollectiveMismatch", lambda: dist.all_reduce(big), big,
                       f"elements per block: rank 0 has 8, rank {last} has {DATA_BYTES_MAX // 4 + 1}")
    _in_step(rec, "fused:too_large", rank, n)
    plain = calls.fused_route
    if rank == last:                                            # this rank sends its header alone
        calls.fused_route = lambda *a, **k: None
    try:
        _expect_everywhere(rec, "fused:header_alone", "CollectiveMismatch", lambda: dist.all_reduce(x), x,
                           f"bytes of data sent with the header: rank 0 has 32, rank {last} has 0")
    finally:
        calls.fused_route = plain
    _in_step(rec, "fused:header_alone", rank, n)
    bad = torch.zeros(4, 2).t() if rank == 0 else x             # not contiguous: no data from rank 0
    _expect_everywhere(rec, "fused:bad_tensor", "BadTensor", lambda: dist.all_reduce(bad), x,
                       "rank 0: ")
    _in_step(rec, "fused:bad_tensor", rank, n)


def fused_job(rank: int, n: int, init: str) -> dict:
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group

    import kernels.pytorch  # noqa: F401
    dist.init_process_group("topocoll", init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    rec = Recorder()
    pg = _get_default_group()
    _messages_per_call(rec, pg, rank, n, gloo)
    _mismatches(rec, pg, rank, n)
    dist.destroy_process_group()
    return rec.out

"""A ring's Simple CTA threads as NCCL's tuner sets them (synth/model/nccl/ring_steps.py ``simple_ring_threads``)
and the copy rate of a 256-thread CTA, hand-computed from the source's rule: 256 threads where the ring graph's
bandwidth x channels <= PCI_BW 12 GB/s (NVIDIA/nccl v2.28.9-1 src/graph/tuning.cc line 231; the tree graph's in
2.5, v2.5.6-1 line 80; 256 always in 2.4, v2.4.8-1 src/include/rings.h lines 10-13), else 512."""

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.params import ModelParams
from synth.model.nccl.ring_steps import cta_copy_gbs, ring_simple_send_share, simple_ring_threads
from topo_probe import get_preset

V100_PCIE = "Tesla V100-PCIE-16GB"


def _pcie_pair(**kw):
    """2 x V100 PCIe Gen3 through host memory on one socket (Azure NC12s_v3's layout)."""
    m = NcclMachine.from_topology(get_preset("l40s-8gpu-pcie"), gpus_per_process=2)
    return m.with_(**{"arch": "sm70", "ranks": 2, "pcie_gen": 3, "sockets": 1, "p2p": False, "gpu_name": V100_PCIE,
                      **kw})


def test_a_gen3_pcie_ring_runs_256_threads_and_nvlink_512():
    m = _pcie_pair()
    g = comm_graphs(m, version=(2, 28, 9))
    assert g.ring.bw_intra * g.ring.n_channels <= 12.0           # one PCIe Gen3 ring: NCCL rates it 12 GB/s
    assert simple_ring_threads(m, g, (2, 28, 9)) == 256
    h100 = NcclMachine.from_topology(get_preset("dgx-h100"))
    assert simple_ring_threads(h100, comm_graphs(h100), (2, 28, 9)) == 512


@pytest.mark.parametrize("version, expect", [((2, 4, 8), 256), ((2, 5, 6), 512), ((2, 8, 3), 512)])
def test_the_version_picks_the_graph(version, expect):
    """2.4 runs 256 threads on every GPU after Kepler, even on NVLink; 2.5 on reads the graph (NVSwitch: > 12)."""
    h100 = NcclMachine.from_topology(get_preset("dgx-h100"))
    assert simple_ring_threads(h100, comm_graphs(h100, version=version), version) == expect


def test_a_256_thread_cta_copies_at_half_the_rate_by_hand():
    # V100 PCIe 1.37 GHz against H100 SXM5's 1.98 GHz, 256 of 512 threads: 100 x 1.37 / 1.98 / 2 = 34.596 GB/s
    p = ModelParams(ring_copy_gbs=100.0)
    assert cta_copy_gbs("sm70", p, V100_PCIE, threads=256) == pytest.approx(100.0 * 1.37 / 1.98 / 2, rel=1e-9)
    # 2 ranks' all_reduce through host memory: 2 sends and 1 copy a chunk; a channel sending 6 GB/s copies one
    # step in 6 / 34.596 = 0.17343 of a send step: 2 / 2.17343 = 0.92020 of the link (6 / 69.192 = 0.08672: 0.95844 at 512 threads)
    m = _pcie_pair()
    share = ring_simple_send_share(m, "allreduce", 6.0, p, (2, 28, 9), p2p_disable=True, threads=256)
    assert share == pytest.approx(2 / (2 + 6.0 / (100.0 * 1.37 / 1.98 / 2)), rel=1e-9)
    assert share == pytest.approx(0.92020, abs=1e-5)
    full = ring_simple_send_share(m, "allreduce", 6.0, p, (2, 28, 9), p2p_disable=True)
    assert full == pytest.approx(0.95844, abs=1e-5)


def test_the_model_times_a_gen3_ring_with_256_threads(monkeypatch):
    """1 GiB all_reduce on the pair at 2.28: slower than the same ring would be with a 512-thread CTA."""
    from synth.model.nccl import ring_steps, runtime
    m = _pcie_pair()
    t = NcclModel(m, version=(2, 28, 9)).choose("allreduce", 1 << 30)
    assert t.label.startswith("ring/Simple")
    monkeypatch.setattr(runtime, "simple_ring_threads", lambda *a, **k: ring_steps.SIMPLE_MAX_NTHREADS)
    assert t.time_us > NcclModel(m, version=(2, 28, 9)).choose("allreduce", 1 << 30).time_us

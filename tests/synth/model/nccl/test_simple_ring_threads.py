"""A ring's Simple CTA threads as NCCL's tuner sets them (synth/model/nccl/ring_steps.py ``simple_ring_threads``)
and the copy rate of a 256-thread CTA, hand-computed from the source's rule: 256 threads where the ring graph's
bandwidth x channels <= PCI_BW 12 GB/s (NVIDIA/nccl v2.28.9-1 src/graph/tuning.cc line 231; the tree graph's in
2.5, v2.5.6-1 line 80; 256 always in 2.4, v2.4.8-1 src/include/rings.h lines 10-13), else 512."""

import argparse

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.params import ModelParams
from synth.model.nccl.ring_steps import cta_copy_gbs, ring_simple_send_share, simple_ring_threads
from topo_probe import get_preset
from topo_probe.cli.options import apply_machine_arguments

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


def _p3dn_pair():
    """2 p3dn-like hosts: the dgx1-v100 hybrid cube mesh, one 100 Gb/s EFA NIC each."""
    ns = argparse.Namespace(nodes=2, nic_gbps=12.5, nics_per_node=1, rail_optimized=False)
    return NcclMachine.from_topology(apply_machine_arguments(get_preset("dgx1-v100"), ns), net_kind="efa")


@pytest.mark.parametrize("version, expect", [((2, 4, 8), 256), ((2, 5, 6), 512), ((2, 6, 4), 256), ((2, 28, 9), 256)])
def test_the_version_picks_the_graph(version, expect):
    """By hand from NCCL's search on a p3dn-like pair: the GPU-to-NIC path is 12 GB/s (NET_WIDTH 12, a Gen3 x16
    PCI_WIDTH 12: v2.6.4-1 src/graph/topo.h lines 17 and 22), so the search starts at 12 and a ring through the one
    NIC fits 1 channel at 12 (1 x 12 = 12 <= 12: 256); a tree, not a ring, then raises its intra speed in steps of 3
    up to twice the inter speed (v2.5.6-1 src/graph/search.cc lines 548-552), over 21 GB/s NVLink: 1 x 24 > 12.
    2.5 reads the tree graph (v2.5.6-1 tuning.cc line 80: 512), 2.6 on the ring graph (v2.6.4-1 line 80,
    v2.28.9-1 line 231: 256), 2.4 runs 256 regardless (v2.4.8-1 rings.h lines 10-13).  Swapping the two graphs
    turns 2.5.6 to 256 and 2.6 on to 512."""
    m = _p3dn_pair()
    g = comm_graphs(m, version=version)
    assert (g.ring.n_channels, g.ring.bw_intra) == (1, 12.0)
    if version >= (2, 5):
        assert (g.tree.n_channels, g.tree.bw_intra) == (1, 24.0)
    assert simple_ring_threads(m, g, version) == expect


def test_a_256_thread_cta_copies_at_half_the_rate_by_hand():
    # V100 PCIe 1.37 GHz against H100 SXM5's 1.98 GHz, 256 of 512 copy workers (a ring CTA runs the tuner's threads
    # plus one sync warp, v2.28.9-1 enqueue.cc line 1902; nworkers = nthreads - WARP_SIZE, prims_simple.h line 597):
    # 100 x 1.37 / 1.98 x 256 / 512 = 34.596 GB/s
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

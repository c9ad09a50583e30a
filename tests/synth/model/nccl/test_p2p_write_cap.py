"""A ring of P2P over PCIe streams at most at the measured slowest hop of the ring NCCL builds (``p2p_write_gbs``).

A ring runs at its slowest hop: NCCL's search keeps a ring's per-channel speed only if every link of
every hop carries it (NVIDIA/nccl v2.28.9-1 src/graph/search.cc ``followPath``, line 110), and each GPU
forwards each chunk.  With every GPU pair alike in the search (topo.cc lines 264-277 join every pair of
CPU nodes) ties go by start index (search.cc lines 191-200, 242-254): the ring is 0->1->...->7->0.  The
8 x RTX 4090 box after the P2P patch states CUDA's p2pBandwidthLatencyTest (unidirectional, P2P writes,
rows = senders; blog.chlc.cc): 25.6-26.0 GB/s within a socket, 3->4 22.14 and 7->0 21.32 across, so 21.3,
below Gen4 x16's 31.5 x 0.8 = 25.2.  The 8 x RTX 5090 box: 55.62 at both crossings, 56.6 within a socket,
so 55.6, above Gen5's 63 x 0.8 = 50.4: no cap.  The figure is an achieved rate: it is not derated."""

from __future__ import annotations

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.runtime import ring_capacity_gbs

#: the 4090 box's ring 0->1->...->7->0, P2P-on unidirectional GB/s of each hop (sender row, receiver column)
RTX4090_RING_HOPS = [25.60, 25.79, 25.78, 22.14, 25.69, 25.95, 25.83, 21.32]


def _ring(m, p2p=True):
    return ring_capacity_gbs(m, NcclModel(m).table.graphs, DEFAULT_PARAMS, p2p=p2p)


def test_a_measured_ring_hop_below_the_link_rule_caps_the_ring():
    assert min(RTX4090_RING_HOPS) == 21.32                  # 7->0; 6->0's 20.57 is not a hop of this ring
    m = NcclMachine("4090", "sm89", 8, 1, "pcie", 0, pcie_gen=4, cpu_vendor="amd", p2p=True, p2p_write_gbs=21.3)
    assert _ring(m) == pytest.approx(21.3)                  # not derated: an achieved rate
    assert _ring(m.with_(p2p_write_gbs=0.0)) == pytest.approx(25.2)      # not stated: 31.5 x 0.8


def test_a_measured_ring_hop_above_the_link_rule_changes_nothing():
    m = NcclMachine("5090", "sm120", 8, 1, "pcie", 0, pcie_gen=5, cpu_vendor="amd", p2p=True, p2p_write_gbs=55.6)
    assert _ring(m) == pytest.approx(50.4)                  # 63 x 0.8, below 55.6


def test_the_cap_is_for_p2p_rings_only_not_host_memory_rings():
    m = NcclMachine("4090", "sm89", 8, 1, "pcie", 0, pcie_gen=4, cpu_vendor="amd", p2p=True, p2p_write_gbs=1.0)
    assert _ring(m, p2p=False) == pytest.approx(15.75)      # SHM: 31.5 x 0.5, the 1.0 ignored

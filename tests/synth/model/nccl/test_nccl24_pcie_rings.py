"""NCCL 2.4's rings on one host without NVLink: one ring, never duplicated (NVIDIA/nccl v2.4.2-1
src/transport/p2p.cu ``p2pComputeRingsPci`` line 358 ``if (connect == 0) return 1``; src/transport/shm.cu
line 70; src/misc/rings.cu lines 345-352 duplicate only "in case of multinode+NVLink", lines 375-380 raise
to ``NCCL_MIN_NRINGS``' default, 1 after Kepler).  From 2.5 the graph search and
``ncclTopoPostset``'s doubling give the same host 2 channels (v2.8.3-1 src/graph/connect.cc line 267)."""

from __future__ import annotations

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.channel_counts import legacy_one_host_channels
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.params import ModelParams
from topo_probe import get_preset

#: 4 x V100 PCIe behind one Gen3 switch, one process (the Bessemer node's shape, its case's machine)
V100_PCIE = NcclMachine.from_topology(get_preset("l40s-8gpu-pcie"), gpus_per_process=4).with_(
    arch="sm70", ranks=4, pcie_gen=3, sockets=1, p2p=True)
DGX1 = NcclMachine.from_topology(get_preset("dgx1-v100"), gpus_per_process=8)


def test_one_ring_on_a_pcie_host_before_2_5():
    assert comm_graphs(V100_PCIE, version=(2, 4, 2)).n_channels == 1
    assert comm_graphs(V100_PCIE, version=(2, 8, 3)).n_channels == 2     # one searched ring, doubled


def test_nvlink_rings_and_several_hosts_keep_their_channels():
    assert legacy_one_host_channels(V100_PCIE, True, 12, (2, 4)) == 12
    assert legacy_one_host_channels(V100_PCIE.with_(nodes=2, ranks=8), False, 4, (2, 4)) == 4
    assert comm_graphs(DGX1, version=(2, 4)).n_channels == comm_graphs(DGX1, version=(2, 5)).n_channels


def test_ll_gives_way_at_64_kib_on_one_ring():
    """2.4's getKernelInfo keeps LL while nBytes <= nc x nt x nranks x 64 B: 1 x 256 x 4 x 64 = 64 KiB on one
    ring (on two it would be 128 KiB); Simple then runs on the one ring."""
    model = NcclModel(V100_PCIE, ModelParams(), version=(2, 4, 2))
    assert model.choose("allreduce", 64 << 10).label == "ring/LL/1"
    assert model.choose("allreduce", (64 << 10) + 4).label == "ring/Simple/1"

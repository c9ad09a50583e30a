"""A DGX-1's unlinked GPU pairs send through one intermediate GPU over NVLink (PATH_NVB, NCCL >= 2.8), each link
carrying its own pair's bytes and the bytes it relays (synth/model/nccl/p2p_mesh.py).  Expected values are worked
out by hand from NCCL's rule (the FIFO is the receiver's buffer, on the intermediate of the path receiver ->
sender: src/transport/p2p.cc lines 437, 468 and 490-500; that path is searched outward from the sender,
src/graph/paths.cc lines 36-73: the first of the sender's neighbours, most links first, equal counts by lower
GPU index, with the widest narrower leg), not read off the model."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.p2p import p2p_link_efficiency
from synth.model.nccl.p2p_mesh import mesh_links, nvb_intermediate
from synth.model.nccl.params import DEFAULT_PARAMS
from topo_probe import get_preset

#: each unlinked ordered pair of the DGX-1 hybrid cube mesh and the GPU holding its FIFO, by hand: e.g. 0 -> 6 can
#: go through 2 (1 link, then 2) or 4 (2, then 1): both 1 link wide, and the sender 0 lists 4 (2 links) before 2
#: (1 link); 7 -> 0 through 3 or 4, both 1 link from 7 and 1 wide: the lower index, 3 (NVML's order unknown)
DGX1_NVB = {(0, 5): 4, (0, 6): 4, (0, 7): 4, (1, 4): 0, (1, 6): 2, (1, 7): 3, (2, 4): 6, (2, 5): 6, (2, 7): 6,
            (3, 4): 0, (3, 5): 1, (3, 6): 2, (4, 1): 0, (4, 2): 0, (4, 3): 0, (5, 0): 4, (5, 2): 1, (5, 3): 7,
            (6, 0): 2, (6, 1): 2, (6, 3): 2, (7, 0): 3, (7, 1): 5, (7, 2): 6}
GIB = 1 << 30


@pytest.fixture(scope="module")
def dgx1():
    return NcclMachine.from_topology(get_preset("dgx1-v100"))


def test_each_unlinked_dgx1_pair_goes_through_the_intermediate_nccl_picks(dgx1):
    links = mesh_links(dgx1)
    unlinked = {(i, j) for i in range(8) for j in range(8) if i != j and not links[i][j]}
    assert unlinked == set(DGX1_NVB)
    assert {p: nvb_intermediate(links, *p) for p in unlinked} == DGX1_NVB


def _nvl_gbs(m):
    return m.link_gbs * p2p_link_efficiency(m, DEFAULT_PARAMS) * 1e3          # one NVLink, bytes/µs


def _pcie_gbs(m):
    return 15.75 * DEFAULT_PARAMS.link_efficiency(m.arch, "pcie") * 1e3       # Gen3 x16, bytes/µs


@pytest.mark.parametrize("coll, version, units, link", [
    # alltoall: 3 -> 0 (1 link) carries 3 -> 0, 3 -> 4's first leg and 7 -> 0's second: 3 parts, the busiest
    # (so do 1 -> 2, 5 -> 1, 7 -> 3, and 0 -> 4, 2 -> 6 with 6 parts on 2 links)
    ("alltoall", (2, 28), 3, "nvl"),
    # scatter from 0: 0 -> 4 (2 links) carries 4's part and the first legs of 5, 6 and 7: 4 parts, 2 a link;
    # gather to 0: 2 -> 0 (1 link) carries 2's and 6's parts, 3 -> 0 3's and 7's: 2 parts a link
    ("scatter", (2, 28), 2, "nvl"), ("gather", (2, 28), 2, "nvl"),
    # before 2.8 no NVB: GPU 0's PCIe link carries its 3 unlinked peers' parts (alltoall, scatter, gather alike)
    ("alltoall", (2, 7), 3, "pcie"), ("scatter", (2, 7), 3, "pcie"), ("gather", (2, 7), 3, "pcie"),
])
def test_the_busiest_link_sets_a_dgx1_p2p_collective(dgx1, coll, version, units, link):
    """1 GiB: each part 128 MiB; NCCL's fixed p2p µs plus the busiest link's parts at its rate, and under 1 % for
    the receiver's copy of its last FIFO chunk (test_p2p_fifo_fill.py)."""
    rate = _nvl_gbs(dgx1) if link == "nvl" else _pcie_gbs(dgx1)
    by_hand = DEFAULT_PARAMS.p2p_latency_us + units * (GIB / 8) / rate
    t = NcclModel(dgx1, version=version).choose(coll, GIB).time_us
    assert by_hand < t < by_hand * 1.01


def test_a_dgx1_sendrecv_runs_at_its_slowest_pair(dgx1):
    """nccl-tests sendrecv: rank r to r + 1.  1 -> 2 and 5 -> 6 have one NVLink; 3 -> 4 goes through 0 and 7 -> 0
    through 3 (7's links to 3 and 4 are both one wide; the lower index stands in for NVML's unknown order), so the
    one link 3 -> 0 carries both pairs' bytes: 2 parts at one link's rate set 1 GiB at 2.8+ (through 4 instead it
    would be 1).  Before 2.8, 3 -> 4 and 7 -> 0 cross PCIe instead, one part on each x16 link."""
    for version, rate, units in (((2, 28), _nvl_gbs(dgx1), 2), ((2, 7), _pcie_gbs(dgx1), 1)):
        by_hand = DEFAULT_PARAMS.p2p_latency_us + units * GIB / rate
        t = NcclModel(dgx1, version=version).choose("sendrecv", GIB).time_us
        assert by_hand < t < by_hand * 1.01, version


def test_a_mesh_is_the_communicators_gpus_only(dgx1):
    """NCCL's topology holds only the communicator's GPUs (src/graph/topo.cc ``ncclTopoAddNvLinks`` drops a link
    to any other): 2 GPUs of a DGX-1 per host see the 2 x 2 block, one pair 2 links wide."""
    two = dgx1.with_(ranks=4, nodes=2)
    assert mesh_links(two) == ((0, 2), (2, 0))

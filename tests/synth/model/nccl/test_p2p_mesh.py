"""A DGX-1's unlinked GPU pairs send through one intermediate GPU over NVLink (PATH_NVB, NCCL >= 2.8), each link
carrying its own pair's bytes and the bytes it relays (synth/model/nccl/p2p_mesh.py).  Expected values are worked
out by hand from NCCL's rule (src/graph/paths.cc lines 67-73: the first of the receiver's neighbours, most links
first, with the widest narrower leg; src/transport/p2p.cc lines 402-416: the FIFO lives in the intermediate's
memory), not read off the model."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.p2p import p2p_link_efficiency
from synth.model.nccl.p2p_mesh import mesh_links, nvb_intermediate
from synth.model.nccl.params import DEFAULT_PARAMS
from topo_probe import get_preset

#: each unlinked ordered pair of the DGX-1 hybrid cube mesh and its intermediate, by hand: e.g. 0 -> 6 can go
#: through 2 (1 link, then 2) or 4 (2, then 1): both 1 link wide, and 6 lists 2 (2 links) before 4 (1 link)
DGX1_NVB = {(0, 5): 4, (0, 6): 2, (0, 7): 3, (1, 4): 0, (1, 6): 2, (1, 7): 5, (2, 4): 0, (2, 5): 1, (2, 7): 6,
            (3, 4): 0, (3, 5): 7, (3, 6): 2, (4, 1): 0, (4, 2): 6, (4, 3): 0, (5, 0): 4, (5, 2): 6, (5, 3): 1,
            (6, 0): 4, (6, 1): 2, (6, 3): 2, (7, 0): 4, (7, 1): 3, (7, 2): 6}
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
    # alltoall: 0 -> 3 (1 link) carries 0 -> 3, 0 -> 7's first leg and 4 -> 3's second: 3 parts, the busiest
    ("alltoall", (2, 28), 3, "nvl"),
    # scatter from 0: 0 -> 2 (1 link) carries 2's and 6's parts, 0 -> 3 3's and 7's: 2 parts a link; gather to 0:
    # 4 -> 0 (2 links) carries 4's part and the second legs of 5, 6 and 7: 4 parts, 2 a link
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
    through 4, one link wide on their first leg (3 -> 0, 7 -> 4), each leg carrying that pair alone: one link's
    rate sets 1 GiB.  Before 2.8, 3 -> 4 and 7 -> 0 cross PCIe instead."""
    for version, rate in (((2, 28), _nvl_gbs(dgx1)), ((2, 7), _pcie_gbs(dgx1))):
        by_hand = DEFAULT_PARAMS.p2p_latency_us + GIB / rate
        t = NcclModel(dgx1, version=version).choose("sendrecv", GIB).time_us
        assert by_hand < t < by_hand * 1.01, version


def test_a_mesh_is_the_communicators_gpus_only(dgx1):
    """NCCL's topology holds only the communicator's GPUs (src/graph/topo.cc ``ncclTopoAddNvLinks`` drops a link
    to any other): 2 GPUs of a DGX-1 per host see the 2 x 2 block, one pair 2 links wide."""
    two = dgx1.with_(ranks=4, nodes=2)
    assert mesh_links(two) == ((0, 2), (2, 0))

"""Several GPUs of a host share one narrow link on their way to the NIC (``synth/model/nccl/pcie_share.py``): NCCL's
search takes each channel's bandwidth off every link it crosses (NVIDIA/nccl v2.28.9-1 src/graph/search.cc
``followPath`` lines 110-111), so ``k`` GPUs whose channels cross one link get ``1 / k`` of it each, and an alltoall
runs every peer's transfer in one kernel plan (src/enqueue.cc ``scheduleP2pTasksToPlan`` lines 1039-1119).  And a NIC
whose rate is its own PCIe slot's moves data as that PCIe link does.  Before, each GPU was capped by its own path
only and a PCIe-limited NIC ran at the network's efficiency, so these machines fell below the lower bound.
Expectations by hand: data-sheet GB/s per direction x the model's link efficiencies (``link_eff``: pcie 0.8, shm 0.5
for a socket link, as the bound rates a ``cpu`` link), no latency."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.pcie_path import pcie_rate_gbs, run_nic_share
from synth.model.nccl.pcie_share import nic_links, nic_shares
from topo_probe.errors import InvalidArgument
from topo_probe.load import load_topology

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmarks"))
import bound_check  # noqa: E402

GIB = 1 << 30
X4_UPLINK = 'link_speed="16.0 GT/s PCIe" link_width="4"'
FAMILY = Path(__file__).resolve().parents[3] / "fixtures" / "family"


def _us(nbytes: float, gbs: float) -> float:
    """µs to move ``nbytes`` at ``gbs`` GB/s."""
    return nbytes / (gbs * 1e3)


def _x4_shm_two_hosts(tmp_path):
    path = tmp_path / "dump.xml"
    path.write_text(bound_check.pcie_dump_variant(switch_link=X4_UPLINK, pcilink=False))
    return bound_check.machine(load_topology(str(path)), 2)


def test_two_gpus_behind_one_x4_uplink_get_half_of_it_each(tmp_path):
    """The dump's NICs sit under switch 0; GPUs 2 and 3 sit under switch 1, whose x4 uplink (16 GT/s x 4 lanes =
    7.875 GB/s) and switch 0's are their only way to the NIC: both cross both uplinks, 7.875 / 2 = 3.9375 GB/s each.
    GPUs 0 and 1 reach the NIC through their own switch (their x16 links, one GPU each)."""
    topo = _x4_shm_two_hosts(tmp_path)
    links = nic_links(topo, [0, 1, 2, 3])
    assert [len(links[k]) for k in range(4)] == [1, 1, 3, 3]        # GPU link; GPU link + the two uplinks
    # GPUs 0-2 in use: GPU 2 alone on the uplinks (7.875); all four: GPUs 2 and 3 share them
    assert nic_shares(topo, [0, 1, 2, 3], 4) == ((), (), ((7.875, "pcie"),), ((3.9375, "pcie"),))
    m = NcclMachine.from_topology(topo)
    assert (m.nodes, m.p2p, m.pcie_path_gbs, run_nic_share(m)) == (2, False, 7.875, ((3.9375, "pcie"),))
    assert run_nic_share(m.with_(ranks=4)) == ()            # 2 GPUs per host: devices 0-1, under the NIC
    assert pcie_rate_gbs(m, DEFAULT_PARAMS, to_nic=True) == pytest.approx(3.9375 * 0.8)


def test_the_x4_uplink_alltoall_shares_the_uplink(tmp_path):
    """2 x 4 GPUs, 1 GiB alltoall: GPU 2 sends 7/8 GiB (3 local parts through host memory, 4 remote ones through the
    NIC), all across its switch's uplink, which GPU 3 crosses too: at least 7/8 GiB / (3.9375 x 0.8) = 298,261.6 µs
    (before: its own path's 7.875 GB/s, 149,131 µs and 0.58 of the lower bound)."""
    m = NcclMachine.from_topology(_x4_shm_two_hosts(tmp_path))
    floor = _us(GIB * 7 / 8, 3.9375 * 0.8)
    assert floor == pytest.approx(298261.6, abs=0.1)
    assert NcclModel(m).choose("alltoall", GIB).time_us > floor


def test_the_second_sockets_gpus_share_the_socket_link_to_the_nic():
    """4 x P100, the NIC on socket 0 (nvidia-smi: PHB to GPUs 0-1, SOC to GPUs 2-3), the sockets joined by 20 GB/s:
    GPUs 2 and 3 both cross it to the NIC, 10 GB/s each, a socket link (``shm`` efficiency, 0.5, as the bound's
    ``cpu`` links).  A 1 GiB alltoall on 2 hosts: at least 7/8 GiB / (10 x 0.5) = 187,904.8 µs (before: the 20 GB/s
    path at the PCIe efficiency, 0.50 of the bound)."""
    topo = bound_check.machine(load_topology(str(FAMILY / "nvsmi_p100x4_driver384_soc.txt")), 2, nic_gbps=50.0)
    m = NcclMachine.from_topology(topo)
    assert (m.pcie_path_gbs, set(run_nic_share(m))) == (20.0, {(15.75, "pcie"), (10.0, "shm")})   # GPUs 0-1: 31.5 / 2
    floor = _us(GIB * 7 / 8, 10.0 * 0.5)
    assert floor == pytest.approx(187904.8, abs=0.1)
    assert NcclModel(m).choose("alltoall", GIB).time_us > floor


def test_a_nic_limited_by_its_slot_moves_data_at_the_pcie_efficiency():
    """The VM dump on 2 hosts with 50 GB/s NICs: the NIC's Gen3 x16 slot (15.75 GB/s) is its rate, a PCIe link's,
    so a ring through it moves 15.75 x link_eff[pcie] = 12.6 GB/s, not 15.75 x ring_net_eff (0.96); a 1 GiB broadcast
    moves 1 GiB through it: at least 85,217.6 µs.  At its own 12.5 GB/s line rate the NIC is not slot-limited."""
    vm = load_topology(str(FAMILY / "nccl_topo_dump_vm_no_sysfs.xml"))
    m = NcclMachine.from_topology(bound_check.machine(vm, 2, nic_gbps=50.0))
    assert (m.nic_gbps, m.nic_pcie_limited) == (15.75, True)
    floor = _us(GIB, 15.75 * DEFAULT_PARAMS.link_efficiency(m.arch, "pcie"))
    assert floor == pytest.approx(85217.6, abs=0.1)
    assert NcclModel(m).choose("broadcast", GIB).time_us > floor
    assert NcclMachine.from_topology(bound_check.machine(vm, 2, nic_gbps=12.5)).nic_pcie_limited is False


@pytest.mark.parametrize("line_gbs", [12.5, 25.0, 50.0])
def test_a_restated_nic_rate_is_rated_as_the_topology_rates_it(line_gbs):
    """``with_(nic_gbps=...)`` on the slot-limited VM (Gen3 x16 slot, 15.75 GB/s) gives the rate and flag that
    describing the same hosts with that NIC gives (``from_topology``: line rate at most the slot's, limited where the
    slot is below it): 12.5 -> (12.5, unlimited), 25 and 50 -> (15.75, limited).  Before, the copy kept the flag
    whatever the rate (12.5 GB/s NICs moving data at the PCIe efficiency) and took 25 or 50 past the slot."""
    vm = load_topology(str(FAMILY / "nccl_topo_dump_vm_no_sysfs.xml"))
    restated = NcclMachine.from_topology(bound_check.machine(vm, 2, nic_gbps=50.0)).with_(nic_gbps=line_gbs)
    described = NcclMachine.from_topology(bound_check.machine(vm, 2, nic_gbps=line_gbs))
    assert (restated.nic_gbps, restated.nic_pcie_limited) == (described.nic_gbps, described.nic_pcie_limited)
    assert (described.nic_gbps, described.nic_pcie_limited) == ((12.5, False) if line_gbs < 15.75 else (15.75, True))
    assert restated.with_(nic_gbps=line_gbs, nic_pcie_limited=True).nic_pcie_limited is True    # stated: kept


@pytest.mark.parametrize("name", ["2 x 4 x L40S Gen4 x16, SHM, x4 uplinks", "2 x 4 x P100, 2 sockets, 50 GB/s NIC",
                                  "2 x 2 x A100 VM, no sysfs, 50 GB/s NIC"])
def test_the_shared_link_machines_stay_above_the_bound(name):
    """At these 11 sizes the old model put 5, 5 and 10 cells below the lower bound (alltoall; alltoall; broadcast,
    reduce and alltoall), at 0.58, 0.50 and 0.83 of it."""
    topo = dict(bound_check.pcie_limited() + bound_check.family())[name]
    _, below, _ = bound_check.check(topo, sizes=[8 << s for s in range(0, 31, 3)], max_schedule_ranks=8)
    assert not below, (name, below[:3])


@pytest.mark.parametrize("bad", [((-1.0, "pcie"),), (((-1.0, "pcie"),),), (((7.875, "nvlink"),),), (((7.875,),),),
                                 ("x",), ((("7.875", "pcie"),),), (((7.875, "pcie"), "x"),)])
def test_a_bad_nic_share_is_a_one_line_error(bad):
    with pytest.raises(InvalidArgument, match="nic_shares .* must be"):
        NcclMachine("l40s", "sm89", 8, 2, "pcie", 0, nic_shares=bad)


def test_a_scatter_root_beside_the_nic_does_not_share_the_far_uplink(tmp_path):
    """x4-uplink SHM on 2 hosts, 1 GiB scatter / gather from GPU 0: only the root sends (receives) its 7 parts, and GPU
    0 sits under the NIC's own switch, so no other GPU's stream shares its way out (nccl-tests issue one group of
    ncclSend / ncclRecv on the root only).  Its parts cross at most the host's slowest GPU-GPU link (7.875 GB/s x
    link_eff[pcie] 0.8 = 6.3 GB/s: 149,130.8 µs), not half of it (298,261.6 µs, the alltoall share)."""
    m = NcclMachine.from_topology(_x4_shm_two_hosts(tmp_path))
    halved = _us(GIB * 7 / 8, 3.9375 * 0.8)
    for coll in ("scatter", "gather"):
        t = NcclModel(m).choose(coll, GIB).time_us
        assert _us(GIB * 7 / 8, 7.875 * 0.8) < t < halved, (coll, t)


def test_a_sendrecv_across_hosts_has_one_gpu_a_host_on_the_socket_link():
    """4 x P100 on 2 hosts, 50 GB/s NICs, 1 GiB sendrecv (rank r to r + 1): on a host only GPU 3 sends to the next
    host, crossing the socket link 1 -> 0 alone (GPU 1 -> GPU 2 crosses it the other way), so it is not held to
    half of that link: below 1 GiB / (10 GB/s x shm 0.5) = 214,748.4 µs."""
    topo = bound_check.machine(load_topology(str(FAMILY / "nvsmi_p100x4_driver384_soc.txt")), 2, nic_gbps=50.0)
    t = NcclModel(NcclMachine.from_topology(topo)).choose("sendrecv", GIB).time_us
    assert t < _us(GIB, 10.0 * 0.5), t


def _p100_two_hosts(switch1_gbs: float | None = None):
    topo = bound_check.machine(load_topology(str(FAMILY / "nvsmi_p100x4_driver384_soc.txt")), 2, nic_gbps=50.0)
    for h in range(2):                      # GPUs 2-3's switch uplink to their host bridge, both directions
        for u, v in ((f"h{h}.pcie1", f"h{h}.hb1"), (f"h{h}.hb1", f"h{h}.pcie1")):
            topo.graph.edges[u, v]["bandwidth_gbps"] = switch1_gbs or topo.graph.edges[u, v]["bandwidth_gbps"]
    return topo


def test_the_slowest_share_is_picked_after_each_links_efficiency():
    """The P100 on 2 hosts with GPUs 2-3's switch uplink at Gen4 x8 (15.75 GB/s): on their way to the NIC they share
    it (7.875 GB/s each, a PCIe link: x 0.8 = 6.3) and the 20 GB/s socket link (10 each, x shm 0.5 = 5.0).  The
    socket link is the slower after efficiency, though not in GB/s: a 1 GiB alltoall takes at least 7/8 GiB / 5.0
    GB/s = 187,904.8 µs (picking the least GB/s first gave 6.3 GB/s, 149,184 µs, 4 cells below the bound)."""
    topo = _p100_two_hosts(15.75)
    m = NcclMachine.from_topology(topo)
    assert set(run_nic_share(m)) == {(7.875, "pcie"), (10.0, "shm")}
    assert pcie_rate_gbs(m, DEFAULT_PARAMS, to_nic=True) == pytest.approx(10.0 * 0.5)
    assert NcclModel(m).choose("alltoall", GIB).time_us > _us(GIB * 7 / 8, 10.0 * 0.5)
    _, below, _ = bound_check.check(topo, sizes=[8 << s for s in range(0, 31, 3)], max_schedule_ranks=8)
    assert not below, below[:3]

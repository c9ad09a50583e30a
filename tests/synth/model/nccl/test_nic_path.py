"""NCCL's GPU-to-NIC path (``NcclMachine.nic_path``, :mod:`synth.model.nccl.nic_path`): through the CPU without
GPUDirect RDMA, and read from the topology of a host with one GPU."""

import pytest
from _paths import ROOT

from topo_probe import cluster
from topo_probe.errors import InvalidArgument
from topo_probe.topology.model import Topology

from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import NcclModel
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.nic_path import cpu_link_gbs


def _lone_h100(**kw) -> NcclMachine:
    return NcclMachine.from_topology(cluster("dgx-h100", nodes=2)).with_(ranks=2, **kw)


def test_sockets_have_no_gpudirect_rdma_so_ll128_stays_off():
    """net_socket.cc ``ptrSupport = NCCL_PTR_HOST``: no GDR, so paths.cc sends GPU <-> NIC traffic through the
    GPU's CPU (typeInter PHB), and tuning.cc's ``typeInter <= PATH_PXB`` (``<= PATH_PXN`` on sm90) fails."""
    sock = _lone_h100(net_kind="socket")
    model = NcclModel(sock, version=(2, 27, 3))
    assert sock.nic_path == "PXB" and sock.net_path == "PHB"
    assert model.table.graphs.ring.type_inter == "PHB"
    for coll in ("allgather", "allreduce"):
        assert ("ring", "LL128") not in model.table.enabled(coll)
    assert all("LL128" not in model.choose("allreduce", 1 << k).label for k in range(10, 31, 2))
    assert ("ring", "LL128") in NcclModel(_lone_h100(), version=(2, 27, 3)).table.enabled("allreduce")


def _one_gpu_host(gpu_to: str, gdr: bool = True) -> Topology:
    """2 hosts, each: CPU -> host bridge -> PCIe switch sw0 -> GPU; the NIC on sw0 (``gpu_to="sw0"``: PIX), on a
    second switch under sw0 (PXB) or on its own switch under the host bridge (PHB)."""
    t = Topology("one-gpu-hosts")
    for h in range(2):
        p = f"h{h}_"
        t.add_node(p + "cpu", "cpu", host=h)
        t.add_node(p + "hb", "host_bridge", host=h)
        t.add_link(p + "cpu", p + "hb", kind="cpu", bandwidth_gbps=64.0)
        t.add_node(p + "sw0", "pcie_switch", host=h)
        t.add_link(p + "sw0", p + "hb", kind="pcie", bandwidth_gbps=31.5)
        t.add_node(p + "sw1", "pcie_switch", host=h)
        t.add_link(p + "sw1", p + ("sw0" if gpu_to == "PXB" else "hb"), kind="pcie", bandwidth_gbps=31.5)
        t.add_gpu(h, host=h, name="NVIDIA H100 80GB HBM3")
        t.add_link(f"gpu{h}", p + "sw0", kind="pcie", bandwidth_gbps=31.5)
        t.add_node(p + "nic", "nic", host=h, speed_gbps=50.0, **({} if gdr else {"gdr": False}))
        t.add_link(p + "nic", p + ("sw0" if gpu_to == "PIX" else "sw1"), kind="pcie", bandwidth_gbps=31.5)
    return t


@pytest.mark.parametrize("where, gdr, path, ll128", [("PIX", True, "PIX", True), ("PXB", True, "PXB", True),
                                                       ("PHB", True, "PHB", False), ("PIX", False, "PHB", False)])
def test_a_one_gpu_host_reads_its_nic_path_from_the_topology(where, gdr, path, ll128):
    m = NcclMachine.from_topology(_one_gpu_host(where, gdr))
    assert (m.gpus_per_node, m.nodes, m.nic_path) == (1, 2, path)
    model = NcclModel(m, version=(2, 27, 3))
    assert model.table.graphs.ring.type_inter == path
    assert (("ring", "LL128") in model.table.enabled("allreduce")) is ll128


def test_hosts_of_several_gpus_keep_the_default_and_bad_paths_are_refused():
    assert NcclMachine.from_topology(cluster("l40s-8gpu-pcie", nodes=2)).nic_path == "PXB"
    with pytest.raises(InvalidArgument, match="NIC path 'NODE'"):
        _lone_h100(nic_path="NODE")


def test_a_lone_h100_across_the_socket_link_searches_one_channel_at_15_gbs():
    """By hand from NCCL's rules: a SYS path crosses the socket link, which NCCL rates AMD_BW = 16 GB/s (v2.26.2-1
    src/graph/topo.h line 21, topo.cc lines 70-92), so the path is 16 GB/s (paths.cc: the narrowest link); sm90's
    inter speeds 48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12 (search.cc line 919): the first <= 16 is 15, one
    channel takes 15 of the path's 16 (followPath) and 12 would also fit only one (12 < 15 in all), so the graph
    has 1 channel; 15 < 25, so ncclTopoDupChannels keeps it
    (search.cc lines 898-902) and ncclTopoPostset doubles it to 2 (connect.cc line 452), the 2 coll channels the
    MOC logs print.  The same GPU through a PHB path keeps its PCIe Gen5 48 GB/s: 1 x 48, duplicated to 2 x 24, 4."""
    far = NcclModel(_lone_h100(nic_path="SYS", cpu_vendor="amd"), version=(2, 26, 2)).table.graphs
    assert (far.ring.n_channels, far.ring.bw_inter, far.n_channels) == (1, 15.0, 2)
    near = NcclModel(_lone_h100(nic_path="PHB", cpu_vendor="amd"), version=(2, 26, 2)).table.graphs
    assert (near.ring.n_channels, near.ring.bw_inter, near.n_channels) == (2, 24.0, 4)


def test_the_socket_link_is_the_hosts_so_two_gpus_across_it_still_search_one_channel():
    """By hand: 2 hosts x 2 H100 (NVSwitch, 2 of the 8 NICs of 50 GB/s each), every GPU's NIC behind the other
    socket (SYS), AMD, NCCL 2.26.2.  NCCL joins a pair of CPUs by one LINK_SYS each way (v2.26.2-1
    src/graph/topo.cc lines 262-275), and every ring channel crosses it twice, NET -> first GPU and last GPU -> NET,
    whichever GPU it starts at, so the host's channels share its 16 GB/s (AMD_BW, topo.h line 21): at 15 GB/s
    (the first sm90 speed under 16, search.cc line 919) min(16, 370.8 / 15, 2 x 50 / 15, 16 / 15) = 1 channel;
    at 12 still 1 (12 < 15); 6 / 15 < 0.49 ends the search: 1 channel at 15, kept (15 < 25, search.cc line 901),
    2 after ncclTopoPostset.  Counted per GPU (2 x int(16 / 15)) it would be 2 graph channels.  The same hosts
    through a PHB path keep PCIe Gen5's 48: 2 channels at 48 (2 NICs), duplicated to 4 at 24, 8."""
    def graphs(path):
        m = NcclMachine.from_topology(cluster("dgx-h100", nodes=2)).with_(ranks=4, nic_path=path, cpu_vendor="amd")
        assert m.gpus_per_node == 2
        return NcclModel(m, version=(2, 26, 2)).table.graphs
    far, near = graphs("SYS"), graphs("PHB")
    assert (far.ring.n_channels, far.ring.bw_inter, far.n_channels) == (1, 15.0, 2)
    assert (near.ring.n_channels, near.ring.bw_inter, near.n_channels) == (4, 24.0, 8)


def test_the_socket_links_rating_follows_the_nccl_version():
    """topo.h/topo.cc ``ncclTopoGetInterCpuBw`` by tag: AMD_BW 16 in v2.16.2-1 (topo.h line 21, topo.cc lines
    75-77), no AMD case in v2.16.5-1 .. v2.18.6-1 (LOC_BW 5000, topo.h line 13), back in v2.19.1-1 (line 21);
    Skylake SKL_QPI_WIDTH 12 in v2.5.6-1 (line 18), 9.0 from v2.6.4-1 (SKL_QPI_BW 9.0 in v2.17.1-1, line 20),
    10.0 from v2.18.1-1 (line 21).  Intel is read as Skylake (the machine carries no CPU model)."""
    amd, intel = _lone_h100(cpu_vendor="amd"), _lone_h100(cpu_vendor="intel")
    amd_by = {(2, 15, 5): 5000.0, (2, 16, 2): 16.0, (2, 16, 5): 5000.0, (2, 18, 6): 5000.0, (2, 19, 1): 16.0,
              (2, 26, 2): 16.0}
    intel_by = {(2, 5, 6): 12.0, (2, 6, 4): 9.0, (2, 17, 1): 9.0, (2, 18, 1): 10.0, (2, 26, 2): 10.0}
    assert {v: cpu_link_gbs(amd, v) for v in amd_by} == amd_by
    assert {v: cpu_link_gbs(intel, v) for v in intel_by} == intel_by
    # 2.18.6 rates an AMD socket link LOC_BW: a lone H100's SYS path searches as its PHB path does
    sys_, phb = (NcclModel(_lone_h100(nic_path=p, cpu_vendor="amd"), version=(2, 18, 6)).table.graphs
                 for p in ("SYS", "PHB"))
    assert (sys_.ring.n_channels, sys_.ring.bw_inter) == (phb.ring.n_channels, phb.ring.bw_inter) == (2, 24.0)


#: real logs whose rings cross a two-socket AMD host's socket link (4 GPUs a socket, no NIC): each ring crosses the
#: link once each way and every ring link carries the busbw, so the link moves at least that per direction
_AMD_SOCKET_CROSSINGS = ("rtx4090_8gpu_1node_all_reduce_p2p_unlocked.txt",    # 2 x EPYC 7542
                         "rtx5090_8gpu_1node_all_reduce_p2p_sys.txt")         # 2 x EPYC 9575F


def test_a_nic_behind_the_other_amd_socket_is_not_capped_at_nccls_search_rating_of_the_link():
    """NCCL's ``AMD_BW`` (16 GB/s, v2.26.2-1 topo.h line 21) is the rating its search gives the socket link, not
    what the link moves: the fixtures' P2P rings across two-socket AMD hosts move 20.6 GB/s (EPYC 7542) and 45.7
    GB/s (EPYC 9575F) busbw per direction across it.  So a lone H100's NIC (50 GB/s) behind the other AMD socket
    (SYS) keeps at least the rate those logs moved across the link: a 16 GB/s runtime cap would be below both."""
    logs = ROOT / "tests" / "fixtures" / "real_logs"
    moved = {f: max(row.out_of_place.busbw_gbps for run in load_runs(logs / f) for row in run.rows)
             for f in _AMD_SOCKET_CROSSINGS}
    far, near = _lone_h100(nic_path="SYS", cpu_vendor="amd"), _lone_h100(nic_path="PHB", cpu_vendor="amd")
    assert all(gbs > cpu_link_gbs(far, (2, 26, 2)) for gbs in moved.values()), moved
    assert far.gpu_net_gbps >= min(near.gpu_net_gbps, max(moved.values())), (far.gpu_net_gbps, moved)

"""NCCL's GPU-to-NIC path (``NcclMachine.nic_path``, :mod:`synth.model.nccl.nic_path`): through the CPU without
GPUDirect RDMA, and read from the topology of a host with one GPU."""

import pytest

from topo_probe import cluster
from topo_probe.errors import InvalidArgument
from topo_probe.topology.model import Topology

from synth.model.nccl import NcclModel
from synth.model.nccl.machine import NcclMachine


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

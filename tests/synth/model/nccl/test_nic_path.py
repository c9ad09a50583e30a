"""NCCL's GPU-to-NIC path (``NcclMachine.nic_path``, :mod:`synth.model.nccl.nic_path`): through the CPU without
GPUDirect RDMA."""

import pytest

from topo_probe import cluster
from topo_probe.errors import InvalidArgument

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


def test_bad_paths_are_refused():
    with pytest.raises(InvalidArgument, match="NIC path 'NODE'"):
        _lone_h100(nic_path="NODE")

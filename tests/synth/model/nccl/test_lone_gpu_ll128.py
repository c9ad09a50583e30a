"""LL128 on a node's only GPU: NCCL's graph for one GPU a node has ``typeIntra`` PATH_LOC.

NVIDIA/nccl search.cc ``ncclTopoCompute`` starts ``typeIntra`` at ``ngpus == 1 ? PATH_LOC : PATH_NVL`` (v2.16.5-1
lines 748 and 832; from v2.25.1-1 ``minTypeIntra = PATH_LOC``, raised only when ``ngpus > 1``, lines 954-966), and the
tuner turns LL128 on by default where ``typeInter <= PATH_PXB`` (or ``<= PATH_PXN`` from compute capability 90),
``typeIntra <= PATH_NVB`` and the architecture is listed (v2.26.6-1 src/graph/tuning.cc lines 426-439).  PATH_LOC
(0) is below PATH_NVB, so a 2 x 1 H100 ring may run LL128, a PHB path to the NIC (the 2 x 1 A100 PCIe log: "type
LOC/PHB") keeps it off, and a PCIe-only pair of GPUs a node (typeIntra PATH_PIX or above) keeps it off too.
"""

from topo_probe import cluster

from synth.model.nccl import NcclModel
from synth.model.nccl.machine import NcclMachine


def _enabled(m: NcclMachine, version: tuple) -> list:
    return NcclModel(m, version=version).table.enabled("allgather")


def _lone_h100(**kw) -> NcclMachine:
    return NcclMachine.from_topology(cluster("dgx-h100", nodes=2)).with_(ranks=2, **kw)


def test_a_nodes_only_gpu_has_a_local_intra_path():
    m = _lone_h100()
    assert m.gpus_per_node == 1
    assert NcclModel(m, version=(2, 25, 1)).table.graphs.ring.type_intra == "LOC"


def test_ll128_is_on_for_one_gpu_a_node_behind_a_pcie_switch():
    assert ("ring", "LL128") in _enabled(_lone_h100(), (2, 25, 1))
    assert ("ring", "LL128") in _enabled(_lone_h100(), (2, 29, 2))


def test_a_phb_path_to_the_nic_keeps_ll128_off():
    assert ("ring", "LL128") not in _enabled(_lone_h100(nic_path="PHB"), (2, 25, 1))
    a100 = NcclMachine.from_topology(cluster("dgx-a100", nodes=2)).with_(ranks=2, nic_path="PHB")
    assert ("ring", "LL128") not in _enabled(a100, (2, 16, 5))
    assert ("ring", "LL128") in _enabled(a100.with_(nic_path="PXB"), (2, 16, 5))


def test_two_pcie_gpus_a_node_keep_ll128_off():
    pcie = NcclMachine.from_topology(cluster("l40s-8gpu-pcie", nodes=2)).with_(ranks=4, arch="sm80")
    assert pcie.gpus_per_node == 2
    assert NcclModel(pcie, version=(2, 25, 1)).table.graphs.ring.type_intra != "LOC"
    assert ("ring", "LL128") not in _enabled(pcie, (2, 25, 1))


def test_nccl_2_6_keeps_ll128_off_on_a_nodes_only_gpu():
    """By hand, 2 x 1 V100 (compute capability 70, NIC behind one PCIe switch: typeInter PIX, which 2.6's ``typeInter <= LINK_PCI``
    passes, so only the lone GPU's ``typeIntra`` can turn LL128 off).  v2.6.4-1
    tuning.cc line 165 enables LL128 only where ``typeIntra == LINK_NVL`` (1), and search.cc line 632 gives one GPU
    ``typeIntra = PATH_LOC`` (0): off, so 1 MiB all_reduce cannot run LL128.  v2.7.8-1 line 176 has ``typeIntra <=
    PATH_NVL``: LOC passes.  v2.5.6-1 line 154 wants ``graph->nvlink``, set to 1 for every search (search.cc line 491)
    and cleared only on a GPU-to-GPU hop (line 257), which one GPU never takes, with ``type <= LINK_PCI`` (a PCIe-switch
    path): on."""
    v100 = NcclMachine.from_topology(cluster("dgx1-v100", nodes=2)).with_(ranks=2, nic_path="PIX")
    assert v100.gpus_per_node == 1
    at_26 = NcclModel(v100, version=(2, 6, 4))
    assert ("ring", "LL128") not in at_26.table.enabled("allreduce")
    assert "LL128" not in at_26.choose("allreduce", 1 << 20).label
    assert ("ring", "LL128") in _enabled(v100, (2, 7, 8))
    assert ("ring", "LL128") in _enabled(v100, (2, 5, 6))

"""A ring across hosts of PCIe-only GPUs gets no relief on its GPU links (runtime.ring_intra_relief).

On NVLink hosts one hop per host leaves through a NIC instead of NVLink, so each GPU's NVLink carries
(ppn - 1) / ppn of the one-host ring.  A PCIe-only GPU has one link, its x16 link to the host, and the
NIC hop crosses it too: without GPUDirect RDMA NCCL's net transport stages the hop in host buffers the
GPU writes and reads (NVIDIA/nccl v2.6.4-1 src/transport/net.cc lines 67-73, 90-96: ``ncclCudaHostAlloc``
unless ``useGdr``; lines 111, 145: the data buffer is the host one without it).  Checked by hand on the 8 hosts
x 4 RTX 2080 Ti log (NCCL 2.6.4, SHM inside a host, "NET/IB/0" without GDRDMA; class pcie-multihost,
held out: no fit sees it)."""

from __future__ import annotations

import sys

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import DEFAULT_PARAMS, NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.runtime import ring_intra_relief
from topo_probe import cluster

sys.path.insert(0, str(ROOT / "benchmarks"))
from nccl_log_cases import ALL_CASES, HELD_OUT_CLASSES  # noqa: E402
from validate_cost_model import machine_for  # noqa: E402

FILE = "rtx2080ti_32gpu_8node_all_reduce_ib_4gpn.txt"
GEN3_X16_GBS = 15.75          # 8 GT/s x 16 lanes x 128/130 / 8 bits, one direction


def _case_machine():
    case = next(c for c in ALL_CASES if c.file == FILE)
    runs = load_runs(ROOT / "tests" / "fixtures" / "real_logs" / FILE)
    return case, machine_for(case, runs[0]), runs[0]


def test_relief_only_where_the_gpu_links_are_not_pcie():
    """By hand: 4 GPUs a host give 4/3 over NVLink; 1 over PCIe with P2P, through host memory, or P2P disabled."""
    case, m, _ = _case_machine()
    assert case.machine_class in HELD_OUT_CLASSES and (m.nodes, m.gpus_per_node, m.p2p) == (8, 4, False)
    assert ring_intra_relief(m) == 1.0
    assert ring_intra_relief(m.with_(p2p=True)) == 1.0                     # PCIe P2P: still the x16 link
    h100 = NcclMachine.from_topology(cluster("dgx-h100", nodes=2))
    assert ring_intra_relief(h100) == pytest.approx(8 / 7)
    assert ring_intra_relief(h100, p2p=False) == 1.0                       # NCCL_P2P_DISABLE: through PCIe


def test_the_multihost_ring_is_no_faster_than_the_gpus_x16_link_through_host_memory():
    """Hand-computed bound: a GPU that writes and reads host memory over its Gen3 x16 link streams at
    15.75 x link_eff[shm] GB/s per direction (the one-host rule, test_shm_ring.py); every ring hop, the NIC's
    included, crosses that link, so the 8-host ring's Simple busbw at 512 MiB may not exceed it (it was 4/3
    of it, 10.4 GB/s, before).  The log holds 5.5 GB/s from 16 MiB: still below the bound (not explained)."""
    _, m, run = _case_machine()
    bound = GEN3_X16_GBS * DEFAULT_PARAMS.link_efficiency(m.arch, "shm")
    model = NcclModel(m, env=NcclEnv.from_environ({"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}))
    size = 512 << 20
    busbw = model.choose("allreduce", size).busbw_gbps(m.ranks)
    assert bound * 0.9 <= busbw <= bound * 1.001
    real = max(r.out_of_place.busbw_gbps for r in run.rows if r.size >= 16 << 20)
    assert real <= bound

"""A ring through host memory (P2P off, NCCL's SHM transport) moves at the rate of each GPU's own
PCIe x16 link, not at the speed NCCL's topology search assigns the socket link (10 GB/s: a tuning
estimate).  Checked by hand and against a real log of 8 x RTX 4090 on two EPYC sockets with P2P
off (tests/fixtures/real_logs, SOURCE header inside), a machine class no fit has seen."""

from __future__ import annotations

import statistics
import sys

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.runtime import ring_capacity_gbs
from topo_probe.load import load_topology

sys.path.insert(0, str(ROOT / "benchmarks"))
from nccl_log_cases import ALL_CASES, HELD_OUT_CLASSES, IN_SAMPLE  # noqa: E402
from validate_cost_model import evaluate, machine_for  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
LOG = FIXTURES / "real_logs" / "rtx4090_8gpu_1node_all_reduce_shm.txt"
CASE = next(c for c in ALL_CASES if c.file == LOG.name)


def test_the_machine_is_read_from_its_own_nvidia_smi_matrix():
    """The author's nvidia-smi topo -m: every GPU pair SYS, so NCCL runs P2P off, through SHM."""
    m = NcclMachine.from_topology(load_topology(str(FIXTURES / "nvsmi_topo_8x_rtx4090_sys.txt")))
    assert (m.ranks, m.intra, m.p2p, m.pcie_gen) == (8, "pcie", False, 4)


def test_a_shm_ring_streams_at_one_pcie_link_times_the_shm_efficiency():
    """Gen4 x16 is 31.5 GB/s per direction on the data sheet; through host memory a ring reaches
    that times the shared efficiency of host-memory staging, 15.75 GB/s at 0.5, whatever NCCL's
    search speed for the socket link (at most 10 GB/s on an Intel host, 16 on an AMD one)."""
    log = load_runs(LOG)[0]
    m = machine_for(CASE, log)
    assert not m.p2p
    model = NcclModel(m)
    assert model.table.graphs.ring.bw_intra <= 16.0          # NCCL's search: 15 GB/s on this AMD host
    got = ring_capacity_gbs(m, model.table.graphs, DEFAULT_PARAMS)
    assert got == pytest.approx(31.5 * DEFAULT_PARAMS.link_efficiency("sm89", "shm"))


def test_the_real_shm_log_is_predicted_without_fitting_on_it():
    """The class is held out (no fit sees it): from 4 MiB up every row within 15 %, the peak busbw
    (15.04 GB/s at 32 MiB) within 5 %, median within 15 % at >= 64 KiB."""
    assert CASE.machine_class in HELD_OUT_CLASSES and CASE not in IN_SAMPLE
    res = evaluate(CASE)
    big = [r for r in res["rows"] if r["size"] >= 4 << 20]
    assert len(big) == 6
    for r in big:
        assert r["pred_us"] == pytest.approx(r["real_us"], rel=0.15), r
    peak = next(r for r in res["rows"] if r["size"] == 32 << 20)
    assert peak["pred_us"] == pytest.approx(peak["real_us"], rel=0.05)
    assert res["summary"]["median_big"] <= 0.15
    assert statistics.median(abs(r["pred_us"] / r["real_us"] - 1) for r in big) < 0.10


def test_a_second_shm_box_on_pcie_5_is_predicted_too():
    """4 x RTX 5090 (PCIe 5.0, NVIDIA/nccl-tests#287, NCCL 2.26.2) with P2P unavailable: the same
    rule gives 63 x 0.5 = 31.5 GB/s, 15 % above the log's 27.3 GB/s peak (host-memory staging
    reaches 0.43 of Gen5 there, 0.48 of Gen4 on the 4090 box): median within 15 % at >= 64 KiB,
    every row from 1 MiB within 16 %."""
    case = next(c for c in ALL_CASES if c.file == "rtx5090_4gpu_1node_all_reduce_shm.txt")
    assert case.machine_class in HELD_OUT_CLASSES
    res = evaluate(case)
    assert res["machine"].arch == "sm120" and not res["machine"].p2p
    assert res["summary"]["median_big"] <= 0.15
    for r in (r for r in res["rows"] if r["size"] >= 1 << 20):
        assert r["pred_us"] == pytest.approx(r["real_us"], rel=0.16), r
    peak = max(r["real_busbw"] for r in res["rows"])
    assert peak == pytest.approx(27.26) and 31.5 / peak == pytest.approx(1.156, abs=0.01)

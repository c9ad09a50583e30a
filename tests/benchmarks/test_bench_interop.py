"""benchmarks/bench_interop.py: one row per ready-folder XML, each runtime's verdict from its
profile (a file built for msccl-executor-nccl with fused steps is refused by RCCL, one built for
RCCL passes both), the picked sizes, the replay, and the report's counts."""

from __future__ import annotations

import sys

import pytest
from _paths import ROOT

from synth.cli.synthesize import main as synthesize

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_interop as bi  # noqa: E402


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """full:4 allreduce built once for each runtime."""
    out = {}
    for runtime in ("rccl", "msccl-executor-nccl"):
        folder = tmp_path_factory.mktemp(runtime) / "res"
        assert synthesize(["--topology", "full:4", "--collectives", "allreduce", "--time-limit", "2",
                           "--no-progress", "--out", str(folder), "--msccl-runtime", runtime]) == 0
        out[runtime] = folder
    return out


def test_rows_say_what_each_runtime_does(folders, tmp_path):
    rows = {rt: bi.folder_rows("fresh", f, rt) for rt, f in folders.items()}
    for rt, group in rows.items():
        assert group and all(r["runtime"] == rt and r["loads_on_target"] == "yes" for r in group)
        assert all(r["replay"] == "verified" and r["every_size_picked"] == "yes" for r in group)
    assert all(r["rccl"] == "yes" and r["full_ops"] == 0 for r in rows["rccl"])
    fused = [r for r in rows["msccl-executor-nccl"] if r["full_ops"]]
    assert fused and all(r["rccl"].startswith("no: ") and "step types" in r["rccl"] for r in fused)
    bi.write_report(tmp_path, rows["rccl"] + rows["msccl-executor-nccl"], "python benchmarks/bench_interop.py", [],
                    1.0)
    text = (tmp_path / "report.md").read_text()
    n = len(rows["rccl"]) + len(rows["msccl-executor-nccl"])
    rccl_ok = len(rows["rccl"]) + n - len(rows["rccl"]) - len(fused)
    assert f"| fresh | {n} | {n} | {rccl_ok} | {n} | {n} |" in text
    assert (tmp_path / "interop.csv").read_text().count("\n") == n + 1


def test_sizes_and_schedule_names():
    assert bi._sizes([64, 128, 1 << 30]) == "64 B-1 GiB (3)" and bi._sizes([]) == "never"
    assert bi._bytes(3 << 20) == "3 MiB"


def test_threadblock_residency_is_judged_on_the_folders_gpu(tmp_path):
    """A committed DGX A100 file of 58 threadblocks per GPU: the writer checked it against the A100's
    108 SMs (NVIDIA Ampere white paper), so every verdict must too, not the 32 SMs of an unnamed GPU."""
    import shutil
    src = ROOT / "results" / "dgx-a100"
    for part in ("topology.json", "summary.json", "schedules"):
        (shutil.copytree if (src / part).is_dir() else shutil.copy)(src / part, tmp_path / part)
    (tmp_path / "msccl").mkdir()
    shutil.copy(src / "msccl" / "allreduce-oneshot.xml", tmp_path / "msccl")
    [row] = bi.folder_rows("committed", tmp_path, "dgx-a100")
    assert 32 < row["max_tbs_per_gpu"] <= 108
    assert row["loads_on_target"] == "yes" and row["msccl_executor_nccl"] == "yes", row
    assert "unnamed GPU" not in str(row)


def test_the_fresh_runs_are_those_before_the_one_list_of_machines_no_preset_has():
    """tests/_other_machines.py's list, filtered for this benchmark, gives the runs its own list gave
    (the arguments as bench_interop.py spelled them before, at 4c98a676)."""
    quick = ["--collectives", bi.READY_COLLECTIVES, "--time-limit", "10"]
    family = str(ROOT / "tests" / "fixtures" / "family")
    before = [("dgx-a100-2nodes", ["--topology", "dgx-a100", "--nodes", "2"]),
              ("p100x4-soc", ["--topology", f"{family}/nvsmi_p100x4_driver384_soc.txt"]),
              ("l40sx4-pcilink", ["--topology", f"{family}/nccl_topo_dump_bcm_pcilink.xml"]),
              ("a100x2-vm-no-sysfs", ["--topology", f"{family}/nccl_topo_dump_vm_no_sysfs.xml"]),
              ("mi300x-gpus0-5", ["--topology", "mi300x", "--gpus", "0-5"]),
              ("dgx-h100-2nodes-roce", ["--topology", "dgx-h100", "--nodes", "2", "--net", "roce"])]
    runs = bi.fresh_runs(10)
    assert runs[:len(bi.PRESETS) + 2] == [(p, ["--topology", p] + quick) for p in bi.PRESETS] + [
        ("full33-alltoall", ["--topology", "full:33", "--collectives", "alltoall"]),
        ("full33-alltoall-rccl", ["--topology", "full:33", "--collectives", "alltoall", "--msccl-runtime", "rccl"])]
    assert runs[len(bi.PRESETS) + 2:] == [(name, args + quick) for name, args in before]


def test_an_interrupted_fresh_run_stops_the_benchmark_and_commands_name_fixtures_from_the_root(tmp_path, monkeypatch):
    """A fresh synthesize that fails (exit 130: SIGTERM or Ctrl-C reached it) ends the benchmark
    with its exit code before report.md is written: the benchmark went on before and wrote a report
    missing that run's files over the committed one (47 of 52 files after one `timeout`). The
    commands it reports name fixtures by their path in the repository, not by this checkout's."""
    import synth.cli.synthesize as cli
    calls = []
    fixture = str(ROOT / "tests" / "fixtures" / "family" / "x.txt")
    monkeypatch.setattr(bi, "fresh_runs", lambda t: [("a", ["--topology", "full:2"]), ("b", ["--topology", fixture]),
                                                     ("c", ["--topology", "full:3"])])
    monkeypatch.setattr(cli, "main", lambda argv: calls.append(argv) or 0)
    done = bi.run_fresh(tmp_path, 10, lambda s: None)
    assert [cmd for _, _, cmd, _ in done] == ["synthesize --topology full:2",
                                              "synthesize --topology tests/fixtures/family/x.txt",
                                              "synthesize --topology full:3"]
    calls.clear()
    monkeypatch.setattr(cli, "main", lambda argv: calls.append(argv) or (130 if len(calls) == 2 else 0))
    with pytest.raises(SystemExit) as stop:
        bi.run_fresh(tmp_path, 10, lambda s: None)
    assert len(calls) == 2, "the run after the interrupted one started"
    assert stop.value.code == 130

"""`synthesize`: files written, every saved schedule verifies, plan covers all sizes, reuse/force,
partial runs never overwrite complete results, bad input gives one line and exit 2."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from synth.cli.synthesize import main
from synth.formats.msccl import from_msccl_xml
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule
from synth.ir.verifier import check
from synth.pipeline import synthesize as synth_mod
from synth.plan.size_plan import Plan
from synth.plan.versus_nccl import NCCL
from topo_probe.machines.generators import fully_connected
from topo_probe.topology.serialize import save_topology


@pytest.fixture(scope="module")
def ring4_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "out"
    rc = main(["--topology", "dgx1-v100", "--gpus", "0-3", "--collectives", "allgather,allreduce,broadcast",
               "--time-limit", "10", "--out", str(out), "--no-progress"])
    return rc, out


def test_outputs_exist_and_every_schedule_verifies(ring4_run):
    rc, out = ring4_run
    assert rc == 0
    for name in ("topology.json", "plan.json", "summary.json", "report.md", "busbw.png"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "summary.json").read_text())
    from topo_probe.load import load_topology
    fabric = build_fabric(load_topology(str(out / "topology.json")))
    assert summary["fingerprint"] == fabric.fingerprint
    files = sorted((out / "schedules").glob("*.json"))
    assert files
    for f in files:
        check(Schedule.load(f), fabric)  # nothing unverified was saved
    for x in sorted((out / "msccl").rglob("*.xml")):
        check(from_msccl_xml(x.read_text(), fabric=fabric), fabric)
    # msccl/ holds the plan's unrooted algorithms with their size ranges (inclusive maxBytes)
    plan = json.loads((out / "plan.json").read_text())
    ready = {x.stem: from_msccl_xml(x.read_text()).meta["msccl"] for x in (out / "msccl").glob("*.xml")}
    want = {}
    for e in plan["entries"]:
        if e["root"] is None and e["schedule"] != NCCL:      # "nccl": NCCL itself runs there
            stem = Path(e["schedule"]).stem
            lo, hi = want.get(stem, (e["min_bytes"], e["max_bytes"]))
            top = None if hi is None or e["max_bytes"] is None else max(hi, e["max_bytes"])
            want[stem] = (min(lo, e["min_bytes"]), top)
    assert set(ready) == set(want)
    for stem, (lo, hi) in want.items():
        # minBytes is raised to the first power-of-two float32 call the runtime picks: the
        # smallest power-of-two count c with c * sizeMultiplier a multiple of nchunksperloop
        head = (out / "msccl" / f"{stem}.xml").read_text().split(">", 1)[0]
        loop, ngpus = (int(head.split(f'{k}="')[1].split('"')[0]) for k in ("nchunksperloop", "ngpus"))
        mult = ngpus if ready[stem]["coll"] in ("allgather", "reducescatter", "alltoall") else 1
        first = next(2 ** k for k in range(40) if (2 ** k * mult) % loop == 0)
        assert (ready[stem]["min_bytes"], ready[stem]["max_bytes"]) == (max(lo, first * mult * 4),
                                                                        0 if hi is None else hi - 1)
    assert not any(m["coll"] in ("broadcast", "reduce", "gather", "scatter") for m in ready.values())
    for coll in ("allgather", "allreduce", "broadcast"):
        s = summary["collectives"][coll]
        assert {"pareto", "bounds", "simulated_us", "bandwidth_optimal"} <= set(s)
        assert set(s["simulated_us"]["allgather-ring" if coll == "allgather" else f"{coll}-ring"]) == \
            {"1KB", "1MB", "1GB"}


def test_plan_covers_every_size_with_the_fastest_candidate(ring4_run):
    _, out = ring4_run
    plan = Plan.load(out / "plan.json")
    for coll, root in (("allgather", None), ("allreduce", None), ("broadcast", 0)):
        entries = [e for e in plan.entries if e.collective == coll]
        assert entries[0].min_bytes == 0 and entries[-1].max_bytes is None
        for a, b in zip(entries, entries[1:]):
            assert a.max_bytes == b.min_bytes  # contiguous ranges
        for nbytes in (8, 4096, 1 << 20, 1 << 30):
            assert plan.select(coll, nbytes, root) is not None
    # independent check of the pick at 1 GB: no saved candidate is faster by the cost model
    from synth.model.cost import CostModel
    fabric = build_fabric(Schedule and __import__("topo_probe.load", fromlist=["x"]).load_topology(
        str(out / "topology.json")))
    cost = CostModel(fabric)
    entry = plan.select("allgather", 1 << 30)
    best = min(cost.schedule_time_us(Schedule.load(f), 1 << 30) for f in (out / "schedules").glob("allgather-*.json"))
    from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
    from topo_probe.load import load_topology
    nccl_t = NcclModel(NcclMachine.from_topology(load_topology(str(out / "topology.json"))),
                       env=NcclEnv()).time_us("allgather", 1 << 30)
    if entry.schedule == "nccl":              # NCCL kept the range: no schedule is 5 % faster
        assert nccl_t < 1.05 * best
    else:                                     # a schedule kept it: the fastest, and 5 % ahead of NCCL
        picked = cost.schedule_time_us(plan.load_schedule(entry), 1 << 30)
        assert picked <= best + 1e-6 and nccl_t >= 1.05 * picked


def test_rerun_reuses_and_force_redoes(ring4_run, capsys):
    _, out = ring4_run
    before = (out / "summary.json").stat().st_mtime_ns
    assert main(["--topology", "dgx1-v100", "--gpus", "0-3", "--collectives", "allgather",
                 "--time-limit", "10", "--out", str(out), "--no-progress"]) == 0
    assert "reusing" in capsys.readouterr().out
    assert (out / "summary.json").stat().st_mtime_ns == before


def test_interrupted_run_leaves_complete_results_alone(tmp_path, monkeypatch):
    topo = fully_connected(3)
    out = tmp_path / "res"
    opts = synth_mod.SynthesisOptions(collectives=("allgather",), time_limit_s=5, progress=False,
                                      log=lambda s: None)
    synth_mod.run(topo, out, opts)
    good = (out / "plan.json").read_text()

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(synth_mod, "build_plan", boom)
    with pytest.raises(KeyboardInterrupt):
        synth_mod.run(topo, out, opts, force=True)
    assert (out / "plan.json").read_text() == good
    assert [p.name for p in tmp_path.iterdir()] == ["res"]  # nothing beside the folder
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [".topocoll-result"]  # nor in it


@pytest.mark.parametrize("argv,message", [
    (["--topology", "no-such-preset"], "no-such-preset"),
    (["--topology", "dgx1-v100", "--gpus", "0,9"], "GPU 9 does not exist"),
    (["--topology", "dgx1-v100", "--collectives", "allsum"], "unknown collective 'allsum'"),
    (["--topology", "dgx1-v100", "--root", "12", "--collectives", "broadcast"], "root"),
    (["--topology", "ring:3", "--time-limit", "-3"], "--time-limit must be a positive number"),
    (["--topology", "ring:3", "--time-limit", "nan"], "--time-limit must be a positive number"),
    (["--topology", "ring:3", "--root", "-1"], "--root must be a rank"),
    (["--topology", "ring:3", "--collectives", ","], "names no collective"),
    (["--topology", "dgx1-v100", "--gpus", "0"], "needs at least 2 GPUs"),
    (["--topology", "ring:3", "--time-limit", "x"], "invalid float value: 'x'"),
    (["--topology", "ring:3", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path, capsys):
    rc = main(argv + ["--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1


def test_disconnected_topology_file_is_rejected(tmp_path, capsys):
    topo = fully_connected(3)
    topo.graph.remove_edges_from([("gpu2", "gpu0"), ("gpu0", "gpu2"), ("gpu2", "gpu1"), ("gpu1", "gpu2")])
    f = tmp_path / "t.json"
    save_topology(topo, f) if False else f.write_text(json.dumps(__import__(
        "topo_probe.topology.serialize", fromlist=["x"]).topology_to_dict(topo)))
    rc = main(["--topology", str(f), "--out", str(tmp_path / "o"), "--no-progress"])
    assert rc == 2 and "cut off" in capsys.readouterr().err


def test_effective_capacity_candidate_where_link_efficiencies_differ(tmp_path):
    """pcie-8gpu-2socket (PCIe at 24/31.5 beside a CPU link at 1/2): the bandwidth-optimal
    method for effective capacities gives a broadcast the plain one does not (1 GB modelled:
    faster than the ring, where the nominal optimum is slower); DGX-1 (NVLink only) gets none."""
    from synth.baselines import baseline
    from synth.model.cost import CostModel
    from topo_probe.load import load_topology
    opts = synth_mod.SynthesisOptions(collectives=("broadcast",), time_limit_s=20, progress=False,
                                      max_sat_ranks=0, log=lambda *a: None)
    fabric = build_fabric(load_topology("pcie-8gpu-2socket"))
    res = synth_mod.synthesize_collective(fabric, "broadcast", opts, tmp_path)
    plain, eff = res.schedules["broadcast-bwopt"], res.schedules["broadcast-bwopt-effective"]
    check(eff, fabric)
    cm = CostModel(fabric)
    ring = cm.schedule_time_us(baseline("ring", fabric, "broadcast", root=0), 1e9)
    assert cm.schedule_time_us(eff, 1e9) < ring < cm.schedule_time_us(plain, 1e9)
    assert res.summary["bandwidth_optimal_effective"]["schedule"] == "broadcast-bwopt-effective"
    assert (tmp_path / "schedules" / "broadcast-bwopt-effective.json").exists()
    dgx1 = build_fabric(load_topology("dgx1-v100").subset([0, 1, 2, 3]))
    res1 = synth_mod.synthesize_collective(dgx1, "broadcast", opts, tmp_path / "dgx1")
    assert "broadcast-bwopt-effective" not in res1.schedules
    assert "same efficiency" in res1.summary["bandwidth_optimal_effective_note"]


def test_ranges_vs_nccl_keep_a_schedule_only_5_percent_ahead():
    from synth.plan.versus_nccl import ranges_vs_nccl
    sizes = [1, 2, 3, 4]
    ours = {"a": [10.0, 10.0, 10.0, 10.0]}
    nccl = [20.0, 10.4, 10.6, 5.0]        # 2x slower, 4 % slower, 6 % slower, 2x faster
    assert ranges_vs_nccl(sizes, ours, nccl) == [("a", 0, 2), ("nccl", 2, 3), ("a", 3, 4), ("nccl", 4, None)]


def test_empty_out_is_refused(capsys):
    assert main(["--topology", "ring:3", "--out", "", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == "synthesize: --out must name a folder"


def test_default_folder_of_a_topology_named_like_a_path_stays_under_results(tmp_path, monkeypatch):
    """A topology file may name itself ``../../x``; the default folder is still results/<one name>."""
    from topo_probe.topology.serialize import topology_to_dict
    doc = topology_to_dict(fully_connected(3))
    doc["name"] = "../../escaped"
    (tmp_path / "t.json").write_text(json.dumps(doc))
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    assert main(["--topology", str(tmp_path / "t.json"), "--collectives", "allgather", "--time-limit", "2",
                 "--no-progress"]) == 0
    digest = hashlib.sha256(b"../../escaped").hexdigest()[:8]          # the name's safe part and a digest
    assert os.listdir(work) == ["results"] and os.listdir(work / "results") == [f"escaped-x{digest}"]
    assert sorted(os.listdir(tmp_path)) == ["a", "t.json"]


def test_default_folder_of_a_partial_allocation_is_shell_safe_and_reused(tmp_path, monkeypatch, capsys):
    """`--gpus 0,1,2` on ring:4 wrote results/ring4[0,1,2]/, which a shell needs quoted; now
    results/ring4-gpus0-2/, and the second run reuses it; another order of GPUs is another folder."""
    monkeypatch.chdir(tmp_path)
    args = ["--topology", "ring:4", "--collectives", "allgather", "--time-limit", "2", "--no-progress"]
    assert main(args + ["--gpus", "0,1,2"]) == 0
    assert os.listdir(tmp_path / "results") == ["ring4-gpus0-2"]
    capsys.readouterr()
    assert main(args + ["--gpus", "0-2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("results for 1 collectives are in results/ring4-gpus0-2/")
    assert main(args + ["--gpus", "2,0,1"]) == 0
    assert sorted(os.listdir(tmp_path / "results")) == ["ring4-gpus0-2", "ring4-gpus2.0-1"]


def test_a_reader_that_stops_early_does_not_stop_the_run(tmp_path):
    """`synthesize | head -1`: the run goes on quietly and writes its results (status 0)."""
    import subprocess
    import sys
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "synth.cli.synthesize", "--topology", "ring:4",
                             "--collectives", "allgather,allreduce", "--time-limit", "3", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == "", err
    assert set(json.loads((out / "summary.json").read_text())["collectives"]) == {"allgather", "allreduce"}


def test_algorithms_longer_than_rccl_loads_stay_out_of_the_algorithm_folder(tmp_path, monkeypatch):
    """The runtimes load at most 64 steps per threadblock: with the limit at 1 step, every plan
    algorithm of a 3-GPU allgather (2+ steps per threadblock, however its connections are spread
    over channels) goes to msccl/candidates/ with a note.  The executor's fixed cost is set to 0 so
    the plan keeps its bandwidth-optimal range (with the native executor's 4 us + 1 us per record
    NCCL takes every size of this ring)."""
    import dataclasses
    from synth.formats.msccl import runtimes
    from synth.plan import decision
    name = "msccl-executor-nccl"                  # the default for ring:3 (no AMD GPUs)
    monkeypatch.setitem(runtimes.PROFILES, name, dataclasses.replace(runtimes.PROFILES[name], max_steps_per_tb=1))
    monkeypatch.setitem(decision.EXECUTOR_COSTS, "native", decision.ExecutorCost("native", 0.0, 0.0, "test"))
    out = tmp_path / "o"
    assert main(["--topology", "ring:3", "--collectives", "allgather", "--time-limit", "3", "--out", str(out),
                 "--no-progress"]) == 0
    assert not list((out / "msccl").glob("*.xml"))
    assert list((out / "msccl" / "candidates").glob("*.xml"))
    notes = json.loads((out / "summary.json").read_text())["collectives"]["allgather"]["notes"]
    assert any("MSCCL_MAX_NUM_STEPS" in n for n in notes)


def _plan_schedules(out):
    plan = json.loads((out / "plan.json").read_text())
    return plan, sorted({f for e in plan["entries"] for f in (e["schedule"], e.get("fallback")) if f not in ("nccl", None)})


def test_a_reusing_run_verifies_the_plan_and_prints_it(ring4_run, capsys):
    """Reusing is real work the user sees: every schedule file the plan names is verified (the
    count is read off plan.json here) and the plan is printed, one line per collective."""
    _, out = ring4_run
    plan, files = _plan_schedules(out)
    assert main(["--topology", "dgx1-v100", "--gpus", "0-3", "--collectives", "allgather,allreduce,broadcast",
                 "--time-limit", "10", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "reusing" in text and f"verified the {len(files)} schedules its plan runs" in text
    colls = {e["collective"] for e in plan["entries"]}
    assert {line.strip().split(":")[0].split(" (")[0] for line in text.splitlines() if line.startswith("  ")} == colls


def test_a_schedule_that_no_longer_verifies_is_not_reused(ring4_run, tmp_path, capsys):
    """A planted fault: the last step of one of the plan's schedules is dropped (the file still
    loads, the collective is incomplete). The re-run says why it does not reuse, synthesizes
    again, and the schedule it writes verifies."""
    import shutil

    from synth.formats.schedule_file import load_schedule
    from synth.ir.fabric import build_fabric
    from synth.ir.verifier import check
    from topo_probe.load import load_topology
    _, src = ring4_run
    out = tmp_path / "out"
    shutil.copytree(src, out)
    _, files = _plan_schedules(out)
    victim = out / files[0]
    doc = json.loads(victim.read_text())
    doc["steps"] = doc["steps"][:-1]
    victim.write_text(json.dumps(doc))
    assert main(["--topology", "dgx1-v100", "--gpus", "0-3", "--collectives", "allgather,allreduce,broadcast",
                 "--time-limit", "10", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert f"not reusing {out}" in text and "synthesizing again" in text and "verified the" not in text
    fabric = build_fabric(load_topology(str(out / "topology.json")))
    for name in _plan_schedules(out)[1]:
        check(load_schedule(out / name), fabric)


@pytest.mark.parametrize("turned_into", [ValueError, ImportError, RuntimeError])
def test_a_signal_that_c_code_turns_into_another_error_still_ends_as_interrupted(monkeypatch, capsys, turned_into):
    """OR-Tools' import or matplotlib's layout, interrupted by SIGTERM, raise their own error
    from our KeyboardInterrupt (seen: ImportError "initialization failed", ValueError "Invalid
    bounding box"): still "interrupted", exit 130, no traceback."""
    import signal
    import time

    import synth.cli.synthesize as cli

    def interrupted_inside_c_code(argv, where):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except KeyboardInterrupt as e:
            raise turned_into("initialization failed") from e
        raise AssertionError("no signal arrived")

    monkeypatch.setattr(cli, "_main", interrupted_inside_c_code)
    assert cli.main([]) == 130
    assert capsys.readouterr().err.strip() == "synthesize: interrupted; nothing written"


def test_an_error_without_a_signal_is_not_called_an_interruption(monkeypatch):
    import synth.cli.synthesize as cli

    def bug(argv, where):
        raise ValueError("a bug, not a signal")

    monkeypatch.setattr(cli, "_main", bug)
    with pytest.raises(ValueError, match="a bug"):
        cli.main([])

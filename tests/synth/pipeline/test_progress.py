"""Stage times and the progress line of a ``synthesize`` run: a line per collective and stage on a
terminal, nothing in a pipe; ``summary.json`` records every collective's time per stage."""

import io
import json
import time

from rich.console import Console

from synth.pipeline.progress import RunProgress, format_stages
from synth.pipeline.synthesize import SynthesisOptions, run
from topo_probe.load import load_topology


def _drive(console) -> RunProgress:
    with RunProgress(["allgather", "allreduce"], enabled=True, console=console) as prog:
        for coll in ("allgather", "allreduce"):
            with prog.stage("bwopt", coll):
                pass
    return prog


def test_a_terminal_shows_the_collective_and_stage():
    out = io.StringIO()
    _drive(Console(file=out, force_terminal=True, width=100))
    text = out.getvalue()
    assert "allgather (1/2): bwopt" in text and "allreduce (2/2): bwopt" in text


def test_a_pipe_shows_nothing():
    out = io.StringIO()
    prog = _drive(Console(file=out, force_terminal=False))
    assert out.getvalue() == ""
    assert set(prog.collective_stages("allreduce")) == {"bwopt"}


def test_stage_times_add_up_to_the_wall_clock():
    prog = RunProgress(["allgather"], enabled=False)
    t0 = time.perf_counter()
    for _ in range(2):
        with prog.stage("verify", "allgather"):
            time.sleep(0.02)
    wall = time.perf_counter() - t0
    got = prog.per_collective["allgather"]["verify"]
    assert 0.04 <= got <= wall


def test_verbose_logs_each_collective_s_stages():
    lines = []
    prog = RunProgress(["allgather"], enabled=False, verbose=True, log=lines.append)
    prog.per_collective["allgather"].update({"bwopt": 2.0, "verify": 0.5})
    prog.collective_done("allgather")
    assert lines == ["  allgather: " + format_stages({"bwopt": 2.0, "verify": 0.5})]
    assert lines[0] == "  allgather: total 2.5 s: bwopt 2.0, verify 0.5"


def _synthesize(tmp_path, capsys, **kw):
    opts = SynthesisOptions(collectives=("allgather", "broadcast"), time_limit_s=5, max_sat_ranks=2, **kw)
    summary = run(load_topology("ring:3"), tmp_path / "out", opts)
    return summary, capsys.readouterr().out


def test_a_run_records_stage_times_and_is_quiet_in_a_pipe(tmp_path, capsys):
    t0 = time.perf_counter()
    summary, out = _synthesize(tmp_path, capsys, progress=True)
    wall = time.perf_counter() - t0
    assert "\x1b[" not in out and "(1/2)" not in out          # captured output is not a terminal
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["stages"] == summary["stages"]
    per_coll = [sum(saved["collectives"][c]["stages"].values()) for c in ("allgather", "broadcast")]
    run_wide = sum(saved["stages"].values())
    assert {"bwopt", "verify", "save", "export"} <= set(saved["collectives"]["allgather"]["stages"])
    assert {"fabric", "plan", "report", "write"} <= set(saved["stages"])
    assert sum(per_coll) + run_wide <= saved["total_s"] + 0.01 <= wall + 0.02
    assert "## Time per stage" in (tmp_path / "out" / "report.md").read_text()


def test_a_run_on_a_terminal_shows_each_collective(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")           # rich then draws as on a terminal
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    _, out = _synthesize(tmp_path, capsys, progress=True, verbose=True)
    assert "allgather (1/2)" in out and "broadcast (2/2)" in out
    assert "  allgather: total" in out and "  run: total" in out

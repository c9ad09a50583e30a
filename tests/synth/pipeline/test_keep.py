"""A ``synthesize`` run over results that differ from its own only in wall-clock times leaves
every file as it was (bytes, inode, mtime) and says so in one line; a change in anything else
(a ratio, a modelled time, an option, a schedule) is written.  The comparison
(synth.pipeline.wall_clock) is checked against references spelled out here: the summary with
its wall-clock values blanked, the report rendered with every time set to zero."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.cli.synthesize import main
from synth.pipeline.progress import STAGES_PATTERN, format_stages
from synth.pipeline.report import _per_collective_lines, _stage_lines
from synth.pipeline.wall_clock import same_json, same_text, unmarked

#: the wall-clock keys of summary.json, spelled out independently of synth.pipeline.wall_clock
WALL = {"total_s", "stages", "pareto_solve_s", "solve_s", "wall_s", "build_s", "search_wall_s"}
ARGS = ["--topology", "dgx-h100", "--collectives", "allgather,broadcast", "--time-limit", "5", "--no-progress"]


def _state(out: Path) -> dict[str, tuple]:
    """Every entry under ``out``: ``rel -> (sha256, inode, mtime_ns)`` for files, ``"dir"`` for folders."""
    found = {}
    for dirpath, dirnames, files in os.walk(out):
        for d in dirnames:
            found[(Path(dirpath) / d).relative_to(out).as_posix()] = "dir"
        for f in files:
            p = Path(dirpath) / f
            st_ = p.lstat()
            found[p.relative_to(out).as_posix()] = (hashlib.sha256(p.read_bytes()).hexdigest(), st_.st_ino,
                                                    st_.st_mtime_ns)
    return found


def _blank(doc):
    """``doc`` with the value of every wall-clock key replaced by None."""
    if isinstance(doc, dict):
        return {k: None if k in WALL else _blank(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_blank(v) for v in doc]
    return doc


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> Path:
    """One ``synthesize`` run for the module: each test works on its own copy of it (a run with
    the same arguments writes the same files apart from wall-clock times), and it is the
    independent reference run the changed results are compared with."""
    out = tmp_path_factory.mktemp("keep") / "res"
    assert main(ARGS + ["--out", str(out)]) == 0
    assert not any(p.is_symlink() for p in out.rglob("*"))    # a copy shares nothing with it
    return out


def _made(first_run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "res"
    shutil.copytree(first_run, out)
    return out


def test_a_rerun_with_the_same_results_leaves_every_file_as_it_was(first_run, tmp_path, capsys):
    out = _made(first_run, tmp_path)
    before = _state(out)
    first = json.loads((out / "summary.json").read_text())
    capsys.readouterr()
    assert main(ARGS + ["--out", str(out), "--force", "--verbose"]) == 0
    text = capsys.readouterr().out
    assert _state(out) == before                                   # bytes, inodes, mtimes; nothing added
    files = sum(1 for rel, v in before.items() if v != "dir" and rel != ".topocoll-result")
    kept = [x for x in text.splitlines() if x.startswith("results unchanged apart from wall-clock times")]
    assert kept == [f"results unchanged apart from wall-clock times: kept {files} files in {out}/ as they were; "
                    "this run's stage times are above"], text
    # --verbose printed this run's stage times, one line per collective and the run's
    assert re.search(r"^  allgather: total [0-9.]+ s:", text, re.M) and re.search(r"^  run: total ", text, re.M)
    assert json.loads((out / "summary.json").read_text()) == first


def _mutate_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=1))


def _first_sim(doc):
    sims = doc["collectives"]["allgather"]["simulated_us"]
    return sims[next(iter(sims))]


MUTATIONS = {
    # (file, change, whether it is a result): a result is written again, wall-clock times are kept
    "a modelled time in summary.json": ("summary.json", lambda p: _mutate_json(
        p, lambda d: _first_sim(d).__setitem__("1KB", _first_sim(d)["1KB"] * 1.01)), True),
    "the time limit (an option, not a time taken)": ("summary.json", lambda p: _mutate_json(
        p, lambda d: d["options"].__setitem__("time_limit_s", 61.0)), True),
    "a ratio in summary.json": ("summary.json", lambda p: _mutate_json(
        p, lambda d: d["collectives"]["allgather"]["bandwidth_optimal"].__setitem__("ratio_to_bound", 1.01)), True),
    "a ratio in report.md": ("report.md", lambda p: p.write_text(
        re.sub(r"\| ([0-9.]+)x \|", "| 9.99x |", p.read_text(), count=1)), True),
    "a schedule": ("schedules/allgather-ring.json", lambda p: p.write_text(p.read_text() + " "), True),
    "the run's times in summary.json": ("summary.json", lambda p: _mutate_json(
        p, lambda d: (d.__setitem__("total_s", 99.0), d["collectives"]["broadcast"]["stages"].__setitem__(
            "pareto", 42.0), d["collectives"]["allgather"].__setitem__("pareto_solve_s", 7.5))), False),
    "the run's times in report.md": ("report.md", lambda p: p.write_text(
        re.sub(r"; total [0-9.]+ s\.", "; total 99.9 s.", re.sub(r"- allgather: total [^\n]*",
               "- allgather: total 7.0 s: pareto 6.0, bwopt 1.0", p.read_text()))), False),
}


@pytest.mark.parametrize("what", MUTATIONS)
def test_a_changed_result_is_written_and_changed_times_are_kept(what, first_run, tmp_path):
    rel, change, result = MUTATIONS[what]
    out = _made(first_run, tmp_path)
    original = _state(out)
    change(out / rel)
    mutated = _state(out)
    assert mutated[rel][0] != original[rel][0], "the mutation changed nothing"
    assert main(ARGS + ["--out", str(out), "--force"]) == 0
    after = _state(out)
    if not result:
        assert after == mutated                                    # the edited times stay: nothing written
        return
    assert after[rel][1:] != mutated[rel][1:]                      # written again
    assert after[rel][0] == original[rel][0] or rel in ("summary.json", "report.md")
    # this run's results, not the edited ones: those of an independent run (the module's first) apart from its times
    reference = json.loads((first_run / "summary.json").read_text())
    assert _blank(json.loads((out / "summary.json").read_text())) == _blank(reference)
    assert "9.99x" not in (out / "report.md").read_text()
    for timed in ("summary.json", "report.md"):                    # both carry this run's times now
        assert after[timed][1:] != mutated[timed][1:], timed
    same = [r for r in original if r not in (rel, "summary.json", "report.md") and original[r] != "dir"]
    assert same and all(after[r] == mutated[r] for r in same), [r for r in same if after[r] != mutated[r]]


# ---------------------------------------------------------------- the comparison of summary.json

_KEYS = sorted(WALL) + ["time_limit_s", "ratio", "simulated_us", "time_us", "name", "notes", "steps"]
_numbers = st.integers(0, 10**6) | st.floats(0, 1e6, allow_nan=False)
_times = _numbers | st.dictionaries(st.sampled_from(["pareto", "bwopt", "export"]), _numbers, max_size=3)
_leaves = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-10, 10, allow_nan=False) | st.text("ab1.", max_size=3)


def _as_time(value):
    """A time-shaped value (what the writer puts under a wall-clock key) made from ``value``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return abs(value)
    return len(json.dumps(value)) / 8


def _timed(doc):
    if isinstance(doc, dict):
        return {k: _as_time(v) if k in WALL else _timed(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_timed(v) for v in doc]
    return doc


_docs = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=3) |
                     st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4), max_leaves=16).map(_timed)


def _changed(doc, data, results: bool):
    """``doc`` with new wall-clock values drawn here and there and, with ``results``, its
    non-wall-clock parts changed here and there too (a value, a key's name, a key more or less)."""
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            if k in WALL:
                out[k] = data.draw(_times) if data.draw(st.booleans()) else v
            else:
                out[k] = _changed(v, data, results)
        if results and data.draw(st.integers(0, 5)) == 0:
            plain = [k for k in out if k not in WALL]
            how = data.draw(st.sampled_from(["drop", "add", "rename"]))
            if how == "drop" and plain:
                del out[data.draw(st.sampled_from(plain))]
            elif how == "add":
                out.setdefault(data.draw(st.sampled_from([k for k in _KEYS if k not in WALL])), data.draw(_leaves))
            elif how == "rename" and plain:
                k = data.draw(st.sampled_from(plain))
                out = {("renamed" if key == k else key): v for key, v in out.items()}
        return out
    if isinstance(doc, list):
        items = [_changed(v, data, results) for v in doc]
        if results and data.draw(st.integers(0, 5)) == 0:
            items.append(data.draw(_leaves))
        return items
    if results and data.draw(st.integers(0, 3)) == 0:
        return data.draw(_leaves)
    return doc


@settings(max_examples=300, deadline=None)
@given(_docs, st.data())
def test_summaries_are_the_same_exactly_when_they_agree_outside_the_wall_clock_keys(doc, data):
    old = _changed(doc, data, results=data.draw(st.booleans()))
    new_text, old_text = json.dumps(doc, indent=1), json.dumps(old, indent=1)
    expected = json.dumps(_blank(old), indent=1) == json.dumps(_blank(doc), indent=1)
    assert same_json(old_text, new_text) == expected


@settings(max_examples=200, deadline=None)
@given(_docs, st.data())
def test_a_summary_with_any_result_changed_is_never_the_same(doc, data):
    old = _changed(doc, data, results=True)
    if json.dumps(_blank(old)) != json.dumps(_blank(doc)):
        assert not same_json(json.dumps(old, indent=1), json.dumps(doc, indent=1))


def test_a_wall_clock_key_holding_something_else_is_compared_as_a_result():
    new = json.dumps({"total_s": 1.0, "stages": {"pareto": 0.5}}, indent=1)
    assert same_json(json.dumps({"total_s": 2.0, "stages": {"bwopt": 0.1}}, indent=1), new)
    assert not same_json(json.dumps({"total_s": "2.0", "stages": {"pareto": 0.5}}, indent=1), new)
    assert not same_json(json.dumps({"total_s": 1.0, "stages": {"pareto": "fast"}}, indent=1), new)
    assert not same_json(json.dumps({"total_s": 1.0, "stages": {"pareto": 0.5}}, indent=2), new)   # other bytes


# ---------------------------------------------------------------- the comparison of report.md

_STAGE_NAMES = ["baselines", "pareto", "bwopt", "bwopt_effective", "verify", "save", "bounds", "simulate", "export"]
_seconds = st.integers(0, 10**6).map(lambda k: k / 1000)
_record = st.fixed_dictionaries({
    "pareto": st.lists(st.fixed_dictionaries({"steps": st.integers(1, 3), "rounds": st.integers(1, 3),
                                              "chunks": st.integers(1, 6)}), max_size=2),
    "pareto_note": st.sampled_from(["", "more than 8 ranks", "stopped at 60 s"]),
    "pareto_solve_s": _seconds,
    "bandwidth_optimal": st.none() | st.fixed_dictionaries({
        "method": st.sampled_from(["lp-trees", "hierarchical"]), "ratio_to_bound": st.sampled_from([1.0, 1.75, 1.05]),
        "ratio_to_phased_bound": st.sampled_from([0, 1.0, 1.25]), "solve_s": _seconds}),
    "bandwidth_optimal_note": st.sampled_from(["", "covers allgather only", "the LP stopped at 5 s"]),
    "bounds": st.fixed_dictionaries({"latency_steps": st.integers(1, 3),
                                     "bandwidth_rounds_per_block": st.sampled_from(["7/18", "1/2"])}),
    "notes": st.lists(st.sampled_from(["xml skipped", "1 GB: 12.5 s"]), max_size=1),
    "stages": st.dictionaries(st.sampled_from(_STAGE_NAMES), _seconds, min_size=1),
})
_summaries = st.fixed_dictionaries({"allgather": _record, "broadcast": _record})


def _report(collectives: dict) -> str:
    """The per-collective and stage-time lines of a report, its wall-clock times marked."""
    summary = {"collectives": collectives}
    return "\n".join(_per_collective_lines(summary, list(collectives)) + _stage_lines(summary, list(collectives)))


def _zero_times(collectives: dict) -> dict:
    def zero(rec):
        rec = {**rec, "pareto_solve_s": 0.0, "stages": {k: 0.0 for k in rec["stages"]}}
        if rec["bandwidth_optimal"]:
            rec["bandwidth_optimal"] = {**rec["bandwidth_optimal"], "solve_s": 0.0}
        return rec
    return {c: zero(r) for c, r in collectives.items()}


@settings(max_examples=300, deadline=None)
@given(_summaries, st.data())
def test_reports_are_the_same_exactly_when_they_agree_outside_the_wall_clock_spans(new, data):
    old = data.draw(st.one_of(st.just(new), _summaries))
    if data.draw(st.booleans()):      # the same results, other times
        old = {c: {**new[c], "pareto_solve_s": data.draw(_seconds), "stages": data.draw(_record)["stages"],
                   "bandwidth_optimal": new[c]["bandwidth_optimal"] and {**new[c]["bandwidth_optimal"],
                                                                        "solve_s": data.draw(_seconds)}}
               for c in new}
    expected = unmarked(_report(_zero_times(old))) == unmarked(_report(_zero_times(new)))
    assert same_text(unmarked(_report(old)), _report(new)) == expected


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(_STAGE_NAMES), st.floats(0, 1e5, allow_nan=False)))
def test_every_line_of_stage_times_is_what_the_report_marks_as_times(stages):
    assert re.fullmatch(STAGES_PATTERN, format_stages(stages))


def test_a_marked_span_holds_only_what_its_kind_writes():
    from synth.pipeline.wall_clock import wall_number, wall_stages
    new = f"total {wall_number('3.1')} s. | 1.21x\n- allgather: {wall_stages('total 0.6 s: pareto 0.4')}\n"
    assert same_text("total 12.5 s. | 1.21x\n- allgather: total 9.0 s: bwopt 8.0, export 1.0\n", new)
    assert same_text("total 1.5 s. | 1.21x\n- allgather: total 0.1 s: \n", new)
    assert not same_text("total 2.5 s. | 1.22x s. | 1.21x\n- allgather: total 0.6 s: pareto 0.4\n", new)
    assert not same_text("total 2.5 s. | 1.21x\n- allgather: total 0.6 s: pareto 0.4 | 1.22x\n", new)
    assert not same_text("total 3.1 s. | 1.21x\n- allgather: total 0.6 s: pareto 0.4\n- broadcast:\n", new)

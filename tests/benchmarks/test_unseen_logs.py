"""benchmarks/unseen_logs.py and unseen_log_cases.py: every unseen log parses and is the run its case
describes, the committed scores follow from the logs' own rows, one case computed by hand from the
``simulate --import`` command's printed table, the folder and the case list agree, and no fit reads
these logs."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from _paths import FIXTURES, ROOT

from synth.formats.nccl_tests.runs import guess_collective, load_runs

sys.path.insert(0, str(ROOT / "benchmarks"))

import nccl_log_cases
import unseen_log_cases as unseen
import unseen_logs

FOLDER = FIXTURES / "real_logs" / "unseen"
COMMITTED = ROOT / "results" / "model_validation"
BY_FILE = {c.file: c for c in unseen.CASES}
#: a row of nccl-tests' table: size, count, type, redop, root, then the out-of-place time, algbw, busbw
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s", re.MULTILINE)
#: collectives whose count column is per rank (nccl-tests: count = size / type size / ranks)
PER_RANK_COUNT = {"allgather", "reducescatter", "alltoall"}
#: bytes per element of the types the logs use (nccl-tests' type names)
TYPE_BYTES = {"float": 4, "uint8": 1}
KIB64 = 64 * 1024


def own_rows(path) -> dict[int, tuple[int, float, float, float]]:
    """size -> (count, time us, algbw, busbw) of the out-of-place columns, read with a regex (not the
    project's reader); rows of size 0 left out."""
    text = path.read_text(encoding="utf-8")
    return {int(m[1]): (int(m[2]), float(m[6]), float(m[7]), float(m[8])) for m in ROW.finditer(text) if int(m[1])}


def row_types(path) -> set[str]:
    """The type column's values over the rows of a log."""
    return {m[3] for m in ROW.finditer(path.read_text(encoding="utf-8"))}


def committed() -> dict:
    return json.loads((COMMITTED / "unseen_logs.json").read_text(encoding="utf-8"))


def as_dicts(case_doc: dict, columns) -> list[dict]:
    return [dict(zip(columns, row)) for row in case_doc["rows"]]


@pytest.mark.parametrize("case", unseen.CASES, ids=lambda c: c.file)
def test_every_log_parses_and_is_the_run_its_case_describes(case):
    path = FOLDER / case.file
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# SOURCE: ") and len(text.splitlines()[0]) > 200
    runs = load_runs(path)
    assert len(runs) == 1 and guess_collective(runs[0], path) == case.collective
    ranks = [int(r) for r in re.findall(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s", text, re.MULTILINE)]
    assert ranks == list(range(case.ranks)) and runs[0].num_ranks == case.ranks
    rows = own_rows(path)
    sizes = sorted(rows)
    assert [r.size for r in runs[0].rows if r.size] == sizes           # the importer reads every row
    assert all(b == 2 * a for a, b in itertools.pairwise(sizes)) and len(sizes) >= 5
    lo, hi = map(int, re.search(r"minBytes (\d+) maxBytes (\d+)", text).groups())
    assert lo <= sizes[0] and sizes[-1] <= hi
    per = case.ranks if case.collective in PER_RANK_COUNT else 1
    (dtype,) = row_types(path)
    for size, (count, time_us, algbw, _) in rows.items():
        assert count * TYPE_BYTES[dtype] * per == size, size             # float 4, uint8 1 byte per element
        assert size / time_us / 1e3 == pytest.approx(algbw, rel=0.02, abs=0.011), size


def test_the_committed_scores_follow_from_the_logs_rows():
    """Each case's real busbw is its log's out-of-place busbw at every size >= 64 KiB, and its median
    and worst |pred/real - 1| follow from the printed prediction over that busbw (NumPy, both within
    the rounding of the printed columns)."""
    doc = committed()
    assert [c["file"] for c in doc["cases"]] == [c.file for c in unseen.CASES]
    for c in doc["cases"]:
        rows = own_rows(FOLDER / c["file"])
        got = [r for r in as_dicts(c, doc["row_columns"]) if r["size"] >= KIB64]
        assert [r["size"] for r in got] == [s for s in sorted(rows) if s >= KIB64 and rows[s][3] > 0], c["file"]
        real = np.array([rows[r["size"]][3] for r in got])
        assert [r["real_busbw"] for r in got] == real.tolist()
        errors = np.abs(np.array([r["pred_busbw"] for r in got]) / real - 1)
        slack = 0.0051 / real.min() * 1.01 + 5e-4           # busbw printed to 0.01 GB/s, pred/real to 0.001
        score = c["score"]
        assert score["rows"] == len(got)
        assert abs(score["median"] - np.median(errors)) <= slack, c["file"]
        assert abs(score["worst"] - errors.max()) <= slack, c["file"]
        if score["ok"]:          # decided on the unrounded errors; the record keeps 4 decimals, so a value just
            assert score["median"] <= 0.15 and score["worst"] <= 0.35        # over a bar may read as the bar itself
        else:
            assert score["median"] >= 0.15 or score["worst"] >= 0.35, c["file"]
        if c["file"] not in unseen.BEFORE_REFIT:                         # added after BEFORE_REVISION: no record
            assert c["before"] is None
            continue
        median, worst = unseen.BEFORE_REFIT[c["file"]]
        assert (c["before"]["median"], c["before"]["worst"]) == (round(median / 100, 4), round(worst / 100, 4))


def test_the_committed_counts_and_report_are_the_cases_own():
    doc = committed()
    cases = doc["cases"]
    counted = [c for c in cases if c["status"] not in ("derived", "seen_issue36", "seen_issue36_header")]
    assert len(cases) == 27 and len(counted) == 15
    assert sum(c["before"] is not None for c in cases) == len(unseen.BEFORE_REFIT) == 18
    assert doc["counts"]["all"]["within_both"] == sum(c["score"]["ok"] for c in cases)
    assert doc["counts"]["counted"]["within_both"] == sum(c["score"]["ok"] for c in counted)
    assert doc["counts"]["counted"]["before_within_both"] == sum(
        m <= 15 and w <= 35 for f, (m, w) in unseen.BEFORE_REFIT.items() if BY_FILE[f].status not in unseen.NOT_COUNTED)
    assert doc["counts"]["counted_needed"] == 13          # 12 of 14, scaled to 15 cases and rounded up
    text = (COMMITTED / "unseen_logs.md").read_text(encoding="utf-8")
    for c in cases:
        line = next(x for x in text.splitlines() if x.startswith(f"| {c['file']} |"))
        assert f"| {c['score']['median']:.1%} | {c['score']['worst']:.1%} |" in line
        assert line.endswith("| \u2014 | \u2014 | \u2014 |") == (c["before"] is None)
    ok = doc["counts"]["counted"]["within_both"]
    assert f"**{ok} of 15**" in text and ("**not met**" in text) == (ok < 13)


def _cli_rows(case) -> dict[int, float]:
    """size -> predicted out-of-place busbw of ``simulate --import LOG ARGS --baseline nccl``, run as a
    command with only the case's NCCL variables in its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "RCCL_"))}
    env.update(case.env, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "synth.cli.simulate", "--import", str(FOLDER / case.file),
                          *case.args, "--baseline", "nccl"], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    return {int(f[0]): float(f[7]) for f in (line.split() for line in out.splitlines())
            if f and f[0].isdigit()}


@pytest.mark.parametrize("file,meets", [("h200_8gpu_1node_all_reduce_azure_nvls_DERIVED.txt", True),
                                        ("mi300x_vf_8gpu_1node_all_reduce_azure.txt", False)])
def test_one_case_by_hand_from_the_printed_table_of_the_command(file, meets):
    """The H200 table needs its NCCL_ALGO=NVLS to be the run the source made (without it the model
    picks ring/LL up to 1 MiB and NVLS only above); the MI300X VM's all_reduce misses the bar (median 36 %)."""
    case = BY_FILE[file]
    pred = _cli_rows(case)
    real = {s: v[3] for s, v in own_rows(FOLDER / file).items() if s >= KIB64 and v[3] > 0}
    errors = sorted(abs(pred[s] / real[s] - 1) for s in real)
    n = len(errors)
    median = (errors[(n - 1) // 2] + errors[n // 2]) / 2
    score = next(c for c in committed()["cases"] if c["file"] == file)["score"]
    slack = 0.0051 / min(real.values()) * 1.01 + 5e-4
    assert score["rows"] == n and abs(score["median"] - median) <= slack and abs(score["worst"] - errors[-1]) <= slack
    assert score["ok"] == meets


def test_the_committed_results_are_what_the_benchmark_gives_today():
    """Every case but the 72-GPU rack (20 s of lower-bound search alone) predicted again in process:
    the same rows and scores as committed (rerun the benchmark after a refit)."""
    doc = committed()
    for c in doc["cases"]:
        if c["ranks"] > 32:
            continue
        now = unseen_logs.evaluate(BY_FILE[c["file"]])
        assert now["rows"] == as_dicts(c, doc["row_columns"]) and now["score"] == c["score"], c["file"]


def test_the_case_environment_holds_only_the_cases_variables(monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    monkeypatch.delenv("NCCL_PROTO", raising=False)
    with unseen_logs.case_environment({"NCCL_PROTO": "LL"}):
        assert os.environ.get("NCCL_PROTO") == "LL" and "NCCL_ALGO" not in os.environ
    assert os.environ["NCCL_ALGO"] == "Tree" and "NCCL_PROTO" not in os.environ


def test_the_case_list_and_the_folder_agree_and_a_log_without_a_case_stops_the_benchmark(tmp_path, capsys,
                                                                                          monkeypatch):
    assert unseen_logs.uncased_logs() == []
    assert sorted(p.name for p in FOLDER.glob("*.txt")) == sorted(BY_FILE)
    folder = tmp_path / "unseen"
    shutil.copytree(FOLDER, folder)
    (folder / "extra_8gpu_all_reduce.txt").write_text((FOLDER / unseen.CASES[0].file).read_text(encoding="utf-8"))
    (folder / unseen.CASES[1].file).unlink()
    assert unseen_logs.uncased_logs(folder) == ["extra_8gpu_all_reduce.txt: a log without a case",
                                                f"{unseen.CASES[1].file}: a case without a log"]
    monkeypatch.setattr(unseen_logs, "FOLDER", folder)
    out = tmp_path / "out"
    assert unseen_logs.main(["--out", str(out)]) == 2
    assert "extra_8gpu_all_reduce.txt: a log without a case" in capsys.readouterr().err and not out.exists()


def test_no_fit_reads_an_unseen_log():
    """Not a case of nccl_log_cases (what fit_nccl_model.py and the class holdout read), not where
    ``real_logs/*.txt`` finds logs, and no copy of one under another name (two or more rows >= 64 KiB
    of the same size and busbw in one fitted log)."""
    names = set(BY_FILE)
    assert not names & {c.file for c in nccl_log_cases.ALL_CASES}
    assert not names & {c.file for c in nccl_log_cases.IN_SAMPLE}
    assert not names & {p.name for p in (FIXTURES / "real_logs").glob("*.txt")}
    fitted = {c.file for c in nccl_log_cases.ALL_CASES}
    signatures = {f: {(s, v[3]) for s, v in own_rows(FIXTURES / "real_logs" / f).items() if s >= KIB64}
                  for f in fitted}
    for name in names:
        mine = {(s, v[3]) for s, v in own_rows(FOLDER / name).items() if s >= KIB64}
        assert all(len(mine & sig) < 2 for sig in signatures.values()), name


def test_the_rack_logs_rows_are_the_published_anchor_figures_its_note_names():
    import published_nccl_anchors as anchors
    rows = own_rows(FOLDER / "gb200_72gpu_nvl72_1rack_all_reduce_coreweave.txt")
    assert {(s, v[3]) for s, v in rows.items()} == set(anchors._NVL72)
    assert "published_nccl_anchors" in BY_FILE["gb200_72gpu_nvl72_1rack_all_reduce_coreweave.txt"].note


def test_a_machine_the_command_refuses_stops_the_benchmark_naming_the_log(tmp_path, capsys, monkeypatch):
    """An 8-rank log described as two 8-GPU hosts: simulate's own rank check refuses it, in one line."""
    import dataclasses
    bad = dataclasses.replace(unseen.CASES[2], args=("--topology", "hgx-h200", "--nodes", "2"))
    monkeypatch.setattr(unseen, "CASES", [bad, *unseen.CASES[3:]] + unseen.CASES[:2])
    out = tmp_path / "out"
    assert unseen_logs.main(["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"unseen_logs: error: {bad.file}: ") and "8 ranks" in err and "\n" not in err
    assert not out.exists()


def test_the_spread_of_two_runs_of_one_machine_by_hand_and_from_the_logs_own_rows():
    """run_spread on a hand-made pair (100 vs 80 and 50 vs 50 GB/s, one size below 64 KiB left out):
    ratios 1.25 and 1.0, halfway errors 20/180 and 0; then each committed pair against the logs' busbw
    read with this file's own regex."""
    rows = [{"size": KIB64, "real_busbw": 100.0}, {"size": 2 * KIB64, "real_busbw": 50.0}, {"size": 1024, "real_busbw": 9.0}]
    other = [{"size": KIB64, "real_busbw": 80.0}, {"size": 2 * KIB64, "real_busbw": 50.0}, {"size": 1024, "real_busbw": 1.0}]
    s = unseen_logs.run_spread(rows, other)
    assert s["sizes"] == 2 and s["low"] == 1.0 and s["high"] == 1.25
    assert s["median"] == pytest.approx(0.125) and s["halfway"] == pytest.approx((20 / 180) / 2)
    assert unseen_logs.run_spread(rows, [])["sizes"] == 0
    for fa, fb in unseen.SAME_MACHINE:
        assert BY_FILE[fa].collective == BY_FILE[fb].collective and BY_FILE[fa].ranks == BY_FILE[fb].ranks
        a, b = own_rows(FOLDER / fa), own_rows(FOLDER / fb)
        shared = [s for s in a if s in b and s >= KIB64]
        ratios = [a[s][3] / b[s][3] for s in shared]
        got = unseen_logs.run_spread([{"size": s, "real_busbw": v[3]} for s, v in a.items()],
                                     [{"size": s, "real_busbw": v[3]} for s, v in b.items()])
        assert got["sizes"] == len(shared) and got["median"] == pytest.approx(np.median(np.abs(np.array(ratios) - 1)))
        assert got["low"] == pytest.approx(min(ratios)) and got["high"] == pytest.approx(max(ratios))


#: the "ND MI300X v5 (GB/s)" column of samuel-bohman/AI-benchmarking-guide @3de0c294
#: Azure_Results/ND_MI300X_v5_results.md, 1K to 8G, copied by hand from that page
ND_MI300X_V5_BUSBW = (0.04, 0.07, 0.15, 0.29, 0.59, 1.13, 2.22, 4.18, 7.50, 13.01, 22.41, 43.41, 82.53, 131.57, 171.46,
                      230.35, 266.34, 290.81, 302.80, 308.89, 313.92, 315.06, 314.85, 316.82)


def test_the_derived_rows_are_the_published_busbw_and_follow_the_readme_rule():
    """Every busbw-only table: the out-of-place and in-place columns equal, algbw = busbw * n / (2 (n - 1)) and
    time = size / algbw, each within its printed rounding (the fixture README's rule); the Azure ND MI300X v5
    table's busbw is the published column, size 1 KiB doubling to 8 GiB."""
    row = re.compile(r"^\s*(\d+)\s+\d+\s+float\s+sum\s+-1\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+N/A\s+([\d.]+)\s+([\d.]+)"
                     r"\s+([\d.]+)\s+N/A\s*$", re.MULTILINE)
    derived = [c for c in unseen.CASES if c.status == "derived"]
    assert len(derived) == 3
    for case in derived:
        rows = row.findall((FOLDER / case.file).read_text(encoding="utf-8"))
        assert len(rows) == len(own_rows(FOLDER / case.file)) == 24, case.file
        n = case.ranks
        for size, t, algbw, busbw, t2, algbw2, busbw2 in rows:
            assert (t, algbw, busbw) == (t2, algbw2, busbw2), size
            assert float(algbw) == pytest.approx(float(busbw) * n / (2 * (n - 1)), abs=0.0051), size
            exact = int(size) / (float(busbw) * n / (2 * (n - 1))) / 1e3     # us, from the unrounded algbw
            assert float(t) == pytest.approx(exact, abs=0.51 if exact >= 1000 else 0.051), size
    rows = own_rows(FOLDER / "mi300x_vf_8gpu_1node_all_reduce_azure_ndv5_DERIVED.txt")
    assert sorted(rows) == [1024 << k for k in range(24)]
    assert [rows[s][3] for s in sorted(rows)] == list(ND_MI300X_V5_BUSBW)

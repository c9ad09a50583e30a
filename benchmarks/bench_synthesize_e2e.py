"""``synthesize`` end to end: wall time, time per stage, peak memory and ratio to the bound.

Usage::

    nice python benchmarks/bench_synthesize_e2e.py [--big] [--baseline REF] [--only 64,rail] [--sets one,all]
                                                   [--out results/scale/e2e]

Each case is one whole ``synthesize`` command (``synth.cli.synthesize.main``, every output
written, MSCCL exports included) in a child process of its own, into a fresh temporary folder
with ``--force --no-progress``; its peak memory is the child's ``ru_maxrss`` (``os.wait4``).
Sizes: 8 GPUs (``dgx-h100``, ``dgx-a100``), 16 (``dgx-h100 --nodes 2``), 32 (``dgx-h100 --nodes
4``), 64 (``dgx-a100 --nodes 8``); with ``--big`` also 256 (``dgx-h100 --nodes 32``) and 1,024
(``dgx-h100 --nodes 128``); with ``--only rail`` (only then) also 16 rail-optimized
(``dgx-h100 --nodes 2 --rail-optimized``).  Collective sets: ``one`` (allgather) and ``all`` (the eight).

Stage columns (seconds, summed over the collectives) come from ``summary.json``'s ``stages``
(written by runs that record them; blank for older code); ``ratio`` is the largest
``ratio_to_bound`` of the bandwidth-optimal schedules (allreduce: to the phased bound).  With
``--baseline REF`` every case also runs on the ``synth`` and ``topo_probe`` packages of git
revision REF (``git archive``), right before the current tree, so both are measured under the
same load.  Writes ``<out>.md`` and ``<out>.csv``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_msccl_export import _tree_at  # noqa: E402  (a git revision's packages, extracted)
STAGES = ("startup", "fabric", "baselines", "pareto", "bwopt", "bwopt_effective", "verify", "save", "bounds",
          "simulate", "plan", "export", "report", "write")
#: (GPUs, label, synthesize arguments); the big ones only with --big
CASES = [
    (8, "dgx-h100", ["--topology", "dgx-h100"]),
    (8, "dgx-a100", ["--topology", "dgx-a100"]),
    (16, "2 x dgx-h100", ["--topology", "dgx-h100", "--nodes", "2"]),
    (32, "4 x dgx-h100", ["--topology", "dgx-h100", "--nodes", "4"]),
    (64, "8 x dgx-a100", ["--topology", "dgx-a100", "--nodes", "8"]),
]
BIG = [
    (256, "32 x dgx-h100", ["--topology", "dgx-h100", "--nodes", "32"]),
    (1024, "128 x dgx-h100", ["--topology", "dgx-h100", "--nodes", "128"]),
]
#: cases run only when ``--only`` names them by label
NAMED = {"rail": (16, "2 x dgx-h100 rail", ["--topology", "dgx-h100", "--nodes", "2", "--rail-optimized"])}
SETS = {"one": "allgather", "all": "all"}
#: targets of the whole command for all eight collectives (s), by GPUs
TARGET_S = {8: 10, 16: 10, 32: 10, 64: 10, 256: 30, 1024: 180}


def _ratio(summary: dict) -> float | None:
    """Largest ratio to the bound of the run's bandwidth-optimal schedules."""
    worst = None
    for rec in summary.get("collectives", {}).values():
        bw = rec.get("bandwidth_optimal") or {}
        r = bw.get("ratio_to_phased_bound") or bw.get("ratio_to_bound")
        if isinstance(r, (int, float)):
            worst = r if worst is None else max(worst, r)
    return worst


def _stages(summary: dict) -> dict[str, float]:
    """Seconds per stage, summed over collectives, plus the run-wide stages."""
    out: dict[str, float] = {}
    recs = [rec.get("stages", {}) for rec in summary.get("collectives", {}).values()] + [summary.get("stages", {})]
    for st in recs:
        for k, v in st.items():
            out[k] = out.get(k, 0.0) + float(v)
    return out


def run_case(tree: Path, args: list[str], collectives: str, tmp: Path) -> dict:
    """One ``synthesize`` in a child process: wall time, the child's peak RSS, its summary."""
    out = Path(tempfile.mkdtemp(dir=tmp))
    code = ("import sys; from synth.cli.synthesize import main; "
            "sys.exit(main(sys.argv[1:]))")
    cmd = [sys.executable, "-c", code, *args, "--collectives", collectives, "--out", str(out / "r"),
           "--force", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(tree))
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=str(tree), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"synthesize {' '.join(args)} failed ({proc.returncode}): {err.decode()[-2000:]}")
    summary = json.loads((out / "r" / "summary.json").read_text())
    stages = _stages(summary)
    if summary.get("total_s") is not None:       # Python start, imports, topology, putting files in place
        stages["startup"] = max(0.0, wall - float(summary["total_s"]))
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024, "total_s": summary.get("total_s"),
            "ratio": _ratio(summary), "stages": stages}


def _fmt(v, digits=2) -> str:
    return "" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))


def write(out: Path, rows: list[dict], header: list[str]) -> None:
    stage_cols = [s for s in STAGES if any(s in r["stages"] for r in rows)]
    cols = ["gpus", "machine", "collectives", "code", "wall_s", "cpu_s", "target_s", "peak_mb", "ratio"] + stage_cols
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([_fmt(r.get(c)) if c in r else _fmt(r["stages"].get(c)) for c in cols])
    lines = header + ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [_fmt(r.get(c), 4 if c == "ratio" else 2) if c in r else _fmt(r["stages"].get(c)) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def compare(before_csv: Path, rows: list[dict]) -> list[str]:
    """A table of this run's cases beside the same cases in an earlier run's CSV."""
    with open(before_csv, newline="") as f:
        old = {(r["gpus"], r["machine"], r["collectives"]): r for r in csv.DictReader(f)}
    out = ["", f"Beside the earlier run in `{before_csv.name}` (same benchmark; load differed, compare CPU first):",
           "", "| gpus | machine | collectives | cpu_s before | cpu_s after | wall_s before | wall_s after | "
           "peak_mb before | peak_mb after | ratio before | ratio after |", "|" + "---|" * 11]
    for r in rows:
        o = old.get((str(r["gpus"]), r["machine"], r["collectives"]))
        if o is None:
            continue
        out.append(f"| {r['gpus']} | {r['machine']} | {r['collectives']} | {o.get('cpu_s', '')} | {_fmt(r['cpu_s'])} | "
                   f"{o['wall_s']} | {_fmt(r['wall_s'])} | {o['peak_mb']} | {_fmt(r['peak_mb'])} | {o['ratio']} | "
                   f"{_fmt(r['ratio'], 4)} |")
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--big", action="store_true", help="also 256 and 1,024 GPUs")
    ap.add_argument("--baseline", help="git revision to time right before this tree")
    ap.add_argument("--only", default="", help="comma list of GPU counts, or 'rail', to run (default: all counts)")
    ap.add_argument("--sets", default="one,all", help="collective sets: one (allgather), all (the eight)")
    ap.add_argument("--out", default=str(ROOT / "results" / "scale" / "e2e"))
    ap.add_argument("--before", help="CSV of an earlier run: add a before/after table")
    ap.add_argument("--from-log", help=argparse.SUPPRESS)   # rows printed by an earlier run: write them only
    args = ap.parse_args(argv)
    named = [NAMED[x] for x in args.only.split(",") if x in NAMED]
    only = {int(x) for x in args.only.split(",") if x and x not in NAMED}
    cases = [c for c in CASES + (BIG if args.big else []) if (not only and not named) or c[0] in only] + named
    sets = [s for s in args.sets.split(",") if s]
    rows: list[dict] = []
    load0 = os.getloadavg()[0]
    t0 = time.time()
    if args.from_log:
        import ast
        rows = [ast.literal_eval(line) for line in Path(args.from_log).read_text().splitlines() if line.startswith("{")]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trees = ([("before", _tree_at(args.baseline, tmp))] if args.baseline else []) + [("after", ROOT)]
        for gpus, machine, cargs in ([] if args.from_log else cases):
            for s in sets:
                for label, tree in trees:
                    r = run_case(tree, cargs, SETS[s], tmp)
                    rows.append({"gpus": gpus, "machine": machine, "collectives": "all eight" if s == "all"
                                 else SETS[s], "code": label if args.baseline else "", **r,
                                 "target_s": TARGET_S.get(gpus) if s == "all" else None})
                    print(rows[-1], flush=True)
    cmd = "nice python benchmarks/bench_synthesize_e2e.py" + " --big" * args.big + \
          (f" --baseline {args.baseline}" if args.baseline else "") + (f" --only {args.only}" if args.only else "") + \
          (f" --sets {args.sets}" if args.sets != "one,all" else "") + \
          (f" --before {os.path.relpath(args.before, ROOT)}" if args.before else "")
    header = [
        "# synthesize end to end", "",
        f"Command: `{cmd}` (from the repository root).  Machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; load average (1 min) {load0:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end (the machine is shared); {time.time() - t0:.0f} s in all.", "",
        "One row per `synthesize` command, each in its own process, every output written (MSCCL XML included), "
        "run once.  `wall_s`: the whole command; `cpu_s`: the CPU time it used (user + system, all its threads; "
        "on a shared machine the steadier measure); `target_s`: the target for all eight collectives; `peak_mb`: "
        "the process's peak resident set (`ru_maxrss`); `ratio`: the largest ratio to the cut bound of the "
        "bandwidth-optimal schedules (allreduce: to the phased bound); the other columns: seconds per stage "
        "from `summary.json`, summed over collectives (`startup`: the command's wall time outside the run's `total_s` (Python start, imports, reading the topology, putting the results in place), `verify` "
        "runs `synth.ir.verifier.check` on every saved schedule, `save` writes schedule files, `export` the "
        "MSCCL XML, `report` report.md and busbw.png, `write` the other files)."
        + (f"  `code`: `before` is git revision {args.baseline}, `after` this tree, run one right after the "
           "other." if args.baseline else ""),
    ]
    if args.from_log:
        header[2] = (f"Command: `{cmd} [--big] [--only N] [--sets S]` (from the repository root), rows gathered from "
                     f"several runs; `code` is the git revision each row ran.  Machine: {platform.machine()}, "
                     f"{os.cpu_count()} cores, Python {platform.python_version()}, shared with other work.")
    if args.before:
        header += compare(Path(args.before), rows)
    write(Path(args.out), rows, header)


if __name__ == "__main__":
    main()

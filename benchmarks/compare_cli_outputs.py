"""Run the command-line tools of two git revisions on the same inputs and compare what they print
and write, ignoring only what must differ (process ids, wall-clock times, output paths).

Used to show that a restructuring changed no behaviour::

    python benchmarks/compare_cli_outputs.py 4a5d9a0 HEAD --out results/layout

Each revision is checked out into a temporary git worktree and run from source (from inside
that worktree), its console scripts resolved from its own ``pyproject.toml``.  Tables are
compared cell by cell on the nccl-tests columns (size ... busbw) plus the lower-bound columns
of ``simulate`` (for measured host sweeps: everything but the times and bandwidths); ``synthesize`` folders file by file (plan, summary, report, schedules, MSCCL XML)
with timing fields removed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

from shown_paths import script_command    # a sibling: this script runs from benchmarks/

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "topo-probe dgx1-v100 gpus 0-5": ["topo-probe", "--topology", "dgx1-v100", "--gpus", "0-5"],
    "topo-probe dgx-a100": ["topo-probe", "--topology", "dgx-a100"],
    "topo-probe nvidia-smi file": ["topo-probe", "--topology", "tests/fixtures/nvsmi_topo_dgx1_v100.txt"],
    "simulate allreduce ring dgx-a100": ["simulate", "--topology", "dgx-a100", "--collective", "allreduce",
                                         "--baseline", "ring", "-b", "8", "-e", "4G", "-f", "2"],
    "simulate allgather half dgx1-v100": ["simulate", "--topology", "dgx1-v100", "--collective", "allgather",
                                          "-b", "1K", "-e", "1G", "-f", "4", "-d", "half"],
    "simulate bwopt schedule file": ["simulate", "--topology", "dgx1-v100", "--gpus", "0-5", "--collective",
                                     "allgather", "--schedule", "results/bwopt/schedules/dgx1-v100[0-1-2-3-4-5]-allgather.json",
                                     "-b", "1M", "-e", "64M", "-f", "4"],
    "sweep sim compare dgx-a100": ["sweep", "all_reduce", "--backend", "sim", "--topology", "dgx-a100", "-b", "8",
                                   "-e", "4G", "-f", "2", "--compare", "plan,ring,tree", "--plot", "{out}/plot.png"],
    "sweep host 4 ranks": ["sweep", "all_gather", "-b", "8", "-e", "64K", "-f", "4", "-g", "4", "-n", "1", "-w", "0"],
    "sweep import log": ["sweep", "--import", "tests/fixtures/nccl_tests_allreduce_a100x8_single_process.txt"],
    "synthesize dgx-a100": ["synthesize", "--topology", "dgx-a100", "--out", "{out}/syn", "--collectives",
                            "allgather,allreduce,alltoall", "--time-limit", "10", "--no-progress"],
}
TIMING_KEYS = re.compile(r"(wall|solve|build|total|search_wall|time_limit)_s$|^seconds$")


def scripts(tree: Path) -> dict[str, str]:
    return tomllib.loads((tree / "pyproject.toml").read_text())["project"]["scripts"]


def run(tree: Path, argv: list[str], out: Path) -> tuple[int, str, str]:
    module, func = scripts(tree)[argv[0]].split(":")
    args = [a.replace("{out}", str(out)) for a in argv[1:]]
    code = f"import sys; from {module} import {func} as m; sys.exit(m({args!r}))"
    res = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, timeout=900,
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "TOPOCOLL_RESULTS": str(tree / "results")})
    return res.returncode, res.stdout, res.stderr


def table(text: str) -> list[list[str]]:
    """nccl-tests data rows: the columns size..busbw, and simulate's last three (slices, bound)."""
    rows = []
    for line in text.splitlines():
        f = line.split()
        if f and not line.startswith("#") and f[0].isdigit() and len(f) >= 8:
            rows.append(f[:8] + (f[-3:] if len(f) in (11, 16) else f[8:]))
    return rows


def scrub(value):
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not TIMING_KEYS.search(k)}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def folder(path: Path) -> dict[str, object]:
    out = {}
    for f in sorted(path.rglob("*")):
        rel = str(f.relative_to(path))
        if f.suffix == ".json":
            out[rel] = scrub(json.loads(f.read_text()))
        elif f.suffix in (".xml",):
            out[rel] = f.read_text()
        elif f.name == "report.md":
            out[rel] = re.sub(r"\d+\.\d+ s\b|total [\d.]+ s", "<t> s", f.read_text())
    return out


def compare(name: str, a: tuple, b: tuple, out_a: Path, out_b: Path) -> str:
    notes = []
    if a[0] != b[0]:
        notes.append(f"exit status {a[0]} vs {b[0]}")
    ta, tb = table(a[1]), table(b[1])
    if "host" in name:          # measured wall times: compare sizes, counts, types and #wrong only
        ta, tb = ([r[:5] + r[8:9] + r[12:13] for r in t] for t in (ta, tb))
    if ta != tb:
        bad = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        notes.append(f"table differs from row {bad} ({len(ta)} vs {len(tb)} rows)")
    if name.startswith("topo-probe") and a[1].replace(" ", "") != b[1].replace(" ", ""):
        notes.append("printed topology differs")
    if name.startswith("synthesize"):
        fa, fb = folder(out_a / "syn"), folder(out_b / "syn")
        diff = sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))
        if diff:
            notes.append(f"{len(diff)} output files differ: {diff[:5]}")
        else:
            notes.append(f"{len(fa)} output files identical (timings removed)")
    if name.startswith("synthesize") or notes:
        return "; ".join(notes)
    return "identical (printed text)" if name.startswith("topo-probe") else f"identical ({len(ta)} table rows)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "layout")
    args = p.parse_args(argv)
    revs = [subprocess.run(["git", "rev-parse", "--short", r], cwd=ROOT, capture_output=True, text=True).stdout.strip()
             for r in (args.before, args.after)]
    lines = [f"# CLI outputs: {revs[0]} vs {revs[1]}", "",
             f"Command: `{script_command(__file__, [args.before, args.after, '--out', str(args.out)])}`", "",
             "| command | result |", "|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        trees = []
        for k, rev in enumerate((args.before, args.after)):
            tree = Path(tmp) / f"tree{k}"
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), rev], cwd=ROOT, check=True)
            trees.append(tree)
        try:
            same = True
            for name, cmd in COMMANDS.items():
                outs = [Path(tmp) / f"out{k}-{abs(hash(name))}" for k in range(2)]
                for o in outs:
                    o.mkdir()
                res = [run(t, cmd, o) for t, o in zip(trees, outs)]
                verdict = compare(name, res[0], res[1], *outs)
                same &= verdict.startswith("identical") or "files identical" in verdict
                lines.append(f"| `{' '.join(cmd)}` | {verdict} |")
                print(name, "->", verdict, flush=True)
        finally:
            for tree in trees:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cli_outputs.md").write_text("\n".join(lines) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

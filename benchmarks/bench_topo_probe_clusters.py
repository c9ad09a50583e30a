"""CPU seconds of ``topo-probe --topology PRESET --nodes N`` (the whole display: nvidia-smi matrix,
bandwidth matrix, NIC blocks), per tree: this checkout and, with ``--before REV``, another revision
checked out into a temporary git worktree, side by side in one run.

    python benchmarks/bench_topo_probe_clusters.py --nodes 4,8,16,32 --before d309b56 --before-nodes 4,8,16 \\
        --out results/scale/topo_probe_clusters.md

Each run is one child process; its CPU time (user + system) comes from ``resource.getrusage`` of the
children, and its output's SHA-256 is kept, so equal outputs across trees show.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from shown_paths import script_command    # a sibling: this script runs from benchmarks/

ROOT = Path(__file__).resolve().parents[1]


def _cpu_run(tree: Path, preset: str, nodes: int) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", "from topo_probe.cli.entry import topo_probe; topo_probe()",
                          "--topology", preset, "--nodes", str(nodes)], cwd=tree, capture_output=True,
                         env=dict(os.environ, PYTHONPATH=str(tree)), check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, hashlib.sha256(out).hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="dgx-h100")
    ap.add_argument("--nodes", default="4,8,16,32")
    ap.add_argument("--before", help="a revision to time beside this checkout")
    ap.add_argument("--before-nodes", default="4,8")
    ap.add_argument("--out", help="write a Markdown table here")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = [("this checkout", ROOT, [int(n) for n in args.nodes.split(",")])]
        if args.before:
            wt = Path(tmp) / "before"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(wt), args.before], check=True)
            trees.append((args.before, wt, [int(n) for n in args.before_nodes.split(",")]))
        try:
            for name, tree, counts in trees:
                for n in counts:
                    cpu, digest = _cpu_run(tree, args.preset, n)
                    rows.append((name, n, cpu, digest))
                    print(f"{name}: {n} hosts {cpu:.2f} s CPU, output {digest}", flush=True)
        finally:
            if args.before:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(wt)], check=False)
    if args.out:
        cmd = script_command(__file__, argv if argv is not None else sys.argv[1:])
        lines = [f"# topo-probe on clusters of {args.preset}: CPU seconds per run", "", f"Command: `{cmd}`", "",
                 "| tree | hosts | CPU s | output SHA-256 (12) |", "|---|---|---|---|"]
        lines += [f"| {t} | {n} | {c:.2f} | `{d}` |" for t, n, c, d in rows]
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""MSCCL export time, stage by stage, against the number of transfers.

Usage::

    python benchmarks/bench_msccl_export.py [--baseline REF] [--out results/scale/msccl_export.md]

Cases: ring allgather (``synth.baselines``, one chunk per rank) on ``cluster("dgx-a100", nodes)``
for 8 to 128 GPUs, and the 64-GPU allgather that ``synthesize --topology dgx-a100 --nodes 8
--collectives allgather`` exports (:func:`synth.solve.bwopt.optimal.bandwidth_optimal` with the
cost model's effective capacities).  Each schedule is built once and saved; every export runs in
a child process of its own, on this tree and, with ``--baseline``, on the ``synth`` and
``topo_probe`` packages of git revision REF (extracted with ``git archive``), one after the other
per case.  Stages of one :func:`synth.formats.msccl.writer.to_msccl_xml` call: ``build``
(lowering, fusion, threadblocks, merging: ``build_program``), ``emit`` (the XML text), ``parse``
and ``replay`` (the in-place replay check of the emitted text).  The XML of both trees is
compared byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RING_GPUS = (8, 16, 32, 64, 128)


# ---------------------------------------------------------------------------- child: one export
def _child(path: str) -> None:
    """Export the schedule at ``path`` once, timing each stage; print one JSON line."""
    import synth.formats.msccl.parse as parse_mod
    import synth.formats.msccl.replay as replay_mod
    import synth.formats.msccl.writer as writer
    from synth.formats.schedule_file import load_schedule
    times = {"build": 0.0, "emit": 0.0, "parse": 0.0, "replay": 0.0}

    def timed(stage, fn):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                times[stage] += time.perf_counter() - t0
        return run

    writer.build_program = timed("build", writer.build_program)
    writer._emit = timed("emit", writer._emit)
    parse_mod.parse_program = timed("parse", parse_mod.parse_program)
    replay_mod.replay = timed("replay", replay_mod.replay)
    s = load_schedule(path)
    t0 = time.perf_counter()
    text = writer.to_msccl_xml(s)
    total = time.perf_counter() - t0
    print(json.dumps({"total": total, **times, "steps": text.count("<step "), "bytes": len(text),
                      "md5": hashlib.md5(text.encode()).hexdigest(), "code": writer.__file__}))


# ---------------------------------------------------------------------------- parent
def _schedules(folder: Path, ring_gpus) -> list[tuple[str, int, int, Path]]:
    """(case, GPUs, transfers, saved schedule) of every case."""
    sys.path.insert(0, str(ROOT))
    from synth.baselines import baseline
    from synth.formats.schedule_file import save_schedule
    from synth.ir.fabric import build_fabric
    from synth.model.cost import CostParams
    from synth.solve.bwopt.optimal import bandwidth_optimal
    from topo_probe.machines.clusters import cluster
    from topo_probe.machines.presets import get_preset
    out = []

    def fabric(gpus):
        return build_fabric(get_preset("dgx-a100") if gpus == 8 else cluster("dgx-a100", nodes=gpus // 8))

    def add(name, s):
        path = folder / f"{name}.json.gz"
        save_schedule(s, path)
        out.append((name, s.ranks, sum(len(st.transfers) for st in s.steps), path))

    for gpus in ring_gpus:
        add(f"ring allgather {gpus}", baseline("ring", fabric(gpus), "allgather", chunks=1))
    add("bwopt-effective allgather 64 (synthesize)",
        bandwidth_optimal(fabric(64), "allgather", efficiency=CostParams()))
    return out


def _tree_at(ref: str, folder: Path) -> Path:
    """The synth and topo_probe packages of git revision ``ref``, extracted under ``folder``."""
    tar = folder / "baseline.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(tar), ref, "synth", "topo_probe"], check=True)
    dest = folder / "baseline"
    with tarfile.open(tar) as t:
        t.extractall(dest)
    return dest


def _run(tree: Path, schedule: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    got = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(schedule)], env=env,
                         capture_output=True, text=True, check=True, cwd=str(tree))
    return json.loads(got.stdout.strip().splitlines()[-1])


def _row(case, gpus, transfers, label, r) -> str:
    us = 1e6 * r["total"] / transfers
    return (f"| {case} | {gpus} | {transfers} | {r['steps']} | {label} | {r['build']:.2f} | {r['emit']:.2f} | "
            f"{r['parse']:.2f} | {r['replay']:.2f} | {r['total']:.2f} | {us:.0f} |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--baseline", help="git revision to time side by side (its synth and topo_probe)")
    ap.add_argument("--out", default=str(ROOT / "results" / "scale" / "msccl_export.md"))
    ap.add_argument("--ring-gpus", default=",".join(map(str, RING_GPUS)))
    args = ap.parse_args(argv)
    if args.child:
        return _child(args.child)
    ring_gpus = [int(x) for x in args.ring_gpus.split(",") if x]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cases = _schedules(tmp, ring_gpus)
        trees = ([("before", _tree_at(args.baseline, tmp))] if args.baseline else []) + [("after", ROOT)]
        rows, same = [], True
        for case, gpus, transfers, path in cases:
            got = {label: _run(tree, path) for label, tree in trees}
            for label, r in got.items():
                rows.append(_row(case, gpus, transfers, label, r))
                print(rows[-1], flush=True)
            if len({r["md5"] for r in got.values()}) > 1:
                same = False
                print(f"  {case}: the XML differs between {' and '.join(got)}", flush=True)
    cmd = "python benchmarks/bench_msccl_export.py" + (f" --baseline {args.baseline}" if args.baseline else "") + (
        f" --ring-gpus {args.ring_gpus}" if args.ring_gpus != ",".join(map(str, RING_GPUS)) else "")
    lines = ["# MSCCL export time", "", f"Command: `{cmd}`", "",
             "Seconds per stage of one `to_msccl_xml` call (default options), each in a fresh process; "
             "`build`: lowering, fusion, threadblocks, merging; `emit`: the XML text; `parse` and `replay`: "
             "the in-place replay check of the emitted text; `us/transfer`: total over transfers.", "",
             "| case | GPUs | transfers | steps | code | build | emit | parse | replay | total | us/transfer |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|", *rows, ""]
    if args.baseline:
        lines.append("The XML of every case is byte-identical before and after." if same else
                     "**The XML differs between before and after in at least one case.**")
        lines.append("")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

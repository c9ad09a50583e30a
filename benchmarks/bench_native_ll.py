"""The native executor's LL protocol beside its Simple protocol on one GPU, ranks sharing the card,
every collective from 8 B to 1 MiB (where LL may run), side by side in one process:

* ``simple_graph`` / ``ll_graph``   -- :class:`kernels.Communicator` on CuPy arrays, the same arrays
  call after call (bound once, replayed as a CUDA graph), under each protocol;
* ``simple_launch`` / ``ll_launch`` -- the same with the kernel launched directly each call;
* ``plain_cupy``                    -- what a user would write with CuPy on one card;
* ``nccl_1rank``                    -- NCCL's call of the same collective and bytes with one rank.

Every LL and Simple result is checked against NumPy before it is timed (a wrong call is a row of
the report, not a crash).  Times are wall time per call over back-to-back calls, best of 3 rounds
(:func:`bench_native_gpu.wall_us`).

    python benchmarks/bench_native_ll.py --out results/gpu
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_native_gpu import (COLLS, METHOD, buffers, call_args, check_once, empty_graph_launch_us, nccl_one_rank,
                              per_rank_count, plain_cupy, wall_us)

from kernels import Communicator
from kernels.comm.communicator import nccl_bytes
from shown_paths import script_command

SIZES = [8, 1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20]
EXECUTORS = ("ll_graph", "simple_graph", "ll_launch", "simple_launch", "plain_cupy", "nccl_1rank")
_NCCL_US: dict = {}


def measure(cp, n: int, coll: str, nbytes: int, comms: dict, wrong: list) -> dict:
    """us per call of each executor for one (collective, ranks, bytes) cell."""
    per = per_rank_count(coll, n, nbytes)
    ins, outs = buffers(cp, coll, n, per)
    pos, kw = call_args(coll, ins, outs)
    nb = nccl_bytes(coll, per, 4, n)
    iters = 300 if nbytes <= 1 << 16 else 100
    got: dict = {"bytes": nb}
    for name, comm in comms.items():
        method = getattr(comm, METHOD[coll])
        bad = check_once(cp, method, pos, kw, coll, n, ins, outs)
        if bad:
            wrong.append(f"{name} {coll} n={n} {nb} B: {bad}")
            print("WRONG", wrong[-1], flush=True)
            continue
        got[name] = wall_us(cp, lambda: method(*pos, **kw), iters)
        got.setdefault("schedule", comm.last_schedule.meta.get("baseline", comm.last_schedule.name)
                       if comm.last_schedule is not None else "")
    f, _ = plain_cupy(cp, coll, n, ins, outs)
    got["plain_cupy"] = wall_us(cp, f, max(3, iters // 4))
    if (coll, nb) not in _NCCL_US:             # one rank's NCCL depends on the bytes alone: once per cell
        f1 = nccl_one_rank(cp, coll, nb)
        _NCCL_US[(coll, nb)] = None if f1 is None else wall_us(cp, f1, iters)
    if _NCCL_US[(coll, nb)] is not None:
        got["nccl_1rank"] = _NCCL_US[(coll, nb)]
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/gpu")
    ap.add_argument("--ranks", default="8,4,2")
    ap.add_argument("--collectives", default=",".join(COLLS))
    ap.add_argument("--max-bytes", type=int, default=1 << 20)
    ap.add_argument("--name", default="native_ll", help="stem of the .md/.csv written under --out")
    args = ap.parse_args(argv)
    import cupy as cp

    from kernels.native.layer import NativeLayer
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, wrong = [], []
    empty_graph_us = empty_graph_launch_us(cp)
    for n in (int(x) for x in args.ranks.split(",")):
        comms = {f"{p}_{mode}": Communicator(n, plan=False, backend=NativeLayer(protocol=p, graphs=mode == "graph"))
                 for p in ("ll", "simple") for mode in ("graph", "launch")}
        for coll in args.collectives.split(","):
            for nbytes in [s for s in SIZES if s <= args.max_bytes]:
                cell = measure(cp, n, coll, nbytes, comms, wrong)
                rows.append({"collective": coll, "ranks": n, **cell})
                print(f"{coll:14s} n={n} {cell['bytes']:>8d} B  " + "  ".join(
                    f"{k}={cell[k]:.1f}" for k in EXECUTORS if k in cell), flush=True)
            for c in comms.values():
                c._bound.clear()
            cp.get_default_memory_pool().free_all_blocks()
            write(out, rows, empty_graph_us, wrong, args.name)
    write(out, rows, empty_graph_us, wrong, args.name)
    print(report(rows, empty_graph_us, wrong)[-4000:])
    return 1 if wrong else 0


def write(out: Path, rows: list, empty_us: float, wrong: list, name: str = "native_ll") -> None:
    with open(out / f"{name}.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["collective", "ranks", "bytes", "schedule", *EXECUTORS])
        for r in rows:
            w.writerow([r["collective"], r["ranks"], r["bytes"], r.get("schedule", ""),
                        *[f"{r[k]:.2f}" if k in r else "" for k in EXECUTORS]])
    (out / f"{name}.md").write_text(report(rows, empty_us, wrong))


def report(rows: list, empty_us: float, wrong: list) -> str:
    import subprocess
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip()
    import os
    tuning = " ".join(f"{k}={os.environ[k]}" for k in ("TOPOCOLL_NATIVE_DEFINES", "TOPOCOLL_LL_PIECE_BYTES")
                      if os.environ.get(k))
    command = script_command(__file__, sys.argv[1:], f"{tuning + ' ' if tuning else ''}python")   # --out <tmp>/pass
    lines = [f"# LL protocol of the native executor on one GPU ({gpu}), ranks sharing the card", "",
             f"Made by `{command}` "
             f"(float32, sum, root 0; us per call, best of 3 rounds). Empty graph launch {empty_us:.2f} us.", "",
             "| collective | ranks | bytes | schedule | LL graph | Simple graph | Simple / LL | LL launched "
             "| Simple launched | plain CuPy | NCCL 1 rank |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = lambda k: f"{r[k]:.1f}" if k in r else ""
        ratio = f"{r['simple_graph'] / r['ll_graph']:.2f}" if "ll_graph" in r and "simple_graph" in r else ""
        lines.append(f"| {r['collective']} | {r['ranks']} | {r['bytes']} | {r.get('schedule', '')} | {c('ll_graph')} "
                     f"| {c('simple_graph')} | {ratio} | {c('ll_launch')} | {c('simple_launch')} | {c('plain_cupy')} "
                     f"| {c('nccl_1rank')} |")
    lines += ["", f"Wrong or failed calls: {len(wrong)}"] + [f"- {w}" for w in wrong]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())

"""The native executor on one GPU with 2, 4 and 8 ranks sharing the card, side by side with what
it replaces and with the card's limits, every collective from 8 B to 256 MiB.

Executors (one process, one card, one run, so every ratio is side by side):

* ``native_graph``  -- :class:`kernels.Communicator` with CuPy arrays, repeated calls on the same
  arrays (the call is bound once and replayed as a CUDA graph);
* ``native_launch`` -- the same, with the kernel launched directly each call (no graph);
* ``python_ops``    -- the op-by-op CuPy layer it replaces (``backend="cupy-ops"``; few sizes:
  it is slow);
* ``plain_cupy``    -- what a user would write with CuPy for the same data on one card
  (sums with ``+``, slices assigned);
* ``floor``         -- the larger of an empty kernel's graph launch and the collective's
  minimum bytes (each input read once, each output written once) at the copy ceiling;
* ``copy_ceiling``  -- ``cupy`` device-to-device copy of 1 GiB (counts 2 GiB moved);
* ``nccl_1rank``    -- NCCL's call of the same collective and bytes with one rank
  (all_reduce, all_gather, reduce_scatter, broadcast, reduce; its floor per call).

``us_per_call`` is wall time per call over ``iters`` back-to-back calls followed by one
synchronize (host time included: what a training loop sees); ``gbps_moved`` is the executor's
own bytes read plus written per call over that time (for native: the lowered program's
traffic; plain CuPy: the arrays its expressions read and write; NCCL one rank: 2 x bytes).
Every native result is checked against NumPy before it is timed.

    python benchmarks/bench_native_gpu.py --out results/gpu
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels import Communicator  # noqa: E402
from kernels.backends.executor import program_for, run_schedule  # noqa: E402
from kernels.comm.communicator import nccl_bytes  # noqa: E402

COLLS = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "gather", "scatter", "alltoall")
METHOD = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
          "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
          "alltoall": "all_to_all"}
SIZES = [8, 1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 26, 1 << 28]
FIELDS = ["collective", "ranks", "bytes", "executor", "us_per_call", "gbps_moved"]


def wall_us(cp, fn, iters: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        cp.cuda.Device().synchronize()
        best = min(best, (time.perf_counter() - t) / iters * 1e6)
    return best


def empty_graph_launch_us(cp) -> float:
    """Wall time of replaying a captured graph of one empty kernel (the floor of a graph call)."""
    empty = cp.RawKernel(r'extern "C" __global__ void e() {}', "e")
    with cp.cuda.Stream(non_blocking=True) as side:
        side.begin_capture()
        empty((1,), (1,), (), stream=side)
        g = side.end_capture()
    return wall_us(cp, lambda: g.launch(cp.cuda.get_current_stream()), 2000)


def per_rank_count(coll: str, n: int, nbytes: int) -> int:
    """float32 elements per rank (at least 1) for a call of ``nbytes`` on ``n`` ranks: the whole
    buffer of a rank, or its 1/n share where the collective's size counts n pieces."""
    return max(1, nbytes // 4 // (n if coll in ("allgather", "gather", "alltoall", "reducescatter", "scatter") else 1))


def buffers(cp, coll: str, n: int, count: int):
    """(ins, outs, call kwargs) for a Communicator method, float32, root 0."""
    ins = [cp.random.standard_normal(count * (n if coll in ("scatter", "alltoall", "reducescatter") else 1),
                                     dtype=cp.float32) for _ in range(n)]
    out_n = n * count if coll in ("allgather", "gather", "alltoall") else count
    outs = [cp.zeros(out_n, cp.float32) for _ in range(n)]
    return ins, outs


def call_args(coll, ins, outs):
    if coll == "broadcast":
        return (outs,), {"root": 0}
    if coll in ("reduce", "gather", "scatter"):
        return (ins, outs), {"root": 0}
    return (ins, outs), {}


def expected(coll, n, hins):
    s = np.sum(np.stack(hins).astype(np.float64), axis=0) if coll in ("allreduce", "reduce", "reducescatter") else None
    c = len(hins[0]) // n if coll in ("scatter", "alltoall", "reducescatter") else len(hins[0])
    return {"allreduce": [s] * n, "reduce": [s] + [None] * (n - 1),
            "reducescatter": [None if s is None else s[r * c:(r + 1) * c] for r in range(n)],
            "allgather": [np.concatenate(hins)] * n, "gather": [np.concatenate(hins)] + [None] * (n - 1),
            "scatter": [hins[0][r * c:(r + 1) * c] for r in range(n)],
            "alltoall": [np.concatenate([hins[s][d * c:(d + 1) * c] for s in range(n)]) for d in range(n)],
            "broadcast": None}[coll]


def plain_cupy(cp, coll, n, ins, outs):
    """(function, bytes it moves) of the CuPy code a user would write on one card."""
    c = outs[0].size if coll not in ("allgather", "gather", "alltoall") else outs[0].size // n
    item = 4
    if coll in ("allreduce", "reduce", "reducescatter"):
        acc = cp.empty_like(ins[0])

        def f():
            cp.add(ins[0], ins[1], out=acc)
            for x in ins[2:]:
                cp.add(acc, x, out=acc)
            if coll == "allreduce":
                for o in outs:
                    o[...] = acc
            elif coll == "reduce":
                outs[0][...] = acc
            else:
                for r, o in enumerate(outs):
                    o[...] = acc[r * c:(r + 1) * c]
        size = ins[0].size * item
        moved = 3 * size + 3 * size * (n - 2) + 2 * size * (1 if coll == "reduce" else 1 if coll == "reducescatter"
                                                             else n)
        return f, moved
    if coll == "broadcast":
        return (lambda: [o.__setitem__(Ellipsis, outs[0]) for o in outs[1:]]), 2 * c * item * (n - 1)
    if coll in ("allgather", "gather"):
        dsts = outs if coll == "allgather" else outs[:1]

        def f():
            for o in dsts:
                for r in range(n):
                    o[r * c:(r + 1) * c] = ins[r]
        return f, 2 * c * item * n * len(dsts)
    if coll == "scatter":
        return (lambda: [o.__setitem__(Ellipsis, ins[0][r * c:(r + 1) * c]) for r, o in enumerate(outs)]), \
            2 * c * item * n

    def a2a():
        for d in range(n):
            for s in range(n):
                outs[d][s * c:(s + 1) * c] = ins[s][d * c:(d + 1) * c]
    return a2a, 2 * c * item * n * n


def min_bytes(coll, n, count, item=4):
    """Each input read once, each output written once (what one ideal kernel moves)."""
    c = count * item
    return {"allreduce": n * c + n * c, "reduce": n * c + c, "reducescatter": n * n * c + n * c,
            "broadcast": c + n * c, "allgather": n * c + n * n * c, "gather": n * c + n * c,
            "scatter": n * c + n * c, "alltoall": 2 * n * n * c}[coll]


def nccl_one_rank(cp, coll, nbytes):
    from cupy.cuda import nccl
    comm = nccl.NcclCommunicator.initAll([cp.cuda.Device().id])[0]
    count = max(1, nbytes // 4)
    x, y = cp.zeros(count, cp.float32), cp.zeros(count, cp.float32)
    s = cp.cuda.get_current_stream().ptr
    f = {"allreduce": lambda: comm.allReduce(x.data.ptr, y.data.ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, s),
         "allgather": lambda: comm.allGather(x.data.ptr, y.data.ptr, count, nccl.NCCL_FLOAT32, s),
         "reducescatter": lambda: comm.reduceScatter(x.data.ptr, y.data.ptr, count, nccl.NCCL_FLOAT32,
                                                     nccl.NCCL_SUM, s),
         "broadcast": lambda: comm.broadcast(x.data.ptr, y.data.ptr, count, nccl.NCCL_FLOAT32, 0, s),
         "reduce": lambda: comm.reduce(x.data.ptr, y.data.ptr, count, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, 0, s)}
    return f.get(coll)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/gpu")
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--max-bytes", type=int, default=1 << 28)
    ap.add_argument("--collectives", default=",".join(COLLS))
    ap.add_argument("--before", default=None, help="an earlier native.csv: its native_graph times become a column")
    args = ap.parse_args(argv)
    import cupy as cp
    from kernels.native.layer import NativeLayer
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    big = cp.empty(1 << 28, cp.float32)
    big2 = cp.empty_like(big)
    copy_us = wall_us(cp, lambda: big2.__setitem__(Ellipsis, big), 10)
    copy_gbps = 2 * big.nbytes / copy_us / 1e3
    empty_graph_us = empty_graph_launch_us(cp)
    del big, big2
    launch_layer = NativeLayer(graphs=False)
    used: dict = {}
    host: dict = {}
    wrong: list = []
    before = read_before(args.before)
    extra = {"used": used, "host": host, "wrong": wrong, "before": before}
    ops_layer = "cupy-ops"
    for n in (int(x) for x in args.ranks.split(",")):
        comm = Communicator(n, plan=False)
        direct = Communicator(n, plan=False, backend=launch_layer)
        for coll in args.collectives.split(","):
            for nbytes in [s for s in SIZES if s <= args.max_bytes]:
                per = per_rank_count(coll, n, nbytes)
                ins, outs = buffers(cp, coll, n, per)
                pos, kw = call_args(coll, ins, outs)
                method = getattr(comm, METHOD[coll])
                nb = nccl_bytes(coll, per, 4, n)
                sched = comm.schedule_for(coll, nb, 0 if coll in ("broadcast", "reduce", "gather", "scatter") else None)
                bad = check_once(cp, method, pos, kw, coll, n, ins, outs)
                sched = comm.last_schedule or sched          # what the call ran (one GPU: direct)
                used[(coll, n, nb)] = sched.meta.get("baseline", sched.name)
                if bad:
                    wrong.append(f"{coll} n={n} {nb} B: {bad}")
                    print("WRONG", wrong[-1], flush=True)
                    continue
                prog = program_for(sched, per, np.float32)
                traffic = prog.traffic_bytes()
                iters = 200 if nbytes <= 1 << 20 else 20 if nbytes <= 1 << 26 else 5
                t = wall_us(cp, lambda: method(*pos, **kw), iters)
                rows.append((coll, n, nb, "native_graph", t, traffic / t / 1e3))
                if nbytes in (8, 1 << 10):
                    host[(coll, n, nb)] = host_us(cp, lambda: method(*pos, **kw))
                sends = ins if coll != "broadcast" else [outs[0]] + [None] * (n - 1)
                recvs = outs if coll not in ("reduce", "gather") else [outs[0]] + [None] * (n - 1)
                if coll in ("scatter",):
                    sends = [ins[0]] + [None] * (n - 1)
                dmethod = getattr(direct, METHOD[coll])
                t = wall_us(cp, lambda: dmethod(*pos, **kw), iters)
                rows.append((coll, n, nb, "native_launch", t, traffic / t / 1e3))
                if nbytes in (8, 1 << 20, 1 << 26):
                    t = wall_us(cp, lambda: run_schedule(sched, sends, recvs, backend=ops_layer), 3, warmup=1)
                    rows.append((coll, n, nb, "python_ops", t, traffic / t / 1e3))
                f, moved = plain_cupy(cp, coll, n, ins, outs)
                t = wall_us(cp, f, max(3, iters // 4))
                rows.append((coll, n, nb, "plain_cupy", t, moved / t / 1e3))
                mb = min_bytes(coll, n, per)
                fl = max(empty_graph_us, mb / copy_gbps / 1e3)
                rows.append((coll, n, nb, "floor", fl, mb / fl / 1e3))
                rows.append((coll, n, nb, "copy_ceiling", 2 * nb / copy_gbps / 1e3, copy_gbps))
                if n == 2:
                    f1 = nccl_one_rank(cp, coll, nb)
                    if f1 is not None:
                        t = wall_us(cp, f1, iters)
                        rows.append((coll, 1, nb, "nccl_1rank", t, 2 * nb / t / 1e3))
                print(f"{coll:14s} n={n} {nb:>11d} B  " + "  ".join(
                    f"{r[3]}={r[4]:.1f}" for r in rows if r[:3] == (coll, n, nb)), flush=True)
                del ins, outs
            comm._bound.clear()
            direct._bound.clear()
            cp.get_default_memory_pool().free_all_blocks()
            write(out, rows, copy_gbps, empty_graph_us, extra)   # after each collective: a cut-off run keeps its rows
    write(out, rows, copy_gbps, empty_graph_us, extra)
    print(report(rows, copy_gbps, empty_graph_us, extra)[-3000:])
    return 1 if wrong else 0


def check_once(cp, method, pos, kw, coll, n, ins, outs) -> str:
    """Run the call once and compare with NumPy: '' when right, else what was wrong."""
    try:
        method(*pos, **kw)
    except Exception as exc:                      # a failed call is a result too, not the end of the run
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    want = expected(coll, n, [cp.asnumpy(x) for x in ins])
    for r, w in enumerate(want or []):
        if w is not None:
            got = cp.asnumpy(outs[r]).astype(np.float64)
            if not np.allclose(got, w, rtol=1e-4, atol=1e-3 * n):
                return f"rank {r} wrong (max error {float(np.max(np.abs(got - w))):.3g})"
    return ""


def host_us(cp, fn, iters: int = 100, rounds: int = 3) -> float:
    """Host time per call (us): back-to-back calls without waiting for the GPU, the best of
    ``rounds`` rounds (as :func:`wall_us`), so one pause of the host process is not charged to
    every call of a round."""
    fn()
    cp.cuda.Device().synchronize()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t) / iters * 1e6)
        cp.cuda.Device().synchronize()
    return best


def read_before(path) -> dict:
    """(collective, ranks, bytes) -> native_graph us of an earlier run's CSV."""
    if not path or not Path(path).is_file():
        return {}
    with open(path, newline="") as fh:
        return {(r["collective"], int(r["ranks"]), int(r["bytes"])): float(r["us_per_call"])
                for r in csv.DictReader(fh) if r["executor"] == "native_graph"}


def write(out: Path, rows, copy_gbps: float, empty_graph_us: float, extra: dict) -> None:
    with open(out / "native.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(FIELDS)
        for r in rows:
            w.writerow([r[0], r[1], r[2], r[3], f"{r[4]:.2f}", f"{r[5]:.1f}"])
    (out / "native.md").write_text(report(rows, copy_gbps, empty_graph_us, extra))


def report(rows, copy_gbps, empty_us, extra: dict) -> str:
    import subprocess
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip()
    lines = [f"# Native executor on one GPU ({gpu}), ranks sharing the card", "",
             "Made by `python benchmarks/bench_native_gpu.py --out results/gpu` (float32, sum, root 0).",
             f"Copy ceiling {copy_gbps:.0f} GB/s (1 GiB device copy, read + write); empty graph launch "
             f"{empty_us:.2f} us.", "",
             "`schedule`: the baseline the Communicator ran (no plan: the fastest by the cost model); "
             "`before`: native_graph of the earlier run given with `--before`.", "",
             "| collective | ranks | bytes | schedule | native_graph us | before us | native_launch us | python_ops us "
             "| plain_cupy us | floor us | native GB/s moved | % of copy ceiling |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in rows:
        by.setdefault((r[0], r[1] if r[3] != "nccl_1rank" else None, r[2]), {})[r[3]] = r
    for (coll, n, nb), d in by.items():
        if n is None or "native_graph" not in d:
            continue
        g = d["native_graph"]
        cell = lambda k: f"{d[k][4]:.1f}" if k in d else ""   # noqa: E731
        old = extra["before"].get((coll, n, nb))
        lines.append(f"| {coll} | {n} | {nb} | {extra['used'].get((coll, n, nb), '')} | {cell('native_graph')} | "
                     f"{'' if old is None else f'{old:.1f}'} | {cell('native_launch')} | {cell('python_ops')} "
                     f"| {cell('plain_cupy')} | {cell('floor')} | {g[5]:.0f} | {100 * g[5] / copy_gbps:.0f} % |")
    nccl = [r for r in rows if r[3] == "nccl_1rank"]
    if nccl:
        lines += ["", "NCCL, one rank, same bytes (its per-call floor):", "",
                  "| collective | bytes | us |", "|---|---|---|"]
        lines += [f"| {r[0]} | {r[2]} | {r[4]:.1f} |" for r in nccl]
    if extra["host"]:
        lines += ["", "Host time per cached call (us; best of 3 rounds of 100 back-to-back calls on the same arrays, "
                  "not waiting for the GPU):",
                  "", "| collective | ranks | bytes | host us |", "|---|---|---|---|"]
        lines += [f"| {c} | {n} | {b} | {t:.1f} |" for (c, n, b), t in sorted(extra["host"].items())]
    lines += ["", f"Wrong or failed calls: {len(extra['wrong'])}"] + [f"- {w}" for w in extra["wrong"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())

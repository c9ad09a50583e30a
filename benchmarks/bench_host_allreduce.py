"""Host all_reduce throughput of the NumPy backend vs the memory-bandwidth floor.

For each rank count and message size (bytes per rank, float32) this runs the ``ring``
baseline allreduce (synth.baselines on ``fully_connected(n)``) with ``backend="host"`` and
reports nccl-tests style figures (algbw = size / time, busbw = algbw * 2(n-1)/n) next to two
floors.  The copy bandwidth is measured **in the same run, on the same buffers, interleaved
with the allreduce iterations** (the machine may be shared): copying every rank's send buffer
into its receive buffer with NumPy, on the host backend's thread pool (one copy per rank) and
on one thread, best of the rounds; bandwidth = bytes read + written per second.

* **schedule floor** = memory traffic of the lowered schedule (every op's bytes read and
  written: a reduce-copy moves 3x its size, a copy 2x; ring allreduce = 5(n-1) x size)
  / copy bandwidth.  ``efficiency`` = schedule floor / best allreduce time: how close the
  executor gets to moving the schedule's bytes at memory speed (target >= 0.5 at >= 64 MB).
* **ideal floor** = 2 n x size / copy bandwidth = the measured copy time itself (read every
  input once, write every output once): no schedule can beat it on one host.

Writes ``report.md``, ``results.csv`` and ``efficiency.png`` into ``--out``.

Usage::

    python benchmarks/bench_host_allreduce.py --out results/host_allreduce
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels.backends.executor import program_for, run_schedule  # noqa: E402
from kernels.backends.host import HostLayer  # noqa: E402
from synth.baselines import baseline  # noqa: E402
from synth.ir.fabric import build_fabric  # noqa: E402
from synth.ir.schedule import atomic_write_text  # noqa: E402
from topo_probe.pictures import save_png  # noqa: E402
from topo_probe.machines.generators import fully_connected  # noqa: E402
from shown_paths import script_command  # noqa: E402

MB = 1 << 20


def _copy_all(pool, send, recv) -> float:
    """Seconds to copy every send buffer into its receive buffer (one task per rank, or serial)."""
    t = time.perf_counter()
    if pool is None:
        for x, y in zip(send, recv):
            np.copyto(y, x)
    else:
        list(pool.map(lambda xy: np.copyto(xy[1], xy[0]), zip(send, recv)))
    return time.perf_counter() - t


def time_allreduce(n: int, size: int, layer: HostLayer, min_time: float, max_iters: int,
                   step_layer: HostLayer | None = None) -> dict:
    """Interleave allreduce runs with floor copies on the same buffers; best of each.

    With ``step_layer`` (the same backend in step-major order), each round also times it, for
    a side-by-side ratio of the two execution orders.
    """
    sched = baseline("ring", build_fabric(fully_connected(n)), "allreduce", chunks=1)
    count = size // 4
    send = [np.full(count, r + 1, np.float32) for r in range(n)]
    recv = [np.full(count, -1, np.float32) for _ in range(n)]
    pool = layer._pool_get()
    run_schedule(sched, send, recv, backend=layer)          # warm-up
    if step_layer is not None:
        run_schedule(sched, send, recv, backend=step_layer)
    times, copies, serial, step_times = [], [], [], []
    while len(times) < max_iters and (sum(times) + sum(copies) < min_time or len(times) < 5):
        copies.append(_copy_all(pool, send, recv))
        serial.append(_copy_all(None, send, recv))
        t = time.perf_counter()
        run_schedule(sched, send, recv, backend=layer)
        times.append(time.perf_counter() - t)
        if step_layer is not None:
            t = time.perf_counter()
            run_schedule(sched, send, recv, backend=step_layer)
            step_times.append(time.perf_counter() - t)
    want = n * (n + 1) / 2
    step = max(1, count // 4096)
    for r in range(n):
        if not np.all(recv[r][::step] == want):
            raise SystemExit(f"error: n={n} size={size}: rank {r} holds a wrong sum")
    prog = program_for(sched, count, np.float32)
    copy_s = min(min(copies), min(serial))
    traffic = prog.traffic_bytes()
    paired = [traffic / (2 * n * size / min(c, s)) / t for c, s, t in zip(copies, serial, times)]
    return {"paired_efficiency": statistics.median(paired),"ranks": n, "size_bytes": size, "iters": len(times), "time_s": min(times),
            "median_s": statistics.median(times), "traffic_bytes": prog.traffic_bytes(),
            "copy_bw_GBps": 2 * n * size / copy_s / 1e9, "copy_threads_GBps": 2 * n * size / min(copies) / 1e9,
            "copy_serial_GBps": 2 * n * size / min(serial) / 1e9,
            "step_major_s": min(step_times) if step_times else float("nan")}


def render(rows: list[dict], args, cmd: str) -> tuple[str, str]:
    fields = ["ranks", "size_bytes", "iters", "time_s", "median_s", "algbw_GBps", "busbw_GBps", "traffic_bytes",
              "copy_bw_GBps", "copy_threads_GBps", "copy_serial_GBps", "schedule_floor_s", "efficiency",
              "ideal_floor_s", "ideal_efficiency", "paired_efficiency", "step_major_s"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    lines = [
        "# Host all_reduce throughput (NumPy backend) vs the memory-bandwidth floor", "",
        f"Command: `{cmd}`", "",
        f"Machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"{_mem_gib():.0f} GiB RAM, Python {platform.python_version()}, NumPy {np.__version__}; "
        f"host backend with {args.threads or os.cpu_count()} threads, slice-major order with columns of "
        f"{args.slice_kb} KiB per cell (`HostLayer(slice_bytes=...)`); `step-major` is the same backend "
        f"with `slice_bytes=0` (a barrier after each step, tiles of {args.tile_mb} MiB), timed in the same "
        f"rounds.", "",
        "Copy bandwidth: bytes read + written per second copying every rank's send buffer into its "
        "receive buffer (same buffers, interleaved with the allreduce rounds, best of the rounds, pool "
        "or single thread, whichever is faster).", "",
        "Schedule: `ring` baseline allreduce on `fully_connected(n)` (1 chunk per rank), float32, "
        "out-of-place.  Schedule floor = lowered schedule's memory traffic (5(n-1) x size for ring) / copy "
        "bandwidth; ideal floor = 2 n x size / copy bandwidth.  Time = best timed iteration (median in "
        "the CSV).  `efficiency` = schedule floor (best copy) / best time; `paired` = median over rounds of "
        "the same ratio with the copy measured right before that round (robust to bursts of load).", "",
        "| ranks | size | iters | time (ms) | median (ms) | algbw (GB/s) | busbw (GB/s) | copy bw (GB/s) "
        "| schedule floor (ms) | efficiency | paired | ideal floor (ms) | vs ideal | step-major (ms) "
        "| step-major / slice-major |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['ranks']} | {_size(r['size_bytes'])} | {r['iters']} | {1e3 * r['time_s']:.2f} | "
                     f"{1e3 * r['median_s']:.2f} | {r['algbw_GBps']:.2f} | {r['busbw_GBps']:.2f} | "
                     f"{r['copy_bw_GBps']:.1f} | {1e3 * r['schedule_floor_s']:.2f} | "
                     f"**{r['efficiency']:.2f}** | {r['paired_efficiency']:.2f} | {1e3 * r['ideal_floor_s']:.2f} | "
                     f"{r['ideal_efficiency']:.2f} | {1e3 * r['step_major_s']:.2f} | "
                     f"{r['step_major_s'] / r['time_s']:.2f} |")
    big = [r for r in rows if r["size_bytes"] >= 64 * MB]
    if big:
        worst = min(big, key=lambda r: r["efficiency"])
        pw = min(big, key=lambda r: r["paired_efficiency"])
        ok = worst["efficiency"] >= 0.5
        lines += ["", f"Target (efficiency >= 0.5 at >= 64 MB): **{'met' if ok else 'NOT met'}** - lowest "
                  f"{worst['efficiency']:.3f} (n={worst['ranks']}, {_size(worst['size_bytes'])}); lowest paired "
                  f"estimate {pw['paired_efficiency']:.3f} (n={pw['ranks']}, {_size(pw['size_bytes'])})."]
    if args.skipped:
        lines += ["", "Skipped (buffers would exceed --max-mem-gib " + f"{args.max_mem_gib:g}): "
                  + ", ".join(f"n={n} {_size(s)}" for n, s in args.skipped) + "."]
    lines += ["", "Notes: the ring moves 5(n-1) x size bytes against 2n x size for the ideal, so its "
              "`vs ideal` column cannot exceed 2n/(5(n-1)) (0.53 for n=4, 0.46 for n=8) even at full memory "
              "speed.  Small sizes are dominated by Python per-op overhead (a few µs per op); they fit in the "
              "last-level cache, and so does the floor copy of the same buffers.  The floor counts bytes, not "
              "cache-line traffic: a reduce-copy's destination is also read for ownership before it is written, "
              "which a large memcpy may avoid with streaming stores, so even a perfect executor sits somewhat "
              "below 1.0 on the schedule floor.  Slice-major order keeps a column's intermediate values in "
              "cache between steps, so most of the schedule's bytes never reach DRAM: its efficiency on the "
              "byte-counted schedule floor is not capped by memory speed, only the ideal floor is a hard "
              "limit.  " + args.load_note, ""]
    return buf.getvalue(), "\n".join(lines)


def _size(b: int) -> str:
    return f"{b // (1 << 30)} GiB" if b >= 1 << 30 else f"{b // MB} MiB"


def _mem_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    except (ValueError, OSError):
        return float("nan")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for n in sorted({r["ranks"] for r in rows}):
        rr = [r for r in rows if r["ranks"] == n]
        xs = [r["size_bytes"] / MB for r in rr]
        ax1.plot(xs, [r["efficiency"] for r in rr], "o-", label=f"{n} ranks: schedule floor / time")
        ax1.plot(xs, [r["ideal_efficiency"] for r in rr], "x--", label=f"{n} ranks: ideal floor / time")
        ax2.plot(xs, [r["busbw_GBps"] for r in rr], "o-", label=f"{n} ranks")
    ax1.axhline(0.5, color="grey", lw=1, ls=":", label="target 0.5")
    ax1.axvline(64, color="grey", lw=1, ls=":")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size per rank (MiB)")
        ax.legend(fontsize=7)
    ax1.set_ylabel("efficiency")
    ax2.set_ylabel("busbw (GB/s, nccl-tests definition)")
    fig.suptitle("Host all_reduce (ring, NumPy backend) vs memory-bandwidth floor")
    fig.tight_layout()
    save_png(fig, path, "benchmarks/bench_host_allreduce.py", dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[1, 4, 16, 64, 256, 512, 1024])
    ap.add_argument("--max-mem-gib", type=float, default=12.0, help="cap on send+recv buffers of one run")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tile-mb", type=int, default=4, help="step-major tile size (MiB)")
    ap.add_argument("--slice-kb", type=int, default=1024, help="slice-major column width per cell (KiB)")
    ap.add_argument("--no-step-major", action="store_true", help="do not time the step-major order alongside")
    ap.add_argument("--min-time", type=float, default=2.5, help="seconds of timed rounds per point")
    ap.add_argument("--max-iters", type=int, default=30)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "host_allreduce")
    args = ap.parse_args(argv)
    if any(n < 2 for n in args.ranks) or any(s < 1 for s in args.sizes_mb) or args.tile_mb < 1 or args.slice_kb < 1:
        print("error: --ranks must be >= 2, --sizes-mb, --tile-mb and --slice-kb >= 1", file=sys.stderr)
        return 2
    threads = args.threads or os.cpu_count() or 1
    args.load_note = (f"The machine is shared with other jobs: load average before the run "
                      f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs, so floor and allreduce are measured "
                      f"interleaved and each is the best of its rounds.")
    layer = HostLayer(threads=threads, tile_bytes=args.tile_mb * MB, slice_bytes=args.slice_kb << 10)
    step_layer = None if args.no_step_major else HostLayer(threads=threads, tile_bytes=args.tile_mb * MB,
                                                           slice_bytes=0)
    rows, args.skipped = [], []
    for n in args.ranks:
        for mb in args.sizes_mb:
            size = mb * MB
            if 2 * n * size > args.max_mem_gib * (1 << 30):
                args.skipped.append((n, size))
                continue
            r = time_allreduce(n, size, layer, args.min_time, args.max_iters, step_layer)
            r["algbw_GBps"] = size / r["time_s"] / 1e9
            r["busbw_GBps"] = r["algbw_GBps"] * 2 * (n - 1) / n
            r["schedule_floor_s"] = r["traffic_bytes"] / (r["copy_bw_GBps"] * 1e9)
            r["efficiency"] = r["schedule_floor_s"] / r["time_s"]
            r["ideal_floor_s"] = 2 * n * size / (r["copy_bw_GBps"] * 1e9)
            r["ideal_efficiency"] = r["ideal_floor_s"] / r["time_s"]
            rows.append(r)
            print(f"n={n} {_size(size):>8}: {1e3 * r['time_s']:9.2f} ms  busbw {r['busbw_GBps']:6.2f} GB/s  "
                  f"copy {r['copy_bw_GBps']:5.1f} GB/s  efficiency {r['efficiency']:.2f}  "
                  f"paired {r['paired_efficiency']:.2f}  vs ideal {r['ideal_efficiency']:.2f}  "
                  f"step-major {1e3 * r['step_major_s']:.1f} ms", flush=True)
    layer.close()
    if step_layer is not None:
        step_layer.close()
    args.load_note += f" Load average after: {os.getloadavg()[0]:.1f}."
    cmd = script_command(__file__, argv if argv is not None else sys.argv[1:])
    csv_text, md = render(rows, args, cmd.strip())
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "results.csv", csv_text)
    atomic_write_text(args.out / "report.md", md)
    plot(rows, args.out / "efficiency.png")
    print(f"wrote {args.out}/report.md, results.csv, efficiency.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The cost of the ``topocoll`` backend's checked send/recv (:mod:`kernels.pytorch.checked_p2p`):
a 2-process ping-pong, 4 B to 4 MiB of float32, checked (the default) against
``TOPOCOLL_P2P_CHECK=0`` (straight to the group's gloo) and against today's protocol with the
helper threads as first written (a new thread per receive); and the start-up cost of a group
(its gloo groups' connections).  Writes ``OUT/p2p.md`` (default ``results/pytorch/``) with the
command at the top.

    python benchmarks/bench_p2p.py                 # 7 rounds of 200 round trips per size
    python benchmarks/bench_p2p.py --quick         # 3 rounds of 30

Both processes run every variant, rounds alternating between them, sizes one after another; a
round is a store barrier then ``--trips`` round trips (rank 0 sends, rank 1 receives and sends the
same tensor back); the table shows rank 0's median round (by wall time): half its mean wall time
per round trip (one way) and its CPU time per round trip (``time.process_time``: all of rank 0's
threads).  Load from other processes on the host stretches the wall time, and on 2 cores the CPU
time too (cold caches after every hand-off between threads), differently for sizes measured at
different times: a table written at a high load average can order sizes wrongly (the one before
small messages rode with their header, at load average 6.5: checked 1 KiB 1809 us, 256 KiB
1454 us; the same code at load average 0.1, ``--quick``: 297 and 506 us).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from synth.formats.nccl_tests.sizes import size_label  # noqa: E402  (the tables' sizes: "4 B", "16 KiB", "4 MiB")
from shown_paths import script_command  # noqa: E402

SIZES_BYTES = (4, 64, 1 << 10, 16 << 10, 256 << 10, 4 << 20)
VARIANTS = ("unchecked", "checked", "thread_per_recv")
LABELS = {"unchecked": "TOPOCOLL_P2P_CHECK=0 (gloo)", "checked": "checked (default)",
          "thread_per_recv": "today's protocol, a new thread per receive"}


class _NewThreadEach:
    """The helper threads as first written, under today's protocol (inline small messages included):
    a new thread for every receive, which always runs it (the caller's wait() never does:
    ``P2PWork._run_job`` claimed here)."""

    def submit(self, run_job) -> None:
        work = run_job.__self__
        work._claim.acquire()
        threading.Thread(target=work._job, daemon=True).start()


def _groups(rank: int, store) -> tuple[dict, dict]:
    """The variants' topocoll groups (made in the same order on both ranks) and seconds each took."""
    from kernels.pytorch.process_group import create
    groups, made_s = {}, {}
    for name in VARIANTS:
        os.environ["TOPOCOLL_P2P_CHECK"] = "0" if name == "unchecked" else "1"
        _barrier(store, rank, f"made/{name}")              # both ranks start together
        t0 = time.perf_counter()
        pg = create(dist_prefix(store, name), rank, 2, timedelta(seconds=120))
        made_s[name] = time.perf_counter() - t0
        pg._native_map = {}                   # not made by torch: no backend config to read
        if name == "thread_per_recv":
            pg._p2p._helpers = _NewThreadEach()
        groups[name] = pg
    return groups, made_s


def dist_prefix(store, name: str):
    import torch.distributed as dist
    return dist.PrefixStore(f"bench_p2p/{name}/", store)


def _barrier(store, rank: int, key: str) -> None:
    store.set(f"{key}/{rank}", "1")
    store.wait([f"{key}/0", f"{key}/1"])


def _round(pg, rank: int, t, trips: int) -> tuple[float, float]:
    """Seconds per round trip: wall, and this process's CPU (every thread: load on the host
    stretches the first, hardly the second)."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(trips):
        if rank == 0:
            pg.send([t], 1, 0).wait()
            pg.recv([t], 1, 0).wait()
        else:
            pg.recv([t], 0, 0).wait()
            pg.send([t], 0, 0).wait()
    return (time.perf_counter() - t0) / trips, (time.process_time() - c0) / trips


def _rank_job(rank: int, init: str, out_dir: str, opts: dict) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    host, port = init.removeprefix("tcp://").rsplit(":", 1)
    store = dist.TCPStore(host, int(port), 2, rank == 0, timeout=timedelta(seconds=300))
    groups, made_s = _groups(rank, store)
    rows = []
    for size in opts["sizes"]:
        t = torch.ones(size // 4)
        times = {name: [] for name in VARIANTS}
        for name in VARIANTS:                                        # warm-up
            _round(groups[name], rank, t, 3)
        for r in range(opts["rounds"]):
            for name in VARIANTS:
                _barrier(store, rank, f"b/{size}/{r}/{name}")
                times[name].append(_round(groups[name], rank, t, opts["trips"]))
        rows.append({"bytes": size, **{name: sorted(v)[len(v) // 2] for name, v in times.items()}})   # by wall
    _barrier(store, rank, "end")
    if rank == 0:
        from kernels.pytorch.checked_p2p import INLINE_BYTES
        Path(out_dir, "p2p.json").write_text(json.dumps({"rows": rows, "made_s": made_s, "inline_bytes": INLINE_BYTES}))
        store.wait(["done/1"])
    else:
        store.set("done/1", "1")
    for pg in groups.values():
        pg.shutdown()
    os._exit(0)                  # no interpreter teardown: gloo's threads may still hold the groups


def report(res: dict, command: str, opts: dict) -> str:
    lines = ["# checked send/recv against gloo: 2-process ping-pong\n", f"Command: `{command}`\n",
             f"Host: {platform.node() or 'unknown'}, {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"load average {os.getloadavg()[0]:.1f} when written; {opts['rounds']} rounds of {opts['trips']} "
             f"round trips per size, median round, microseconds one way (half a round trip).\n",
             "Each cell: wall one way / rank 0's CPU time per round trip (all its threads), microseconds. "
             f"Checked, a message of up to {size_label(res['inline_bytes'])} travels inside its header's message "
             "(one gloo send); a larger one as a header then its payload.\n",
             "| size | " + " | ".join(LABELS[v] for v in VARIANTS) + " | checked / gloo (wall) |",
             "|---" * (len(VARIANTS) + 2) + "|"]
    for row in res["rows"]:
        us = {v: (row[v][0] / 2 * 1e6, row[v][1] * 1e6) for v in VARIANTS}
        cells = " | ".join(f"{us[v][0]:.0f} / {us[v][1]:.0f}" for v in VARIANTS)
        lines.append(f"| {size_label(row['bytes'])} | {cells} | {us['checked'][0] / us['unchecked'][0]:.2f}x |")
    made = res["made_s"]
    lines += ["", "Start-up, rank 0, one group of 2 ranks on this host (its gloo groups' connections): "
              + ", ".join(f"{LABELS[v]} {made[v] * 1e3:.0f} ms" for v in VARIANTS) + "."]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/pytorch")
    p.add_argument("--quick", action="store_true", help="3 rounds of 30 round trips")
    args = p.parse_args(argv)
    opts = {"trips": 30 if args.quick else 200, "rounds": 3 if args.quick else 7, "sizes": SIZES_BYTES}
    os.environ.setdefault("TOPOCOLL_RESULTS", tempfile.mkdtemp(prefix="topocoll-noplan-"))
    import torch.multiprocessing as mp
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _torch_dist import free_port

    from synth.ir.schedule import atomic_write_text
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_rank_job, args=(f"tcp://127.0.0.1:{free_port()}", tmp, opts), nprocs=2,
                           start_method="spawn")
        res = json.loads(Path(tmp, "p2p.json").read_text())
    command = script_command(__file__, argv if argv is not None else sys.argv[1:])
    text = report(res, command.strip(), opts)
    atomic_write_text(Path(args.out) / "p2p.md", text + "\n")  # makes the folder
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``topocoll`` torch.distributed backend against gloo on CPU: all_reduce latency and busbw,
DDP step time, and where our per-call time goes; writes ``OUT/report.md`` (default
``results/pytorch/``) with the command at the top.

    python benchmarks/bench_pytorch.py                      # 2 and 4 processes
    python benchmarks/bench_pytorch.py --ranks 2 --quick    # a short run

Processes are spawned on this machine (``torch.multiprocessing``, TCP rendezvous), one job per
process count; every variant runs in the same processes, rounds alternating between them.
all_reduce (float32, sum): each round is a gloo barrier then ``--calls`` calls; a rank's time
per call is the round's mean, the round's time the slowest rank's; the table shows the median
over ``--rounds`` rounds; busbw = bytes / time x 2 (n - 1) / n (nccl-tests).  The overhead
rows, at 4 bytes: the whole call (``dist.all_reduce``); the runner alone
(``CallRunner.allreduce``: no torch dispatch, no Work); its one round alone (the header and the
4 bytes to every peer and back, :func:`kernels.pytorch.agreement.agree_with_data`); the
messages each rank sends per call; and the two rounds such a call took before
(:mod:`kernels.pytorch.fused`), each alone: the per-call agreement (a header all-gather) and the
schedule (:func:`kernels.pytorch.schedule_share.run_share` over the group's own connections).  DDP: the 3-layer MLP of
``examples/pytorch/train_ddp.py`` (width 256, batch 32), median step over ``--steps`` steps
after 5 warm-up steps, slowest rank.

``--gpu`` (a GPU machine): 2 processes sharing one card, all_reduce of float32 CUDA tensors,
1 KiB to 64 MiB: the ``topocoll`` group (its native path: one launch per process over CUDA IPC)
against gloo on the same CUDA tensors and against the native executor called directly on the
group's schedule (no dispatch, agreement or worker thread: the difference is the backend's own
overhead per call); each call followed by a device synchronisation; then where the native
executor's time goes, phase by phase (:class:`kernels.pytorch.native_exec.PhaseClock`).  Writes
``OUT/gpu_report.md`` and ``OUT/gpu.json``.  NCCL cannot run two ranks on one card, so it has no
row there; a second job, one process with one rank, runs a one-rank NCCL group beside the one-rank
``topocoll`` group (the issue's "NCCL in the same process layout").

    python benchmarks/bench_pytorch.py --gpu --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))     # benchmarks/, also where a test loads this file
from synth.formats.nccl_tests.sizes import size_label  # noqa: E402  (the tables' sizes: "4 B", "16 KiB", "4 MiB")
from shown_paths import script_command  # noqa: E402

SIZES_BYTES = (4, 1 << 10, 64 << 10, 1 << 20, 16 << 20)
GPU_SIZES_BYTES = (1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)


def _round_time(fn, calls: int, gloo) -> tuple[float, float]:
    """Slowest rank's mean seconds per call over one round of ``calls`` calls: wall time, and CPU
    time (``time.process_time``: every thread of the process, its own and torch's)."""
    import torch
    import torch.distributed as dist
    dist.barrier(group=gloo)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    t = torch.tensor([(time.perf_counter() - t0) / calls, (time.process_time() - c0) / calls], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return float(t[0]), float(t[1])


def _median_times(variants: dict, calls: int, rounds: int, gloo) -> tuple[dict, dict]:
    """Median over rounds of each variant's round time, wall and CPU (variants alternate, each
    round starting with another one)."""
    names = list(variants)
    times = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            times[k].append(_round_time(variants[k], calls, gloo))
    wall = {k: sorted(w for w, _ in v)[len(v) // 2] for k, v in times.items()}
    return wall, {k: sorted(c for _, c in v)[len(v) // 2] for k, v in times.items()}


def _allreduce_rows(n: int, gloo, calls: int, rounds: int, sizes) -> list:
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group
    rows = []
    for nbytes in sizes:
        x = torch.ones(max(1, nbytes // 4))
        y = x.clone()
        calls_here = max(3, calls if nbytes <= (1 << 20) else calls // 5)
        dist.all_reduce(x)
        dist.all_reduce(y, group=gloo)                                     # warm up: lowering, connections
        pg = _get_default_group()
        before = pg._transport("cpu").frames_sent
        dist.all_reduce(x)
        ran = _ran(pg.runner.last_label, pg._transport("cpu").frames_sent - before == n - 1)
        variants = {"topocoll": lambda: dist.all_reduce(x), "gloo": lambda: dist.all_reduce(y, group=gloo)}
        med, cpu = _median_times(variants, calls_here, rounds, gloo)
        bus = {k: nbytes / v * 2 * (n - 1) / n / 1e9 for k, v in med.items()}
        rows.append({"bytes": nbytes, "topocoll_us": med["topocoll"] * 1e6, "gloo_us": med["gloo"] * 1e6,
                     "topocoll_busbw": bus["topocoll"], "gloo_busbw": bus["gloo"],
                     "topocoll_cpu_us": cpu["topocoll"] * 1e6, "gloo_cpu_us": cpu["gloo"] * 1e6, "ran": ran})
    return rows


def _overhead(n: int, gloo, calls: int, rounds: int) -> dict:
    """Where a 4-byte call's time goes (module docstring): µs per call of each variant, and the
    messages this rank sends per whole call."""
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group

    from kernels.pytorch.agreement import Header, agree, agree_with_data
    from kernels.pytorch.plan_choice import choose
    from kernels.pytorch.schedule_share import GroupTransport, run_share
    pg = _get_default_group()
    x, z = torch.ones(1), torch.ones(1)
    sched = choose(pg.runner.selector, "allreduce", 1, 4).schedule
    internal = pg._transport("cpu")
    header, fused = Header("allreduce", 1, 1, op="sum"), Header("allreduce", 1, 1, op="sum", data_bytes=4)
    data = memoryview(z.numpy()).cast("B")
    variants = {"call": lambda: dist.all_reduce(x),
                "runner": lambda: pg.runner.allreduce([x], "sum"),
                "round": lambda: agree_with_data(internal, fused, n, pg.rank(), data=data),
                "schedule": lambda: run_share(sched, z, z, 1, op="sum", rank=pg.rank(),
                                              transport=GroupTransport(internal)),
                "agreement": lambda: agree(internal, header, n, pg.rank()),
                "gloo": lambda: dist.all_reduce(x, group=gloo)}
    for fn in variants.values():
        fn()
    med, cpu = _median_times(variants, calls, rounds, gloo)
    out = {k: v * 1e6 for k, v in med.items()}
    out["cpu"] = {k: v * 1e6 for k, v in cpu.items()}
    before = internal.frames_sent
    for _ in range(calls):
        dist.all_reduce(x)
    out["messages_per_call"] = (internal.frames_sent - before) / calls
    out["schedule_name"] = f"{sched.name or sched.meta.get('baseline', 'schedule')}"
    return out


def _ddp_step_ms(n: int, gloo, steps: int) -> dict:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    out = {}
    for name, group in (("topocoll", dist.group.WORLD), ("gloo", gloo)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                    torch.nn.ReLU(), torch.nn.Linear(256, 1))
        ddp = DDP(model, process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(dist.get_rank())
        times = []
        for step in range(steps + 5):
            xb, yb = torch.randn(32, 64, generator=g), torch.randn(32, 1, generator=g)
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(xb), yb).backward()
            opt.step()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
            if step >= 5:
                times.append(float(t))
        out[name] = sorted(times)[len(times) // 2] * 1e3
    return out


def _rank_job(rank: int, n: int, init: str, out_dir: str, opts: dict) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)                      # as torchrun does (OMP_NUM_THREADS=1)

    import kernels.pytorch  # noqa: F401
    dist.init_process_group("topocoll", init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    result = {"allreduce": _allreduce_rows(n, gloo, opts["calls"], opts["rounds"], opts["sizes"]),
              "overhead": _overhead(n, gloo, opts["calls"], opts["rounds"]),
              "ddp_ms": _ddp_step_ms(n, gloo, opts["steps"])}
    if rank == 0:
        Path(out_dir, f"n{n}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _gpu_rows(n: int, gloo, calls: int, rounds: int, sizes, nccl=None) -> list:
    """topocoll vs gloo vs the native executor alone on CUDA tensors (module docstring); and
    vs ``nccl`` (a one-rank NCCL group) where given."""
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group

    from kernels.pytorch.plan_choice import choose
    pg = _get_default_group()
    sync = torch.cuda.synchronize
    rows = []
    for nbytes in sizes:
        count = nbytes // 4
        x, y, z, w = (torch.zeros(count, device="cuda") for _ in range(4))
        sched = choose(pg.runner.selector, "allreduce", count, 4).schedule
        variants = {"topocoll": lambda: (dist.all_reduce(x), sync()),
                    "native": lambda: (pg.runner.native.run(sched, z, z, count, "sum"), sync()),
                    "gloo": lambda: (dist.all_reduce(y, group=gloo), sync())}
        if nccl is not None:
            variants["nccl"] = lambda: (dist.all_reduce(w, group=nccl), sync())
        before = pg.runner.native.launches
        for fn in variants.values():
            fn()                                   # warm up: lowering, kernel, IPC mappings
        native = pg.runner.native.launches - before == 2 and pg.runner.last_path == "native"
        med, _ = _median_times(variants, max(3, calls if nbytes <= (1 << 20) else calls // 4), rounds, gloo)
        row = {"bytes": nbytes, "native_path": native, "schedule": sched.name or "schedule"}
        for k, v in med.items():
            row[f"{k}_us"], row[f"{k}_busbw"] = v * 1e6, nbytes / v * 2 * (n - 1) / n / 1e9
        clock = pg.runner.native.clock             # where a native call's time goes (this rank)
        clock.reset()
        dist.barrier(group=gloo)
        for _ in range(max(3, calls if nbytes <= (1 << 20) else calls // 4)):
            variants["native"]()
        row["phases_us"] = {k: round(v, 1) for k, v in clock.per_call_us().items()}
        rows.append(row)
    return rows


def _gpu_rank_job(rank: int, n: int, init: str, out_dir: str, opts: dict) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    torch.cuda.set_device(0)                       # the processes share the card

    import kernels.pytorch  # noqa: F401
    dist.init_process_group("topocoll", init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    nccl = dist.new_group(backend="nccl") if n == 1 else None     # NCCL: one rank per card
    rows = _gpu_rows(n, gloo, opts["calls"], opts["rounds"], GPU_SIZES_BYTES, nccl)
    if rank == 0:
        Path(out_dir, f"n{n}.json").write_text(json.dumps({"allreduce": rows, "device": torch.cuda.get_device_name(),
                                                           "why_not": dist.distributed_c10d._get_default_group()
                                                           .runner.native.why_not}))
    dist.destroy_process_group()


def run(n: int, opts: dict, job=_rank_job) -> dict:
    import torch.multiprocessing as mp
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from _torch_dist import free_port
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(job, args=(n, f"tcp://127.0.0.1:{free_port()}", tmp, opts), nprocs=n,
                           start_method="spawn")
        return json.loads(Path(tmp, f"n{n}.json").read_text())


def gpu_report(res: dict, command: str, opts: dict) -> str:
    import torch
    lines = ["# The topocoll torch.distributed backend on CUDA tensors: 2 processes sharing one card", "",
             f"    {command}", "", f"{res['device']}, torch {torch.__version__}; {opts['rounds']} rounds of "
             f"{opts['calls']} calls (1/4 of them from 16 MiB), median round, slowest rank; each call followed by "
             f"a device synchronisation.  native = the group's native executor called directly on the same "
             f"schedule; topocoll - native = the backend's own overhead per call.", "",
             "| all_reduce float32 | schedule | ran natively | topocoll µs | native alone µs | gloo µs | "
             "topocoll busbw GB/s | gloo busbw GB/s | overhead µs |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res["allreduce"]:
        lines.append(f"| {size_label(r['bytes'])} | {r['schedule']} | {'yes' if r['native_path'] else 'NO'} | "
                     f"{r['topocoll_us']:,.0f} | {r['native_us']:,.0f} | {r['gloo_us']:,.0f} | "
                     f"{r['topocoll_busbw']:.2f} | {r['gloo_busbw']:.2f} | {r['topocoll_us'] - r['native_us']:,.0f} |")
    if res.get("why_not"):
        lines += ["", f"The native path was off: {res['why_not']}"]
    return "\n".join(lines + _phase_lines(res) + _one_rank_lines(res.get("one_rank")) + [""])


def _one_rank_lines(res: dict | None) -> list:
    """One process, one rank: topocoll against NCCL in the same layout (the issue's one-rank row)."""
    if not res:
        return []
    lines = ["", "## One rank: against NCCL", "", "One process, a one-rank `topocoll` group beside a one-rank NCCL "
             "group (`dist.new_group(backend=\"nccl\")`) on the same card, the same rounds; an all_reduce of one "
             "rank is a copy, so this row is the per-call cost of each backend around the bytes.", "",
             "| all_reduce float32 | ran natively | topocoll µs | native alone µs | NCCL µs | gloo µs | "
             "topocoll - NCCL µs | overhead µs |", "|---|---|---|---|---|---|---|---|"]
    for r in res["allreduce"]:
        lines.append(f"| {size_label(r['bytes'])} | {'yes' if r['native_path'] else 'NO'} | "
                     f"{r['topocoll_us']:,.1f} | {r['native_us']:,.1f} | {r['nccl_us']:,.1f} | {r['gloo_us']:,.1f} | "
                     f"{r['topocoll_us'] - r['nccl_us']:,.1f} | {r['topocoll_us'] - r['native_us']:,.1f} |")
    if res.get("why_not"):
        lines += ["", f"The native path was off: {res['why_not']}"]
    return lines


#: the phases of :class:`kernels.pytorch.native_exec.PhaseClock`, in the order a call meets them
PHASES = ("total", "input_sync", "export", "sockets", "launch", "device", "other")


def _phase_lines(res: dict) -> list:
    """Where a native call's time goes (rank 0, the native executor alone, µs per call)."""
    lines = ["", "Where a native call's time goes (rank 0, the native executor alone, µs per call): input_sync = "
             "the stream synchronised before the entry barrier; export = CUDA IPC handles of the buffers; sockets = "
             "the entry and exit all-gathers; device = from the launch until the stream is done (the kernel, its "
             "waits for the peer's kernel included); other = the rest of the runner's host work.  Two processes "
             "on one card without CUDA MPS cannot run kernels at once (the GPU time-slices their contexts), so a "
             "kernel that waits for the peer's flags waits for a context switch: that shows as device time.", "",
             "| all_reduce float32 | " + " | ".join(PHASES) + " |", "|---" * (len(PHASES) + 1) + "|"]
    for r in res["allreduce"]:
        ph = r.get("phases_us", {})
        lines.append(f"| {size_label(r['bytes'])} | " + " | ".join(f"{ph.get(k, 0.0):,.0f}" for k in PHASES) + " |")
    if res.get("note"):
        lines += ["", res["note"]]
    return lines


def _ran(label: str, one_round: bool) -> str:
    """What a call ran, as the table says it: ``best:direct`` -> ``direct``; ``, one round``
    where its data rode with the call's header (one message per peer: :mod:`kernels.pytorch.fused`).

    >>> _ran("best:oneshot", True), _ran("best:direct", False)
    ('oneshot, one round', 'direct')
    """
    return label.removeprefix("best:") + (", one round" if one_round else "")


def report(results: dict, command: str, opts: dict) -> str:
    import torch
    lines = [f"# The topocoll torch.distributed backend against gloo (CPU)", "", f"    {command}", "",
             f"torch {torch.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPU cores "
             f"({platform.machine()}); processes spawned on one machine, TCP rendezvous; no plan "
             f"(the cost-model fallback: every rank fully connected; a CPU all_reduce runs the baseline the "
             f"host transport's cost model picks, `kernels/pytorch/host_cost.py`: the one-step `oneshot` "
             f"carries its data in the agreement's round up to 2 MiB); {opts['rounds']} rounds of "
             f"{opts['calls']} calls (1/5 of them from 16 MiB), median round, slowest rank; CPU µs: the "
             f"process's CPU time per call (all its threads: gloo's own I/O threads count), the same rounds. "
             f"Load average when the report was written: {os.getloadavg()[0]:.1f} (the machine's cores are "
             f"shared: where it is above the core count, wall times mostly measure waiting for a core, and "
             f"the CPU columns say more about a backend's own cost).", ""]
    for n, res in sorted(results.items()):
        lines += [f"## {n} processes", "", "| all_reduce float32 | topocoll µs | gloo µs | topocoll busbw GB/s | "
                  "gloo busbw GB/s | topocoll / gloo | topocoll CPU µs | gloo CPU µs | topocoll ran |",
                  "|---" * 9 + "|"]
        for r in res["allreduce"]:
            ratio = r["topocoll_us"] / r["gloo_us"]
            lines.append(f"| {size_label(r['bytes'])} | {r['topocoll_us']:,.0f} | {r['gloo_us']:,.0f} | "
                         f"{r['topocoll_busbw']:.3f} | {r['gloo_busbw']:.3f} | {ratio:.2f}x | "
                         f"{r['topocoll_cpu_us']:,.0f} | {r['gloo_cpu_us']:,.0f} | {r.get('ran', '')} |")
        o = res["overhead"]
        lines += ["", f"Where a 4-byte `dist.all_reduce` goes (µs per call): the whole call {o['call']:,.0f}; "
                      f"the runner alone (`CallRunner.allreduce`: no torch dispatch, no Work) {o['runner']:,.0f}; "
                      f"its one round alone (header and data to every peer and back, "
                      f"`agree_with_data`) {o['round']:,.0f}; gloo's all_reduce {o['gloo']:,.0f}. So: sockets "
                      f"{o['round']:,.0f}, checks, plan lookup and the reduction {o['runner'] - o['round']:,.0f}, "
                      f"torch's dispatch and the Work {o['call'] - o['runner']:,.0f}; "
                      f"{o['messages_per_call']:.1f} messages sent per call by each rank. The two rounds a call "
                      f"took before (and calls over 2 MiB, of a schedule of several steps or of other "
                      f"collectives still take: the agreement, then the schedule): the agreement "
                      f"alone {o['agreement']:,.0f}, the schedule alone (`{o['schedule_name']}`, run_share over the "
                      f"group's own connections) {o['schedule']:,.0f}. CPU per call (every thread of the "
                      f"process): the whole call {o['cpu']['call']:,.0f}, the runner {o['cpu']['runner']:,.0f}, "
                      f"the round {o['cpu']['round']:,.0f}, gloo {o['cpu']['gloo']:,.0f}.", "",
                  f"DDP step (MLP 64-256-256-1, batch 32, median of {opts['steps']}): topocoll "
                  f"{res['ddp_ms']['topocoll']:.2f} ms, gloo {res['ddp_ms']['gloo']:.2f} ms.", ""]
    where = ("this machine has one" if torch.cuda.is_available() else "no GPU on the machine that wrote this report "
             "(`torch.cuda.is_available()` is False): no GPU rows here")
    lines += ["## GPU", "", f"`--gpu` on a GPU machine writes `gpu_report.md` beside this file; {where}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--out", default="results/pytorch")
    p.add_argument("--quick", action="store_true", help="fewer rounds and calls, sizes up to 1 MiB")
    p.add_argument("--gpu", action="store_true", help="CUDA tensors, 2 processes on one card (module docstring)")
    p.add_argument("--note", default="", help="a line for gpu_report.md (e.g. whether CUDA MPS was on)")
    args = p.parse_args(argv)
    opts = {"calls": 10 if args.quick else 40, "rounds": 3 if args.quick else 7, "steps": 10 if args.quick else 40,
            "sizes": SIZES_BYTES[:4] if args.quick else SIZES_BYTES}
    os.environ.setdefault("TOPOCOLL_RESULTS", tempfile.mkdtemp(prefix="topocoll-noplan-"))
    from synth.ir.schedule import atomic_write_text
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = script_command(__file__, argv if argv is not None else sys.argv[1:])   # --out /tmp/x: --out <tmp>/x
    if args.gpu:
        import torch
        if not torch.cuda.is_available():
            print("bench_pytorch.py --gpu: torch sees no CUDA GPU here", file=sys.stderr)
            return 2
        res = {**run(2, opts, _gpu_rank_job), "note": args.note, "one_rank": run(1, opts, _gpu_rank_job)}
        atomic_write_text(out / "gpu.json", json.dumps(res, indent=1) + "\n")
        text = gpu_report(res, command.strip(), opts)
        atomic_write_text(out / "gpu_report.md", text)
        print(text)
        return 0 if all(r["native_path"] for r in res["allreduce"]) else 1
    results = {n: run(n, opts) for n in args.ranks}
    text = report(results, command.strip(), opts)
    atomic_write_text(out / "report.md", text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""plan.json vs what runs: every committed preset plan (``results/<preset>/plan.json``) at sampled
sizes (each range's ends and middle and every power-of-two size in it) through the Communicator,
on the host path (NumPy) and on the GPU path with the CPU stand-in of CuPy (the tests' fake CUDA
runtime under the op-by-op CuPy layer, NCCL a recording stand-in): what plan.json says, what ran,
and the mismatches (there must be none).  Calls up to 64 KiB run and are checked against NumPy;
larger sampled sizes check the route the same call takes (``Communicator.route``).

Also the plans ``synthesize`` writes for machines no preset has (the user's files of
tests/fixtures at 2-6 GPUs, tests/_plan_truth.py's UNSEEN).  Also: how often the Communicator's previous per-call rule (``kernels/comm/nccl_choice.py`` at
commit 67d5ffc: NCCL also where the schedule's modelled time plus the native executor's 4 us +
1 us per record is not 5 % below NCCL's, with a fresh NCCL model per call shape) ran NCCL at a
size plan.json gives a schedule, and the host time per call of that rule's first call for a
shape against the lookup that replaced it.

    python benchmarks/bench_plan_truth.py --out results/interop
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))        # the tests' stand-ins of CuPy and NCCL

from _plan_truth import EXEC_BYTES, UNSEEN, PlanTruth, unseen_plan  # noqa: E402
from kernels.backends.executor import program_for  # noqa: E402
from kernels.comm.nccl_runtime import NCCL_CALLS  # noqa: E402
from kernels.native.device_program import build_device_program  # noqa: E402
from synth.formats.schedule_file import load_schedule  # noqa: E402
from synth.ir.schedule import atomic_write_text  # noqa: E402
from synth.plan.versus_nccl import MARGIN, nccl_curve  # noqa: E402
from topo_probe import get_preset  # noqa: E402

PRESETS = ("dgx1-v100", "dgx-a100", "dgx-h100", "mi300x", "pcie-8gpu-2socket")
#: the previous per-call rule's constants (kernels/comm/nccl_choice.py at 67d5ffc)
OLD_CALL_US, OLD_RECORD_US = 4.0, 1.0


def old_rule(topology, truth: PlanTruth, sample, entry) -> tuple[bool, float]:
    """(whether the previous per-call rule ran NCCL for this schedule call, host µs of its first
    call for the shape: lowering, the busiest block's records, a fresh NCCL model)."""
    sched = load_schedule(truth.plan.base_dir / entry.schedule)
    count = sample.nbytes // 4 // max(sched.spec.input_blocks(), sched.spec.output_blocks())
    t0 = time.perf_counter()
    prog = program_for(sched, count, np.float32)
    dp = build_device_program(prog, 1, slices=1)
    records = int(max(dp.block_start[b + 1] - dp.block_start[b] for b in range(dp.num_blocks)))
    ours = truth.host.selector.cost.schedule_time_us(sched, sample.nbytes) + OLD_CALL_US + OLD_RECORD_US * records
    theirs = nccl_curve(topology, sample.collective, [sample.nbytes])["times"][0]
    return ours * MARGIN > theirs, (time.perf_counter() - t0) * 1e6


def lookup_us(truth: PlanTruth, samples, repeat: int = 200) -> tuple[float, float]:
    """Median host µs of ``Communicator.route`` (the lookup each call makes) on the stand-in GPU
    path: the first call of each sampled size, and repeated calls."""
    first, again = [], []
    for s in samples:
        truth.gpu.selector._chosen.clear()                 # a size never asked for: per-size memos cleared
        truth.gpu.selector.chooser._choices.clear()
        t0 = time.perf_counter()
        truth.gpu.route(s.collective, s.nbytes, s.root, np.float32, "sum", on_gpus=True, layer="cupy")
        first.append((time.perf_counter() - t0) * 1e6)
    for s in samples:
        t0 = time.perf_counter()
        for _ in range(repeat):
            truth.gpu.route(s.collective, s.nbytes, s.root, np.float32, "sum", on_gpus=True, layer="cupy")
        again.append((time.perf_counter() - t0) * 1e6 / repeat)
    return statistics.median(first), statistics.median(again)


def fresh_plan(folder: Path):
    """A plan built now with the one decision: DGX A100's GPUs 0-3, all eight collectives (no SAT)."""
    from synth.pipeline import synthesize as synth_mod
    topo = get_preset("dgx-a100").subset([0, 1, 2, 3])
    opts = synth_mod.SynthesisOptions(time_limit_s=5, progress=False, max_sat_ranks=0, log=lambda s: None)
    synth_mod.run(topo, folder, opts, force=True)
    return folder / "plan.json", topo


def preset_section(name: str, path: Path, topology, old_per_preset: int) -> tuple[list[str], dict]:
    truth = PlanTruth(path, topology)
    samples = truth.run()
    entry_of = {}
    for s in samples:
        entry_of[id(s)] = next(e for e in truth.plan.entries if e.collective == s.collective and e.root == s.root
                               and e.covers(s.nbytes))
    rows, stats = [], Counter()
    for k, e in enumerate(truth.plan.entries):
        mine = [s for s in samples if entry_of[id(s)] is e]
        host = Counter(s.host for s in mine)
        gpu = Counter(s.gpu for s in mine)
        bad = sum(1 for s in mine if s.mismatch)
        hi = "∞" if e.max_bytes is None else str(e.max_bytes)
        rows.append(f"| {e.collective} | {e.min_bytes}-{hi} | `{e.schedule}` | {len(mine)} "
                    f"({sum(s.executed for s in mine)}) | {_counts(host)} | {_counts(gpu)} | {bad} |")
    stats["samples"] = len(samples)
    stats["executed"] = sum(s.executed for s in samples)
    stats["mismatches"] = sum(1 for s in samples if s.mismatch)
    stats["host_fallback"] = sum(1 for s in samples if s.planned == "nccl")
    stats["gpu_nccl"] = sum(1 for s in samples if s.gpu == "nccl")
    sched_samples = [s for s in samples if s.planned not in ("nccl", "") and s.collective in NCCL_CALLS]
    picked = sched_samples if old_per_preset is None else \
        sched_samples[::max(1, len(sched_samples) // old_per_preset)][:old_per_preset]
    old = [(s.nbytes & (s.nbytes - 1) == 0, *old_rule(topology, truth, s, entry_of[id(s)])) for s in picked]
    for pow2, label in ((True, "pow2"), (False, "other")):
        mine = [o for o in old if o[0] == pow2]
        stats[f"old_{label}"] = f"{sum(o[1] for o in mine)} of {len(mine)}"
    stats["old_first_us"] = statistics.median(o[2] for o in old) if old else float("nan")
    stats["lookup_first_us"], stats["lookup_us"] = lookup_us(truth, samples[:40])
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else "a plan built by this script"
    head = [f"### {name}", "", f"`{where}`: {len(truth.plan.entries)} entries, "
            f"{stats['samples']} sampled sizes ({stats['executed']} run through the executors, up to "
            f"{EXEC_BYTES // 1024} KiB), **{stats['mismatches']} mismatches**.", "",
            "| collective | range (bytes) | plan.json says | samples (run) | host path ran | stand-in GPU path ran "
            "| mismatches |", "|---|---|---|---|---|---|---|"]
    return head + rows + [""], stats


def _counts(c: Counter) -> str:
    return ", ".join(f"`{k}` x{v}" for k, v in sorted(c.items()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/interop", help="folder for plan_truth.md")
    ap.add_argument("--old-samples", type=int, default=None,
                    help="schedule sizes per preset the old rule is evaluated at (default: all sampled)")
    args = ap.parse_args(argv)
    sections, totals = [], {}
    for name in PRESETS:
        lines, stats = preset_section(name, ROOT / "results" / name / "plan.json", get_preset(name), args.old_samples)
        sections += lines
        totals[name] = stats
    with tempfile.TemporaryDirectory() as tmp:
        path, topo = fresh_plan(Path(tmp))
        name = "fresh: dgx-a100 GPUs 0-3"
        lines, stats = preset_section(name, path, topo, args.old_samples)
        sections += lines
        totals[name] = stats
        for key in UNSEEN:                   # machines no preset has: synthesize on the user's files
            path, topo = unseen_plan(key, Path(tmp) / key)
            name = f"unseen: {key} ({topo.num_gpus} GPUs, `tests/fixtures/{UNSEEN[key][0]}`)"
            lines, stats = preset_section(name, path, topo, args.old_samples)
            sections += lines
            totals[name] = stats
    summary = ["| preset | sampled sizes | run (<= 64 KiB) | mismatches | `nccl` sizes: host ran the fallback "
               "| stand-in GPU ran NCCL | old rule: NCCL at a schedule size, power of two | at other sizes "
               "| old rule's first call (µs) | lookup, first call of a size (µs) | lookup, repeated (µs) |",
               "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in totals.items():
        summary.append(f"| {name} | {s['samples']} | {s['executed']} | **{s['mismatches']}** | {s['host_fallback']} "
                       f"| {s['gpu_nccl']} | {s['old_pow2']} | {s['old_other']} | {s['old_first_us']:,.0f} "
                       f"| {s['lookup_first_us']:.1f} | {s['lookup_us']:.1f} |")
    text = "\n".join([
        "# plan.json vs what ran", "",
        "Command: `python benchmarks/bench_plan_truth.py --out results/interop`", "",
        "Every entry of every committed preset plan at sampled sizes (each range's ends and middle, every power-of-"
        "two size in it; float32) through the `Communicator`: the host path (NumPy arrays) and the GPU path with the "
        "CPU stand-in of CuPy (`tests/_fake_device.py` under the op-by-op CuPy layer; NCCL a stand-in that records "
        "its calls, NCCL available with one GPU per rank). *plan.json says* is read by a linear scan of the file; "
        "*ran* is the call's `last_route`. A mismatch is a call whose route is not plan.json's entry (or, on an "
        "`nccl` entry where NCCL cannot run, not its documented fallback), a schedule other than the entry's file, "
        "an NCCL call with other arguments, or a result that differs from NumPy. On the host path an `nccl` entry "
        "runs its fallback (NumPy arrays: NCCL runs on GPU memory only); on the GPU path gather, scatter and "
        "alltoall `nccl` entries run theirs (NCCL has no single call for them). Each `nccl` entry names its "
        "`fallback` schedule (plans made before that field: the fastest baseline at the size, `best:<baseline>`).",
        "",
        "*Old rule*: the Communicator's previous per-call decision (`kernels/comm/nccl_choice.py` at 67d5ffc), "
        "evaluated at every sampled size where plan.json names a schedule of a collective NCCL has as one call: how "
        "many it sent to NCCL, at the power-of-two sizes the plan is decided at and at the sizes between them (the "
        "old rule evaluated the call's exact size: a range's upper end can flip), and the median host time of its "
        "first call for a shape (lowering, the busiest block's records, a fresh NCCL model). Where it "
        "disagrees at power-of-two sizes, it judged the call's exact shape with another rule. *Lookup*: `Communicator.route`, what each call now does (median; the first call of a size "
        "with the selector's per-size memos cleared; and repeated calls). *fresh*: a plan this script builds with "
        "the one decision (DGX A100's GPUs 0-3, all eight collectives, no SAT), with `decision` and `fallback` "
        "recorded per entry. *unseen*: machines no preset has, as `synthesize --topology FILE [--gpus ...] --out X` "
        "makes their plans from the user's files in `tests/fixtures/` (`family/README.md` says what each imitates; "
        "5 s budget, no SAT), at 2, 3, 4 and 6 GPUs.",
        "",
        *summary, "", f"Host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end of the run "
        "(the lookup's µs are host times on that machine).", "", *sections])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "plan_truth.md", text + "\n")
    print(text)
    return 1 if any(s["mismatches"] for s in totals.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

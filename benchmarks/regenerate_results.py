"""Regenerate the committed results: the one ordered list of (command, output folder, depends on the NCCL model).

Usage::

    python benchmarks/regenerate_results.py --list                 # the list and what is not regenerated
    python benchmarks/regenerate_results.py --model-only           # after any change under synth/model
    python benchmarks/regenerate_results.py --model-only --with-loo   # ... and the leave-one-out holdout (~65 min)
    python benchmarks/regenerate_results.py --only msccl_vs_rccl,bwopt [--dry-run]
    python benchmarks/regenerate_results.py                        # every step (timing benchmarks too)

Each step is the command its results file states, run from the repository root with this
interpreter for ``python`` and the console scripts next to it (``synthesize``, ``sweep``), the
checkout first on ``PYTHONPATH``.  The order is valid for ``--model-only``: the fit first (every
later step reads ``synth/model/nccl/fitted_params.json``), the presets (``results/<preset>/``)
before the steps that read their plans, tuner files and MSCCL folders.  ``model`` marks a step
whose output moves when the NCCL cost model or the synthesizer (``synth/``) changes; the others
time or stress code paths the model does not reach.  A step's output goes to its log (in a
temporary folder); a failing step stops the run with one line naming it, and the exit status 2.
``NOT_REGENERATED`` says, for each committed results file or folder no step writes, why.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from topo_probe.topology.serialize import atomic_write

ROOT = Path(__file__).resolve().parent.parent
CONSOLE_SCRIPTS = ("synthesize", "sweep", "simulate", "topo-probe")
PRESETS = ("dgx-a100", "dgx-h100", "pcie-8gpu-2socket")
MV = "results/model_validation"

__all__ = ["Step", "STEPS", "LOO", "NOT_REGENERATED", "select", "argv_of", "main"]


@dataclass(frozen=True)
class Step:
    """One command (as its results file states it, run from the repository root), the folder it
    writes, and whether the NCCL model or the synthesizer moves its output."""

    name: str
    command: str
    out: str
    model: bool
    note: str = ""


def _py(name: str, script_args: str, out: str, model: bool, note: str = "") -> Step:
    return Step(name, f"python benchmarks/{script_args}", out, model, note)


_MODEL_STEPS = (
    _py("fit", "fit_nccl_model.py --write", "synth/model/nccl", True, "first: every later step reads its constants"),
    _py("validate", f"validate_cost_model.py --out {MV}", MV, True),
    _py("holdout-by-class", f"holdout_nccl_model.py --by-class --out {MV} --write", MV, True),
    # the commands of docs/results.md's table (its contract), plus --no-progress; mi300x has no tuner file
    Step("preset-dgx1-v100", "synthesize --force --no-progress --nccl-tuner-conf results/dgx1-v100/nccl_tuner.conf",
         "results/dgx1-v100", True),
    *(Step(f"preset-{t}", f"synthesize --topology {t} --force --no-progress"
           f" --nccl-tuner-conf results/{t}/nccl_tuner.conf", f"results/{t}", True) for t in PRESETS),
    Step("preset-mi300x", "synthesize --topology mi300x --force --no-progress", "results/mi300x", True),
    _py("unseen-logs", f"unseen_logs.py --out {MV}", MV, True, "the held-out logs: the lead runs it"),
    _py("published-anchors", f"published_nccl_anchors.py --out {MV} --write", MV, True),
    _py("ll-plan", "ll_plan_cells.py --out results/ll_plan", "results/ll_plan", True, "reads the presets"),
    Step("sweep-dgx-a100", "sweep all_reduce --backend sim --topology dgx-a100 -b 8 -e 4G -f 2"
         " --compare plan,nccl,ring,tree --import tests/fixtures/nccl_tests_allreduce_a100x8_single_process.txt"
         " --plot results/sweep/dgx-a100_all_reduce_busbw.png > results/sweep/dgx-a100_all_reduce_sim.txt",
         "results/sweep", True, "reads results/dgx-a100/plan.json"),
    _py("printed-channels", f"printed_channels.py --out {MV}", MV, True),
    _py("residual-groups", f"residual_groups.py --out {MV}", MV, True, "reads the class holdout"),
    _py("bound-check", f"bound_check.py --out {MV}", MV, True),
    _py("tuner-coverage", "bench_tuner_coverage.py --out results/interop", "results/interop", True,
        "reads the presets' tuner files"),
    _py("tuner-write", "bench_tuner_write.py --out results/interop", "results/interop", True),
    _py("bwopt", "bench_bwopt.py", "results/bwopt", True),
    _py("calibration", "calibrate_cost_model.py", "results/calibration", True),
    _py("msccl-vs-rccl", "msccl_vs_rccl.py", "results/msccl_vs_rccl", True),
    _py("plan-truth", "bench_plan_truth.py --out results/interop", "results/interop", True, "reads the presets' plans"),
    _py("interop", "bench_interop.py", "results/interop", True, "reads the presets' MSCCL folders"),
    _py("lockstep", "bench_lockstep_vs_pipelined.py", "results/lockstep", True),
    _py("synthesis", "bench_synthesis.py", "results/synthesis", True),
    _py("scale", "bench_scale.py --out results/scale", "results/scale", True),
    _py("oversubscribed", "bench_oversubscribed.py --out results/scale/oversubscribed", "results/scale", True),
)

_OTHER_STEPS = (
    _py("new-user", "new_user_pass.py --out results/new_user", "results/new_user", False,
        "last model-free: the final code"),
    _py("host-reduce", "bench_host_reduce.py --repeats 5 --out results/host_reduce", "results/host_reduce", False),
    _py("host-allreduce", "bench_host_allreduce.py --out results/host_allreduce --max-mem-gib 17",
        "results/host_allreduce", False, "needs 17 GiB of memory"),
    Step("mpi-n2", "mpirun -n 2 python benchmarks/bench_mpi_allreduce.py --out results/mpi --rounds 12",
         "results/mpi", False),
    *(Step(f"mpi-n4{'-' + a if a else ''}", "mpirun --oversubscribe -n 4 python benchmarks/bench_mpi_allreduce.py"
           f" --out results/mpi --rounds 12{' --algo ' + a if a else ''}", "results/mpi", False)
      for a in ("", "rhd", "ring")),
    Step("mpi-overhead", "mpirun --oversubscribe -n 4 python benchmarks/bench_mpi_overhead.py --out results/mpi",
         "results/mpi", False),
    _py("mpi-leaving", "bench_mpi_leaving.py --out results/mpi", "results/mpi", False,
        "launches its own mpirun jobs (2 and 4 ranks), ~3 min"),
    _py("pytorch", "bench_pytorch.py --out results/pytorch", "results/pytorch", False),
    _py("pytorch-p2p", "bench_p2p.py", "results/pytorch", False),
    _py("fuzz-loaders", "fuzz_loaders.py --cases 10000 --workers 1 --out results/robustness", "results/robustness",
        False),
    _py("faults", "fault_campaign.py --kills 40 --concurrent 5 --signals 80 --seed 0", "results/robustness", False),
    _py("faults-buffers", "fault_campaign.py --buffers 10000 --seed 0", "results/robustness", False),
    _py("faults-memory", "fault_campaign.py --memory 1024", "results/robustness", False),
    _py("ctrl-c", "ctrl_c_startup.py --out results/robustness", "results/robustness", False),
    _py("memory-admission", "memory_admission.py", "results/robustness", False),
)

STEPS: tuple[Step, ...] = _MODEL_STEPS + _OTHER_STEPS

LOO = _py("holdout-loo", f"holdout_nccl_model.py --out {MV}", MV, True,
          "leave-one-out holdout, ~65 min on 2 cores: only with --with-loo")

NOT_REGENERATED: dict[str, str] = {
    "results/gpu": "measured on a GPU machine (H200 passes); re-run there with benchmarks/gpu_*.sh",
    "results/gpu/pass_2026-11-28": "one dated GPU pass, kept as measured",
    "results/pytorch/gpu": "measured on a GPU machine (bench_pytorch.py --gpu)",
    "results/call_path": "a before/after pair at two fixed commits (ed8bedb, 9b8451e), commands in its report",
    "results/layout": "compares the CLIs of the two revisions around the layout restructuring (4a5d9a0 and its result)",
    "results/new_user/before_fixes": "the new-user pass before its fixes, a fixed record",
    "results/robustness/after_net_transport": "the fuzz campaign after one fix (net transport), a fixed record",
    "results/robustness/nccl_xml_after_fix": "the fuzz campaign after one fix (NCCL XML), a fixed record",
    "results/scale/e2e*.md": "synthesize wall/CPU timings compared with earlier revisions (--before), a timing record",
    "results/scale/msccl_export.md": "export timing against a fixed baseline revision (--baseline 16d0713)",
    "results/scale/sweep_sim_ranks.md": "CPU time of the sim sweep by rank count, a timing record",
    "results/scale/topo_probe_clusters.md": "topo_probe timing against a fixed revision (--before d309b56)",
    f"{MV}/blackwell_nvls.md": "hand-written issue note: the numbers at the change it records",
    f"{MV}/nvls_tree_chunk.md": "hand-written issue note: the numbers at the change it records",
    f"{MV}/simple_latency.md": "hand-written issue note: the numbers at the change it records",
}


def select(model_only: bool = False, only: str | None = None, with_loo: bool = False) -> list[Step]:
    """The steps to run, in list order (the leave-one-out holdout right after the class holdout);
    ``only``: comma-separated step names.  ValueError names an unknown one."""
    ordered = [*STEPS[:3], LOO, *STEPS[3:]]
    if only is not None:
        names = [n.strip() for n in only.split(",") if n.strip()]
        unknown = [n for n in names if n not in {s.name for s in ordered}]
        if unknown or not names:
            raise ValueError(f"--only: no step named {(unknown or [only])[0]!r} (see --list)")
        steps = [s for s in ordered if s.name in names]
    else:
        steps = [s for s in ordered if s is not LOO or with_loo]
    return [s for s in steps if s.model] if model_only else steps


def argv_of(step: Step) -> tuple[list[str], str | None]:
    """The argument vector of a step's command and the file its stdout goes to (``> FILE``), if any:
    ``python`` is this interpreter, a console script the one beside it (else on PATH)."""
    tokens = shlex.split(step.command)
    stdout = None
    if ">" in tokens:
        at = tokens.index(">")
        if at != len(tokens) - 2:
            raise ValueError(f"step {step.name}: '>' must be followed by exactly one file")
        stdout, tokens = tokens[at + 1], tokens[:at]
    bindir = Path(sys.executable).parent
    argv = []
    for tok in tokens:
        if tok == "python":
            tok = sys.executable
        elif tok in CONSOLE_SCRIPTS:
            tok = str(bindir / tok) if (bindir / tok).exists() else (shutil.which(tok) or tok)
        argv.append(tok)
    return argv, stdout


def _run(step: Step, logdir: Path) -> tuple[int, Path]:
    """Run one step from the repository root; returns its exit status and log file."""
    argv, stdout = argv_of(step)
    log = logdir / f"{step.name}.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    with open(log, "w") as err:
        if stdout is None:
            return subprocess.run(argv, cwd=ROOT, env=env, stdout=err, stderr=subprocess.STDOUT).returncode, log
        r = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        if r.returncode == 0:        # the committed file is replaced only by a whole, successful output
            atomic_write(ROOT / stdout, r.stdout)
        return r.returncode, log


def _list(steps: list[Step]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="regenerated, in this order")
    for col in ("name", "model", "folder", "command", "note"):
        table.add_column(col, overflow="fold")
    for s in steps:
        table.add_row(s.name, "yes" if s.model else "no", s.out, s.command, s.note)
    table.add_row(LOO.name, "yes", LOO.out, LOO.command, LOO.note)
    skipped = Table(title="not regenerated")
    skipped.add_column("path")
    skipped.add_column("why", overflow="fold")
    for path, why in NOT_REGENERATED.items():
        skipped.add_row(path, why)
    Console().print(table, skipped)


def _run_all(steps: list[Step], dry_run: bool) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if dry_run:
        for s in steps:
            console.print(f"[bold]{s.name}[/] ({'model' if s.model else 'no model'}) -> {s.out}: {s.command}",
                          highlight=False, soft_wrap=True)
        return 0
    logdir = Path(tempfile.mkdtemp(prefix="regenerate-results-"))
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=console) as progress:
        task = progress.add_task("regenerate", total=len(steps))
        for s in steps:
            progress.update(task, description=s.name)
            start = time.monotonic()
            try:
                rc, log = _run(s, logdir)
            except OSError as exc:
                progress.stop()
                print(f"regenerate_results: step {s.name} could not start ({exc.strerror}): {s.command}",
                      file=sys.stderr)
                return 2
            if rc != 0:
                progress.stop()
                print(f"regenerate_results: step {s.name} failed (exit {rc}; log {log}): {s.command}", file=sys.stderr)
                return 2
            progress.console.print(f"{s.name}: done in {time.monotonic() - start:.0f} s -> {s.out}", highlight=False)
            progress.advance(task)
    console.print(f"{len(steps)} steps done; logs in {logdir}", highlight=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-only", action="store_true", help="only the steps the NCCL model or synthesizer moves")
    ap.add_argument("--only", metavar="NAME", help="these steps only (comma-separated names, see --list)")
    ap.add_argument("--with-loo", action="store_true", help="add the leave-one-out holdout (~65 min)")
    ap.add_argument("--list", action="store_true", help="print the list and what is not regenerated, run nothing")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    try:
        steps = select(args.model_only, args.only, args.with_loo)
        for s in steps:
            argv_of(s)
    except ValueError as exc:
        print(f"regenerate_results: {exc}", file=sys.stderr)
        return 2
    if args.list:
        _list(list(STEPS))
        return 0
    try:
        return _run_all(steps, args.dry_run)
    except KeyboardInterrupt:
        print("regenerate_results: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

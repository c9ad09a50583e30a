"""A new user's first hour, scripted: on a fresh clone of HEAD, run every shell command of README.md,
docs/*.md and examples/README.md, the Python examples of README.md and docs/, every file under
examples/, and the bad inputs users have tried; for each record the exit status against the
expected one (0, or 2 for bad input; 1 only where a result is wrong), the wall time, whether a
Python traceback was printed, and every file of the clone it created, changed or removed outside
its declared output (file list, mtimes and SHA-256 before and after each command).  Declared
outputs are redirected to a temporary folder, so at the end ``git status --porcelain`` of the
clone must be empty.  Nothing is installed: the four tools are small shims that run this
interpreter with PYTHONPATH at the clone.

Last, every committed ``synthesize`` result (each ``results/<name>/`` holding a summary.json that
synthesize wrote) is regenerated in the clone with ``--force`` and the options its summary
records; each must leave ``git status --porcelain`` of its folder empty and touch no file but its
``nccl_tuner.conf`` (:func:`regen_commands`).

    python benchmarks/new_user_pass.py --out results/new_user [--quick]

Commands that need a GPU, a build of nccl-tests, an install or minutes of benchmarking are listed
as skipped with the reason; ``mpirun -n 4`` runs as ``-n 2``.  The bad inputs are
``benchmarks/new_user_bad_inputs.py``'s, the report is ``benchmarks/new_user_report.py``'s.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from _docs import python_snippets, shell_commands  # noqa: E402
from new_user_bad_inputs import bad_inputs_issue24, bad_inputs_issue38  # noqa: E402
from new_user_report import render, totals  # noqa: E402

from synth.ir.schedule import atomic_write_text  # noqa: E402
from shown_paths import script_command  # noqa: E402

TOOLS = {"topo-probe": "topo_probe.cli.main", "synthesize": "synth.cli.synthesize",
         "simulate": "synth.cli.simulate", "sweep": "kernels.sweep.cli"}
#: flags whose value is a file or folder the command writes: redirected to the command's folder
OUTPUT_FLAGS = ("--json", "--nccl-xml", "--plot", "--csv", "--nccl-tuner-conf", "--out", "-J")
#: documented commands not run, by a pattern of the command, and why
SKIP = [(r"pip install|python3 -m venv", "installs packages; the pass uses this interpreter and installs nothing"),
        (r"-m pytest", "the test suite (minutes on 2 cores; CI runs it: .ci/run)"),
        (r"\[--|\[-[a-z]", "a synopsis of the flags, not a command"),
        (r"all_reduce_perf|torchrun", "needs GPUs, NCCL's tuner plugin and a build of nccl-tests / PyTorch"),
        (r"benchmarks/bench_mpi_allreduce", "an MPI benchmark that rewrites results/mpi/ (minutes)"),
        (r"holdout_nccl_model\.py|fit_nccl_model\.py", "a model-fitting benchmark (one fit per log: 5-10 minutes "
         "on 2 cores)")]
TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Cmd:
    """One command: ``shell`` runs under bash in the clone; ``{out}`` is its own output folder."""

    label: str
    shell: str
    expect: tuple[int, ...] = (0,)
    targets: tuple[str, ...] = ()            # clone paths it may write (its declared output)
    setup: Callable[[Path], None] | None = None
    check: Callable[[Path, str], str | None] | None = None   # (out, stdout+stderr) -> what is wrong
    skip: str = ""
    quick: bool = True
    note: str = ""
    regen: str = ""                          # the committed results folder it regenerates


@dataclass
class Outcome:
    cmd: Cmd
    rc: int | None = None
    seconds: float = 0.0
    traceback: bool = False
    touched: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)       # every file it changed, inside its target too
    problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.problems)


# ---------------------------------------------------------------- snapshots
def snapshot(root: Path, before: dict | None = None) -> dict[str, tuple]:
    """``path -> (size, mtime_ns, ctime_ns, sha256)`` of every file under ``root`` but ``.git``;
    a file whose size, mtime and ctime are those of ``before`` keeps its hash (any write moves ctime)."""
    out = {}
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if not (dirpath == str(root) and d == ".git")]
        for name in files:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            old = (before or {}).get(rel)
            if old is not None and old[:3] == key:
                out[rel] = old
                continue
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else "link"
            out[rel] = (*key, digest)
    return out


def touched(before: dict, after: dict, targets=()) -> list[str]:
    """Files created, removed, rewritten or re-stamped (mtime) outside ``targets``."""
    changed = [p for p in before.keys() | after.keys()
               if p not in before or p not in after or before[p][1] != after[p][1] or before[p][3] != after[p][3]]
    inside = [t.rstrip("/") for t in targets]
    return sorted(p for p in changed if not any(p == t or p.startswith(t + "/") for t in inside))


# ---------------------------------------------------------------- running
def run_one(cmd: Cmd, clone: Path, out: Path, env: dict, timeout: float, snap: dict) -> tuple[Outcome, dict]:
    res = Outcome(cmd)
    out.mkdir(parents=True, exist_ok=True)
    if cmd.setup is not None:
        cmd.setup(out)
    shell = cmd.shell.replace("{out}", shlex.quote(str(out)))
    t0 = time.perf_counter()
    proc = subprocess.Popen(["bash", "-c", shell], cwd=clone, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        res.rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)                 # the whole group: mpirun's ranks too
        stdout, stderr = proc.communicate()
        res.problems.append(f"timed out after {timeout:g} s")
    res.seconds, text = time.perf_counter() - t0, stdout + stderr
    (out / "output.txt").write_text(f"$ {shell}\n{text}")
    res.traceback = TRACEBACK in text
    after = snapshot(clone, snap)
    res.touched = touched(snap, after, cmd.targets)
    res.written = touched(snap, after)
    if res.rc is not None and res.rc not in cmd.expect:
        res.problems.append(f"exit {res.rc}, expected {'/'.join(map(str, cmd.expect))}: {_last_line(text)}")
    if res.traceback:
        res.problems.append("printed a traceback")
    if res.touched:
        res.problems.append(f"touched {', '.join(res.touched[:5])}")
    why = cmd.check(out, text) if cmd.check is not None and res.rc is not None else None
    if why:
        res.problems.append(why)
    return res, after


def _last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1][:160] if lines else "(no output)"


def run_pass(cmds: list[Cmd], clone: Path, work: Path, env: dict, timeout: float, log=print) -> list[Outcome]:
    """Run ``cmds`` in order in ``clone`` (skipped ones are reported, not run); command k writes
    into ``work/k``."""
    outcomes, snap = [], snapshot(clone)
    for k, cmd in enumerate(cmds):
        if cmd.skip:
            outcomes.append(Outcome(cmd))
            continue
        res, snap = run_one(cmd, clone, work / f"{k:02d}", env, timeout, snap)
        outcomes.append(res)
        log(f"{'FAIL' if res.failed else 'ok  '} {res.seconds:6.1f} s  {cmd.label}: {cmd.shell[:90]}"
            + (f"  <- {'; '.join(res.problems)}" if res.failed else ""))
    return outcomes


def tool_env(clone: Path, bin_dir: Path, home: Path) -> dict:
    """PATH with shims for the four tools and ``python`` (this interpreter, PYTHONPATH = the clone)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, module in [*TOOLS.items(), ("python", None), ("python3", None)]:
        run = f"-m {module} " if module else ""
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {run}"$@"\n')
        (bin_dir / name).chmod(0o755)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")])
    return {"PATH": path, "PYTHONPATH": str(clone), "HOME": str(home), "LANG": "C.UTF-8", "MPLBACKEND": "Agg",
            "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1", "PYTHONWARNINGS": "ignore", "PYTHONDONTWRITEBYTECODE": "1"}


# ---------------------------------------------------------------- what a new user runs
def redirect(shell: str) -> tuple[str, bool]:
    """Output flags' values moved into ``{out}`` (``$PWD/`` dropped); whether any was."""
    new = re.sub(r"(?<!\S)(%s)\s+(\S+)" % "|".join(map(re.escape, OUTPUT_FLAGS)),
                 lambda m: f"{m.group(1)} {{out}}/{Path(m.group(2).replace('$PWD/', '')).name}", shell)
    return new, new != shell


def doc_commands(clone: Path) -> list[Cmd]:
    docs = ["README.md", *sorted(p.relative_to(clone).as_posix() for p in (clone / "docs").glob("*.md")),
            "examples/README.md"]
    cmds = []
    for doc in docs:
        for no, shell in shell_commands((clone / doc).read_text()):
            label, shell = f"{doc}:{no}", re.sub(r"\s{2,}#\s.*$", "", shell)     # the comment is bash's to drop
            skip = next((why for pat, why in SKIP if re.search(pat, shell)), "")
            if skip:
                cmds.append(Cmd(label, shell, skip=skip))
                if "python3 -m venv" in shell:   # the install line also runs the main job
                    cmds.append(Cmd(f"{label} (its main job)", "synthesize", targets=("results/dgx1-v100/",),
                                    note="`.venv/bin/synthesize` without the install"))
                continue
            shell, moved = redirect(shell)
            notes = ["outputs into the pass's folder"] if moved else []
            if re.match(r"(\S+=\S+\s+)*mpirun\b", shell):
                shell, n = re.subn(r"-n [3-9]\b", "-n 2", shell)
                notes += ["2 ranks"] if n else []
            targets = tuple(f"results/{m}/" for m in re.findall(r"^synthesize --topology (\S+)(?!.*--out)", shell))
            cmds.append(Cmd(label, shell, targets=targets, note=", ".join(notes)))
    for doc in docs[:-1]:
        for k, code in enumerate(python_snippets((clone / doc).read_text())):
            launch = "mpirun -n 2 python" if "MPICommunicator" in code else "python"
            setup = (lambda out, code=code: (out / "example.py").write_text(code))
            cmds.append(Cmd(f"{doc} python example {k + 1}", f"cd {{out}} && {launch} example.py", setup=setup,
                            quick="synthesize(" not in code, note="run in its own folder"))
    for f in sorted((clone / "examples").rglob("*.py")):
        rel = f.relative_to(clone).as_posix()
        if "--single" in f.read_text():
            cmds.append(Cmd(rel, f"python {rel} --single --json {{out}}/losses.json", note="the single-process reference"))
        else:
            cmds.append(Cmd(rel, f"python {rel}", skip="run by its documented commands (examples/README.md)"))
    return cmds


# ---------------------------------------------------------------- regenerating the committed results
def regen_commands(clone: Path) -> list[Cmd]:
    """One command per committed ``synthesize`` result of ``clone``: ``synthesize --force`` into
    its folder with the topology, collectives, root and time limit its summary.json records (and
    ``--nccl-tuner-conf`` where a tuner file lies beside it); checked by :func:`_git_clean`."""
    cmds = []
    for summary in sorted((clone / "results").glob("*/summary.json")):
        folder = summary.parent.relative_to(clone).as_posix()
        try:
            doc = json.loads(summary.read_text())
        except (OSError, ValueError):
            continue
        if not (isinstance(doc, dict) and {"topology", "fingerprint", "collectives", "options"} <= doc.keys()):
            continue                                # not a summary of synthesize
        args, why = _regen_args(clone, folder, doc)
        shell = shlex.join(["synthesize", *args])
        cmds.append(Cmd(f"regenerate {folder}/", shell, targets=(f"{folder}/nccl_tuner.conf",), regen=folder,
                        check=lambda out, text, folder=folder: _git_clean(clone, folder), skip=why))
    return cmds


def _regen_args(clone: Path, folder: str, doc: dict) -> tuple[list[str], str]:
    """The arguments that made ``doc`` (a summary.json), and why it cannot be remade ("" if it can)."""
    from synth.ir.collectives import COLLECTIVES, ROOTED
    from topo_probe.machines.presets import PRESETS
    name, opts, colls = doc["topology"], doc["options"], list(doc["collectives"])
    subset = re.fullmatch(r"(.+)\[([0-9,]+)\]", str(name))
    if name in PRESETS:
        args = ["--topology", name]
    elif subset and subset.group(1) in PRESETS:
        args = ["--topology", subset.group(1), "--gpus", subset.group(2)]
    else:
        args = ["--topology", f"{folder}/topology.json"]
    args += ["--out", folder, "--force", "--no-progress"]
    if opts.get("time_limit_s", 60.0) != 60.0:
        args += ["--time-limit", f"{opts['time_limit_s']:g}"]
    if tuple(colls) != COLLECTIVES:
        args += ["--collectives", ",".join(colls)]
    roots = {rec.get("root") for c, rec in doc["collectives"].items()
             if c in ROOTED and isinstance(rec, dict)} - {None}
    if len(roots) > 1:
        return args, f"its rooted collectives have different roots ({sorted(roots)}): one run cannot remake them"
    if roots and roots != {0}:
        args += ["--root", str(roots.pop())]
    fixed = {"max_sat_ranks": 8, "max_sat_steps": 8, "max_sat_chunks": 6}
    if any(opts.get(k, v) != v for k, v in fixed.items()):
        return args, "made with solver settings the command line does not set"
    if (clone / folder / "nccl_tuner.conf").is_file():
        args += ["--nccl-tuner-conf", f"{folder}/nccl_tuner.conf"]
    return args, ""


def _git_clean(clone: Path, folder: str) -> str | None:
    """None where ``git status --porcelain`` of ``folder`` is empty, else what it lists."""
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain", "--untracked-files=all", "--",
                             folder], capture_output=True, text=True).stdout.splitlines()
    return f"git status not clean: {', '.join(status[:5])}" if status else None


#: prints the BLAS libraries numpy loads and the CPU kernels they chose (floats can differ in the last
#: digit from one kernel to another)
BLAS_PROBE = ("import numpy, threadpoolctl; print(', '.join(f\"{i['internal_api']} {i.get('architecture', '?')} "
              "kernels, {i['num_threads']} threads\" for i in threadpoolctl.threadpool_info()))")


def blas_info(clone: Path, env: dict) -> str:
    """What :data:`BLAS_PROBE` prints in the clone's environment ("unknown" where it cannot tell)."""
    try:
        done = subprocess.run(["python", "-c", BLAS_PROBE], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def make_clone(work: Path, rev: str = "HEAD") -> tuple[Path, str]:
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "--detach", rev], check=True)
    head = subprocess.run(["git", "-C", str(clone), "log", "-1", "--format=%h (%s)"], capture_output=True,
                          text=True, check=True).stdout.strip()
    return clone, head


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/new_user", help="folder for report.md")
    ap.add_argument("--quick", action="store_true", help="skip the slower examples (synthesis in Python)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per command")
    ap.add_argument("--rev", default="HEAD", help="the commit to clone (default HEAD)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="new-user-") as tmp:
        work = Path(tmp)
        clone, head = make_clone(work, args.rev)
        env = tool_env(clone, work / "bin", work / "home")
        bad = [Cmd(**c) for c in bad_inputs_issue24() + bad_inputs_issue38()]
        cmds = doc_commands(clone) + bad + regen_commands(clone)
        if shutil.which("mpirun", path=env["PATH"]) is None:
            cmds = [c if "mpirun" not in c.shell else Cmd(c.label, c.shell, skip="mpirun is not installed") for c in cmds]
        if args.quick:
            cmds = [c if c.quick else Cmd(c.label, c.shell, skip="--quick (slower example)") for c in cmds]
        blas = blas_info(clone, env)
        outcomes = run_pass(cmds, clone, work / "runs", env, args.timeout)
        status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True,
                                text=True).stdout
    text = render(outcomes, script_command(__file__, sys.argv[1:] if argv is None else argv),
                  head, status, time.perf_counter() - t0, blas)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.md", text)
    print(totals(outcomes) + ("; git status not clean" if status.strip() else ""))
    return 1 if any(o.failed for o in outcomes) or status.strip() else 0


if __name__ == "__main__":
    sys.exit(main())

"""Fault campaign for ``synthesize``'s result folders: kill -9 at random instants, SIGINT/SIGTERM
near the end of a run, a full disk
(a small tmpfs, where this machine lets us mount one), concurrent runs into one folder, and
symlinked or user-owned paths.  Every trial ends with the question: did the user lose
anything?  A loss is any of

* a result folder that, after the next ordinary run (which finishes an interrupted publish and
  removes our leftovers), holds neither complete earlier results nor complete new ones;
* a file we did not write changed or gone (a user's note inside the folder, a file a symlink
  points to, anything beside the folder);
* a run that exits 0 after failing, or exits with a traceback.

Results: ``results/robustness/faults.md`` (counts per fault kind, the command that made it).

    python benchmarks/fault_campaign.py --kills 40 --out results/robustness/faults.md

``--buffers N`` runs the buffer-misuse campaign instead (``tests/_buffer_misuse.py``, the same
one CI runs): N generated calls of every ``Communicator(plan=False)`` collective and of
``run_schedule`` with drawn byte orders, ndarray subclasses, overlaps and argument types, each
judged against NumPy; it replaces only its own section of the results file.

    python benchmarks/fault_campaign.py --buffers 10000 --seed 0

``--memory MIB`` runs the memory cases instead: sweeps, simulate and synthesize under an
address-space cap (``ulimit -v``) of MIB MiB, some that fit, some that admission must refuse and
some past what it estimates; each must exit 0, or 2 with one line, never a traceback.

    python benchmarks/fault_campaign.py --memory 1024
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from synth.ir.schedule import atomic_write_text  # noqa: E402

BUFFER_SECTION = "\n## Buffer misuse: generated calls\n"
MEMORY_SECTION = "\n## Memory under a cap\n"
#: what each loss was, for the report (signal trials)
LOSSES: list[str] = []
ARGS = ["--topology", "full:4", "--collectives", "allgather,allreduce", "--time-limit", "5"]


def synth(out: Path, *extra: str, wait: bool = True, env=None):
    cmd = [sys.executable, "-m", "synth.cli.synthesize", *ARGS, "--out", str(out), *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    if not wait:
        return proc
    out_text, err = proc.communicate(timeout=300)
    return proc.returncode, out_text, err


def complete(out: Path) -> bool:
    """Complete results: summary and plan parse, every schedule the plan names exists and parses."""
    try:
        json.loads((out / "summary.json").read_text())
        plan = json.loads((out / "plan.json").read_text())
        for e in plan["entries"]:
            if e["schedule"] != "nccl":
                json.loads((out / e["schedule"]).read_text())
        return True
    except (OSError, ValueError, KeyError):
        return False


def snapshot(paths) -> dict:
    return {str(p): p.read_bytes() if p.is_file() else None for p in paths}


def kill_trials(base: Path, n: int, rng: random.Random) -> dict:
    out = base / "kill" / "out"
    assert synth(out)[0] == 0
    note = out.parent / "beside.txt"
    note.write_text("a user's file beside the results")
    t0 = time.monotonic()
    assert synth(out, "--force")[0] == 0
    span = time.monotonic() - t0
    counts = {"trials": 0, "losses": 0, "recovered_by_next_run": 0}
    for _ in range(n):
        proc = synth(out, "--force", wait=False)
        time.sleep(rng.uniform(0, span))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        counts["trials"] += 1
        before = complete(out)
        rc, _, err = synth(out)                    # the next ordinary run: reuse or redo, and tidy
        ok = rc == 0 and complete(out) and note.read_text() == "a user's file beside the results"
        leftovers = [p.name for p in out.iterdir() if p.name.startswith(".v-")]
        if not ok or leftovers or "Traceback" in err:
            counts["losses"] += 1
        elif not before:
            counts["recovered_by_next_run"] += 1
    return counts


def _summary_id(out: Path):
    try:
        st = (out / "summary.json").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def signal_trials(base: Path, n: int, rng: random.Random) -> dict:
    """SIGINT or SIGTERM in the second half of ``synthesize --force`` (where its clean-up runs and
    a signal can land in a callback), each with another --time-limit than the results in place, so
    that a finished run publishes new results: each run ends 0 (done first) or 130 with one
    'interrupted' line that is true of the folder (its summary.json the one from before the run: 'previous
    results kept'; a new one: 'interrupted after its results were in place'), never a traceback,
    and the folder holds complete results."""
    out = base / "signal" / "out"
    assert synth(out)[0] == 0
    t0 = time.monotonic()
    assert synth(out, "--force", "--time-limit", "4")[0] == 0       # the span of a run that publishes
    span = time.monotonic() - t0
    counts = {"trials": 0, "losses": 0, "finished_first": 0, "interrupted_previous_kept": 0,
              "interrupted_new_in_place": 0, "message_untrue": 0}
    limit = "4"                                  # the time limit of the results in place
    for k in range(n):
        before = _summary_id(out)
        other = "4" if limit == "5" else "5"        # other results than those in place: they are published
        proc = synth(out, "--force", "--time-limit", other, wait=False)
        time.sleep(rng.uniform(0.5 * span, 1.1 * span))
        proc.send_signal(signal.SIGINT if k % 2 else signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        new = _summary_id(out) != before
        limit = other if new else limit
        said = lines[-1] if proc.returncode == 130 and len(lines) == 1 else ""
        kind = ("finished_first" if proc.returncode == 0 else
                "interrupted_previous_kept" if said == "synthesize: interrupted; previous results kept" else
                "interrupted_new_in_place" if said.startswith("synthesize: interrupted after its results were in place")
                else "")
        true = (kind == "finished_first" and new) or (kind == "interrupted_previous_kept" and not new) or (
            kind == "interrupted_new_in_place" and new)
        counts["trials"] += 1
        if kind:
            counts[kind] += 1
        counts["message_untrue"] += bool(kind) and not true
        if not (kind and true and "Traceback" not in err and complete(out)):
            counts["losses"] += 1
            LOSSES.append(f"signal trial {k}: exit {proc.returncode}, {'complete' if complete(out) else 'INCOMPLETE'}"
                          f" {'new' if new else 'previous'} results, stderr ends {' / '.join(lines[-3:])[-300:]!r}")
    return counts


def disk_full_trials(base: Path) -> dict:
    mnt = base / "small"
    mnt.mkdir()
    counts = {"trials": 0, "losses": 0, "refused_in_one_line": 0}
    for size_kb in (16, 64, 128, 256, 512, 1024):
        try:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mnt)], check=True,
                           capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            return {"skipped": "this machine does not let us mount a tmpfs"}
        try:
            for earlier in (False, True):
                out = mnt / "out"
                if earlier:
                    shutil.rmtree(out, ignore_errors=True)
                    rc0 = synth(out)[0]
                    if rc0 != 0:
                        continue                       # earlier results do not fit at all
                    old = snapshot(sorted(out.rglob("*")))
                counts["trials"] += 1
                rc, _, err = synth(out, "--force")
                lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("\u280b", " "))]
                if rc == 0:
                    ok = complete(out)
                else:
                    ok = rc == 2 and "Traceback" not in err and (not earlier or snapshot(sorted(out.rglob("*"))) == old)
                    counts["refused_in_one_line"] += "No space left" in err and len(lines) <= 2
                counts["losses"] += not ok
        finally:
            subprocess.run(["umount", str(mnt)], capture_output=True)
    return counts


def concurrent_trials(base: Path, n: int) -> dict:
    counts = {"trials": 0, "losses": 0, "runs_refused_busy": 0}
    for k in range(n):
        out = base / f"conc{k}" / "out"
        procs = [synth(out, "--force", wait=False) for _ in range(3)]
        results = [(p.wait(), p.stderr.read()) for p in procs]
        counts["trials"] += 1
        counts["runs_refused_busy"] += sum(1 for rc, err in results if rc == 2)
        bad = any(rc not in (0, 2) or "Traceback" in err for rc, err in results)
        counts["losses"] += bad or not complete(out)
    return counts


def symlink_trials(base: Path) -> dict:
    counts = {"trials": 0, "losses": 0}
    # the results folder is a symlink to the user's folder: written through, nothing else touched
    real = base / "real"
    real.mkdir()
    (real / "MYNOTE.txt").write_text("mine")
    link = base / "linked"
    link.symlink_to(real)
    rc, _, err = synth(link)
    counts["trials"] += 1
    counts["losses"] += (real / "MYNOTE.txt").read_text() != "mine" or "Traceback" in err
    # a result file replaced by a symlink to a user's file: the user's file stays as it was
    out = base / "sym" / "out"
    assert synth(out)[0] == 0
    victim = base / "sym" / "victim.txt"
    victim.write_text("do not overwrite")
    (out / "report.md").unlink()
    (out / "report.md").symlink_to(victim)
    rc, _, err = synth(out, "--force")
    counts["trials"] += 1
    counts["losses"] += victim.read_text() != "do not overwrite" or "Traceback" in err
    # .current replaced by a real folder holding a user's file
    (out / ".current").unlink(missing_ok=True)
    (out / ".current").mkdir()
    (out / ".current" / "MYNOTE.txt").write_text("mine")
    rc, _, err = synth(out, "--force")
    counts["trials"] += 1
    counts["losses"] += (out / ".current" / "MYNOTE.txt").read_text() != "mine" or "Traceback" in err
    return counts


#: (command, argv) run under the cap: host sweeps around the cap (admitted or refused by the
#: admission check), sim sweeps of many ranks (refused before building by their schedules' estimate)
MEMORY_CASES = [("sweep", [c, "-b", "32M", "-e", "128M", "-f", "2", "-g", "8", "-n", "1", "-w", "0"])
                for c in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter",
                          "alltoall")] + [
    ("sweep", ["all_reduce", "-b", "1G", "-e", "1G", "-g", "1"]),
    ("sweep", ["all_reduce", "-b", "8M", "-e", "32M", "-f", "2", "-g", "4", "-n", "1", "-w", "0"]),
    ("sweep", ["all_reduce", "-b", "8", "-e", "8", "-g", "512", "--backend", "sim"]),
    ("sweep", ["all_reduce", "-b", "8", "-e", "8", "-g", "1024", "--backend", "sim"]),
    ("sweep", ["alltoall", "-b", "8", "-e", "1M", "-f", "64", "-g", "256", "--backend", "sim"]),
    ("sweep", ["all_gather", "-b", "8", "-e", "4G", "-f", "16", "--backend", "sim", "--topology", "dgx-h100",
               "--nodes", "16"]),
    ("simulate", ["--topology", "dgx-h100", "--nodes", "16", "--collective", "allreduce", "--baseline", "nccl"]),
    ("simulate", ["--topology", "full:256", "--collective", "alltoall", "--baseline", "direct"]),
    ("synthesize", ["--topology", "full:16", "--collectives", "allreduce,allgather", "--time-limit", "2"]),
    ("topo-probe", ["--topology", "dgx-h100", "--nodes", "4"])]


def memory_trials(cap_mib: int, base: Path) -> tuple[list[str], int]:
    """Every :data:`MEMORY_CASES` command under ``ulimit -v cap_mib`` MiB: a markdown table row
    each (exit, seconds, last stderr line) and the count of failures (exit 2 without exactly one
    line on stderr, any other non-zero exit, or a traceback)."""
    import resource

    def capped():
        resource.setrlimit(resource.RLIMIT_AS, (cap_mib << 20, cap_mib << 20))
    bins = Path(sys.executable).parent
    rows, failures = [], 0
    for k, (tool, argv) in enumerate(MEMORY_CASES):
        extra = ["--out", str(base / f"m{k}"), "--no-progress"] if tool == "synthesize" else []
        t0 = time.monotonic()
        proc = subprocess.run([str(bins / tool), *argv, *extra], cwd=base, capture_output=True, text=True,
                              check=False, preexec_fn=capped, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=1200)
        err = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        ok = "Traceback" not in proc.stderr + proc.stdout and (proc.returncode == 0 or (
            proc.returncode == 2 and len(err) == 1))
        failures += not ok
        last = (err[-1] if err else "").replace("|", "/")[:140]
        rows.append(f"| `{tool} {' '.join(argv)}` | {proc.returncode} | {time.monotonic() - t0:.1f} | "
                    f"{'ok' if ok else 'FAILED'} | {last} |")
    return rows, failures


def memory_section(cap_mib: int) -> tuple[str, int]:
    """The memory cases' section of the results (markdown) and its failure count."""
    base = Path(tempfile.mkdtemp(prefix="topocoll-memory-"))
    try:
        rows, failures = memory_trials(cap_mib, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    lines = [MEMORY_SECTION.strip(), "",
             (f"Made by `python benchmarks/fault_campaign.py --memory {cap_mib}`: each command under an "
              f"address-space cap of {cap_mib} MiB (`ulimit -v`, RLIMIT_AS), as the console scripts run. It must exit "
              "0, or 2 with one line (the admission check's refusal before allocating, or 'out of memory' past "
              "what it estimates), never a traceback."), "",
             "| command | exit | seconds | verdict | last line on stderr |", "|---|---|---|---|---|", *rows, "",
             f"Failures: {failures} of {len(rows)}."]
    return "\n".join(lines) + "\n", failures


def buffer_section(calls: int, seed: int) -> tuple[str, int]:
    """The buffer-misuse campaign's section of the results (markdown) and its failure count."""
    sys.path.insert(0, str(ROOT / "tests"))
    from _buffer_misuse import run_campaign  # a test helper: tests/ is on the path only here

    res = run_campaign(calls, seed)
    counts, draws = res["counts"], res["draws"]
    kinds = ("silent wrong answers", "generic exceptions", "other failures")
    lines = [BUFFER_SECTION.strip(), "",
             (f"Made by `python benchmarks/fault_campaign.py --buffers {calls} --seed {seed}` in {counts['cpu_s']} s "
              "of CPU (`tests/_buffer_misuse.py`; CI runs the same campaign, 10,000 calls, in "
              "`tests/kernels/comm/test_buffer_misuse_campaign.py`)."), "",
             ("Each call answers NumPy's reference (within the dtype's reduction bound; no other byte of any array "
              "changed) or refuses with one line (a TopocollError, no byte changed); a call whose every draw is "
              "valid must answer, one with a draw no answer can honour must refuse."), "",
             "| outcome | calls |", "|---|---|", f"| calls (repeats included) | {counts['calls']} |",
             f"| answered, NumPy's reference | {counts['answered'] - counts['failures']} |",
             f"| refused in one line | {counts['refused']} |"]
    lines += [f"| {k} | {counts[k]} |" for k in kinds]
    lines += ["", "Draws (calls drawing each; a call draws a layout and up to two more):", "",
              "| draw | calls |", "|---|---|"] + [f"| {k} | {v} |" for k, v in sorted(draws.items())]
    lines += [""] + [f"- {f}" for f in res["failures"][:20]]
    return "\n".join(lines).rstrip() + "\n", counts["failures"]


def write_section(out: Path, text: str, buffers: bool = False, heading: str | None = None) -> None:
    """Replace one of the file's parts (folder faults first, then the buffer and memory sections,
    each starting at its ``## `` heading): ``heading`` names it (``buffers``: the buffer section),
    none the folder part."""
    heading = BUFFER_SECTION if buffers else heading
    headings = (BUFFER_SECTION, MEMORY_SECTION)
    parts, key = {None: []}, None
    for line in (out.read_text() if out.exists() else "").splitlines(keepends=True):
        if "\n" + line.rstrip("\n") + "\n" in headings:
            key = "\n" + line.rstrip("\n") + "\n"
            parts[key] = []
        parts.setdefault(key, []).append(line)
    parts = {k: "".join(v).strip("\n") for k, v in parts.items()}
    parts[heading] = text.strip("\n")
    atomic_write_text(out, "\n\n".join(parts[h] for h in (None, *headings) if parts.get(h)) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=40)
    ap.add_argument("--concurrent", type=int, default=5)
    ap.add_argument("--signals", type=int, default=40, help="SIGINT/SIGTERM trials near the end of a run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--buffers", type=int, metavar="N", help="run the buffer-misuse campaign (N calls) instead")
    ap.add_argument("--memory", type=int, metavar="MIB", help="run the memory cases under a cap of MIB MiB instead")
    ap.add_argument("--out", default="results/robustness/faults.md")
    args = ap.parse_args(argv)
    if args.memory is not None:
        text, failures = memory_section(args.memory)
        write_section(Path(args.out), text, heading=MEMORY_SECTION)
        print(text)
        return 1 if failures else 0
    if args.buffers is not None:
        text, failures = buffer_section(args.buffers, args.seed)
        write_section(Path(args.out), text, buffers=True)
        print(text)
        return 1 if failures else 0
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="topocoll-faults-"))
    t0 = time.monotonic()
    try:
        table = {"kill -9 at a random instant of synthesize --force": kill_trials(base, args.kills, rng),
                 "SIGINT/SIGTERM in the second half of synthesize --force": signal_trials(base, args.signals, rng),
                 "disk full (tmpfs of 16 KiB-1 MiB), with and without earlier results": disk_full_trials(base),
                 "3 concurrent runs into one folder": concurrent_trials(base, args.concurrent),
                 "symlinked folder, symlinked result file, a user's .current": symlink_trials(base)}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    lines = ["# Fault campaign: synthesize's result folders", "",
             f"Made by `python benchmarks/fault_campaign.py --kills {args.kills} --concurrent {args.concurrent} "
             f"--signals {args.signals} --seed {args.seed}` in {time.monotonic() - t0:.0f} s "
             f"(`synthesize {' '.join(ARGS)}` into temporary folders).", "",
             "A loss: after the next ordinary run, neither complete earlier nor complete new results; a file we "
             "did not write changed; a failing run exiting 0 or with a traceback; a killed run's leftovers "
             "still there after the next run.", "", "| fault | counts |", "|---|---|"]
    total = 0
    for what, counts in table.items():
        total += int(counts.get("losses", 0))
        lines.append(f"| {what} | {', '.join(f'{k} {v}' for k, v in counts.items())} |")
    lines += ["", f"Losses in all: {total}."] + ([""] + [f"- {x}" for x in LOSSES] if LOSSES else [])
    write_section(Path(args.out), "\n".join(lines) + "\n", buffers=False)
    print("\n".join(lines))
    return 1 if total else 0


if __name__ == "__main__":
    raise SystemExit(main())

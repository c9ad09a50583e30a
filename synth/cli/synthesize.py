"""``synthesize``: verified schedules, a size-based plan and a report for a machine's topology.

With no ``--topology`` it probes this machine; with no GPU it uses the embedded default
(:data:`DEFAULT_TOPOLOGY`) and says so.

``--out`` must be a new or empty folder or one holding earlier ``synthesize`` results; other
files there are never touched (:mod:`synth.pipeline.output`).  Ctrl-C or SIGTERM stop the run
within about a second: ``interrupted; previous results kept``, exit 130, nothing left behind (a
signal after the new results were put in place says so: ``interrupted after its results were in
place``, exit 130).
Bad input: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from pathlib import Path
from typing import NamedTuple

from synth.ir.collectives import COLLECTIVES, canonical
from topo_probe.cli.exits import OneLineParser, signals_interrupt, stdout_gone, stdout_may_close
from topo_probe.cli.options import add_machine_arguments, check_host_counts
from topo_probe.errors import TopocollError, UsageError

DEFAULT_TOPOLOGY = "dgx1-v100"


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="synthesize", description=__doc__.splitlines()[0])
    p.add_argument("--topology", help="preset name, topology JSON, `nvidia-smi topo -m` text, NCCL XML or "
                                      "link-matrix JSON (default: probe this machine)")
    p.add_argument("--gpus", help="use only these GPUs, e.g. 0,2-5 (renumbered from 0)")
    p.add_argument("--collectives", default="all", help="all, or a comma list such as allgather,allreduce")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="solver budget per collective in seconds (default 60)")
    p.add_argument("--root", type=int, default=0, help="root rank for broadcast/reduce/gather/scatter")
    p.add_argument("--out", help="output folder: new, empty or holding earlier results of synthesize "
                                 "(default results/<topology name, shell-safe>, e.g. results/dgx1-v100-gpus0-4 for --gpus 0-4)")
    p.add_argument("--force", action="store_true",
                   help="redo even if results made with the same topology and options exist "
                        "(other files are never touched)")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.add_argument("--verbose", action="store_true", help="print every collective's time per stage")
    p.add_argument("--nccl-tuner-conf", type=Path, metavar="FILE",
                   help="also write a CSV for NCCL's example tuner plugin (NCCL 2.30.3+, NCCL_TUNER_CONFIG_FILE): "
                        "lines change NCCL's choice only where the NCCL model predicts it beaten; every other "
                        "query keeps NCCL's choice and channels (NVIDIA machines only: RCCL cannot load it; an "
                        "existing FILE is replaced only if synthesize wrote it or it is empty)")
    p.add_argument("--nccl-version", metavar="X.Y[.Z]", help="the NCCL the plan compares with, its patch kept "
                   "(default: the one this machine has installed when probing it, else 2.28)")
    p.add_argument("--msccl-runtime", choices=("rccl", "msccl-executor-nccl"),
                   help="the MSCCL runtime msccl/ is built and checked for (default: rccl where the GPUs are AMD, "
                        "msccl-executor-nccl otherwise); recorded in summary.json")
    add_machine_arguments(p)
    return p


def _collectives(text: str) -> tuple[str, ...]:
    if text.strip().lower() == "all":
        return COLLECTIVES
    names = tuple(dict.fromkeys(canonical(c) for c in text.split(",") if c.strip()))
    if not names:
        raise UsageError(f"--collectives {text!r} names no collective; give 'all' or e.g. allgather,allreduce")
    return names


def _topology(args) -> tuple:
    """``(topology, machine as typed)``: ``--topology`` loaded (or this machine probed) and cut to ``--gpus`` once,
    then shaped by the machine flags; the :class:`_AsTyped` made from the same reading."""
    from topo_probe.cli.options import apply_machine_arguments
    topo, typed = _base_topology(args)
    return apply_machine_arguments(topo, args), typed


def _base_topology(args) -> tuple:
    from topo_probe.load import load_topology, parse_gpu_list
    gpus = tuple(parse_gpu_list(args.gpus)) if args.gpus is not None else None
    spec, found = args.topology, None
    if not spec:
        from topo_probe.probes import probe_machine
        found, reasons = probe_machine()
        if found is None:
            print(f"no GPUs ({'; '.join(reasons) or 'nothing found'}): using the embedded default topology "
                  f"'{DEFAULT_TOPOLOGY}' (choose another with --topology PRESET|FILE)")
            spec = DEFAULT_TOPOLOGY
    typed = _as_typed(args, spec, gpus)
    if spec:
        return load_topology(spec, gpus=list(gpus) if gpus is not None else None), typed
    return (found.subset(gpus) if gpus else found), typed


class _AsTyped(NamedTuple):
    """The machine ``synthesize`` used, as the user named it: ``options`` (``--topology SPEC`` where
    given or where probing found no GPU, ``--host-path-class``, ``--nccl-version`` where set),
    ``gpus``, the ``--gpus`` list (GPU i of the topology used is the machine's ``gpus[i]``; None: all), and
    ``probed``: the machine is this one, found by probing (its installed NCCL is then the one to plan against)."""

    options: tuple = ()
    gpus: tuple | None = None
    probed: bool = False


def _as_typed(args: argparse.Namespace, spec: str | None, gpus: tuple | None) -> _AsTyped:
    """The :class:`_AsTyped` of a run that loaded ``spec`` (None: probed this machine) cut to ``gpus``."""
    options = [*(("--topology", spec) if spec else ()),
               *(("--host-path-class", args.host_path_class) if getattr(args, "host_path_class", None) else ()),
               *(("--nccl-version", args.nccl_version) if args.nccl_version else ())]
    return _AsTyped(tuple(options), gpus, probed=not spec)


def _remedy(gpus, typed: _AsTyped) -> tuple[str, str]:
    """``(command, GPUs)``: the command that writes a tuner file for one host's ``gpus`` (GPUs of the
    topology synthesize used, renumbered from 0 by ``--gpus``) as the user would type it, and those
    GPUs in the machine's own numbering (``4,5,6,7`` for GPUs 2-5 after ``--gpus 2-7``)."""
    mine = ",".join(map(str, (typed.gpus[g] for g in gpus) if typed.gpus is not None else gpus))
    return shlex.join(["synthesize", *typed.options, "--gpus", mine, "--nccl-tuner-conf", "FILE"]), mine


def _write_tuner_conf(topo, path: Path, version: tuple | None = None, typed: _AsTyped | None = None) -> None:
    """Write the tuner file for ``topo``; ``typed`` (default: ``--topology`` ``topo``'s name, a
    preset's) names the machine in the command a warning prints."""
    from synth.model.nccl.tuner_config import tuner_lines, tuner_models, write_tuner_config
    from synth.model.nccl.tuner_shapes import comm_shapes
    typed = typed or _AsTyped(("--topology", topo.name))
    on, off = tuner_models(topo, version)
    lines = tuner_lines(on, off, shapes=comm_shapes(topo, version))
    m = on.machine
    warned = [line for line in lines if line.worst]
    ratio, gpus = max(line.worst for line in warned) if warned else (1.0, ())
    command, mine = _remedy(gpus, typed)
    write_tuner_config(path, lines, comment=(
        f"synthesize --nccl-tuner-conf for {topo.name} ({m.ranks} ranks, {m.nodes} node(s)).\n"
        f"For NCCL's example tuner plugin as built from NCCL 2.30.3 or later (plugins/tuner/example); "
        f"the 2.27.5-2.29.x builds crash at the first matching line.\n"
        f"Use: NCCL_TUNER_PLUGIN=<path to libnccl-tuner-example.so> NCCL_TUNER_CONFIG_FILE={path}"
        + (f"\nWARNING lines name GPUs of {topo.name}; a file for a job on the worst of them: {command}"
           if warned else "")))
    helps, shared = (sum(line.kind == kind for line in lines) for kind in ("help", "shared"))
    print(f"wrote {path} ({len(lines)} lines for NCCL's example tuner plugin; NCCL's modelled choice changed by "
          f"{helps} help lines, faster, and {shared} shared, one pair for GPU subsets whose choices differ)")
    if warned:                      # the file's WARNING comments, said where a user reads
        ranks = ", ".join(map(str, sorted({line.ranks for line in warned})))
        print(f"warning: {len(warned)} lines (for {ranks} GPUs of one host) are up to {ratio:.2f}x slower than "
              f"NCCL's own pick (modelled) on some GPU subset, worst on GPUs {mine}: a line names a "
              f"GPU count, not GPUs; for a job on a few GPUs write a file for them: {command}")


def _check(args: argparse.Namespace) -> None:
    if not (math.isfinite(args.time_limit) and args.time_limit > 0):
        raise UsageError(f"--time-limit must be a positive number of seconds, got {args.time_limit:g}")
    if args.root < 0:
        raise UsageError(f"--root must be a rank (0 or more), got {args.root}")
    if args.out is not None and not args.out.strip():
        raise UsageError("--out must name a folder")
    check_host_counts(args)             # --nodes / --hosts-per-leaf, before a topology is loaded or probed


def main(argv: list[str] | None = None) -> int:
    """Run ``synthesize``: 0 done, 2 bad input, 130 interrupted (Ctrl-C or SIGTERM)."""
    where: dict = {}
    signalled: dict = {}
    try:
        with signals_interrupt() as signalled, stdout_may_close():
            status = _main(argv, where)
            if signalled["raised"]:      # the interrupt landed in a clean-up callback, which swallowed it
                raise KeyboardInterrupt
            return status
    except BrokenPipeError:
        return stdout_gone()
    except BaseException as e:
        # the interrupt may come back as another exception: C code (an extension's import, a
        # plot's layout) that is interrupted turns the KeyboardInterrupt into its own error
        if not isinstance(e, KeyboardInterrupt) and not signalled.get("raised"):
            raise
        print(f"synthesize: {interrupted_line(where)}", file=sys.stderr)
        return 130


def _summary_id(out: Path) -> tuple | None:
    """Which ``summary.json`` is in place in ``out`` (device, inode, mtime; None: none): publishing
    a run's results puts a new file there, keeping the previous results does not."""
    try:
        st = os.stat(Path(out) / "summary.json")
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def interrupted_line(where: dict) -> str:
    """What an interrupted run says about ``where["out"]``, from what is there now against what was
    there when the run began (``where["before"]``): this run's complete results (the signal came
    after they were put in place), the previous results intact, or nothing."""
    out = where.get("out")
    now = _summary_id(out) if out is not None else None
    if now is None:
        return "interrupted; nothing written"
    if now != where.get("before"):
        return f"interrupted after its results were in place; {out}/ holds this run's complete results"
    return "interrupted; previous results kept"


def _main(argv: list[str] | None, where: dict | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        _check(args)
        from synth.pipeline.output import folder_name
        from synth.pipeline.synthesize import SynthesisOptions, run
        from synth.model.nccl.installed import resolve_nccl_version
        topo, typed = _topology(args)
        version, said = resolve_nccl_version(args.nccl_version, probed=typed.probed)
        opts = SynthesisOptions(collectives=_collectives(args.collectives), time_limit_s=args.time_limit,
                                root=args.root, progress=not args.no_progress, verbose=args.verbose,
                                msccl_runtime=args.msccl_runtime, nccl_version=version)
        out = Path(args.out) if args.out is not None else Path("results") / folder_name(topo.name)
        if where is not None:                   # for the line an interrupt prints
            where["out"], where["before"] = out, _summary_id(out)
        if args.nccl_tuner_conf is not None:
            _check_tuner_conf(args.nccl_tuner_conf, out)
            from synth.model.nccl.tuner_config import tuner_models
            tuner_models(topo, version)         # AMD machines, NCCL < 2.28: refused before any work, with why
        if version is not None:
            print(f"planning against NCCL {'.'.join(map(str, version))}'s rules ({said})")
        summary = run(topo, out, opts, force=args.force)
    except TopocollError as e:
        print(f"synthesize: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    except OSError as e:  # reading or tidying the folder failed; a failed write of results is a TopocollError
        if isinstance(e, BrokenPipeError):
            raise
        print(f"synthesize: {_os_error(e)}", file=sys.stderr)
        return 2
    if args.nccl_tuner_conf is not None:
        try:
            _write_tuner_conf(topo, args.nccl_tuner_conf, opts.nccl_version, typed)
        except (OSError, TopocollError) as e:
            why = _os_error(e) if isinstance(e, OSError) else str(e).splitlines()[0]
            print(f"synthesize: {why}; the results in {out}/ are complete, the tuner file was not written",
                  file=sys.stderr)
            return 2
    if summary.get("reused"):
        print(f"results for {len(summary['collectives'])} collectives are in {out}/ (report.md, plan.json)")
        return 0
    if summary.get("unchanged") is not None:     # the run said so in one line
        return 0
    print(f"wrote {out}/ (plan.json, summary.json, report.md, busbw.png, schedules/, msccl/) "
          f"for {len(summary['collectives'])} collectives in {summary['total_s']:.1f} s")
    return 0


def _os_error(e: OSError) -> str:
    """``<file>: <why>``, or ``<why>`` where the error names no file."""
    return f"{e.filename}: {e.strerror or e}" if e.filename else f"{e.strerror or e}"


def _check_tuner_conf(path: Path, out: Path) -> None:
    """Refuse, before any work, a ``--nccl-tuner-conf`` that cannot be written as a file: a folder,
    something not a regular file, a path in a missing or read-only folder, one of the results, or an
    existing file that is not a tuner file of ours (:func:`synth.model.nccl.tuner_config.is_cover_file`)."""
    from synth.pipeline.output import ENTRIES, MARKER, VERSION_PREFIX
    flag = f"--nccl-tuner-conf {path}"
    if path.is_dir():
        raise UsageError(f"{flag} is a folder; name the file to write, e.g. {path / 'nccl_tuner.conf'}")
    if path.exists() and not path.is_file():
        raise UsageError(f"{flag} is not a regular file")
    folder = path.parent
    in_out = os.path.realpath(folder) == os.path.realpath(out)     # the results folder, made by the run
    if in_out and (path.name in ENTRIES or path.name == MARKER or path.name.startswith(VERSION_PREFIX)):
        raise UsageError(f"{flag} is one of the results synthesize writes into {out}; name another file")
    if in_out and not folder.exists():
        return
    if not folder.is_dir():
        raise UsageError(f"{flag}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{flag} cannot be written (permission denied)")
    from synth.model.nccl.tuner_config import is_cover_file
    from topo_probe.topology.serialize import check_replaceable
    check_replaceable("--nccl-tuner-conf", path, lambda head: is_cover_file(head.decode("utf-8", "replace")),
                      "a tuner file synthesize wrote")      # a user's file is never replaced


if __name__ == "__main__":      # as the console script runs (topo_probe.cli.entry.run_command)
    from synth.cli.entry import synthesize
    sys.exit(synthesize())

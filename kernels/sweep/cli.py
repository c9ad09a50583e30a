"""``sweep COLLECTIVE [flags]``: nccl-tests-style bandwidth sweeps of our schedules.

Flags with nccl-tests' meaning and defaults: ``-b/-e`` sizes (K/M/G = powers of 1024),
``-i`` step bytes, ``-f`` step factor, ``-g`` ranks, ``-n`` iterations, ``-w`` warm-up
iterations, ``-c`` check iterations (0: no validation), ``-o`` reduction, ``-d`` data type,
``-r`` root (-1: every root), ``-a`` rank time aggregation, ``-J`` JSON file.  Ours:
``--backend host|cupy|sim|mpi``, ``--topology``, ``--algo plan|nccl|ring|tree|direct|rhd|bruck|oneshot|FILE``,
``--compare A,B,...`` (one table, busbw side by side; ``--plot OUT.png`` and ``--csv`` draw and
save the curves), ``--import LOG``.

Exit status: 0 success; 1 wrong results (``# Out of bounds values`` > 0) or an average bus bandwidth
below 0.9 x ``NCCL_TESTS_MIN_BW`` (GB/s), as nccl-tests fails it; 2 bad flags or input,
or a run that could not complete (one line on stderr); 3 the backend is unavailable here (no
CuPy / GPU).

Examples
--------
``sweep all_reduce -b 8 -e 64K -f 2 -g 4`` (host, fully connected 4 ranks);
``sweep all_reduce --backend sim --topology dgx-a100 -b 8 -e 4G -f 2 --compare plan,ring,tree
--plot busbw.png``; ``sweep --import all_reduce_perf.log``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernels.sweep.output_paths import check_output_paths
from kernels.sweep.runs_header import runs_lines
from synth.cli.nccl_options import (NOT_APPLIED_OPTIONS, add_nccl_tests_options, drop_unwritten_json, flag_notes,
                                    fold_threads, given, make_config, parse_int)
from synth.formats.nccl_tests.conventions import DTYPE_NAMES, NCCL_NAMES, OP_NAMES
from synth.plan.arguments import check_algo_arg
from topo_probe.cli.exits import OneLineParser, signals_interrupt, stdout_gone
from topo_probe.cli.options import add_machine_arguments
from topo_probe.errors import DeviceUnavailable, TopocollError, UsageError


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="sweep", description="nccl-tests-style bandwidth sweeps of topocoll schedules.")
    p.add_argument("collective", nargs="?", help=f"one of {', '.join(NCCL_NAMES.values())}")
    a = p.add_argument
    add_nccl_tests_options(p, {"-o": f"{'/'.join(OP_NAMES)}/all (default sum)",
                               "-d": f"{' '.join(DTYPE_NAMES)} or all (default float)"})
    a("--backend", default="host", help="host | cupy | sim | mpi (default host; mpi under mpirun)")
    a("--topology", default=None, help="preset name or topology file (default: fully connected)")
    a("--algo", default="plan", help="plan | nccl | ring | tree | direct | rhd | bruck | oneshot | schedule FILE")
    a("--compare", default=None, help="comma-separated algorithms to sweep side by side")
    a("--plot", default=None, help="PNG of busbw vs size (an existing PNG topocoll drew or an empty file is "
                                    "replaced, any other file refused)")
    a("--csv", default=None, help="CSV of the curves (default: the PNG path with .csv)")
    a("--import", dest="import_log", default=None, help="a real nccl-tests log to read / overlay")
    add_machine_arguments(p)
    return p


#: flags a bare ``sweep --import LOG`` has no use for (it re-prints the log's own sizes and runs)
_IMPORT_IGNORES = ("-b", "-e", "-i", "-f", "-g", "-n", "-w", "-c", "-o", "-d", "-r", "-a", "-J", "--algo",
                   "--compare", "--topology", "--backend", *(o.short for o in NOT_APPLIED_OPTIONS))


def gpu_count(args) -> int | None:
    """``-g`` as a rank count (None: not given); one line for a value that is not one (every backend)."""
    ngpus = None if args.ngpus is None else parse_int(args.ngpus, "number of GPUs (-g)")
    if ngpus is not None and ngpus < 1:
        raise UsageError(f"invalid number of GPUs: -g {ngpus} (must be >= 1)")
    from topo_probe.limits import MAX_GPUS
    if ngpus is not None and ngpus > MAX_GPUS:
        raise UsageError(f"invalid number of GPUs: -g {ngpus} (at most {MAX_GPUS} ranks, as any topology)")
    return ngpus


def resolve_topology(args):
    """``(topology or None, ranks)`` from ``--topology`` and ``-g``."""
    ngpus = gpu_count(args)
    if args.topology is None:
        n = ngpus or 1
        if n == 1:
            return None, 1
        from topo_probe.machines.generators import fully_connected
        return fully_connected(n), n
    from topo_probe.cli.options import apply_machine_arguments
    from topo_probe.load import load_topology
    topo = apply_machine_arguments(load_topology(args.topology), args)
    n = ngpus or topo.num_gpus
    if n > topo.num_gpus:
        raise UsageError(f"invalid number of GPUs: -g {n} but topology {topo.name!r} has {topo.num_gpus}")
    if n < topo.num_gpus:
        topo = topo.subset(list(range(n)))
    return topo, n


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``sweep``; returns the exit status (see module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with signals_interrupt() as signalled:
            args = build_parser().parse_args(argv)
            status = _main(args, argv)
            if signalled["raised"]:      # swallowed in a clean-up callback: still interrupted
                raise KeyboardInterrupt
            return status
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except UsageError as e:
        print(f"sweep: error: {_unnamed(str(e))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # stdout closed early (sweep ... | head): the reader has what it wanted
        return stdout_gone()
    except KeyboardInterrupt:  # Ctrl-C / SIGTERM: one line, no traceback
        print("sweep: interrupted", file=sys.stderr)
        return 130
    except DeviceUnavailable as e:
        print(f"sweep: skipped: {e}", file=sys.stderr)
        return 3
    except (TopocollError, ValueError, OSError) as e:
        print(f"sweep: error: {_unnamed(str(e).splitlines()[0]) if str(e) else type(e).__name__}", file=sys.stderr)
        return 2


def _unnamed(line: str) -> str:
    """``line`` without a leading ``sweep: `` (a refusal naming its owner, the sweep): ``sweep: error:`` names it."""
    return line.removeprefix("sweep: ")


def _main(args, argv: list[str]) -> int:
    if args.backend not in ("host", "cupy", "sim", "mpi"):
        raise UsageError(f"invalid backend {args.backend!r}: expected host, cupy, sim or mpi")
    from topo_probe.cli.options import check_host_counts
    check_host_counts(args)                    # --nodes / --hosts-per-leaf, before the topology is read
    from synth.formats.nccl_tests.writer import min_bw_gbps
    args.min_bw = min_bw_gbps()                # NCCL_TESTS_MIN_BW: a bad value ends here, before any output
    drop_unwritten_json(args, "sweep")
    check_output_paths(args)
    _check_unused(args, argv)
    unused = [f for f, v in (("--plot", args.plot), ("--csv", args.csv), ("--compare", args.compare),
                             ("--import", args.import_log)) if v is not None]
    if args.backend == "mpi" and args.collective is not None and unused:     # its one table has no use for them
        raise UsageError(f"--backend mpi prints one nccl-tests table; {', '.join(unused)} would be ignored (use "
                         "--backend host or sim for them)")
    if args.backend == "mpi" and parse_int(args.nthreads, "number of threads (-t)") > 1:
        raise UsageError(f"--backend mpi runs one rank per process: -t {args.nthreads} (threads per process) "
                         "does not apply; start more processes with mpirun -n")
    fold_threads(args)
    unapplied = flag_notes(args, args.collective, argv)    # a bad number for a taken flag ends here, before any output
    if args.collective is None:
        if args.import_log is None:
            raise UsageError("missing COLLECTIVE (one of " + ", ".join(NCCL_NAMES.values()) + ")")
        ignored = [flag for flag in _IMPORT_IGNORES if given(argv, flag)]
        if ignored:
            raise UsageError(f"--import LOG alone re-prints the log as it was run; {', '.join(ignored)} would be "
                             "ignored (name a COLLECTIVE and --backend sim to model other sizes)")
        from kernels.sweep.importer import import_only
        return import_only(args.import_log, plot_path=args.plot, csv_path=args.csv)
    if args.backend == "mpi":  # one process per rank under mpirun; rank 0 prints the table
        from kernels.sweep.mpi_backend import check_launched, run_sweep_mpi
        algo = check_algo_arg(args.algo, "sweep")          # on every rank alike, one rank too, before start-up
        check_launched(gpu_count(args), args.topology)
        return run_sweep_mpi(lambda n: make_config(args, n), args.topology, algo,
                             argv=["sweep", *argv], json_path=args.output_file, notes=unapplied)
    if args.import_log is not None:
        if args.plot is None:
            raise UsageError("--import with a COLLECTIVE overlays the log on --plot OUT.png; without --plot "
                             "re-print it with: sweep --import LOG")
        from kernels.sweep.importer import read_log
        imported = read_log(args.import_log, args.collective)  # the right test of the right collective, or refuse
    if args.backend == "sim" and args.topology is None and args.ngpus is not None:
        _admit_sim(args, parse_int(args.ngpus, "number of GPUs (-g)"))   # before its 1,024-rank fabric too
    topo, n = resolve_topology(args)
    if args.import_log is not None:
        ranks = getattr(imported.log, "num_ranks", None)
        if ranks and ranks != n:            # its busbw would sit beside a curve of another machine
            raise UsageError(f"{args.import_log}: a run of {ranks} ranks; this sweep has {n} (-g or --topology)")
    cfg = make_config(args, n)
    algos = [a.strip() for a in args.compare.split(",") if a.strip()] if args.compare else [args.algo]
    if not algos:
        raise UsageError("--compare: empty list of algorithms")
    # every name checked once, before the first runs (one rank too); each selector takes its name as checked
    algos = [check_algo_arg(algo, "sweep") for algo in algos]
    if args.backend == "sim" and topo is None:
        raise UsageError("the sim backend needs at least 2 ranks (-g) or a --topology")
    if args.backend == "sim":
        cfg.check = 0  # nothing runs, nothing to validate
    if args.backend == "sim" and "nccl" in algos:   # NCCL's model of 1 GPU: no collective (synthesize's line);
        from synth.ir.collectives import check_collective_gpus   # ring / plan time a one-rank call
        check_collective_gpus(topo.name, n)
    if args.backend == "sim":           # before any schedule is built (kernels.sweep.memory.sim_need_bytes)
        _admit_sim(args, cfg.nranks)
    return sweep_and_report(cfg, topo, algos, args, argv, unapplied)


#: the machine-shape flags (:func:`topo_probe.cli.options.add_machine_arguments`), by their ``dest``
_MACHINE_FLAGS = ("nodes", "nic_gbps", "nics_per_node", "rail_optimized", "spine_oversubscription", "hosts_per_leaf",
                  "net", "host_path_class")


def _check_unused(args, argv: list[str]) -> None:
    """Refuse flags that would change nothing: a machine-shape flag without a ``--topology`` to reshape (or under
    ``--backend mpi``, which takes the topology as it is), ``--algo`` beside a ``--compare`` list without it
    (the list names the algorithms run)."""
    shape = [f"--{d.replace('_', '-')}" for d in _MACHINE_FLAGS if getattr(args, d, None) not in (None, False)]
    if shape and args.topology is None:
        raise UsageError(f"{', '.join(shape)} reshape a --topology; name one (the fully connected -g ranks have "
                         "no machine to reshape)")
    if shape and args.backend == "mpi":
        raise UsageError(f"--backend mpi takes --topology as it is; {', '.join(shape)} would be ignored")
    compared = [a.strip() for a in (args.compare or "").split(",")]
    if args.compare is not None and given(argv, "--algo") and args.algo not in compared:
        raise UsageError(f"--algo {args.algo} beside --compare {args.compare}: --compare names every algorithm run; "
                         "add it there")


def _admit_sim(args, nranks: int) -> None:
    from kernels.sweep.memory import admit_sim
    from topo_probe.limits import MAX_GPUS
    if 2 <= nranks <= MAX_GPUS:                    # other counts: resolve_topology's own one line
        admit_sim(nranks, max(1, len([a for a in (args.compare or "").split(",") if a.strip()])))


def _busy(what: str):
    """A rich spinner on stderr while ``what`` runs, only on a terminal (quiet in a pipe)."""
    import contextlib
    if not sys.stderr.isatty():
        return contextlib.nullcontext()
    from rich.console import Console
    return Console(stderr=True).status(what + " ...")


def _print(lines) -> None:
    for line in lines:
        print(line, flush=True)


def _prepare(cfg, topo, algo: str, backend_name: str):
    """``algo``'s schedule source, backend, device lines and ``#`` notes, checked before anything prints
    (an algorithm that does not apply, a sweep that cannot fit)."""
    from kernels.sweep.backends import make_backend
    from synth.sweep.driver import make_selector, schedule_at
    from synth.sweep.sim_backend import NCCL_ALGO_COLUMN

    if algo == "nccl" and backend_name != "sim":
        raise UsageError("--algo nccl is NCCL's tuner model: use --backend sim (on GPUs, run NCCL's own nccl-tests)")
    with _busy(f"preparing {algo} on {topo.name if topo is not None else '1 rank'} ({cfg.nranks} ranks)"):
        source = make_selector(cfg.collective, topo, algo)
        schedule_at(source, cfg.collective, cfg.roots()[0], 0)  # fail before printing when the algorithm does not apply
    if backend_name in ("host", "cupy"):         # a sweep that cannot fit ends here, before its header
        from kernels.sweep.memory import admit_sweep, available_gpu_bytes
        if backend_name == "host":
            admit_sweep(cfg, source, schedule_at)
        else:
            admit_sweep(cfg, source, schedule_at, available=available_gpu_bytes(), where="GPU memory")
    backend = make_backend(backend_name, source)
    if algo == "nccl":
        backend.extra_columns = NCCL_ALGO_COLUMN
    where = topo.name if topo is not None else "single rank"
    notes = ([f"sweep: {cfg.entry.nccl_name} backend {backend.name} topology {where} algo {algo}"]
             + (source.notes if source else []) + runs_lines(cfg, source, algo))
    notes += [backend.counts_note] if getattr(backend, "counts_note", None) else []     # what sim's times count
    if algo == "nccl":                   # the NCCL model's validated error for this machine class, as simulate says it
        from synth.model.nccl.confidence import confidence_line
        notes.append(confidence_line(backend.nccl.machine, collective=cfg.collective))
    return source, backend, backend.devices(cfg.nranks, topo), notes


def _one(cfg, topo, algo: str, backend_name: str, *, extra_notes=(), min_bw: float | None = None):
    """Run ``algo`` and print its nccl-tests table; returns (summary, source, devices)."""
    from synth.formats.nccl_tests import writer as output
    from synth.sweep.driver import run_sweep

    source, backend, devices, notes = _prepare(cfg, topo, algo, backend_name)
    _print(output.preamble_lines(cfg, devices, notes + list(extra_notes)))
    columns = getattr(backend, "extra_columns", ())
    _print(output.header_lines(columns))
    summary = run_sweep(cfg, backend, source, on_row=lambda row: print(output.row_line(row, columns), flush=True))
    _print(output.footer_lines(summary, min_bw=min_bw, program=output.program_name(cfg.collective)))
    return summary, source, devices


def _compared(cfg, topo, algos: list[str], backend_name: str, *, extra_notes=(), min_bw: float | None = None):
    """``--compare``: every algorithm prepared first, one preamble with all their notes (each one's NCCL
    model class line too, whichever place it has in the list), then each run and one side-by-side table;
    returns ``[(algo, summary, source, devices)]``."""
    from kernels.sweep.compare import side_by_side_lines
    from synth.formats.nccl_tests import writer as output
    from synth.sweep.driver import run_sweep

    prepared = [(algo, *_prepare(cfg, topo, algo, backend_name)) for algo in algos]
    notes = list(dict.fromkeys(n for *_, algo_notes in prepared for n in algo_notes))
    _print(output.preamble_lines(cfg, prepared[0][3], notes + list(extra_notes)))
    runs = []
    for algo, source, backend, devices, _ in prepared:
        print(f"# running {algo} ...", flush=True)
        runs.append((algo, run_sweep(cfg, backend, source), source, devices))
    _print(side_by_side_lines([a for a, *_ in runs], [s for _, s, _, _ in runs], min_bw=min_bw))
    return runs


def sweep_and_report(cfg, topo, algos: list[str], args, argv: list[str], notes=()) -> int:
    """Sweep every algorithm in ``algos`` (one table each, ``notes`` among its ``#`` lines), then write
    -J / --plot / --csv.  Status 1 when a result was wrong or an average bus bandwidth fails
    ``NCCL_TESTS_MIN_BW`` (as nccl-tests' non-zero exit)."""
    from dataclasses import replace

    from synth.formats.nccl_tests import writer as output
    from synth.sweep.driver import SweepSummary

    min_bw = getattr(args, "min_bw", None)
    json_path = output.free_json_path(args.output_file) if args.output_file else None
    if json_path is not None:
        print(output.json_output_line(json_path), flush=True)
    start = output.now()
    if len(algos) == 1:
        runs = [(algos[0], *_one(cfg, topo, algos[0], args.backend, extra_notes=notes, min_bw=min_bw))]
    else:                     # --compare: one table, the algorithms side by side
        runs = _compared(cfg, topo, algos, args.backend, extra_notes=notes, min_bw=min_bw)
    failed = sum(s.errors for _, s, _, _ in runs) + sum(output.below_min_bw(s.avg_busbw, min_bw) for _, s, _, _ in runs)
    if json_path is not None:
        merged = SweepSummary([replace(r, algorithm=f"{algo}={r.algorithm}" if len(runs) > 1 else r.algorithm)
                               for algo, s, _, _ in runs for r in s.rows])
        extra = {"backend": args.backend, "topology": topo.name if topo is not None else None,
                 "algorithms": algos}
        output.write_json(json_path, output.json_document(cfg, runs[0][3], merged, argv=["sweep", *argv],
                                                          start_time=start, extra=extra, min_bw=min_bw))
    if args.plot is not None or args.csv is not None:
        _plot(cfg, topo, runs, args)
    return 1 if failed else 0


def _plot(cfg, topo, runs, args) -> None:
    from kernels.sweep import compare

    series = []
    for algo, summary, source, _ in runs:
        label = algo if algo != "plan" or (source and source.plan) else "plan (no plan.json: best baseline)"
        series += compare.series_from_summary(label, summary)
    sizes = sorted({r.size for _, s, _, _ in runs for r in s.rows if r.size > 0})
    if topo is not None and sizes and args.backend != "host":     # a GPU fabric's bound means nothing for CPU times
        root = cfg.roots()[0]
        cost = getattr(runs[0][2], "cost", None)
        bound = compare.bound_series(runs[0][2].fabric, cfg.collective, None if root < 0 else root, sizes,
                                     cfg.nranks, params=cost.params if cost is not None else None)
        if bound is not None:
            series.append(bound)
    if args.import_log is not None:
        from kernels.sweep.importer import measured_series
        series += measured_series(args.import_log, cfg.collective)
    csv_path = Path(args.csv) if args.csv else Path(args.plot).with_suffix(".csv")
    where = topo.name if topo is not None else "1 rank"
    title = (f"{cfg.entry.nccl_name} on {where} ({cfg.nranks} ranks, {', '.join(cfg.dtypes)}, "
             f"{args.backend} backend)")
    compare.write_csv(csv_path, series)
    if args.plot is None:
        print(f"# Wrote {csv_path}", flush=True)
        return
    compare.plot(args.plot, series, title)
    print(f"# Wrote {args.plot} and {csv_path}", flush=True)


if __name__ == "__main__":  # pragma: no cover  (as the console script runs)
    from kernels.entry import sweep
    raise SystemExit(sweep())

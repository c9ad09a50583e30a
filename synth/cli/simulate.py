"""``simulate``: the sweep's ``sim`` backend (:mod:`synth.sweep.sim_backend`) under its own name,
with the lower bound beside every row.

Usage::

    simulate --topology dgx-a100 --collective allreduce [--gpus 0-3 | -g 4] [--nodes 2 ...] \\
             [--schedule FILE | --baseline nccl|ring|tree|direct|rhd|bruck|oneshot] [-r R] \\
             [-b 8] [-e 4G] [-f 2 | -i STEP] [-d float] [-J OUT.json]

It is ``sweep COLLECTIVE --backend sim --algo BASELINE|FILE -c 0``: the same nccl-tests flags with
nccl-tests' defaults (:mod:`synth.cli.nccl_options`: ``-b 32M -e 32M``, so name the range, e.g.
``-b 8 -e 4G -f 2``), the ring baseline by default, and three columns after nccl-tests' ones: ``slices``
(the pipelining the cost model chose), and the lower bound of any schedule on the fabric
(:func:`synth.model.bounds.lower_bounds` with the same efficiency factors) as a time and a busbw.  A schedule's
row counts our executor's measured fixed cost beside its modelled time, as the sweep's ``sim`` rows do (a ``# sim:``
line says so); ``--baseline nccl`` rows are the NCCL model's alone.  So against an ``--import`` log only
``--baseline nccl``'s pred/real is a prediction of the log; a schedule's is ours over the log's NCCL run (a
``# pred/real:`` line says so).
Sizes take K/M/G suffixes (powers of 1024); ``size`` and ``count`` follow nccl-tests.  A schedule
file is topocoll JSON (also ``.json.gz``) or MSCCL XML.  Bad input prints one line on stderr and
exits with status 2; an average bus bandwidth below 0.9 x ``NCCL_TESTS_MIN_BW`` (GB/s) prints ``FAILED``
and exits with status 1, as nccl-tests.
"""

from __future__ import annotations

import sys

from synth.cli.nccl_options import (add_nccl_tests_options, drop_unwritten_json, flag_notes, fold_threads, given,
                                    make_config, parse_int)
from synth.ir.collectives import ROOTED, canonical, check_collective_gpus
from topo_probe.cli.exits import OneLineParser, signals_interrupt, stdout_gone
from topo_probe.cli.options import add_machine_arguments
from topo_probe.errors import TopocollError, UsageError
from topo_probe.limits import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
from topo_probe.number_checks import check_float

#: the baselines ``--baseline`` takes
BASELINE_CHOICES = ("nccl", "ring", "tree", "direct", "rhd", "bruck", "oneshot")


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="simulate", description="nccl-tests style sweep from the cost model, with lower bounds")
    p.add_argument("--topology", required=True, help="preset, generator spec (full:16) or topology file")
    p.add_argument("--gpus", help="GPU subset, e.g. 0,2-5 (renumbered in this order)")
    p.add_argument("--collective", help="allreduce, allgather, reducescatter, ... (default: the --import log's)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--schedule", help="schedule file: topocoll JSON (.json, .json.gz) or MSCCL XML")
    src.add_argument("--baseline", choices=BASELINE_CHOICES,
                     help="baseline (default ring); nccl: what NCCL's tuner picks per size, timed by the NCCL model")
    add_nccl_tests_options(p, {"-g": "ranks: the topology's first G GPUs (default: all of them)",
                               "-r": "root rank of rooted collectives, -1 = every root (default 0; with --import: "
                                     "the log's root, required when it holds several)",
                               "-n": "timed iterations, printed as nccl-tests does (the model runs none)",
                               "-w": "warm-up iterations, printed as nccl-tests does (the model runs none)",
                               "-a": "rank times 0 rank 0, 1 mean, 2 min, 3 max: taken, no effect (the model has one "
                                     "time for every rank)",
                               "-c": "ignored: the model validates nothing (printed as 0)"})
    p.add_argument("--import", dest="import_log", metavar="LOG",
                   help="a real nccl-tests log: model exactly its sizes, collective and type, with its busbw "
                        "and pred/real beside each row (a log of several types / ops / roots: pick one with "
                        "-d / -o / -r); --baseline nccl predicts the log; a schedule or other baseline is ours "
                        "as our executor would run it, so its pred/real is ours over the log's NCCL run, not a "
                        "prediction of that run")
    p.add_argument("--cycle", metavar="K", help="with --import of an nccl-tests -N log (its sizes repeated K or more "
                   "times): compare cycle K, 1-based (default 1)")
    add_machine_arguments(p)     # its --net default here: what the --import log's NCCL INFO lines name
    p.add_argument("--nic-dma-gbps", type=float, metavar="G",
                   help="GB/s per direction one NIC moves GPU memory at, where a measurement of the host states it "
                        "(e.g. osu_mbw_mr -d cuda); the NCCL model caps the network at it (default: the line rate)")
    p.add_argument("--nccl-version", metavar="X.Y[.Z]", help="the NCCL whose rules the NCCL model follows, its "
                   "patch kept (default: the --import log's printed version, else 2.28)")
    return p


def _imported(args) -> tuple[object, dict[int, float], list] | None:
    """(run, busbw per size, rows) of ``--import``: the rows of one datatype, op and root (``-d`` / ``-o``
    / ``-r``, or the log's only ones) of one ``-N`` cycle (``--cycle``, else the first:
    :func:`~synth.formats.nccl_tests.runs.pick_rows`); fills ``--collective``, ``-d``, ``-o`` and ``-r`` from the
    log; the busbw compared is out-of-place, else in-place (:func:`~synth.formats.nccl_tests.runs.compared`: an
    in-place-only log), the first row's of a size the log prints twice in a row (nccl-tests' 16-byte blocks per
    rank round small sizes to one); the reader's notes and rows that report wrong results go to stderr."""
    if not args.import_log:
        if args.cycle is not None:
            raise UsageError("--cycle picks a cycle of an --import LOG; there is none")
        return None
    from synth.formats.nccl_tests.conventions import OP_NAMES
    from synth.formats.nccl_tests.runs import compared, guess_collective, load_nccl_tests, pick_rows
    run = load_nccl_tests(args.import_log, args.collective)
    found = guess_collective(run, args.import_log)
    if args.collective is None:
        if found is None:
            raise UsageError(f"{args.import_log}: cannot tell the collective; give --collective")
        args.collective = found
    elif found is not None and found != canonical(args.collective):
        raise UsageError(f"{args.import_log}: a {found} log, --collective is {canonical(args.collective)}")
    rooted = canonical(args.collective) in ROOTED       # an unrooted log's rows have no root to pick
    rows = pick_rows(run, args.import_log, args.datatype if given(args.argv, "-d") else None,
                     args.op if given(args.argv, "-o") else None,
                     parse_int(args.root, "root") if given(args.argv, "-r") and rooted else None,
                     cycle=None if args.cycle is None else parse_int(args.cycle, "cycle (--cycle)"),
                     collective=args.collective)
    for note in run.notes:                  # a cut-off last row left out, -N cycles: what the reader chose
        print(f"# note: {note}", file=sys.stderr)
    from synth.formats.nccl_tests.consistency import inconsistent_notes
    for line in inconsistent_notes(run, args.import_log):        # a row whose numbers disagree: a mangled copy?
        print(f"simulate: warning: {line}", file=sys.stderr)
    if rows:
        args.datatype = rows[0].type
        args.op = rows[0].redop if rows[0].redop in OP_NAMES else args.op
        args.root = next((str(r.root) for r in rows if r.root is not None), args.root)     # the log's root
    wrong = sum(1 for r in rows if run.wrong_column == "#wrong"
                and any(m is not None and (m.wrong or 0) > 0 for m in (r.out_of_place, r.in_place)))
    if wrong:
        print(f"simulate: note: {args.import_log}: {wrong} of {len(rows)} rows report #wrong > 0 (nccl-tests "
              f"found wrong results); their busbw is compared as it is", file=sys.stderr)
    real: dict[int, float] = {}
    for r in rows:
        m = compared(r)
        if m is not None and m.busbw_gbps and r.size > 0:
            real.setdefault(r.size, m.busbw_gbps)
    return run, real, rows


def _config(args, n: int):
    """The :class:`~synth.sweep.driver.SweepConfig` of the flags: the sweep's own parsing
    (:func:`synth.cli.nccl_options.make_config`), the float8 types included (modelled, not run),
    nothing validated (``-c`` is 0); ``-r`` of an unrooted collective is ignored, as nccl-tests does."""
    if args.collective is None:
        raise UsageError("the following arguments are required: --collective (or --import LOG)")
    args.backend = "sim"
    cfg = make_config(args, n)
    cfg.check = 0
    return cfg


def _machine(args, run) -> dict:
    """What the NCCL model takes from the log and the flags: the GPU architecture (device
    names), GPUs per process (``nThread`` x ``nGpus``) and threads per process (``nThread``: each enqueues its own
    ``nGpus``, the host time), the network (the log's NCCL INFO lines, unless ``--net``
    put a transport on the topology's NICs), and ``--nic-dma-gbps`` (a measured GPU-memory rate per
    NIC: :attr:`synth.model.nccl.NcclMachine.gpu_net_gbps`)."""
    # -t T -g G: one process of T x G ranks (nccl-tests v2.19.6 common.cu:901)
    out = run.machine_fields() if run is not None else {}
    if not args.net and run is not None and run.network is not None:
        out["net_kind"] = run.network.kind
    dma = getattr(args, "nic_dma_gbps", None)
    if dma is not None:     # the bandwidth rule of every CLI bandwidth flag (topo_probe.cli.options: --nic-gbps)
        out["nic_dma_gbs"] = check_float(dma, "--nic-dma-gbps", UsageError, lo=MIN_BANDWIDTH_GBPS,
                                         hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    return out


def _check_ranks(args, run, topo) -> None:
    """A log of another number of ranks than the topology's GPUs is refused (its busbw would be
    compared with a prediction for another machine)."""
    ranks = run.num_ranks
    if ranks and ranks != topo.num_gpus:
        hosts = len({d.host for d in run.devices})
        where = f" on {hosts} hosts" if hosts > 1 else ""
        raise UsageError(f"{args.import_log}: a run of {ranks} ranks{where}; --topology {topo.name} has "
                         f"{topo.num_gpus} GPUs (describe the machine with --nodes, --nics-per-node, --nic-gbps "
                         f"or --gpus)")


def _log_sizes(rows, cfg) -> tuple[int, ...]:
    """The imported rows' sizes that the sweep reproduces exactly (whole elements per block), each once (nccl-tests
    prints a size again where its 16-byte blocks per rank round two sizes to one)."""
    from synth.formats.nccl_tests.conventions import numpy_dtype
    from synth.sweep.entries import entry
    e, item = entry(cfg.collective), numpy_dtype(cfg.dtypes[0]).itemsize
    return tuple(dict.fromkeys(r.size for r in rows
                               if r.size > 0 and e.counts(r.size, item, cfg.nranks).size == r.size))


def _log_range(cfg, run, argv: list[str]) -> None:
    """The header's minBytes, maxBytes and step are the imported log's (the rows are its sizes),
    not nccl-tests' defaults for a run without -b/-e; so are its warm-up and timed iterations, unless
    ``-w`` / ``-n`` are given."""
    cfg.minbytes, cfg.maxbytes = min(cfg.size_list), max(cfg.size_list)
    if run.warmup_iters is not None and not given(argv, "-w"):
        cfg.warmup = run.warmup_iters
    if run.iters is not None and not given(argv, "-n"):
        cfg.iters = run.iters
    if run.step and run.step_kind == "factor":
        cfg.stepfactor = run.step
    elif run.step and run.step_kind == "bytes":
        cfg.stepfactor, cfg.stepbytes = 1, run.step


def _check_schedule_file(sel, args, topo, name: str) -> None:
    s = sel.file_schedule
    if s.collective != name:
        raise UsageError(f"{args.schedule} is a {s.collective} schedule, --collective is {name}")
    fp = sel.fabric.fingerprint
    if s.topology_fingerprint and s.topology_fingerprint != fp and not s.meta.get("msccl"):
        raise UsageError(f"{args.schedule} was made for topology {s.topology_name!r} "
                         f"(fingerprint {s.topology_fingerprint}), not {topo.name!r} ({fp})")
    if given(args.argv, "-r") and name in ROOTED and s.root != parse_int(args.root, "root"):
        raise UsageError(f"{args.schedule} has root {s.root}, --root is {args.root}")


def run(args) -> list[str]:
    """The output lines for parsed ``args`` (raises UsageError / TopocollError on bad input)."""
    from synth.formats.nccl_tests import writer
    from synth.model.nccl.installed import resolve_nccl_version
    from synth.sweep.driver import make_selector, run_sweep
    from synth.sweep.sim_backend import SimBackend
    from topo_probe.cli.options import apply_machine_arguments, check_host_counts
    from topo_probe.load import load_topology, parse_gpu_list

    args.argv = getattr(args, "argv", [])        # the command line as given (which flags were named)
    min_bw = writer.min_bw_gbps()                # NCCL_TESTS_MIN_BW: a bad value ends here, before any work
    drop_unwritten_json(args, "simulate")         # nccl-tests writes no such file
    fold_threads(args)
    check_host_counts(args)                       # --nodes / --hosts-per-leaf, before the topology is read
    topo = load_topology(args.topology, gpus=parse_gpu_list(args.gpus) if args.gpus is not None else None)
    topo = _first_ranks(apply_machine_arguments(topo, args), args.ngpus)
    check_collective_gpus(topo.name, topo.num_gpus)     # --gpus 0, a 1-GPU file: as synthesize
    if args.output_file:
        from pathlib import Path

        from synth.sweep.output_file import check_output_file
        check_output_file("-J", Path(args.output_file))
    imported = _imported(args)
    cfg = _config(args, topo.num_gpus)
    if imported is not None:
        _check_ranks(args, imported[0], topo)
        cfg.size_list = _log_sizes(imported[2], cfg)
        if not cfg.size_list:
            raise UsageError(f"{args.import_log}: no size of the log fits {topo.num_gpus} ranks")
        _log_range(cfg, imported[0], args.argv)
    algo = args.schedule or args.baseline or "ring"
    dma_said = getattr(args, "nic_dma_gbps", None) is not None
    if dma_said and algo != "nccl":
        raise UsageError("--nic-dma-gbps applies to the NCCL model only (--baseline nccl)")
    version, said = resolve_nccl_version(args.nccl_version, imported[0].nccl_version if imported else None)
    sel = make_selector(cfg.collective, topo, algo, plan=False)
    if args.schedule:
        _check_schedule_file(sel, args, topo, cfg.collective)
        if sel.same_bits_warning:                # a warning, not an error: the status stays what the run says
            print(f"simulate: warning: {sel.same_bits_warning}", file=sys.stderr)
    backend = SimBackend(sel, bounds=True, measured=imported[1] if imported else None, nccl_column=algo == "nccl",
                         nccl_machine=_machine(args, imported[0] if imported else None),
                         nccl_version=version)
    if dma_said and backend.nccl.machine.nodes < 2:
        raise UsageError(f"--nic-dma-gbps: {topo.name} is one host, no network to cap (describe the hosts with --nodes)")
    sched = sel.select(cfg.collective, 0, cfg.roots()[0] if cfg.collective in ROOTED else None).schedule
    p = sel.cost.params
    what = _what(args, backend, topo, sched, algo, said, imported)
    notes = [f"simulate: {cfg.collective} on {topo.name} ({topo.num_gpus} GPUs), {what}",
             f"cost model: launch {p.launch_us:.4g} us, step overhead {p.step_overhead_us:.4g} us, slice overhead "
             f"{p.slice_overhead_us:.4g} us, nvlink x{p.nvlink_efficiency:.3g}, pcie x{p.pcie_efficiency:.3g}, "
             f"network x{p.network_efficiency:.3g} (link constants shared with the NCCL model)", backend.counts_note]
    if algo == "nccl":
        from synth.model.nccl.confidence import confidence_line
        notes.append(confidence_line(backend.nccl.machine, collective=cfg.collective,
                                     version=backend.nccl.table.version))
    notes += _flag_notes(args, cfg, imported)
    from synth.model.bounds import lower_bounds
    b = lower_bounds(sel.fabric, cfg.collective, sched.root)
    notes.append(f"lower bound: {b.latency_steps} steps, {b.latency_us:g} us latency, {b.bandwidth_rounds_per_block} "
                 f"rounds per block of {sel.fabric.unit_gbps:g} GB/s ({b.method}{'' if b.exact else ', not exact'})")
    path = writer.free_json_path(args.output_file) if args.output_file else None
    lines = [writer.json_output_line(path)] if path is not None else []
    lines += writer.preamble_lines(cfg, backend.devices(cfg.nranks, topo), notes)
    lines += writer.header_lines(backend.extra_columns)
    start = writer.now()
    summary = run_sweep(cfg, backend, sel, on_row=lambda row: lines.append(writer.row_line(row, backend.extra_columns)))
    if path is not None:
        writer.write_json(path, writer.json_document(cfg, backend.devices(cfg.nranks, topo), summary,
                                                     argv=["simulate", *args.argv], start_time=start,
                                                     extra={"backend": "sim", "topology": topo.name,
                                                            "algorithms": [algo]}, min_bw=min_bw))
    args.below_min_bw = writer.below_min_bw(summary.avg_busbw, min_bw)     # main's status 1, as nccl-tests fails
    return lines + writer.footer_lines(summary, min_bw=min_bw, program=writer.program_name(cfg.collective))


def _what(args, backend, topo, sched, algo: str, said: str, imported) -> str:
    """The header's description of what is timed: NCCL as its tuner runs it (GPU, environment, version
    rules, and across hosts the network and where it was read) or our schedule."""
    env = backend.nccl.env.describe() or "NCCL defaults"
    platform = backend.nccl.platform_env if algo == "nccl" else {}
    if platform:                                         # what the network plugin or its profile sets (the user wins)
        env += ", under the platform's " + " ".join(f"{k}={v}" for k, v in sorted(platform.items()))
    what = (f"NCCL as its tuner runs it ({backend.nccl.machine.arch}, {env}, "
            f"NCCL {'.'.join(map(str, backend.nccl.table.version))} rules: {said})"
            if algo == "nccl" else f"schedule {sched.name or '?'} ({sched.num_steps} steps, {sched.chunks_per_rank} "
            f"chunks per rank)")
    m = backend.nccl.machine if algo == "nccl" else None
    if m is not None and m.nodes > 1:
        said = imported[0].network if imported and not args.net else None
        nics_say = any(topo.graph.nodes[n].get("transport") for n in topo.nodes_of_kind("nic"))
        src = (f"the log: {said.evidence}" if said is not None else "--net" if args.net
               else "the topology's NICs" if nics_say else "default")
        what += f"; network {m.net_kind} ({src})"
        if m.nic_dma_gbs > 0 and m.gpu_net_gbps < m.used_net_gbps:   # only when it binds
            what += f", GPU memory at {m.nic_dma_gbs:g} GB/s per NIC (--nic-dma-gbps)"
    return what


def _flag_notes(args, cfg, imported) -> list[str]:
    """The notes on what the flags and the ``--import`` log ask that the model does otherwise: nccl-tests flags
    taken but not applied, ``-r`` of an unrooted collective, ``-o all``'s mulsum, the log's launches and sizes."""
    notes = flag_notes(args, cfg.collective, args.argv)
    if imported:
        notes += [_log_launch_note(imported[0]), _dropped_sizes_note(imported[2], cfg), _pred_real_note(args)]
    return [n for n in notes if n]


def _pred_real_note(args) -> str | None:
    """What ``pred/real`` compares where ours meets an ``--import`` log: a schedule's row is our schedule as our
    executor would run it (its fixed cost counted, :mod:`synth.sweep.sim_backend`), so its ratio is ours over the
    log's NCCL run, not the model's error on it; None under ``--baseline nccl``, whose row predicts the log."""
    if args.baseline == "nccl":
        return None
    name = args.baseline or (f"schedule {args.schedule}" if args.schedule else "ring")
    return (f"pred/real: {name} is our schedule as our executor would run it (executor fixed cost counted) over the "
            f"log's NCCL run, not a prediction of that run (--baseline nccl predicts the log)")


def _dropped_sizes_note(rows, cfg) -> str | None:
    """A note naming the log's sizes that today's nccl-tests rule cannot give (whole 16-byte blocks per rank of a
    divided collective, :func:`synth.formats.nccl_tests.conventions.block_counts`; an nccl-tests before v2.13.12
    cut them otherwise), which are left out of the prediction."""
    sizes = sorted({r.size for r in rows if r.size > 0} - set(cfg.size_list))
    if not sizes:
        return None
    return (f"{len(sizes)} of the log's sizes (first {sizes[0]} B) are not whole 16-byte blocks per rank, as nccl-tests "
            f"cuts them since v2.13.12: not predicted")


def _log_launch_note(run) -> str | None:
    """A note when the imported log's parameter line says its calls were launched otherwise than one
    plain launch each (nccl-tests ``graph: G`` > 0: a CUDA graph of the iterations; ``agg iters: M`` > 1:
    M operations per launch), which the model does not time."""
    how = [f"graph: {run.graph} (-G, CUDA graph launches)" if run.graph else "",
           f"agg iters: {run.agg_iters} (-m, operations per launch)" if (run.agg_iters or 1) > 1 else ""]
    how = [h for h in how if h]
    return (f"the log ran with {', '.join(how)}; the model times one plain launch per call, so its small sizes "
            f"may read slower than the log's") if how else None


def _first_ranks(topo, ngpus: str | None):
    """``-g G``: the topology's first ``G`` GPUs (at least 2: the model times a collective)."""
    if ngpus is None:
        return topo
    g = parse_int(ngpus, "number of GPUs (-g)")
    if not 2 <= g <= topo.num_gpus:
        raise UsageError(f"invalid number of GPUs: -g {g}; topology {topo.name!r} has {topo.num_gpus} "
                         f"(the model needs at least 2)")
    return topo if g == topo.num_gpus else topo.subset(list(range(g)))


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``simulate``; returns the exit status (0; 1 when the modelled average bus bandwidth is
    below 0.9 x ``NCCL_TESTS_MIN_BW``, as nccl-tests fails; 2 on bad input)."""
    try:
        with signals_interrupt() as signalled:
            argv = list(sys.argv[1:] if argv is None else argv)
            args = build_parser().parse_args(argv)
            args.argv = argv
            lines = run(args)
            if signalled["raised"]:      # swallowed in a clean-up callback: still interrupted
                raise KeyboardInterrupt
            print("\n".join(lines))
            sys.stdout.flush()
            if getattr(args, "below_min_bw", False):     # the average busbw fails NCCL_TESTS_MIN_BW
                return 1
    except BrokenPipeError:  # `simulate ... | head -2`: the reader has what it wanted
        return stdout_gone()
    except KeyboardInterrupt:  # Ctrl-C / SIGTERM: one line, no traceback
        print("simulate: interrupted", file=sys.stderr)
        return 130
    except (TopocollError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"simulate: error: {msg}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover  (as the console script runs)
    from synth.cli.entry import simulate
    sys.exit(simulate())

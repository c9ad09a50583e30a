"""``simulate``: the sweep's ``sim`` backend under its own name, with the lower bound beside
every row.

Usage::

    simulate --topology dgx-a100 --collective allreduce [--gpus 0-3] [--nodes 2 ...] \\
             [--schedule FILE | --baseline nccl|ring|tree|direct|rhd|bruck|oneshot] [--root R] \\
             [-b 8] [-e 4G] [-f 2 | -i STEP] [-d float]

It is ``sweep COLLECTIVE --backend sim --algo BASELINE|FILE -c 0`` with simulate's defaults
(``-b 8 -e 4G -f 2``, the ring baseline) and three columns after nccl-tests' ones: ``slices``
(the pipelining the cost model chose), and the lower bound of any schedule on the fabric
(:func:`synth.model.bounds.lower_bounds` with the same efficiency factors) as a time and a busbw.
Sizes take K/M/G suffixes (powers of 1024); ``size`` and ``count`` follow nccl-tests.  A schedule
file is topocoll JSON (also ``.json.gz``) or MSCCL XML.  Bad input prints one line on stderr and
exits with status 2.
"""

from __future__ import annotations

import sys

from synth.formats.nccl_tests.conventions import nccl_dtype
from synth.formats.nccl_tests.sizes import parse_size as shared_parse_size
from synth.formats.nccl_tests.sizes import size_sweep
from synth.ir.collectives import ROOTED, canonical
from topo_probe.cli.exits import OneLineParser, signals_interrupt, stdout_gone
from topo_probe.cli.options import add_machine_arguments
from topo_probe.errors import TopocollError, UsageError

#: the baselines ``--baseline`` takes
BASELINE_CHOICES = ("nccl", "ring", "tree", "direct", "rhd", "bruck", "oneshot")


def parse_size(text: str) -> int:
    """Bytes for ``"8"``, ``"64K"``, ``"4G"`` (powers of 1024, like nccl-tests).

    >>> parse_size("4G"), parse_size("64k"), parse_size("8")
    (4294967296, 65536, 8)
    """
    try:
        return shared_parse_size(text)
    except ValueError:
        raise UsageError(f"bad size {text!r}: expected a number with an optional K, M or G suffix") from None


def sweep_sizes(minbytes: int, maxbytes: int, factor: int | None, step: int | None) -> list[int]:
    """The sizes nccl-tests visits: ``minbytes`` then times ``factor`` (or plus ``step``) up to ``maxbytes``.

    >>> sweep_sizes(8, 64, 2, None)
    [8, 16, 32, 64]
    """
    if minbytes > maxbytes:
        raise UsageError(f"-b {minbytes} is larger than -e {maxbytes}")
    try:
        return size_sweep(minbytes, maxbytes, step or 0, factor or 1)
    except ValueError as e:
        raise UsageError(str(e)) from None


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="simulate", description="nccl-tests style sweep from the cost model, with lower bounds")
    p.add_argument("--topology", required=True, help="preset, generator spec (full:16) or topology file")
    p.add_argument("--gpus", help="GPU subset, e.g. 0,2-5 (renumbered in this order)")
    p.add_argument("--collective", help="allreduce, allgather, reducescatter, ... (default: the --import log's)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--schedule", help="schedule file: topocoll JSON (.json, .json.gz) or MSCCL XML")
    src.add_argument("--baseline", choices=BASELINE_CHOICES,
                     help="baseline (default ring); nccl: what NCCL's tuner picks per size, timed by the NCCL model")
    p.add_argument("--root", type=int, help="root rank of rooted collectives (default 0)")
    p.add_argument("-b", "--minbytes", default="8", help="smallest size (default 8)")
    p.add_argument("-e", "--maxbytes", default="4G", help="largest size (default 4G)")
    step = p.add_mutually_exclusive_group()
    step.add_argument("-f", "--stepfactor", type=int, help="multiply the size by this (default 2)")
    step.add_argument("-i", "--stepbytes", help="add this many bytes instead of multiplying")
    p.add_argument("-d", "--datatype", default="float", help="nccl-tests type name (default float)")
    p.add_argument("--import", dest="import_log", metavar="LOG",
                   help="a real nccl-tests log: predict exactly its sizes, collective and type, with its busbw "
                        "and pred/real beside the prediction")
    add_machine_arguments(p)     # its --net default here: what the --import log's NCCL INFO lines name
    return p


def _imported(args) -> tuple[object, dict[int, float]] | None:
    """(run, busbw per size) of ``--import``; fills ``--collective`` and ``-d`` from the log."""
    if not args.import_log:
        return None
    from synth.formats.nccl_tests.runs import guess_collective, load_nccl_tests
    run = load_nccl_tests(args.import_log, args.collective)
    found = guess_collective(run, args.import_log)
    if args.collective is None:
        if found is None:
            raise UsageError(f"{args.import_log}: cannot tell the collective; give --collective")
        args.collective = found
    elif found is not None and found != canonical(args.collective):
        raise UsageError(f"{args.import_log}: a {found} log, --collective is {canonical(args.collective)}")
    if run.rows:
        args.datatype = run.rows[0].type
    real = {r.size: r.out_of_place.busbw_gbps for r in run.rows
            if r.out_of_place is not None and r.out_of_place.busbw_gbps and r.size > 0}
    return run, real


def _config(args, n: int):
    from kernels.sweep.driver import SweepConfig
    if args.collective is None:
        raise UsageError("the following arguments are required: --collective (or --import LOG)")
    name = canonical(args.collective)
    if name not in ROOTED and args.root is not None:
        raise UsageError(f"{name} takes no --root")
    try:
        dtype = nccl_dtype(args.datatype)
    except TopocollError as e:
        raise UsageError(f"-d {args.datatype!r}: {e}") from None
    lo, hi = parse_size(args.minbytes), parse_size(args.maxbytes)
    if args.stepbytes is not None:
        step, factor = parse_size(args.stepbytes), 1
        if step < 1:
            raise UsageError("-i must be at least 1 byte")
    else:
        step, factor = 0, 2 if args.stepfactor is None else args.stepfactor
        if factor < 2:
            raise UsageError(f"-f must be >= 2, got {factor}")
    sweep_sizes(lo, hi, factor if factor > 1 else None, step or None)
    root = args.root if args.root is not None else 0
    if name in ROOTED and not 0 <= root < n:
        raise UsageError(f"--root {root} is not a rank of the {n} GPUs")
    return SweepConfig(name, n, lo, hi, step, factor, iters=1, warmup=0, check=0, ops=("sum",), dtypes=(dtype,),
                       root=root)


def _machine(args, run) -> dict:
    """What the NCCL model takes from the log and the flags: the GPU architecture (device
    names), GPUs per process and the network (the log's NCCL INFO lines, unless ``--net``
    put a transport on the topology's NICs)."""
    from synth.model.nccl import arch_of_gpu_name
    out = {}
    if run is not None:
        out["gpus_per_process"] = run.n_gpus or 1
        arch = arch_of_gpu_name(run.devices[0].name) if run.devices else None
        if arch:
            out["arch"] = arch
    if not args.net and run is not None and run.network is not None:
        out["net_kind"] = run.network.kind
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


def _log_sizes(run, cfg) -> tuple[int, ...]:
    """The log's sizes that the sweep reproduces exactly (whole elements per block)."""
    from kernels.sweep.table import entry
    from synth.formats.nccl_tests.conventions import numpy_dtype
    e, item = entry(cfg.collective), numpy_dtype(cfg.dtypes[0]).itemsize
    return tuple(r.size for r in run.rows if r.size > 0 and e.counts(r.size, item, cfg.nranks).size == r.size)


def _check_schedule_file(sel, args, topo, name: str) -> None:
    s = sel.file_schedule
    if s.collective != name:
        raise UsageError(f"{args.schedule} is a {s.collective} schedule, --collective is {name}")
    fp = sel.fabric.fingerprint
    if s.topology_fingerprint and s.topology_fingerprint != fp and not s.meta.get("msccl"):
        raise UsageError(f"{args.schedule} was made for topology {s.topology_name!r} "
                         f"(fingerprint {s.topology_fingerprint}), not {topo.name!r} ({fp})")
    if args.root is not None and s.root != args.root:
        raise UsageError(f"{args.schedule} has root {s.root}, --root is {args.root}")


def run(args) -> list[str]:
    """The output lines for parsed ``args`` (raises UsageError / TopocollError on bad input)."""
    from kernels.sweep.backends import SimBackend
    from kernels.sweep.driver import make_selector, run_sweep
    from synth.formats.nccl_tests import writer
    from topo_probe.cli.options import apply_machine_arguments
    from topo_probe.load import load_topology, parse_gpu_list

    topo = load_topology(args.topology, gpus=parse_gpu_list(args.gpus) if args.gpus is not None else None)
    topo = apply_machine_arguments(topo, args)
    imported = _imported(args)
    cfg = _config(args, topo.num_gpus)
    if imported is not None:
        _check_ranks(args, imported[0], topo)
        cfg.size_list = _log_sizes(imported[0], cfg)
        if not cfg.size_list:
            raise UsageError(f"{args.import_log}: no size of the log fits {topo.num_gpus} ranks")
    algo = args.schedule or args.baseline or "ring"
    sel = make_selector(cfg.collective, topo, algo, plan=False)
    if args.schedule:
        _check_schedule_file(sel, args, topo, cfg.collective)
    backend = SimBackend(sel, bounds=True, measured=imported[1] if imported else None, nccl_column=algo == "nccl",
                         nccl_machine=_machine(args, imported[0] if imported else None),
                         nccl_version=imported[0].nccl_version[:2] if imported and imported[0].nccl_version else None)
    sched = sel.select(cfg.collective, 0, cfg.roots()[0] if cfg.collective in ROOTED else None).schedule
    p = sel.cost.params
    what = (f"NCCL as its tuner runs it ({backend.nccl.machine.arch}, {backend.nccl.env.describe() or 'NCCL defaults'})"
            if algo == "nccl" else f"schedule {sched.name or '?'} ({sched.num_steps} steps, {sched.chunks_per_rank} "
            f"chunks per rank)")
    m = backend.nccl.machine if algo == "nccl" else None
    if m is not None and m.nodes > 1:
        said = imported[0].network if imported and not args.net else None
        nics_say = any(topo.graph.nodes[n].get("transport") for n in topo.nodes_of_kind("nic"))
        src = (f"the log: {said.evidence}" if said is not None else "--net" if args.net
               else "the topology's NICs" if nics_say else "default")
        what += f"; network {m.net_kind} ({src})"
    notes = [f"simulate: {cfg.collective} on {topo.name} ({topo.num_gpus} GPUs), {what}",
             f"cost model: launch {p.launch_us:.4g} us, step overhead {p.step_overhead_us:.4g} us, slice overhead "
             f"{p.slice_overhead_us:.4g} us, nvlink x{p.nvlink_efficiency:.3g}, pcie x{p.pcie_efficiency:.3g}, "
             f"network x{p.network_efficiency:.3g} (link constants shared with the NCCL model)"]
    if algo == "nccl":
        from synth.model.nccl.confidence import confidence_line
        notes.append(confidence_line(backend.nccl.machine, collective=cfg.collective))
    from synth.model.bounds import lower_bounds
    b = lower_bounds(sel.fabric, cfg.collective, sched.root)
    notes.append(f"lower bound: {b.latency_steps} steps, {b.latency_us:g} us latency, {b.bandwidth_rounds_per_block} "
                 f"rounds per block of {sel.fabric.unit_gbps:g} GB/s ({b.method}{'' if b.exact else ', not exact'})")
    lines = writer.preamble_lines(cfg, backend.devices(cfg.nranks, topo), notes)
    lines += writer.header_lines(backend.extra_columns)
    summary = run_sweep(cfg, backend, sel, on_row=lambda row: lines.append(writer.row_line(row, backend.extra_columns)))
    return lines + writer.footer_lines(summary)


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``simulate``; returns the exit status (0, or 2 on bad input)."""
    try:
        with signals_interrupt() as signalled:
            args = build_parser().parse_args(argv)
            lines = run(args)
            if signalled["raised"]:      # swallowed in a clean-up callback: still interrupted
                raise KeyboardInterrupt
            print("\n".join(lines))
            sys.stdout.flush()
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

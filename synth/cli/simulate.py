"""``simulate``: an nccl-tests style size sweep computed by the cost model, with lower bounds.

Usage::

    simulate --topology dgx-a100 --collective allreduce [--gpus 0-3] \\
             [--schedule FILE | --baseline ring|tree|direct|rhd|bruck] [--root R] \\
             [-b 8] [-e 4G] [-f 2 | -i STEP] [-d float]

Sizes take K/M/G suffixes (powers of 1024) like nccl-tests; ``size`` and ``count`` follow
nccl-tests (size = max(send, recv) bytes of a rank, rounded down to whole elements per block;
count = elements per block).  Columns: the nccl-tests ones (time from
:class:`synth.model.cost.CostModel`), ``slices`` (the pipelining chosen), then the lower bound
(:func:`synth.model.bounds.lower_bounds` with the same efficiency factors) as time and busbw.
Bad input prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys

from synth.formats.nccl_tests.sizes import parse_size as shared_parse_size
from synth.formats.nccl_tests.sizes import size_sweep
from synth.formats.schedule_file import load_schedule
from synth.ir.collectives import COMBINING, ROOTED, canonical
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule
from synth.model.bounds import lower_bounds
from synth.model.cost import CostModel, CostParams, algbw_gbps, busbw_gbps
from topo_probe.cli.options import add_machine_arguments
from topo_probe.errors import TopocollError

#: nccl-tests data types and their sizes in bytes (``-d``), with common aliases
DTYPES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2,
          "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
_ALIASES = {"char": "int8", "int": "int32", "float16": "half", "fp16": "half", "float32": "float",
            "fp32": "float", "float64": "double", "bf16": "bfloat16"}


class _BadInput(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        raise _BadInput(message)


def parse_size(text: str) -> int:
    """Bytes for ``"8"``, ``"64K"``, ``"4G"`` (powers of 1024, like nccl-tests).

    >>> parse_size("4G"), parse_size("64k"), parse_size("8")
    (4294967296, 65536, 8)
    """
    try:
        return shared_parse_size(text)
    except ValueError:
        raise _BadInput(f"bad size {text!r}: expected a number with an optional K, M or G suffix") from None


def sweep_sizes(minbytes: int, maxbytes: int, factor: int | None, step: int | None) -> list[int]:
    """The sizes nccl-tests visits: ``minbytes`` then times ``factor`` (or plus ``step``) up to ``maxbytes``.

    >>> sweep_sizes(8, 64, 2, None)
    [8, 16, 32, 64]
    """
    if minbytes > maxbytes:
        raise _BadInput(f"-b {minbytes} is larger than -e {maxbytes}")
    try:
        return size_sweep(minbytes, maxbytes, step or 0, factor or 1)
    except ValueError as e:
        raise _BadInput(str(e)) from None


def _parser() -> _Parser:
    p = _Parser(prog="simulate", description="nccl-tests style sweep from the cost model, with lower bounds")
    p.add_argument("--topology", required=True, help="preset name or topology file")
    p.add_argument("--gpus", help="GPU subset, e.g. 0,2-5 (renumbered in this order)")
    p.add_argument("--collective", required=True, help="allreduce, allgather, reducescatter, ...")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--schedule", help="schedule JSON (topocoll.schedule v1)")
    src.add_argument("--baseline", choices=["ring", "tree", "direct", "rhd", "bruck"],
                     help="baseline schedule (default ring)")
    p.add_argument("--root", type=int, help="root rank of rooted collectives (default 0)")
    p.add_argument("-b", "--minbytes", default="8", help="smallest size (default 8)")
    p.add_argument("-e", "--maxbytes", default="4G", help="largest size (default 4G)")
    step = p.add_mutually_exclusive_group()
    step.add_argument("-f", "--stepfactor", type=int, help="multiply the size by this (default 2)")
    step.add_argument("-i", "--stepbytes", help="add this many bytes instead of multiplying")
    p.add_argument("-d", "--datatype", default="float", help="nccl-tests type name (default float)")
    add_machine_arguments(p)
    return p


def _schedule(args, topo, fabric, name: str) -> Schedule:
    root = args.root
    if args.schedule:
        sched = load_schedule(args.schedule, fabric=fabric)
        if sched.collective != name:
            raise _BadInput(f"{args.schedule} is a {sched.collective} schedule, --collective is {name}")
        if sched.ranks != fabric.num_ranks:
            raise _BadInput(f"{args.schedule} has {sched.ranks} ranks, topology {topo.name!r} has {fabric.num_ranks}")
        if sched.topology_fingerprint and sched.topology_fingerprint != fabric.fingerprint:
            raise _BadInput(f"{args.schedule} was made for topology {sched.topology_name!r} "
                            f"(fingerprint {sched.topology_fingerprint}), not {topo.name!r} ({fabric.fingerprint})")
        if root is not None and sched.root != root:
            raise _BadInput(f"{args.schedule} has root {sched.root}, --root is {root}")
        try:
            from synth.ir.verifier import check
        except ImportError:  # pragma: no cover - verifier is part of the package
            return sched
        check(sched, fabric)
        return sched
    from synth.baselines import baseline
    return baseline(args.baseline or "ring", fabric, name, root=root)


def _fmt_time(t: float) -> str:
    return f"{t:7.0f}" if t >= 10000 else f"{t:7.1f}" if t >= 100 else f"{t:7.2f}"


def run(args) -> list[str]:
    """The output lines for parsed ``args`` (raises _BadInput / TopocollError on bad input)."""
    from topo_probe.cli.options import apply_machine_arguments
    from topo_probe.load import load_topology, parse_gpu_list
    name = canonical(args.collective)
    if name not in ROOTED and args.root is not None:
        raise _BadInput(f"{name} takes no --root")
    dtype = _ALIASES.get(args.datatype, args.datatype)
    if dtype not in DTYPES:
        raise _BadInput(f"-d {args.datatype!r} is not an nccl-tests type ({', '.join(DTYPES)})")
    lo, hi = parse_size(args.minbytes), parse_size(args.maxbytes)
    if args.stepbytes is not None:
        step, factor = parse_size(args.stepbytes), None
        if step < 1:
            raise _BadInput("-i must be at least 1 byte")
    else:
        step, factor = None, 2 if args.stepfactor is None else args.stepfactor
        if factor < 2:
            raise _BadInput(f"-f must be >= 2, got {factor}")
    sizes = sweep_sizes(lo, hi, factor, step)
    topo = apply_machine_arguments(load_topology(args.topology, gpus=parse_gpu_list(args.gpus) if args.gpus else None),
                                   args)
    fabric = build_fabric(topo)
    sched = _schedule(args, topo, fabric, name)
    params = CostParams()
    model = CostModel(fabric, params)
    bound = lower_bounds(fabric, name, sched.root)
    n, spec = fabric.num_ranks, sched.spec
    blocks = max(spec.input_blocks(), spec.output_blocks())
    ts = DTYPES[dtype]
    redop = "sum" if name in COMBINING else "none"
    root = sched.root if name in ROOTED else -1
    lines = [f"# simulate: {name} on {topo.name} ({n} GPUs), schedule {sched.name or '?'} "
             f"({sched.num_steps} steps, {sched.chunks_per_rank} chunks per rank)",
             f"# cost model: launch {params.launch_us} us, step overhead {params.step_overhead_us} us, "
             f"slice overhead {params.slice_overhead_us} us, nvlink x{params.nvlink_efficiency:.3g}, "
             f"pcie x{params.pcie_efficiency:.3g}, network x{params.network_efficiency:.3g}",
             f"# lower bound: {bound.latency_steps} steps, {bound.latency_us:g} us latency, "
             f"{bound.bandwidth_rounds_per_block} rounds per block of {fabric.unit_gbps:g} GB/s "
             f"({bound.method}{'' if bound.exact else ', not exact'})",
             "#",
             "#       size         count      type   redop    root     time   algbw   busbw  slices    bound   bound",
             "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)   busbw"]
    busbws = []
    for size in sizes:
        count = size // (ts * blocks)
        nbytes = count * ts * blocks
        est = model.estimate(sched, nbytes)
        lb = bound.time_us(nbytes, params)
        bb = busbw_gbps(name, n, nbytes, est.time_us)
        busbws.append(bb)
        lines.append(f"{nbytes:12d}  {count:12d}  {dtype:>8s}  {redop:>6s}  {root:6d}  {_fmt_time(est.time_us)}  "
                     f"{algbw_gbps(nbytes, est.time_us):6.2f}  {bb:6.2f}  {est.slices:6d}  {_fmt_time(lb)}  "
                     f"{busbw_gbps(name, n, nbytes, lb):6.2f}")
    lines.append(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``simulate``; returns the exit status (0, or 2 on bad input)."""
    try:
        args = _parser().parse_args(argv)
        lines = run(args)
    except (_BadInput, TopocollError, OSError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"simulate: error: {msg}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

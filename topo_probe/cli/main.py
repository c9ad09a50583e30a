"""``topo-probe``: show (and export) the interconnect of this machine or of a named topology.

Usage::

    topo-probe [--topology X] [--gpus LIST] [--json OUT] [--nccl-xml OUT]
               [--format matrix|json] [--nvlink-gbps F]

Without ``--topology`` the local machine is probed (:func:`topo_probe.probes.probe_machine`);
with no GPU found it prints one line ``no GPUs: <reasons>`` and exits 0.  Bad input prints
one line on stderr and exits 2.  A reader that stops early (``topo-probe | head``) ends it
quietly with status 0.
"""

from __future__ import annotations

import argparse
import json
import sys

from topo_probe.cli.exits import OneLineParser, stdout_gone
from topo_probe.cli.options import add_machine_arguments
from topo_probe.errors import TopocollError, TopologyError, UsageError
from topo_probe.topology.model import Topology

PROG = "topo-probe"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description="Show the GPU interconnect topology (nvidia-smi topo -m style), "
                "pair bandwidths and P2P/GPUDirect RDMA support; export it as JSON or NCCL XML.")
    p.add_argument("--topology", metavar="X", help="preset name or file (our JSON, link-matrix JSON, NCCL "
                   "topology XML, nvidia-smi topo -m output); default: probe this machine")
    p.add_argument("--gpus", metavar="LIST", help="keep only these GPUs, e.g. 0,2-5 (renumbered 0..)")
    p.add_argument("--json", metavar="OUT", help="write the topology as topocoll.topology JSON to OUT "
                   "(an existing OUT only if topo-probe wrote it or it is empty)")
    p.add_argument("--nccl-xml", metavar="OUT", help="write the topology as NCCL topology XML to OUT "
                   "(an existing OUT only if topo-probe wrote it or it is empty)")
    p.add_argument("--format", choices=("matrix", "json"), default="matrix",
                   help="what to print on stdout (default: matrix)")
    p.add_argument("--nvlink-gbps", metavar="F", type=float,
                   help="NVLink speed per link per direction in GB/s (default: per GPU generation)")
    add_machine_arguments(p)
    return p


def _probe() -> tuple[Topology | None, list[str]]:
    try:
        from topo_probe.probes import probe_machine
    except ImportError as exc:
        return None, [f"probe unavailable ({exc})"]
    return probe_machine()


def _check_outputs(args: argparse.Namespace) -> None:
    """Before any work: ``--json`` / ``--nccl-xml`` replace an existing file only when it is one we
    write (a ``topocoll.topology`` JSON; an XML that begins with our comment line), never a user's."""
    from topo_probe.parsers.nccl_xml_export import is_topology_xml
    from topo_probe.topology.serialize import check_replaceable, is_topology_json
    if args.json:
        check_replaceable("--json", args.json, is_topology_json, "one topo-probe wrote (a "
                          "topocoll.topology JSON)")
    if args.nccl_xml:
        check_replaceable("--nccl-xml", args.nccl_xml, is_topology_xml, "one topo-probe wrote "
                          "(an NCCL XML that begins with <!-- topocoll: topology)")


def _run(args: argparse.Namespace) -> int:
    from topo_probe.cli.options import apply_machine_arguments, check_host_counts
    from topo_probe.load import load_topology, parse_gpu_list

    _check_outputs(args)
    check_host_counts(args)         # before a topology is loaded or this machine probed
    gpus = parse_gpu_list(args.gpus) if args.gpus is not None else None
    if args.topology is not None:
        topo = load_topology(args.topology, gpus=gpus, nvlink_gbps=args.nvlink_gbps)
    else:
        topo, reasons = _probe()
        if topo is None or topo.num_gpus == 0:
            print("no GPUs: " + ("; ".join(reasons) if reasons else "none found"))
            return 0
        if args.nvlink_gbps is not None:
            from topo_probe.load import set_nvlink_speed
            set_nvlink_speed(topo, args.nvlink_gbps)
        if gpus is not None:
            topo = topo.subset(gpus)
    topo = apply_machine_arguments(topo, args)
    if args.json:
        from topo_probe.topology.serialize import save_topology
        save_topology(topo, args.json)
    if args.nccl_xml:
        from topo_probe.parsers.nccl_xml_export import to_nccl_xml
        from topo_probe.topology.serialize import atomic_write
        try:
            atomic_write(args.nccl_xml, to_nccl_xml(topo))
        except OSError as exc:
            raise TopologyError(f"{args.nccl_xml}: cannot write ({exc.strerror or exc})") from None
    if args.format == "json":
        from topo_probe.topology.serialize import topology_to_dict
        print(json.dumps(topology_to_dict(topo), indent=1))
    else:
        from topo_probe.cli.display import render
        print(render(topo))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``topo-probe``; returns the exit status (0 ok, 2 bad input)."""
    try:
        args = build_parser().parse_args(argv)
        return _run(args)
    except UsageError as exc:
        print(f"{PROG}: error: {exc} (see {PROG} --help)", file=sys.stderr)
    except BrokenPipeError:  # `topo-probe | head`: the reader has what it wanted
        return stdout_gone()
    except (TopocollError, ValueError, OSError) as exc:
        print(f"{PROG}: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
              file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":      # as the console script runs
    from topo_probe.cli.entry import topo_probe
    sys.exit(topo_probe())

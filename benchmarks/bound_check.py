"""Does the lower bound bound both sides?  Every (machine, collective, size) cell: NCCL's modelled
choice and every baseline schedule as the cost model times it, against the bound computed from the
same link constants (``synth/model/physics.py``).

    python benchmarks/bound_check.py --out results/model_validation     # bound_check.md

Machines: the presets and clusters of 2-16 hosts over InfiniBand, RoCE, EFA, EFA v2 and TCPXO, and PCIe-limited
hosts read from an NCCL topology dump (:func:`pcie_limited`: 4 x L40S under two Broadcom switches, the GPUs' links
at Gen4 x16, Gen3 x8 or Gen5 x16, with P2P through a ``<pcilink>`` (also under x4 uplinks) or through host memory
behind x4 uplinks (also on 2 hosts)) and
two family fixtures (:func:`family`: 4 x P100 on two sockets, a VM's dump without sysfs, also with 50 GB/s NICs);
sizes 8 B - 8 GiB (every 4x); baselines on fabrics of up to 32 ranks.  Prints and writes one row
per machine (cells, cells below the bound, the closest NCCL came to the bound) and every cell
below it.  About a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from synth.baselines import available_baselines, baseline  # noqa: E402
from synth.ir.fabric import build_fabric  # noqa: E402
from synth.ir.schedule import atomic_write_text  # noqa: E402
from synth.model.bounds import lower_bounds  # noqa: E402
from synth.model.cost import CostModel  # noqa: E402
from synth.model.nccl import NcclMachine, NcclModel  # noqa: E402
from synth.model.physics import cost_params_for  # noqa: E402
from topo_probe.cli.options import apply_machine_arguments  # noqa: E402
from topo_probe.errors import TopologyError  # noqa: E402
from topo_probe.load import load_topology  # noqa: E402
from topo_probe.machines.presets import get_preset  # noqa: E402
from topo_probe.parsers.nccl_xml import parse_nccl_xml  # noqa: E402
from topo_probe.topology.checks import check_topology  # noqa: E402
from shown_paths import script_command  # noqa: E402

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall", "gather", "scatter")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
SIZES = [8 << k for k in range(0, 31, 2)]
PRESETS = ("dgx1-v100", "dgx2", "dgx-a100", "dgx-h100", "mi300x", "pcie-8gpu-2socket")
#: (preset, hosts, --net, rail-optimized)
CLUSTERS = [("dgx-h100", 2, None, False), ("dgx-h100", 4, None, True), ("dgx-h100", 8, "roce", True),
            ("dgx-a100", 2, "efa", False), ("dgx-h100", 2, "efa2", False), ("dgx-h100", 2, "tcpxo", False),
            ("mi300x", 2, None, False), ("dgx-h100", 16, None, True)]


def machine(preset, nodes=None, net=None, rail=False, nic_gbps=None):
    """``preset`` (a name or a Topology) as ``--nodes`` / ``--net`` / ``--rail-optimized`` / ``--nic-gbps`` shape it."""
    ns = argparse.Namespace(nodes=nodes, nic_gbps=nic_gbps, nics_per_node=None, rail_optimized=rail, net=net,
                            spine_oversubscription=None, hosts_per_leaf=None)
    return apply_machine_arguments(get_preset(preset) if isinstance(preset, str) else preset, ns)


#: the hand-written NCCL dump of 4 x L40S (Gen4 x16) under two Gen5 Broadcom switches joined by ``<pcilink>``
PCILINK_DUMP = ROOT / "tests" / "fixtures" / "family" / "nccl_topo_dump_bcm_pcilink.xml"
_GPU_LINK = 'link_speed="16.0 GT/s PCIe" link_width="16">\n        <gpu'
_SWITCH_LINK = 'subsystem_device="0x100b" link_speed="32.0 GT/s PCIe" link_width="16"'
_PCILINKS = ('      <pcilink target="0000:35:00.0"/>\n', '      <pcilink target="0000:15:00.0"/>\n')


def pcie_dump_variant(gpu_link: str = "", switch_link: str = "", pcilink: bool = True) -> str:
    """:data:`PCILINK_DUMP`'s text with the GPUs' ``link_speed``/``link_width`` replaced by ``gpu_link`` (e.g.
    ``'link_speed="8.0 GT/s PCIe" link_width="8"'``), the switches' by ``switch_link``, and without the
    ``<pcilink>`` pair where ``pcilink`` is False (the switches then meet at the host bridge: PHB, no P2P)."""
    text = PCILINK_DUMP.read_text()
    if gpu_link:
        text = text.replace(_GPU_LINK, f"{gpu_link}>\n        <gpu")
    if switch_link:
        text = text.replace(_SWITCH_LINK, f'subsystem_device="0x100b" {switch_link}')
    return text if pcilink else text.replace(_PCILINKS[0], "").replace(_PCILINKS[1], "")


#: a switch uplink of 4 lanes at 16 GT/s (7.875 GB/s)
X4_UPLINK = 'link_speed="16.0 GT/s PCIe" link_width="4"'
#: (name, gpu_link, switch_link, pcilink, hosts) of the PCIe-limited machines
PCIE_VARIANTS = [("4 x L40S Gen4 x16, pcilink", "", "", True, None),
                 ("2 x 4 x L40S Gen4 x16, pcilink", "", "", True, 2),
                 ("4 x L40S Gen3 x8, pcilink", 'link_speed="8.0 GT/s PCIe" link_width="8"', "", True, None),
                 ("2 x 4 x L40S Gen3 x8, pcilink", 'link_speed="8.0 GT/s PCIe" link_width="8"', "", True, 2),
                 ("4 x L40S Gen5 x16, pcilink", 'link_speed="32.0 GT/s PCIe" link_width="16"', "", True, None),
                 ("4 x L40S Gen4 x16, pcilink, x4 uplinks", "", X4_UPLINK, True, None),
                 ("4 x L40S Gen4 x16, SHM", "", "", False, None),
                 ("4 x L40S Gen4 x16, SHM, x4 uplinks", "", X4_UPLINK, False, None),
                 ("2 x 4 x L40S Gen4 x16, SHM, x4 uplinks", "", X4_UPLINK, False, 2)]


def pcie_limited() -> list[tuple[str, object]]:
    """The :data:`PCIE_VARIANTS` as ``(name, Topology)``, each dump's text parsed as it is built (no file) and
    checked as :func:`~topo_probe.load.load_topology` checks a file's."""
    out = []
    for name, gpu_link, switch_link, pcilink, hosts in PCIE_VARIANTS:
        topo = parse_nccl_xml(pcie_dump_variant(gpu_link, switch_link, pcilink), source=name)
        topo = check_topology(topo, name, TopologyError)
        out.append((name, machine(topo, hosts) if hosts else topo))
    return out


#: (name, fixture in tests/fixtures/family, hosts, --nic-gbps) of the family fixtures whose links bound NCCL's streams:
#: 4 x P100 on two sockets joined by a 20 GB/s link (nvidia-smi, no P2P across them), and a VM's dump without sysfs
#: (Gen3 x16 read for its links, a 100 Gb/s NIC without GPUDirect RDMA); with 50 GB/s NICs (``--nic-gbps``) the
#: P100's socket-1 GPUs share the socket link to the NIC and the VM's NIC runs at its Gen3 x16 slot's rate
#: (synth/model/nccl/pcie_share.py)
FAMILY = [("4 x P100, 2 sockets (nvidia-smi)", "nvsmi_p100x4_driver384_soc.txt", None, None),
          ("2 x 4 x P100, 2 sockets, 12.5 GB/s NIC", "nvsmi_p100x4_driver384_soc.txt", 2, 12.5),
          ("2 x 4 x P100, 2 sockets, 50 GB/s NIC", "nvsmi_p100x4_driver384_soc.txt", 2, 50.0),
          ("2 x 2 x A100 VM, no sysfs", "nccl_topo_dump_vm_no_sysfs.xml", 2, None),
          ("2 x 2 x A100 VM, no sysfs, 50 GB/s NIC", "nccl_topo_dump_vm_no_sysfs.xml", 2, 50.0)]


def family(fixtures: Path = ROOT / "tests" / "fixtures" / "family") -> list[tuple[str, object]]:
    """The :data:`FAMILY` machines as ``(name, Topology)``."""
    out = []
    for name, file, hosts, nic in FAMILY:
        topo = load_topology(str(fixtures / file))
        out.append((name, machine(topo, hosts, nic_gbps=nic) if hosts else topo))
    return out


def check(topo, *, sizes=SIZES, max_schedule_ranks: int = 32) -> tuple[int, list[tuple], float]:
    """``(cells, cells below the bound, NCCL's least time / bound)`` of one machine at ``sizes``
    (bytes); baseline schedules are timed on machines of at most ``max_schedule_ranks`` ranks
    (NCCL's choice on every machine)."""
    fab = build_fabric(topo)
    params = cost_params_for(fab)
    nccl, ours = NcclModel(NcclMachine.from_topology(topo)), CostModel(fab, params)
    cells, below, closest = 0, [], float("inf")
    for coll in COLLECTIVES:
        root = 0 if coll in ROOTED else None
        bound = lower_bounds(fab, coll, root=root)
        scheds = [(b, baseline(b, fab, coll, root=root)) for b in available_baselines(fab, coll)] \
            if fab.num_ranks <= max_schedule_ranks else []
        for size in sizes:
            lb = bound.time_us(size, params)
            c = nccl.choose(coll, size)
            timed = [(f"NCCL {c.label}", c.time_us)] + [(b, ours.schedule_time_us(s, size)) for b, s in scheds]
            closest = min(closest, c.time_us / lb)
            cells += len(timed)
            below += [(coll, size, who, t, lb) for who, t in timed if t < lb * (1 - 1e-9)]
    return cells, below, closest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "results" / "model_validation")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    machines = [(name, get_preset(name)) for name in PRESETS]
    machines += [(f"{k} x {pr}{', ' + net if net else ''}{', rails' if rail else ''}", machine(pr, k, net, rail))
                 for pr, k, net, rail in CLUSTERS]
    machines += pcie_limited() + family()
    lines = ["# The lower bound against both sides", "",
             f"Command: `{script_command(__file__, sys.argv[1:] if argv is None else argv)}`", "",
             "Per machine: cells timed (NCCL's modelled choice and every baseline schedule by the cost model, 8 "
             "collectives, 8 B - 8 GiB every 4x), how many fall below the lower bound computed from the same link "
             "constants, and the closest NCCL comes to the bound (its time / the bound).", "",
             "| machine | cells | below the bound | NCCL's least time / bound |", "|---|---|---|---|"]
    total, bad = 0, []
    for name, topo in machines:
        cells, below, closest = check(topo)
        total, bad = total + cells, bad + [(name, *b) for b in below]
        lines.append(f"| {name} | {cells} | {len(below)} | {closest:.3f} |")
        print(f"{name:28s} {cells:5d} cells, {len(below)} below the bound, NCCL at >= {closest:.3f} of it")
    lines += ["", f"{len(bad)} of {total} cells below the bound ({time.perf_counter() - t0:.0f} s)."]
    lines += [f"- {m} {c} {s} B: {who} {t:.1f} us < bound {lb:.1f} us" for m, c, s, who, t, lb in bad]
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "bound_check.md", "\n".join(lines) + "\n")
    print(f"{len(bad)} of {total} cells below the bound; wrote {args.out / 'bound_check.md'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""``nvidia-smi topo -m`` and ``nvidia-smi topo -p2p <r|w|n|a|p>`` output to a Topology.

Accepts raw (tab-separated), pasted (space-aligned) or terminal-coloured text (colour sequences are taken out,
:func:`~topo_probe.terminal_text.shown_text`), with or without NIC columns (``NIC0``... with a ``NIC Legend:`` block,
or named columns such as ``mlx5_0``), the ``CPU Affinity`` / ``NUMA Affinity`` / ``GPU NUMA ID`` columns, the
`` X `` diagonal and the empty cell nvidia-smi prints before ``GPU NUMA ID``; lines before the header and after
the matrix (the legends) are ignored, except the NIC legend.

What is built (and what is assumed, recorded in ``topo.assumptions``):

* ``NV#`` -> a direct ``nvlink`` edge of # links.  When every pair of a GPU group shows the same NV# and that
  many links per GPU is implausible point to point (NV12 x 7 peers = 84, NV18), NVSwitches are inferred
  instead (NV12: 6, NV18: 4, see :data:`topo_probe.parsers.link_matrix.NVSWITCH_PLANS`).
* NVLink speed: ``nvlink_gbps`` if given, else a guess from the NV# pattern (NV12 everywhere
  -> NVLink3, NV18 -> NVLink4, NV1/NV2 mesh -> NVLink2; all 25 GB/s per link per direction).
* PCIe: a tree that reproduces every PCIe cell (GPU-GPU, GPU-NIC, NIC-NIC), see
  :func:`topo_probe.parsers.pcie_classes.add_pcie_tree_from_classes`; CPUs (NUMA nodes) from the
  ``NUMA Affinity`` column, else from equal ``CPU Affinity`` strings.  Link speed is ``pcie_gbps`` if given,
  else a guess from the NVLink generation (Gen3 for NVLink2, Gen4 for NVLink3 or no NVLink, Gen5 for NVLink4).

>>> text = "\\tGPU0\\tGPU1\\tCPU Affinity\\n GPU0\\t X \\tNV4\\t0-7\\nGPU1\\tNV4\\t X \\t0-7\\n"
>>> t = parse_nvsmi_topo(text)
>>> t.smi_label(0, 1), t.nvlink_count(1, 0), t.graph.nodes["gpu0"]["cpu_affinity"]
('NV4', 4, '0-7')
"""

from __future__ import annotations

from pathlib import PurePath

from topo_probe.errors import TopologyError
from topo_probe.limits import MAX_BANDWIDTH_GBPS, MAX_LINKS_PER_EDGE, MIN_BANDWIDTH_GBPS
from topo_probe.number_checks import check_float
from topo_probe.number_rules import ascii_int
from topo_probe.parsers.hardware import PCIE_LANE_GBPS, nvlink_guess_from_counts
from topo_probe.parsers.link_matrix import add_nvlinks
from topo_probe.parsers.nvsmi_matrix import GPU_LABEL, P2P_CELL, P2P_CODES, TOPO_CELL, read_matrix, reconcile
from topo_probe.parsers.pcie_classes import add_pcie_tree_from_classes
from topo_probe.topology.checks import check_topology
from topo_probe.topology.model import P2PCapability, Topology

__all__ = ["parse_nvsmi_topo", "parse_nvsmi_p2p", "apply_p2p", "P2P_CODES"]

_P2P_MODES = {"r": "read", "w": "write", "n": "nvlink", "a": "atomics", "p": "prop"}


def _source_name(source: str, default: str) -> str:
    return PurePath(source).stem if source and not source.startswith("<") else default


def parse_nvsmi_topo(text: str, *, nvlink_gbps: float | None = None, source: str = "<text>",
                     pcie_gbps: float | None = None) -> Topology:
    """Parse ``nvidia-smi topo -m`` output (see the module docstring; older drivers' SOC is SYS).

    Parameters
    ----------
    text : str
        The output, raw or pasted.
    nvlink_gbps : float, optional
        NVLink bandwidth per link per direction (GB/s); guessed (and noted) when omitted.
    source : str
        File name for error messages and the topology name.
    pcie_gbps : float, optional
        PCIe link bandwidth per direction (GB/s); guessed (and noted) when omitted.

    Returns
    -------
    Topology
        GPUs ``gpu0..`` (attributes ``cpu_affinity``, ``numa_node``, ``gpu_numa_id``), NICs
        ``nic0..`` (attribute ``name``), inferred switches, CPUs; ``smi_label(i, j)``
        reproduces every GPU cell and ``pcie_class`` every GPU-NIC / NIC-NIC cell.

    Ambiguous or contradictory cells are read, never refused, each reading recorded in
    ``topo.assumptions``: asymmetric cells take the slower reading, an X off the diagonal (or a
    diagonal cell that is not X) is ignored, NV# between a GPU and a NIC is unknown, a GPU row
    missing some affinity values is matched to the header by column, and PCIe/NUMA
    contradictions are read as :func:`~topo_probe.parsers.pcie_classes.add_pcie_tree_from_classes`
    says (SYS between GPUs of one NUMA node: the cell wins, as on cloud VMs).

    Raises
    ------
    TopologyError
        ``source:line N column M: problem`` when the text is not an nvidia-smi matrix: a
        missing/duplicate header, a ragged or missing row, an unknown cell.
    """
    _check_speeds(nvlink_gbps=nvlink_gbps, pcie_gbps=pcie_gbps)
    mat = read_matrix(text, source, TOPO_CELL, "nvidia-smi topo -m")
    reconcile(mat)
    gpu_cols = [c for c in mat.cols if GPU_LABEL.fullmatch(c)]
    nic_cols = [c for c in mat.cols if c not in gpu_cols]
    node = {c: f"gpu{k}" for k, c in enumerate(gpu_cols)}
    node.update({c: f"nic{k}" for k, c in enumerate(nic_cols)})
    label = {v: k for k, v in node.items()}
    _unknown_gpu_nic_nvlinks(mat, gpu_cols, nic_cols)

    t = Topology(_source_name(source, "nvidia-smi-topo"),
                 description=f"parsed from `nvidia-smi topo -m` output {source}")
    t.assumptions.extend(mat.notes)
    numa, affinity = _add_gpus_and_nics(t, mat, gpu_cols, nic_cols, node)
    counts = [[int(mat.cells[(a, b)][0][2:]) if mat.cells[(a, b)][0].startswith("NV") else 0
               for b in gpu_cols] for a in gpu_cols]
    link_gbps, pcie_gbps = _link_speeds(t, counts, nvlink_gbps, pcie_gbps)
    t.assumptions.extend(add_nvlinks(t, counts, link_gbps=link_gbps))

    classes = {(node[a], node[b]): tok for (a, b), (tok, _, _) in mat.cells.items()
               if a != b and not tok.startswith("NV") and tok != "?"}

    def locate(a: str, b: str) -> str:
        tok, ln, col = mat.cells[(label[a], label[b])]
        return mat.where(ln, col)

    eps = [node[c] for c in gpu_cols + nic_cols]
    t.assumptions.extend(add_pcie_tree_from_classes(t, eps, classes, numa=numa, affinity=affinity,
                                                    pcie_gbps=pcie_gbps, locate=locate))
    if any(numa[node[c]] is None for c in gpu_cols) and gpu_cols:
        t.assumptions.append("no NUMA Affinity column (or N/A): NUMA nodes inferred from CPU Affinity and the cells")
    return check_topology(t, source, TopologyError)


def _unknown_gpu_nic_nvlinks(mat, gpu_cols: list[str], nic_cols: list[str]) -> None:
    """NV# to a NIC (not possible): read as unknown, said so in ``mat.notes``."""
    for a, b in ((a, b) for a in gpu_cols + nic_cols for b in nic_cols if a < b or a in gpu_cols):
        tok, ln, col = mat.cells[(a, b)]
        if tok.startswith("NV"):
            mat.notes.append(f"cell {a}/{b} is {tok} ({mat.shown.where(ln, col)}): NVLink to a NIC is not possible, "
                             "read as unknown")
            mat.cells[(a, b)] = mat.cells[(b, a)] = ("?", ln, col)


def _add_gpus_and_nics(t: Topology, mat, gpu_cols: list[str], nic_cols: list[str], node: dict[str, str]):
    """Add the GPUs (with their affinity columns) and the NICs (legend names) of the matrix;
    return each GPU's NUMA node and its NUMA (else CPU) affinity text."""
    numa, affinity = {}, {}
    for k, c in enumerate(gpu_cols):
        vals = mat.values.get(c, {})
        cpu_aff = _value(vals.get("CPU Affinity"))
        numa_aff = _value(vals.get("NUMA Affinity"))
        gpu_numa = _value(vals.get("GPU NUMA ID"))
        numa_node = ascii_int(numa_aff, 6)
        attrs = {"cpu_affinity": cpu_aff, "numa_node": numa_node}
        if numa_aff is not None and numa_node is None:
            attrs["numa_affinity"] = numa_aff
        if ascii_int(gpu_numa, 6) is not None:
            attrs["gpu_numa_id"] = ascii_int(gpu_numa, 6)
        t.add_gpu(k, host=0, **attrs)
        numa[node[c]] = numa_node
        affinity[node[c]] = numa_aff if numa_aff is not None else cpu_aff
    for k, c in enumerate(nic_cols):
        t.add_node(f"nic{k}", "nic", name=mat.nic_legend.get(c, c), host=0)
    return numa, affinity


def _link_speeds(t: Topology, counts: list[list[int]], nvlink_gbps: float | None,
                 pcie_gbps: float | None) -> tuple[float, float]:
    """(NVLink GB/s per link, PCIe GB/s per link): as given, else guessed from the NVLink counts
    and said so in the topology's assumptions."""
    guess = nvlink_guess_from_counts(counts)
    if nvlink_gbps is None and guess is not None:
        t.assumptions.append(f"NVLink speed {guess[0]} GB/s per link per direction: {guess[1]} "
                             "(pass nvlink_gbps / --nvlink-gbps to set it)")
    link_gbps = float(nvlink_gbps) if nvlink_gbps is not None else (guess[0] if guess else 25.0)
    if pcie_gbps is None:
        gen = guess[2] if guess else 4
        pcie_gbps = PCIE_LANE_GBPS[gen] * 16
        t.assumptions.append(f"PCIe links assumed Gen{gen} x16 ({pcie_gbps} GB/s per direction); "
                             "nvidia-smi topo -m does not show link speeds")
    return link_gbps, pcie_gbps


def _check_speeds(**gbps: float | None) -> None:
    for name, value in gbps.items():
        if value is not None:
            check_float(value, name, TopologyError, lo=MIN_BANDWIDTH_GBPS, hi=MAX_BANDWIDTH_GBPS / MAX_LINKS_PER_EDGE,
                        unit="GB/s")


def _value(v: str | None) -> str | None:
    return None if v is None or v in ("N/A", "") else v


def parse_nvsmi_p2p(text: str, *, source: str = "<text>", mode: str = "r") -> dict[tuple[int, int], P2PCapability]:
    """Parse ``nvidia-smi topo -p2p <mode>`` output into ``{(i, j): P2PCapability}``.

    Codes: OK, CNS (chipset not supported), GNS (GPU not supported), TNS (topology not
    supported), NS (not supported), DR (disabled by regkey), U (unknown).  A non-OK cell
    gives read = write = atomics = False with the legend text as reason.  An OK cell gives
    read = write = True and atomics = (``mode == "a"``): the table of one mode says nothing
    about the others, so for modes r/w/n/p atomics are reported False "not reported".

    >>> p = parse_nvsmi_p2p(" \\tGPU0\\tGPU1\\t\\n GPU0\\tX\\tGNS\\t\\n GPU1\\tGNS\\tX\\t\\n")
    >>> p[(0, 1)].supported, p[(0, 1)].reason
    (False, 'GPU not supported (nvidia-smi topo -p2p r: GNS)')
    """
    if mode not in _P2P_MODES:
        raise TopologyError(f"{source}: p2p mode {mode!r} is not one of {', '.join(_P2P_MODES)}")
    mat = read_matrix(text, source, P2P_CELL, "nvidia-smi topo -p2p")
    for c in mat.cols:
        if not GPU_LABEL.fullmatch(c):
            raise mat.error(mat.header_line, 1, f"column {c!r}: a -p2p table has GPU columns only")
    out: dict[tuple[int, int], P2PCapability] = {}
    for (a, b), (tok, _, _) in mat.cells.items():
        if a == b:
            continue
        i, j = int(a[3:]), int(b[3:])
        if tok == "OK":
            atom = mode == "a"
            out[(i, j)] = P2PCapability(True, True, atom, "" if atom else
                                        f"atomics not reported by nvidia-smi topo -p2p {mode}")
        else:
            tok = "U" if tok == "?" else tok    # X off the diagonal: unknown
            out[(i, j)] = P2PCapability(False, False, False, f"{P2P_CODES[tok]} (nvidia-smi topo -p2p {mode}: {tok})")
    return out


def apply_p2p(topo: Topology, table: dict[tuple[int, int], P2PCapability]) -> Topology:
    """Set ``topo.p2p_overrides`` from a :func:`parse_nvsmi_p2p` table (in place; returns topo).

    Raises TopologyError when the table names a GPU the topology does not have.
    """
    n = topo.num_gpus
    for (i, j), cap in sorted(table.items()):
        if not (0 <= i < n and 0 <= j < n):
            raise TopologyError(f"p2p table: GPU pair ({i}, {j}) is outside topology {topo.name!r} with {n} GPUs")
        topo.p2p_overrides[(i, j)] = cap
    return topo

"""``nvidia-smi topo -m`` and ``nvidia-smi topo -p2p <r|w|n|a|p>`` output to a Topology.

Accepts raw (tab-separated), pasted (space-aligned) or terminal-coloured text (colour sequences are taken out,
:func:`~topo_probe.guard.terminal_lines`), with or without NIC columns (``NIC0``... with a ``NIC Legend:`` block,
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

import re
from dataclasses import dataclass, field
from pathlib import PurePath

from topo_probe.errors import TopologyError
from topo_probe.guard import (
    MAX_BANDWIDTH_GBPS,
    MAX_INPUT_BYTES,
    MAX_LINKS_PER_EDGE,
    MAX_MATRIX_COLUMNS,
    MIN_BANDWIDTH_GBPS,
    ascii_int,
    check_float,
    check_topology,
    show,
    terminal_lines,
)
from topo_probe.parsers.hardware import PCIE_LANE_GBPS, nvlink_guess_from_counts
from topo_probe.parsers.link_matrix import add_nvlinks
from topo_probe.parsers.pcie_classes import add_pcie_tree_from_classes
from topo_probe.topology.model import P2PCapability, Topology

__all__ = ["parse_nvsmi_topo", "parse_nvsmi_p2p", "apply_p2p", "P2P_CODES"]

_ATTR_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER_TOKEN = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")
_TOPO_CELL = re.compile(r"X|NV[1-9][0-9]*|PIX|PXB|PHB|NODE|SYS|SOC")  # SOC: SYS as drivers before NODE print it
_GPU_LABEL = re.compile(r"GPU([0-9]+)")

#: ``nvidia-smi topo -p2p`` legend.
P2P_CODES = {"OK": "Status Ok", "CNS": "Chipset not supported", "GNS": "GPU not supported",
             "TNS": "Topology not supported", "NS": "Not supported", "DR": "Disabled by regkey", "U": "Unknown"}
_P2P_CELL = re.compile("X|" + "|".join(sorted(P2P_CODES, key=len, reverse=True)))
_P2P_MODES = {"r": "read", "w": "write", "n": "nvlink", "a": "atomics", "p": "prop"}


@dataclass
class _Matrix:
    """The matrix part of nvidia-smi output, tokens with their positions."""

    cols: list[str]                      # matrix column labels (GPU0.., NIC0../mlx5_0)
    attrs: list[str]                     # attribute columns after the matrix
    header_line: int
    end_line: int                        # first line after the matrix
    cells: dict[tuple[str, str], tuple[str, int, int]] = field(default_factory=dict)  # (row, col) -> (text, line, column)
    values: dict[str, dict[str, str]] = field(default_factory=dict)                    # row -> attr -> value
    nic_legend: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)       # readings of ambiguous cells (assumptions)
    header_text: str = ""
    soc_noted: bool = False                              # the SOC-for-SYS note is made (once, at the first SOC)


def _err(source: str, line: int, col: int, msg: str) -> TopologyError:
    return TopologyError(f"{source}:line {line} column {col}: {msg}")


def _tokens(line: str, pattern: re.Pattern = re.compile(r"\S+")) -> list[tuple[int, str]]:
    return [(m.start() + 1, m.group()) for m in pattern.finditer(line)]


def _is_header(toks: list[tuple[int, str]], cell: re.Pattern) -> bool:
    return bool(toks) and toks[0][1] == "GPU0" and (len(toks) == 1 or not cell.fullmatch(toks[1][1]))


def _read_matrix(text: str, source: str, cell: re.Pattern, what: str) -> _Matrix:
    if len(text) > MAX_INPUT_BYTES:
        raise TopologyError(f"{source}: more than the {MAX_INPUT_BYTES} characters a loader reads")
    lines = terminal_lines(text, source, TopologyError)
    start = next((k for k, ln in enumerate(lines) if "GPU0" in ln and _is_header(_tokens(ln), cell)), None)
    if start is None:
        raise TopologyError(f"{source}:line 1 column 1: no `{what}` header (a line starting with GPU0) found")
    head = _tokens(lines[start], _HEADER_TOKEN)
    if len(head) > MAX_MATRIX_COLUMNS + len(_ATTR_COLUMNS):
        raise _err(source, start + 1, 1, f"the header has {len(head)} columns, more than the "
                   f"{MAX_MATRIX_COLUMNS} GPUs + NICs of one host this parser takes")
    cols, attrs = [], []
    for col, tok in head:
        if tok in _ATTR_COLUMNS:
            attrs.append(tok)
        elif attrs:
            raise _err(source, start + 1, col, f"header column {show(tok)} comes after the affinity columns")
        elif tok in cols:
            raise _err(source, start + 1, col, f"header names column {show(tok)} twice")
        else:
            m = _GPU_LABEL.fullmatch(tok)
            ngpu = sum(1 for c in cols if _GPU_LABEL.fullmatch(c))
            if m and (ascii_int(m.group(1), 6) != ngpu or len(cols) != ngpu):
                raise _err(source, start + 1, col, f"header column {show(tok)} out of order (expected "
                           f"{'GPU%d' % ngpu if len(cols) == ngpu else 'GPU columns before NIC columns'})")
            cols.append(tok)
    mat = _Matrix(cols, attrs, start + 1, len(lines) + 1, header_text=lines[start])
    rows_seen: dict[str, int] = {}
    k = start + 1
    while k < len(lines) and len(rows_seen) < len(cols):
        line = lines[k]
        toks = _tokens(line)
        if not toks or toks[0][1].startswith("Legend"):
            break
        _read_row(mat, source, k + 1, line, toks, cell, rows_seen, head)
        k += 1
    mat.end_line = k + 1
    if missing := [c for c in cols if c not in rows_seen]:
        raise _err(source, k + 1, 1, f"matrix truncated: no row for {', '.join(missing)} (the header at line "
                   f"{start + 1} has {len(cols)} columns)")
    for line in lines[k:]:
        m = re.match(r"\s*(NIC[0-9]+)\s*:\s*(\S+)\s*$", line)
        if m:
            mat.nic_legend[m.group(1)] = m.group(2)
    return mat


def _read_row(mat: _Matrix, source: str, ln: int, line: str, toks, cell, rows_seen, head) -> None:
    label_col, label = toks[0]
    if _tokens(line, _HEADER_TOKEN) == head or _is_header(toks, cell):
        raise _err(source, ln, label_col, f"duplicate header line (the header is line {mat.header_line})")
    if label not in mat.cols:
        raise _err(source, ln, label_col, f"row label {show(label)} is not a column of the header "
                   f"({', '.join(mat.cols)})")
    if label in rows_seen:
        raise _err(source, ln, label_col, f"row {label} appears twice (first at line {rows_seen[label]})")
    rows_seen[label] = ln
    n = len(mat.cols)
    values = toks[1:]
    extra = len(values) - n
    is_gpu = bool(_GPU_LABEL.fullmatch(label))
    allowed = (len(mat.attrs),) if is_gpu else (0, len(mat.attrs))
    short = is_gpu and 0 <= extra < len(mat.attrs) and all(cell.fullmatch(t) for _, t in values[:n])
    if (extra < 0 or extra not in allowed) and not short:
        where = toks[1 + n][0] if extra > 0 else len(line.rstrip()) + 1
        raise _err(source, ln, where, f"ragged row {label}: {len(values)} cells, expected {n} matrix cells"
                   + (f" + {len(mat.attrs)} values ({', '.join(mat.attrs)})" if mat.attrs and is_gpu else ""))
    for (col, tok), name in zip(values[:n], mat.cols):
        if not cell.fullmatch(tok):
            expect = "X, NV<n>, PIX, PXB, PHB, NODE, SYS or SOC" if cell is _TOPO_CELL else \
                "X, " + ", ".join(P2P_CODES)
            raise _err(source, ln, col, f"unknown cell {show(tok)} in row {label}, column {name} (expected {expect})")
        if tok.startswith("NV") and (ascii_int(tok[2:], 6) or MAX_LINKS_PER_EDGE + 1) > MAX_LINKS_PER_EDGE:
            raise _err(source, ln, col, f"cell {label}/{name} is {tok[:12]}: more than the {MAX_LINKS_PER_EDGE} "
                       f"NVLinks a GPU pair can have")
        if tok == "SOC" and not mat.soc_noted:
            mat.soc_noted = True
            mat.notes.append(f"cells SOC (first: row {label}, line {ln} column {col}): older drivers' SYS, read as SYS")
        tok = "SYS" if tok == "SOC" else tok
        if (tok == "X") != (name == label):
            mat.notes.append(f"cell {label}/{name} is {tok} (line {ln} column {col}): "
                             + ("the diagonal, read as X" if name == label else "X off the diagonal, read as unknown"))
            tok = "X" if name == label else "?"
        mat.cells[(label, name)] = (tok, ln, col)
    if short:
        mat.values[label] = _values_by_position(mat, line, n)
        mat.notes.append(f"row {label} (line {ln}) has {extra} of the {len(mat.attrs)} values of "
                         f"{', '.join(mat.attrs)}: matched to the header by column, the others read as unknown")
    else:
        mat.values[label] = {a: v for a, (_, v) in zip(mat.attrs, values[n:])}


def _values_by_position(mat: _Matrix, line: str, n: int) -> dict[str, str]:
    """Attribute values of a row that lacks some, each given to the nearest header column not already used (tabs
    expanded to 8 columns, as a terminal shows them)."""
    head = {tok: col for col, tok in _tokens(mat.header_text.expandtabs(8), _HEADER_TOKEN) if tok in mat.attrs}
    out: dict[str, str] = {}
    free = list(mat.attrs)
    for col, tok in _tokens(line.expandtabs(8))[1 + n:]:
        best = min(free, key=lambda a: abs(head[a] - col))
        out[best] = tok
        free = free[free.index(best) + 1:]
        if not free:
            break
    return out


def _reconcile(mat: _Matrix) -> None:
    """Make the matrix symmetric: where cell a/b and b/a differ, both take the slower reading (fewer NVLinks; a
    PCIe class over NVLink; the farther PCIe class; a known cell over an unknown one), said so in ``mat.notes``."""
    rank = {c: k for k, c in enumerate(("PIX", "PXB", "PHB", "NODE", "SYS"))}

    def slowness(tok: str) -> tuple[int, int]:
        if tok.startswith("NV"):
            return 0, -int(tok[2:])
        return (1, rank[tok]) if tok in rank else (-1, 0)

    for (a, b), (tok, ln, col) in sorted(mat.cells.items(), key=lambda kv: kv[1][1:]):
        other = mat.cells[(b, a)]
        if other[0] == tok:
            continue
        pick = max((tok, other[0]), key=slowness)
        said = [x if x != "?" else "unknown" for x in (tok, other[0])]
        mat.notes.append(f"cell {a}/{b} is {said[0]} (line {ln} column {col}) but {b}/{a} is {said[1]} (line "
                         f"{other[1]} column {other[2]}): read as {pick}")
        mat.cells[(a, b)], mat.cells[(b, a)] = (pick, ln, col), (pick, other[1], other[2])


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
    mat = _read_matrix(text, source, _TOPO_CELL, "nvidia-smi topo -m")
    _reconcile(mat)
    gpu_cols = [c for c in mat.cols if _GPU_LABEL.fullmatch(c)]
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
        return f"{source}:line {ln} column {col}"

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
            mat.notes.append(f"cell {a}/{b} is {tok} (line {ln} column {col}): NVLink to a NIC is not possible, "
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
    mat = _read_matrix(text, source, _P2P_CELL, "nvidia-smi topo -p2p")
    for c in mat.cols:
        if not _GPU_LABEL.fullmatch(c):
            raise _err(source, mat.header_line, 1, f"column {c!r}: a -p2p table has GPU columns only")
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

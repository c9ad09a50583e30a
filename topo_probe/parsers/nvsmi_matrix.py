"""The matrix part of ``nvidia-smi topo -m`` / ``-p2p`` output: header, rows and cells with their places.

:func:`read_matrix` reads the text as a terminal shows it (:func:`~topo_probe.terminal_text.shown_text`: colour
sequences out) into a :class:`Matrix` of cell tokens, each with the line of the file and its column in the text as
shown; an error or a note names that place (:meth:`Matrix.where`, which says when a column is counted without
colour codes).
:func:`reconcile` makes the cells symmetric.  :mod:`topo_probe.parsers.nvsmi` builds the topology from them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from topo_probe.errors import TopologyError, show
from topo_probe.limits import MAX_INPUT_BYTES, MAX_LINKS_PER_EDGE, MAX_MATRIX_COLUMNS
from topo_probe.number_rules import ascii_int
from topo_probe.terminal_text import ShownText, shown_text

_ATTR_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_HEADER_TOKEN = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")
TOPO_CELL = re.compile(r"X|NV[1-9][0-9]*|PIX|PXB|PHB|NODE|SYS|SOC")  # SOC: SYS as drivers before NODE print it
GPU_LABEL = re.compile(r"GPU([0-9]+)")

#: ``nvidia-smi topo -p2p`` legend.
P2P_CODES = {"OK": "Status Ok", "CNS": "Chipset not supported", "GNS": "GPU not supported",
             "TNS": "Topology not supported", "NS": "Not supported", "DR": "Disabled by regkey", "U": "Unknown"}
P2P_CELL = re.compile("X|" + "|".join(sorted(P2P_CODES, key=len, reverse=True)))


@dataclass
class Matrix:
    """The matrix part of nvidia-smi output, tokens with their positions."""

    cols: list[str]                      # matrix column labels (GPU0.., NIC0../mlx5_0)
    attrs: list[str]                     # attribute columns after the matrix
    header_line: int
    end_line: int                        # first line after the matrix
    #: (row, col) -> (text, line of the file, column in the text as shown)
    cells: dict[tuple[str, str], tuple[str, int, int]] = field(default_factory=dict)
    values: dict[str, dict[str, str]] = field(default_factory=dict)                    # row -> attr -> value
    nic_legend: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)       # readings of ambiguous cells (assumptions)
    header_text: str = ""
    soc_noted: bool = False                              # the SOC-for-SYS note is made (once, at the first SOC)
    source: str = "<text>"
    shown: ShownText = field(default_factory=lambda: ShownText([]))

    def where(self, line: int, col: int) -> str:
        """``source:line L column C`` (:meth:`~topo_probe.terminal_text.ShownText.where`: the file's line, the
        column in the text as shown, said so on a line that held colour codes)."""
        return f"{self.source}:{self.shown.where(line, col)}"

    def error(self, line: int, col: int, msg: str) -> TopologyError:
        return TopologyError(f"{self.where(line, col)}: {msg}")


def _tokens(line: str, pattern: re.Pattern = re.compile(r"\S+")) -> list[tuple[int, str]]:
    return [(m.start() + 1, m.group()) for m in pattern.finditer(line)]


def _is_header(toks: list[tuple[int, str]], cell: re.Pattern) -> bool:
    return bool(toks) and toks[0][1] == "GPU0" and (len(toks) == 1 or not cell.fullmatch(toks[1][1]))


def read_matrix(text: str, source: str, cell: re.Pattern, what: str) -> Matrix:
    if len(text) > MAX_INPUT_BYTES:
        raise TopologyError(f"{source}: more than the {MAX_INPUT_BYTES} characters a loader reads")
    shown = shown_text(text, source, TopologyError)
    lines = shown.lines
    start = next((k for k, ln in enumerate(lines) if "GPU0" in ln and _is_header(_tokens(ln), cell)), None)
    if start is None:
        raise TopologyError(f"{source}:{shown.where(1, 1)}: no `{what}` header (a line starting with GPU0) found")
    head = _tokens(lines[start], _HEADER_TOKEN)
    mat = Matrix([], [], start + 1, len(lines) + 1, header_text=lines[start], source=source, shown=shown)
    if len(head) > MAX_MATRIX_COLUMNS + len(_ATTR_COLUMNS):
        raise mat.error(start + 1, 1, f"the header has {len(head)} columns, more than the "
                        f"{MAX_MATRIX_COLUMNS} GPUs + NICs of one host this parser takes")
    cols, attrs = mat.cols, mat.attrs
    for col, tok in head:
        if tok in _ATTR_COLUMNS:
            attrs.append(tok)
        elif attrs:
            raise mat.error(start + 1, col, f"header column {show(tok)} comes after the affinity columns")
        elif tok in cols:
            raise mat.error(start + 1, col, f"header names column {show(tok)} twice")
        else:
            m = GPU_LABEL.fullmatch(tok)
            ngpu = sum(1 for c in cols if GPU_LABEL.fullmatch(c))
            if m and (ascii_int(m.group(1), 6) != ngpu or len(cols) != ngpu):
                raise mat.error(start + 1, col, f"header column {show(tok)} out of order (expected "
                                f"{'GPU%d' % ngpu if len(cols) == ngpu else 'GPU columns before NIC columns'})")
            cols.append(tok)
    rows_seen: dict[str, int] = {}
    k = start + 1
    while k < len(lines) and len(rows_seen) < len(cols):
        line = lines[k]
        toks = _tokens(line)
        if not toks or toks[0][1].startswith("Legend"):
            break
        _read_row(mat, k + 1, line, toks, cell, rows_seen, head)
        k += 1
    mat.end_line = k + 1
    if missing := [c for c in cols if c not in rows_seen]:
        raise mat.error(k + 1, 1, f"matrix truncated: no row for {', '.join(missing)} (the header at line "
                        f"{start + 1} has {len(cols)} columns)")
    for line in lines[k:]:
        m = re.match(r"\s*(NIC[0-9]+)\s*:\s*(\S+)\s*$", line)
        if m:
            mat.nic_legend[m.group(1)] = m.group(2)
    return mat


def _read_row(mat: Matrix, ln: int, line: str, toks, cell, rows_seen, head) -> None:
    label_col, label = toks[0]
    if _tokens(line, _HEADER_TOKEN) == head or _is_header(toks, cell):
        raise mat.error(ln, label_col, f"duplicate header line (the header is line {mat.header_line})")
    if label not in mat.cols:
        raise mat.error(ln, label_col, f"row label {show(label)} is not a column of the header "
                        f"({', '.join(mat.cols)})")
    if label in rows_seen:
        raise mat.error(ln, label_col, f"row {label} appears twice (first at line {rows_seen[label]})")
    rows_seen[label] = ln
    n = len(mat.cols)
    values = toks[1:]
    extra = len(values) - n
    is_gpu = bool(GPU_LABEL.fullmatch(label))
    allowed = (len(mat.attrs),) if is_gpu else (0, len(mat.attrs))
    short = is_gpu and 0 <= extra < len(mat.attrs) and all(cell.fullmatch(t) for _, t in values[:n])
    if (extra < 0 or extra not in allowed) and not short:
        where = toks[1 + n][0] if extra > 0 else len(line.rstrip()) + 1
        raise mat.error(ln, where, f"ragged row {label}: {len(values)} cells, expected {n} matrix cells"
                        + (f" + {len(mat.attrs)} values ({', '.join(mat.attrs)})" if mat.attrs and is_gpu else ""))
    for (col, tok), name in zip(values[:n], mat.cols):
        if not cell.fullmatch(tok):
            expect = "X, NV<n>, PIX, PXB, PHB, NODE, SYS or SOC" if cell is TOPO_CELL else \
                "X, " + ", ".join(P2P_CODES)
            raise mat.error(ln, col, f"unknown cell {show(tok)} in row {label}, column {name} (expected {expect})")
        if tok.startswith("NV") and (ascii_int(tok[2:], 6) or MAX_LINKS_PER_EDGE + 1) > MAX_LINKS_PER_EDGE:
            raise mat.error(ln, col, f"cell {label}/{name} is {tok[:12]}: more than the {MAX_LINKS_PER_EDGE} "
                            f"NVLinks a GPU pair can have")
        if tok == "SOC" and not mat.soc_noted:
            mat.soc_noted = True
            mat.notes.append(f"cells SOC (first: row {label}, {mat.shown.where(ln, col)}): older drivers' SYS, "
                             "read as SYS")
        tok = "SYS" if tok == "SOC" else tok
        if (tok == "X") != (name == label):
            mat.notes.append(f"cell {label}/{name} is {tok} ({mat.shown.where(ln, col)}): "
                             + ("the diagonal, read as X" if name == label else "X off the diagonal, read as unknown"))
            tok = "X" if name == label else "?"
        mat.cells[(label, name)] = (tok, ln, col)
    if short:
        mat.values[label] = _values_by_position(mat, line, n)
        mat.notes.append(f"row {label} (line {ln}) has {extra} of the {len(mat.attrs)} values of "
                         f"{', '.join(mat.attrs)}: matched to the header by column, the others read as unknown")
    else:
        mat.values[label] = {a: v for a, (_, v) in zip(mat.attrs, values[n:])}


def _values_by_position(mat: Matrix, line: str, n: int) -> dict[str, str]:
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


def reconcile(mat: Matrix) -> None:
    """Make the matrix symmetric: where cell a/b and b/a differ, both take the slower reading (fewer NVLinks; a
    PCIe class over NVLink; the farther PCIe class; a known cell over an unknown one), said so in ``mat.notes``."""
    rank = {c: k for k, c in enumerate(("PIX", "PXB", "PHB", "NODE", "SYS"))}

    def slowness(tok: str) -> tuple[int, int]:
        if tok.startswith("NV"):
            return 0, -int(tok[2:])
        return (1, rank[tok]) if tok in rank else (-1, 0)

    for a, b in sorted(mat.cells, key=lambda key: mat.cells[key][1:]):      # in file order; places do not change
        (tok, ln, col), other = mat.cells[(a, b)], mat.cells[(b, a)]       # as read now: a pair is noted once
        if other[0] == tok:
            continue
        pick = max((tok, other[0]), key=slowness)
        said = [x if x != "?" else "unknown" for x in (tok, other[0])]
        mat.notes.append(f"cell {a}/{b} is {said[0]} ({mat.shown.where(ln, col)}) but {b}/{a} is {said[1]} "
                         f"({mat.shown.where(other[1], other[2])}): read as {pick}")
        mat.cells[(a, b)], mat.cells[(b, a)] = (pick, ln, col), (pick, other[1], other[2])


__all__ = ["GPU_LABEL", "Matrix", "P2P_CELL", "P2P_CODES", "TOPO_CELL", "read_matrix", "reconcile"]

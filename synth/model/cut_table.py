"""The in-cut of every GPU subset of a small fabric, as arrays: the table the enumeration bound
of :mod:`synth.model.cuts` reads.

Rows are GPU subsets up to twin classes (GPUs whose swap is an automorphism of the capacity
graph: a row holds how many of each class are inside, the first ones of each class).  Where
the switches are stars a subset's in-cut is a sum over edges, computed for all rows at once;
elsewhere it is one max-flow per row, except that on a cluster, hosts whose swap (every node
``h<a>.x`` with ``h<b>.x``) maps the capacity graph onto itself give equal cuts to a subset
and its image, and so do swaps of two local indices on every host at once (:func:`index_swaps`),
so each orbit's max-flow runs once (2 x dgx-h100 rail: 2^16 max-flows -> 2^15 + 2^7 with the
host swap, 653 with the swaps within each CPU socket too).  :func:`best_ratio` finds the enumeration's maximum ratio with NumPy floats and settles it
among the near-best rows exactly, in row order, so its value and witness are those of the loop
over rows it replaces.
"""

from __future__ import annotations

import itertools
import re
from fractions import Fraction

import numpy as np

from topo_probe.errors import TopologyError

__all__ = ["CutTable", "best_ratio", "host_swaps", "index_swaps", "maxflow_table"]


class CutTable:
    """``vecs[k]``: row ``k``'s count of inside GPUs per class (``classes``); ``cut[k]``: its
    in-cut times the graph's ``denom``; ``out[k]``: its out-cut, the in-cut of its complement."""

    def __init__(self, classes: list[list[int]], vecs: np.ndarray, cut: np.ndarray, comp_index: np.ndarray) -> None:
        self.classes, self.vecs, self.cut = classes, vecs.astype(np.int8), cut      # counts <= 16: one byte
        self.out = cut[comp_index]


def host_swaps(names: list[str], cap: dict[tuple[int, int], int], n: int) -> list[list[int]]:
    """GPU permutations (of ``0 .. n-1``, the first ``n`` of ``names``) that swapping host 0 with
    another host by name makes, where that maps the capacity graph ``cap`` onto itself."""
    hosts = sorted({int(m.group(1)) for x in names for m in [re.match(r"h(\d+)\.", x)] if m})
    out = []
    for h in hosts[1:] if hosts[:1] == [0] else []:
        pattern = re.compile(rf"(?<![0-9A-Za-z_])h(0|{h})\.")
        mapped = [pattern.sub(lambda m: f"h{h if m.group(1) == '0' else 0}.", x) for x in names]
        perm = _automorphism(names, mapped, cap, n)
        if perm is not None:
            out.append(perm)
    return out


def _automorphism(names: list[str], mapped: list[str], cap: dict[tuple[int, int], int], n: int) -> list[int] | None:
    """The GPU permutation that renaming each node ``names[k]`` to ``mapped[k]`` makes, where that
    renaming is a permutation of the nodes that maps GPUs to GPUs and ``cap`` onto itself; else None."""
    index = {x: k for k, x in enumerate(names)}
    if len(set(mapped)) != len(names) or any(x not in index for x in mapped):
        return None
    perm = [index[x] for x in mapped]
    if {(perm[u], perm[v]): c for (u, v), c in cap.items()} == cap and all(p < n for p in perm[:n]):
        return perm[:n]
    return None


def index_swaps(names: list[str], cap: dict[tuple[int, int], int], n: int) -> list[list[int]]:
    """GPU permutations (of ``0 .. n-1``, the first ``n`` of ``names``) that swapping two local
    indices ``i`` and ``j`` on every host at once makes (``h<k>.<kind><i>`` with
    ``h<k>.<kind><j>``, for the kinds with as many nodes per host as the host has GPUs: GPUs, their
    PCIe switches, NICs), where that maps the capacity graph ``cap`` onto itself: on 2 x dgx-h100
    rail the swaps within each CPU socket (GPUs 0-3, 4-7), whose GPUs differ only by rail."""
    parts = [re.fullmatch(r"(h\d+\.)([A-Za-z_]+)(\d+)", x) for x in names]
    count: dict[tuple[str, str], int] = {}
    for m in parts:
        if m:
            count[m.group(1), m.group(2)] = count.get((m.group(1), m.group(2)), 0) + 1
    gpus = {m.group(1): count[m.group(1), m.group(2)] for m in parts[:n] if m}
    if len(gpus) < 1 or len(set(gpus.values())) != 1 or not all(parts[:n]):
        return []
    per_host = next(iter(gpus.values()))
    kinds = {k for (h, k), c in count.items() if c == per_host}
    out = []
    for i, j in itertools.combinations(range(per_host), 2):
        swap = {str(i): str(j), str(j): str(i)}
        mapped = [f"{m.group(1)}{m.group(2)}{swap.get(m.group(3), m.group(3))}" if m and m.group(2) in kinds else x
                  for x, m in zip(names, parts)]
        perm = _automorphism(names, mapped, cap, n)
        if perm is not None:
            out.append(perm)
    return out


def _orbit_rows(inside: np.ndarray, perms: list[list[int]]) -> np.ndarray:
    """For each row (a GPU subset, ``inside``: rows x GPUs, every class one GPU), the first row
    of its orbit under the GPU permutations ``perms``: the row whose cut it shares."""
    n = inside.shape[1]
    bits = inside.astype(np.int64)
    masks = (bits << np.arange(n)).sum(axis=1)
    row_of = np.empty(1 << n, dtype=np.int64)
    row_of[masks] = np.arange(len(masks))
    images = [row_of[(bits << np.array(p)).sum(axis=1)] for p in perms]
    rep = np.arange(len(masks))
    while True:                               # the least row of each orbit, by propagation
        new = rep
        for img in images:
            new = np.minimum(new, new[img])
        if np.array_equal(new, rep):
            return rep
        rep = new


def maxflow_table(g, classes: list[list[int]], perms: list[list[int]]) -> CutTable:
    """The table by max-flow (``g``: the cut module's resource graph), rows in the order of
    ``itertools.product`` over the classes' counts; ``perms`` (from :func:`host_swaps` and
    :func:`index_swaps`, used only when every class is one GPU) share cuts within orbits."""
    n = g.n
    radix = [len(c) + 1 for c in classes]
    vecs = np.indices(radix, dtype=np.int64).reshape(len(radix), -1).T     # itertools.product's order
    inside = np.zeros((len(vecs), n), dtype=bool)
    for k, members in enumerate(classes):
        for pos, x in enumerate(members):
            inside[:, x] = vecs[:, k] > pos
    rep = _orbit_rows(inside, perms) if perms and all(len(c) == 1 for c in classes) else np.arange(len(vecs))
    m, a_in, a_out, s, t = g.flow_net()
    inf = g.inf()
    ins = np.where(inside, 0, inf).astype(np.int64)
    outs = inf - ins
    cut = np.zeros(len(vecs), dtype=np.int64)
    for k in np.flatnonzero(rep == np.arange(len(vecs))).tolist():
        m.set_arcs_capacity(a_in, ins[k])
        m.set_arcs_capacity(a_out, outs[k])
        m.solve(s, t)
        cut[k] = m.optimal_flow()
    cut = cut[rep]
    strides = np.array([int(np.prod(radix[k + 1:])) for k in range(len(radix))], dtype=np.int64)
    comp = ((np.array(radix) - 1 - vecs) * strides).sum(axis=1)
    return CutTable(classes, vecs, cut, comp)


def best_ratio(table: CutTable, out: bool, n: int, num, allow: np.ndarray | None, denom: int,
               members) -> tuple[Fraction, tuple[int, ...]]:
    """max over rows with ``0 < s < n`` (``s`` GPUs inside) and ``allow`` of ``num(s) / cut``
    (``out``: the out-cut), as ``denom * num / cut``, and its first row (``members(vec)`` names
    a row's GPUs, for the witness and the error of a subset nothing reaches)."""
    cut = table.out if out else table.cut
    s = table.vecs.sum(axis=1)
    ok = (s > 0) & (s < n)
    if allow is not None:
        ok &= allow
    zero = np.flatnonzero(ok & (cut == 0))
    if len(zero):
        raise TopologyError(f"GPU subset {members(tuple(table.vecs[zero[0]].tolist()))} cannot be reached from "
                            "the others")
    rows = np.flatnonzero(ok)
    nums = np.asarray(num(s[rows]), dtype=np.int64)
    ratio = nums / cut[rows]
    near = rows[ratio >= ratio.max() * (1 - 1e-9)]      # the exact maximum is among these
    best, arg = None, None
    for k in near.tolist():
        a, b = int(num(int(s[k]))), int(cut[k])
        if best is None or a * best[1] > best[0] * b:
            best, arg = (a, b), k
    return Fraction(best[0] * denom, best[1]), tuple(table.vecs[arg].tolist())

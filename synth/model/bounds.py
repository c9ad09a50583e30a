"""Lower bounds on the time of any schedule of a collective on a fabric.

Latency
-------
Within a step a transfer moves data one channel hop, so a chunk needed by rank ``q`` from rank
``p`` (``p`` in the chunk's ``pre``, ``q`` in its ``post``) takes at least ``hops(p, q)`` steps in
the channel graph and at least the smallest summed channel latency of a ``p -> q`` path.
``latency_steps`` and ``latency_us`` are the maxima over needed pairs.

Bandwidth (cut bound)
---------------------
On the *resource graph* (GPUs, NVSwitches, PCIe switches, CPUs, NICs as nodes; the fabric's
resources as edges with capacity ``bandwidth_gbps / unit_gbps`` blocks per round), any set of
edges separating GPU set A from GPU set B carries everything that must flow from A to B.  For a
GPU subset ``S`` let ``in(S)`` be the min cut from the GPUs outside ``S`` to those inside (switches
may fall on either side: a min s-t cut) and ``out(S) = in(V \\ S)``.  Rounds per block, maximised
over proper subsets ``S`` (``s = |S|``):

============== ====================================================================
allgather      ``(n - s) / in(S)``: each outside block must enter S once (copies inside are free)
reducescatter  ``(n - s) / out(S)``: one partial per outside owner must leave S
allreduce      ``1 / min(in(S), out(S))``: both sides of every cut hold contributions and need the
               whole result, so a full block must cross each cut in each direction.  The
               familiar ``(RS + AG) / n`` (Patarasuk & Yuan) bounds only schedules that finish
               the reduce-scatter before the all-gather starts; pipelined tree schedules beat
               it on uneven fabrics (a verified 1/2 against its 4/5 on DGX-1 GPUs 0-4), so it is
               reported separately as ``Bounds.phased_rounds_per_block``.
alltoall       ``s (n - s) / in(S)``: the blocks are all distinct
gather         ``(n - s) / in(S)`` with the root in S;  scatter ``(n - s) / out(S)``, root in S
broadcast      ``1 / min_p maxflow(root -> p)``; reduce ``1 / min_p maxflow(p -> root)`` (Edmonds)
============== ====================================================================

Up to :data:`ENUMERATE_MAX_RANKS` GPUs every subset is enumerated (after series-reducing
pass-through nodes and grouping interchangeable GPUs, so 16 GPUs take about a second).  Beyond
that the maximum ratio is found exactly by Dinkelbach's method: each iteration is ``n`` max-flow
problems (``rho * cut(S) + |S|`` is a cut function).  Alltoall beyond 16 GPUs uses the best of
the subsets those searches and the singletons/hosts give (``exact=False``).  All cuts are
routing-agnostic, so they bound schedules over any routing.

On a cluster of identical hosts (``Fabric.shape``) the searches use the symmetry: Dinkelbach
forces only one host's GPUs per host orbit into S (:func:`synth.model.cuts.rank_representatives`),
rooted and allreduce cuts try one host per relation to the root's host
(:func:`synth.model.cuts.targets_by_symmetry`), alltoall also tries whole hosts and groups, and
latencies come from :mod:`synth.model.cluster_latency`: every bound of a 1,024-GPU cluster in
about a second, equal to the all-pairs computation on small clusters (tests compare them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import networkx as nx

from synth.ir.collectives import CollectiveSpec, canonical
from synth.ir.fabric import Fabric
from synth.model.cuts import bandwidth_rounds
from topo_probe.errors import InvalidArgument


@dataclass(frozen=True)
class Bounds:
    """Lower bounds for one collective instance on one fabric (see module docstring).

    ``bandwidth_rounds_per_block`` is in fabric rounds (1 chunk over ``unit_gbps``) per block of
    ``count`` elements (SCCL's link-rounds per chunk at 1 chunk per block).  ``pairs`` lists
    ``(hops, latency_us)`` of the needed rank pairs; ``witness`` is a GPU subset attaining the
    bandwidth bound.
    """

    collective: str
    ranks: int
    root: int | None
    latency_steps: int
    latency_us: float
    bandwidth_rounds_per_block: Fraction
    unit_gbps: float
    exact: bool = True
    method: str = "enumeration"
    witness: tuple[int, ...] = ()
    pairs: tuple[tuple[int, float], ...] = ()
    #: allreduce only: the (RS + AG) / n bound of schedules whose two phases do not overlap
    phased_rounds_per_block: Fraction | None = None
    fabric: Fabric | None = field(default=None, compare=False, repr=False)
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def block_bytes(self, nbytes: float) -> float:
        """Bytes of one block for an nccl-tests ``size`` of ``nbytes``."""
        spec = CollectiveSpec(self.collective, self.ranks, 1, self.root)
        return float(nbytes) / max(spec.input_blocks(), spec.output_blocks())

    def rounds_per_block(self, params=None) -> Fraction:
        """Bandwidth bound in rounds per block, with ``params`` efficiency factors if given."""
        if params is None or self.fabric is None:
            return self.bandwidth_rounds_per_block
        key = tuple(params.efficiency(k) for k in ("nvlink", "pcie", "cpu", "network", "infinity_fabric"))
        if key not in self._cache:
            self._cache[key] = bandwidth_rounds(self.fabric, self._spec(), params)[0]
        return self._cache[key]

    def time_us(self, nbytes: float, params=None) -> float:
        """Lower bound (µs) for an nccl-tests size of ``nbytes`` bytes: the hardware latency of the
        longest needed path plus the cut bound's bytes at the links' rates.

        Without ``params`` the rates are the data-sheet bandwidths.  With a
        :class:`synth.model.cost.CostParams` they are its achieved rates (pass
        :func:`synth.model.physics.cost_params_for` of the fabric: the link efficiencies the NCCL
        model uses too).  No runtime overhead (launch, per-step synchronisation, slicing) enters:
        those belong to a runtime, so the bound holds for our schedules as
        :class:`synth.model.cost.CostModel` times them and for NCCL's algorithms as
        :mod:`synth.model.nccl` times them (a test checks both on every preset and cluster).
        """
        bw = float(self.rounds_per_block(params)) * self.block_bytes(nbytes) / (self.unit_gbps * 1e3)
        return self.latency_us + bw

    def _spec(self) -> CollectiveSpec:
        return CollectiveSpec(self.collective, self.ranks, 1, self.root)


# ---------------------------------------------------------------------------- public entry
def lower_bounds(fabric: Fabric, collective: str, root: int | None = None, *, method: str = "auto") -> Bounds:
    """Latency and bandwidth lower bounds of ``collective`` on ``fabric``.

    Parameters
    ----------
    fabric : Fabric
        From :func:`synth.ir.fabric.build_fabric`.
    collective : str
        Any accepted spelling; rooted collectives need ``root`` (default 0).
    method : {"auto", "enumeration", "maxflow"}
        ``auto`` enumerates up to :data:`ENUMERATE_MAX_RANKS` GPUs and uses Dinkelbach max-flow
        beyond.

    Examples
    --------
    >>> from topo_probe.machines.generators import ring
    >>> from synth.ir.fabric import build_fabric
    >>> b = lower_bounds(build_fabric(ring(8)), "allgather")
    >>> b.latency_steps, b.bandwidth_rounds_per_block
    (4, Fraction(7, 2))
    """
    name = canonical(collective)
    if method not in ("auto", "enumeration", "maxflow"):
        raise InvalidArgument(f"method must be auto, enumeration or maxflow, got {method!r}")
    spec = CollectiveSpec(name, fabric.num_ranks, 1, (0 if root is None else root) if name in
                          ("broadcast", "reduce", "gather", "scatter") else root)
    steps, lat_us, pairs = _latency(fabric, spec)
    rounds, exact, used, witness = bandwidth_rounds(fabric, spec, None, method)
    phased = phased_allreduce_bound(fabric) if name == "allreduce" else None
    return Bounds(name, spec.ranks, spec.root, steps, lat_us, rounds, fabric.unit_gbps, exact, used,
                  witness, pairs, phased, fabric)


# ---------------------------------------------------------------------------- latency
def _latency(fabric: Fabric, spec: CollectiveSpec) -> tuple[int, float, tuple[tuple[int, float], ...]]:
    if fabric.shape is not None:
        from synth.model.cluster_latency import cluster_latency
        return cluster_latency(fabric, spec)
    g = nx.DiGraph()
    g.add_nodes_from(range(spec.ranks))
    g.add_weighted_edges_from((i, j, fabric.channel_latency_us(i, j)) for (i, j) in fabric.channels)
    needed = {(p, q) for c in spec.chunks() for p in c.pre for q in c.post if p != q}
    hops = {p: nx.single_source_shortest_path_length(g, p) for p, _ in needed}
    lat = {p: nx.single_source_dijkstra_path_length(g, p) for p, _ in needed}
    pairs = sorted({(hops[p][q], round(lat[p][q], 9)) for p, q in needed})
    frontier = tuple(pr for pr in pairs if not any(o != pr and o[0] >= pr[0] and o[1] >= pr[1] for o in pairs))
    return max((h for h, _ in pairs), default=0), max((u for _, u in pairs), default=0.0), frontier


def phased_allreduce_bound(fabric: Fabric, params=None) -> Fraction:
    """``(RS + AG) / n`` rounds per block: the bound of allreduce schedules that run a complete
    reduce-scatter, then an all-gather (NCCL's rings, SCCL's compositions)."""
    n = fabric.num_ranks
    if n < 2:
        return Fraction(0)
    ag = bandwidth_rounds(fabric, CollectiveSpec("allgather", n, 1), params)[0]
    rs = bandwidth_rounds(fabric, CollectiveSpec("reducescatter", n, 1), params)[0]
    return (ag + rs) / n

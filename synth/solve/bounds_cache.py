"""Lower bounds computed once per fabric: :func:`synth.model.bounds.lower_bounds` of one fabric
object, collective and root, remembered while the fabric lives.

A ``synthesize`` run asks for the same bound several times (the bandwidth-optimal method, its
metadata, the summary, the report); at 16 GPUs each is an enumeration of 2^16 GPU subsets.  The
returned :class:`~synth.model.bounds.Bounds` also remembers its bounds at effective capacities
(:meth:`~synth.model.bounds.Bounds.rounds_per_block`).  Fabrics are treated as immutable.
"""

from __future__ import annotations

import weakref

from synth.ir.collectives import canonical
from synth.ir.fabric import Fabric

#: id(fabric) -> (weak reference to it, {(collective, root): Bounds})
_CACHE: dict[int, tuple[weakref.ref, dict]] = {}


def fabric_bounds(fabric: Fabric, collective: str, root: int | None = None):
    """``lower_bounds(fabric, collective, root)``, computed once per fabric object.

    >>> from topo_probe.machines.generators import ring
    >>> from synth.ir.fabric import build_fabric
    >>> f = build_fabric(ring(4))
    >>> fabric_bounds(f, "allgather") is fabric_bounds(f, "all_gather")
    True
    """
    from synth.model.bounds import lower_bounds
    name = canonical(collective)
    key = id(fabric)
    hit = _CACHE.get(key)
    if hit is None or hit[0]() is not fabric:
        ref = weakref.ref(fabric, lambda r, key=key, cache=_CACHE: cache.pop(key, None)
                          if cache.get(key, (None,))[0] is r else None)
        hit = _CACHE[key] = (ref, {})
    table = hit[1]
    if (name, root) not in table:
        table[(name, root)] = lower_bounds(fabric, name, root=root)
    return table[(name, root)]


__all__ = ["fabric_bounds"]

"""Lower bounds computed once per fabric: :func:`synth.model.bounds.lower_bounds` of one fabric
object, collective and root, remembered while the fabric lives.

A ``synthesize`` run asks for the same bound several times (the bandwidth-optimal method, its
metadata, the summary, the report); at 16 GPUs each is an enumeration of 2^16 GPU subsets.  The
returned :class:`~synth.model.bounds.Bounds` also remembers its bounds at effective capacities
(:meth:`~synth.model.bounds.Bounds.rounds_per_block`).  They are kept on the fabric
(:meth:`~synth.ir.fabric.Fabric.memo`), not in this module.
"""

from __future__ import annotations

from synth.ir.collectives import canonical
from synth.ir.fabric import Fabric

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
    table = fabric.memo("bounds")
    if (name, root) not in table:
        table[(name, root)] = lower_bounds(fabric, name, root=root)
    return table[(name, root)]


__all__ = ["fabric_bounds"]

"""The fastest applicable baseline for a collective at a message size, by the cost model.

What NCCL's tuning does for its fixed algorithms (pick ring or tree per size from a model),
done for our baselines: every baseline of :data:`synth.baselines.BASELINES` that applies is
built once (verified by its builder) and timed with :class:`synth.model.cost.CostModel` at the
nccl-tests size; the least time wins (ties: the order of ``names``).  Used where no plan
entry covers a call: the Communicator's fallback and ``sweep --algo plan``.

>>> from topo_probe.machines.generators import fully_connected, ring
>>> from synth.ir.fabric import build_fabric
>>> BaselineChooser(build_fabric(fully_connected(4))).best("allreduce", None, 1 << 20)[1]
'direct'
>>> BaselineChooser(build_fabric(ring(8))).best("allgather", None, 1 << 30)[1]
'ring'
"""

from __future__ import annotations

from synth.baselines import BASELINES, baseline
from synth.ir.collectives import canonical
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule
from topo_probe.errors import InvalidArgument, TopocollError, UnsupportedCollective

#: baselines tried, in tie-break order
CHOICE_ORDER = ("ring", "tree", "direct", "rhd", "bruck", "oneshot")


class BaselineChooser:
    """Builds, times and caches baselines on one fabric (see module docstring).

    Parameters
    ----------
    fabric : Fabric
    cost : synth.model.cost.CostModel, optional
        Default: ``CostModel(fabric)`` with the calibrated parameters.
    names : sequence of str
        Baselines considered, in tie-break order.
    """

    max_choices = 4096      # cached (collective, root, nbytes) decisions before the cache is reset

    def __init__(self, fabric: Fabric, cost=None, names=CHOICE_ORDER) -> None:
        unknown = [n for n in names if n not in BASELINES]
        if unknown:
            raise InvalidArgument(f"unknown baseline(s) {unknown}; expected some of {', '.join(BASELINES)}")
        self.fabric, self.names, self._cost = fabric, tuple(names), cost
        self._built: dict[tuple, Schedule | None] = {}
        self._reasons: dict[tuple, str] = {}
        self._choices: dict[tuple, tuple[Schedule, str]] = {}

    @property
    def cost(self):
        if self._cost is None:
            from synth.model.cost import CostModel
            self._cost = CostModel(self.fabric)
        return self._cost

    def get(self, name: str, collective: str, root: int | None) -> Schedule | None:
        """Baseline ``name`` of ``collective`` (built once), or None where it does not apply."""
        key = (name, canonical(collective), root)
        if key not in self._built:
            try:
                self._built[key] = baseline(name, self.fabric, collective, root=root)
            except TopocollError as e:
                self._built[key] = None
                self._reasons[key] = str(e)
        return self._built[key]

    def best(self, collective: str, root: int | None, nbytes: int) -> tuple[Schedule, str]:
        """``(schedule, baseline name)`` with the least modelled time at ``nbytes`` (nccl-tests size).

        Raises
        ------
        UnsupportedCollective
            No baseline applies (every reason is named).
        """
        key = (canonical(collective), root, int(nbytes))
        hit = self._choices.get(key)
        if hit is not None:
            return hit
        best = None
        for name in self.names:
            s = self.get(name, collective, root)
            if s is None:
                continue
            t = self.cost.schedule_time_us(s, nbytes)
            if best is None or t < best[0]:
                best = (t, s, name)
        if best is None:
            why = "; ".join(f"{n}: {self._reasons.get((n, key[0], root), '?')}" for n in self.names)
            raise UnsupportedCollective(f"{key[0]} on {self.fabric.topology_name!r}: no baseline applies ({why})")
        if len(self._choices) >= self.max_choices:
            self._choices.clear()
        self._choices[key] = (best[1], best[2])
        return self._choices[key]


__all__ = ["BaselineChooser", "CHOICE_ORDER"]

"""The (algorithm, protocol) one tuner line asks for at one size, for one communicator shape whose
GPU subsets give NCCL different machines (:mod:`.tuner_shapes`).

The plugin matches a line by ``nNodes`` and ``nRanks``, not by which GPUs, so a line for k GPUs
speaks for every k-GPU subset of the host.  At each size :func:`pick` asks, in order:

1. *help*: the representative subset's fastest pair, where it beats NCCL's modelled default there
   by ``min_gain`` and is within :data:`SHAPE_TOLERANCE` of NCCL's own modelled pick on every
   subset class;
2. *keep*: the representative's own pick, where that holds on every class;
3. *shared*: else the pair whose **worst** ratio (line time over NCCL's own time on that subset)
   over every class is least (ties: the faster on the representative).  Where even that worst
   ratio exceeds the tolerance the line says so (:attr:`Pick.worst`, :attr:`Pick.worst_gpus`).
   The cover's pairs are among the candidates, so leaving the shape to the cover is never less
   harmful; a fall-through (NCCL's own pick on one channel) cannot be had for one shape, since the
   ``-1,-1`` cover matches every shape.

So on every subset class, at the sizes the file was written from, a line is within
``max(1 + SHAPE_TOLERANCE, least worst ratio of any pair)`` of NCCL's own modelled pick.

>>> from topo_probe import get_preset
>>> from synth.model.nccl.tuner_config import tuner_models
>>> topo = get_preset("dgx1-v100")
>>> classes = [(g, tuner_models(topo.subset(g))[0]) for g in ((0, 1, 2, 3, 4), (0, 1, 2, 4, 5))]
>>> p = pick(classes[0][1], "allreduce", 30045, 0.05, classes)    # tree/LL128 helps on 0-4, 1.51x slower on the other
>>> p.kind, p.pair, p.worst
('keep', ('tree', 'LL'), 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Pick", "pick", "holds", "worst_ratio", "SHAPE_TOLERANCE"]

#: a shape's line may be this much slower than NCCL's modelled choice on another GPU subset of it
SHAPE_TOLERANCE = 0.02


@dataclass(frozen=True)
class Pick:
    """What one line asks for at one size in one world (NVLS on or off): ``kind`` ``help``,
    ``keep`` or ``shared`` (see the module text); times (µs) on the representative subset;
    ``worst`` the largest ratio of this pair's time over NCCL's own over the subset classes
    (1.0 with one class), on GPUs ``worst_gpus``."""

    algorithm: str       # model names (``ring``, ``LL128``)
    protocol: str
    kind: str
    default_label: str
    default_us: float
    chosen_us: float
    worst: float = 1.0
    worst_gpus: tuple = ()

    @property
    def pair(self) -> tuple[str, str]:
        return self.algorithm, self.protocol

    @property
    def helps(self) -> bool:
        return self.kind == "help"

    @property
    def warns(self) -> bool:
        """Whether some GPU subset gets this line more than :data:`SHAPE_TOLERANCE` slower than NCCL's own."""
        return self.worst > 1 + SHAPE_TOLERANCE


def holds(model, coll: str, pair: tuple, nbytes: int) -> bool:
    """Whether ``pair`` is available to ``model`` and timed within :data:`SHAPE_TOLERANCE` of NCCL's own choice."""
    return _ratio(model, coll, pair, nbytes) <= 1 + SHAPE_TOLERANCE


def _ratio(model, coll: str, pair: tuple, nbytes: int) -> float:
    """``pair``'s modelled time over NCCL's own choice on ``model`` (inf where NCCL does not offer it:
    the plugin skips the line there and another applies)."""
    if pair not in model.table.enabled(coll):
        return math.inf
    return model.forced(coll, *pair, nbytes).time_us / model.choose(coll, nbytes).time_us


def worst_ratio(classes: tuple, coll: str, pair: tuple, nbytes: int) -> tuple[float, tuple]:
    """``(ratio, gpus)``: the largest :func:`_ratio` of ``pair`` over ``classes`` (``(gpus, model)``)."""
    return max(((_ratio(m, coll, pair, nbytes), g) for g, m in classes), key=lambda x: x[0], default=(1.0, ()))


def pick(model, coll: str, nbytes: int, min_gain: float, classes: tuple = ()) -> Pick:
    """NCCL's modelled choice on ``model`` (the representative), the fastest pair where it beats it by
    ``min_gain`` and holds on each of ``classes`` (``(gpus, model)`` of every GPU-subset class of the
    shape, the representative's too, or empty), or the pair of least worst ratio over them."""
    d = model.choose(coll, nbytes)
    timed = {(c.algorithm, c.protocol): c for c in (model.forced(coll, a, p, nbytes) for a, p in
                                                    model.table.enabled(coll))}
    best = min(timed.values(), key=lambda c: c.time_us, default=d)
    label = f"{d.algorithm}/{d.protocol}"

    def made(c, kind, worst=(1.0, ())):
        return Pick(c.algorithm, c.protocol, kind, label, d.time_us, c.time_us, *worst)

    if (best.algorithm, best.protocol) != (d.algorithm, d.protocol) and best.time_us <= d.time_us * (1 - min_gain):
        w = worst_ratio(classes, coll, (best.algorithm, best.protocol), nbytes)
        if w[0] <= 1 + SHAPE_TOLERANCE:
            return made(best, "help", w)
    w = worst_ratio(classes, coll, (d.algorithm, d.protocol), nbytes)
    if w[0] <= 1 + SHAPE_TOLERANCE or not timed:
        return made(d, "keep", w)
    ranked = sorted(((worst_ratio(classes, coll, pair, nbytes), c.time_us, pair) for pair, c in timed.items()),
                    key=lambda x: (x[0][0], x[1]))
    (w, _, pair) = ranked[0]
    return made(timed[pair], "shared", w)

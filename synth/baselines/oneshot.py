"""One-shot all-reduce: every rank reads every peer's whole buffer and reduces it locally.

One step, no second phase: each chunk is reduced from each of the ``n - 1`` other ranks straight
into every rank (the state a step reads is the state at its start, so every rank receives its
peers' own contributions).  It moves ``n - 1`` times the buffer into every rank, against about
twice the buffer for a reduce-scatter followed by an all-gather, and so wins only where a
step's latency outweighs the bytes: small messages on boxes where every pair is a channel
(NVSwitch, xGMI mesh).  It is the small-message all-reduce of the custom all-reduce kernels of
vLLM and TensorRT-LLM; the plan picks it by size like any other schedule.

>>> from synth.ir.fabric import build_fabric
>>> from topo_probe.machines.generators import fully_connected
>>> s = build(build_fabric(fully_connected(4)), "allreduce")
>>> s.num_steps, len(s.steps[0].transfers), {t.op for t in s.steps[0].transfers}   # 4 chunks x 4 x 3 peers
(1, 48, {'reduce'})
"""

from __future__ import annotations

from synth.baselines._common import Builder, make_spec, require_channels
from synth.ir.fabric import Fabric
from synth.ir.schedule import Schedule
from topo_probe.errors import UnsupportedCollective


def build(fabric: Fabric, collective: str, *, root: int | None = None, chunks: int | None = None) -> Schedule:
    """One-shot schedule for ``allreduce`` (default 1 chunk per rank).

    Raises
    ------
    UnsupportedCollective
        For any other collective, or when a rank pair is not a channel of ``fabric``.
    """
    spec = make_spec("oneshot", fabric, collective, root, chunks, 1)
    if spec.name != "allreduce":
        raise UnsupportedCollective(f"oneshot: only allreduce, not {spec.name} (the other collectives' "
                                    f"direct schedules are one step already)")
    n = spec.ranks
    require_channels("oneshot", fabric, [(r, d) for r in range(n) for d in range(n) if r != d],
                     "oneshot allreduce reads every peer")
    b = Builder("oneshot", spec, fabric)
    b.expect(spec.num_chunks * n * (n - 1))
    for ch in spec.chunks():
        for d in range(n):
            for r in range(n):
                if r != d:
                    b.add(0, ch.id, r, d, "reduce")
    return b.finish("oneshot", {})

"""Plans against NCCL as it runs: where a synthesized schedule is not predicted at least 5 %
faster than NCCL (:class:`synth.model.nccl.NcclModel`, the tuner's own choice at each size),
the plan says ``nccl`` — NCCL is faster there, and the drop-in calls it.

>>> from topo_probe import get_preset
>>> nccl = nccl_curve(get_preset("dgx-h100"), "allreduce", [1 << 30])
>>> round(nccl["times"][0] / 1e3, 1), nccl["choices"][0]
(4.2, 'nvls/Simple/16')
"""

from __future__ import annotations

from synth.plan.planner import size_ranges

#: a schedule must beat NCCL's modelled time by this factor to keep its plan entry
MARGIN = 1.05
NCCL = "nccl"


def nccl_curve(topology, collective: str, sizes: list[int], env=None, version: tuple | None = None) -> dict:
    """NCCL's modelled times (µs) and choices at ``sizes`` on ``topology`` (one process per GPU;
    ``env`` default: NCCL defaults, whatever this process's environment says; ``version``: the
    NCCL (major, minor) or (major, minor, patch) whose rules apply, None the model's default).

    The network is modelled with InfiniBand's constants whatever transport the NICs name: the
    cost model that times our schedules has no transport-specific per-hop or per-message cost,
    so giving NCCL EFA's or TCPXO's (``simulate``/``sweep`` do, to predict NCCL alone) would make
    our schedules look faster than they would run on that network."""
    from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
    model = NcclModel(NcclMachine.from_topology(topology, net_kind="ib"), env=env if env is not None else NcclEnv(),
                      version=version)
    picks = [model.choose(collective, n) for n in sizes]
    return {"times": [c.time_us for c in picks], "choices": [c.label for c in picks],
            "machine": model.machine}


def ranges_vs_nccl(sizes: list[int], times: dict[str, list[float]], nccl_times: list[float]):
    """Plan ranges over the candidates plus ``nccl``: at each size the fastest candidate keeps
    it only when NCCL's time is at least :data:`MARGIN` times longer."""
    # NCCL wins a size iff its time < MARGIN x the best schedule's, i.e. iff time / MARGIN < best
    return size_ranges(sizes, {**times, NCCL: [t / MARGIN for t in nccl_times]})


__all__ = ["nccl_curve", "ranges_vs_nccl", "MARGIN", "NCCL"]

"""The cost model against a plain reference: the loop over transfers (with a dict of arrival
times for the critical path) and the per-size wavefront sums it was first written as (a resource's load summed transfer by transfer, every wavefront's
window recomputed for every size and slice count).  The model keeps per-schedule loads and
wavefronts and only scales them by the size; its times must equal the reference's bit for bit,
so plans and reports stay the same."""

from __future__ import annotations

import math

import numpy as np
import pytest

from synth.baselines import available_baselines, baseline
from synth.ir.fabric import build_fabric
from synth.model.cost import CostModel, Estimate, chunk_bytes
from synth.plan.planner import PLAN_SIZES
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import get_preset


def _reference_matrix(m: CostModel, schedule):
    """Loads (chunks) and latencies (µs) per step, one transfer and route entry at a time, and
    the critical path: a transfer leaves once its chunk has arrived at its sender (a dict of
    arrival times per rank and chunk, updated after each step), costs the step overhead and
    arrives its channel's latency later."""
    res = {r: k for k, r in enumerate(m.fabric.resources)}
    kinds = [info.kind for info in m.fabric.resources.values()]
    loads = np.zeros((schedule.num_steps, len(res)))
    lats = np.zeros(schedule.num_steps)
    ready, path = {}, 0.0
    for si, step in enumerate(schedule.steps):
        lat, arrivals = 0.0, []
        for t in step.transfers:
            crosses = False
            for r, f in m.fabric.channels[(t.src, t.dst)]:
                loads[si, res[r]] += float(f)
                crosses = crosses or kinds[res[r]] == "network"
            extra = m.params.network_latency_us if crosses else 0.0
            here = max(0.0, m.fabric.channel_latency_us(t.src, t.dst) + extra)
            lat = max(lat, here)
            arrivals.append(((t.dst, t.chunk), ready.get((t.src, t.chunk), 0.0) + m.params.step_overhead_us + here))
        for key, when in arrivals:
            ready[key] = max(ready.get(key, 0.0), when)
            path = max(path, when)
        lats[si] = lat
    return loads, lats, path


def _reference_pipelined(m: CostModel, loads, lats, path: float, cb: float, k: int) -> Estimate:
    S, p = len(lats), m.params
    if S == 0:
        return Estimate(p.launch_us, k, 0, 0.0, p.launch_us)
    csum = np.vstack([np.zeros((1, loads.shape[1])), np.cumsum(loads, axis=0)])
    w = np.arange(S + k - 1)
    lo, hi = np.maximum(0, w - k + 1), np.minimum(S - 1, w)
    window = csum[hi + 1] - csum[lo]
    t = np.max(window / m.rate, axis=1) * (cb / k)
    fixed = p.launch_us + path + (k - 1) * (p.step_overhead_us + max(lats))
    pipe = float(np.sum(2.0 * np.sqrt(p.slice_overhead_us * t)))
    bw = float(np.sum(t))
    return Estimate(fixed + bw + pipe, k, len(w), bw, fixed)


def _reference_estimate(m: CostModel, schedule, nbytes: int, matrix=None) -> Estimate:
    """``matrix``: :func:`_reference_matrix`'s result when already computed (a pure function of the schedule)."""
    loads, lats, path = _reference_matrix(m, schedule) if matrix is None else matrix
    cb = chunk_bytes(schedule, nbytes)
    ests = [_reference_pipelined(m, loads, lats, path, cb, k) for k in sorted(set(m.params.pipeline_slices))]
    return min(ests, key=lambda e: (e.time_us, e.slices))


def _cases():
    out = []
    for topo in (get_preset("dgx1-v100"), cluster("dgx-h100", 2), cluster("dgx-a100", 2),
                 cluster("dgx-h100", 4, spine_oversubscription=2.0, hosts_per_leaf=2)):
        f = build_fabric(topo)
        for coll in ("allgather", "allreduce", "broadcast", "alltoall"):
            for name in available_baselines(f, coll):
                out.append(pytest.param(f, baseline(name, f, coll), id=f"{topo.name}-{coll}-{name}"))
    return out


@pytest.mark.parametrize("fabric, schedule", _cases())
def test_times_equal_the_reference_bit_for_bit(fabric, schedule):
    m = CostModel(fabric)
    assert m.params.network_latency_us > 0 or fabric.shape is None     # the clusters add the network hop
    sizes = [0, 1, 3] + PLAN_SIZES[::3] + [PLAN_SIZES[-1], 10**10 + 7]
    ref = _reference_matrix(m, schedule)      # computed once: it depends on the schedule only
    for nb in sizes:                          # the model reuses the schedule's wavefronts across sizes
        assert m.estimate(schedule, nb) == _reference_estimate(m, schedule, nb, ref)
    assert math.isfinite(m.schedule_time_us(schedule, PLAN_SIZES[-1]))
    ref_loads, ref_lats, _ = ref
    for si, step in enumerate(schedule.steps[:3]):
        load, lat = m.step_loads(step, si)
        assert np.array_equal(load, ref_loads[si]) and lat == ref_lats[si]


def test_whole_steps_read_as_arrays_on_a_cluster(monkeypatch):
    """Cluster steps of at least ARRAY_TRANSFERS transfers take the RouteArrays path (three pair
    classes: same host, same leaf, other leaf); with the threshold out of reach they take the
    one-by-one path; both give the reference's loads and latency bit for bit."""
    import synth.model.cost as cost
    fabric = build_fabric(cluster("dgx-h100", 4, spine_oversubscription=2.0, hosts_per_leaf=2))
    s = baseline("direct", fabric, "alltoall")
    assert len(s.steps[0].transfers) >= cost.ARRAY_TRANSFERS
    m = CostModel(fabric)
    ref_loads, ref_lats, ref_path = _reference_matrix(m, s)
    assert m._route_arrays() is not None
    for si, step in enumerate(s.steps):
        load, lat = m.step_loads(step, si)
        assert np.array_equal(load, ref_loads[si]) and lat == ref_lats[si]
    monkeypatch.setattr(cost, "ARRAY_TRANSFERS", 10**9)
    slow = CostModel(fabric)
    for si, step in enumerate(s.steps):
        load, lat = slow.step_loads(step, si)
        assert np.array_equal(load, ref_loads[si]) and lat == ref_lats[si]
    assert slow._arrays is None                              # never asked for
    assert m._matrix(s)[2] == slow._matrix(s)[2] == ref_path   # the critical path both ways


def test_a_step_with_a_pair_that_is_no_channel_is_reported_by_transfer():
    from synth.ir.schedule import Schedule, Step, Transfer
    from topo_probe.errors import ScheduleInvalid
    fabric = build_fabric(cluster("dgx-h100", 2))
    good = [Transfer(0, i, j) for i in range(16) for j in range(16) if i != j][:100]
    bad = Schedule("allgather", 16, 1, (Step(1, tuple(good[:70] + [Transfer(0, 3, 3)] + good[70:])),))
    with pytest.raises(ScheduleInvalid, match="no-channel") as e:
        CostModel(fabric).schedule_time_us(bad, 1 << 20)
    assert e.value.transfer == 70

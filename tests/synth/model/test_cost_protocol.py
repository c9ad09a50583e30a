"""The LL protocol in the cost model: NCCL's ring/LL hop latencies (tuning.cc ``baseLat`` ring
{LL 6.6, Simple 8.4}, ``hwLat`` NVLink ring {0.6, 3.4}, PCI {1.0, 5.7}, NET {2.7, 14}: NCCL
2.28.3) scaled by the fitted ratio for every hop after the first, twice the bytes on the wire,
and Simple's launch and first hop (our executor's LL changes only how a step waits for an earlier
one); hand-computed cases, and every LL time at or above the lower bound."""

from __future__ import annotations

from dataclasses import replace

import pytest

from synth.baselines import available_baselines, baseline
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.model.bounds import lower_bounds
from synth.model.cost import CostModel, CostParams
from synth.model.nccl import DEFAULT_PARAMS
from synth.model.physics import LL_MAX_BYTES, cost_params_for, step_costs_us
from topo_probe.errors import InvalidArgument
from topo_probe.machines.presets import get_preset
from topo_probe.topology.model import Topology

PLAIN = CostParams(launch_us=3.0, step_overhead_us=2.0, slice_overhead_us=0.0, pipeline_slices=(1,))


def pair():
    t = Topology("pair-ll")
    t.add_gpu(0)
    t.add_gpu(1)
    t.add_link("gpu0", "gpu1", kind="nvlink", bandwidth_gbps=25.0, latency_us=1.0)
    return build_fabric(t), Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))


def test_a_bare_fabric_moves_its_params_by_nccls_table_ratios_and_doubles_the_bytes():
    fab, s = pair()
    m = CostModel(fab, PLAIN)
    # Simple: launch 3 + step 2 + wire 1 + 1e6 B at 25 GB/s x 0.8 (20e3 B/µs) = 56 µs
    assert m.schedule_time_us(s, 2_000_000) == pytest.approx(56.0, rel=1e-12)
    # LL, one step: the same launch 3 and first step 2 (nothing to wait for), wire 1, 2e6 B on the
    # wire: 100 µs -- a one-step schedule only pays LL's doubled bytes
    ll = m.estimate(s, 2_000_000, "ll")
    assert ll.time_us == pytest.approx(3.0 + 2.0 + 1.0 + 100.0, rel=1e-12)
    assert ll.protocol == "ll" and m.estimate(s, 2_000_000).protocol == "simple"
    assert ll.bandwidth_us == pytest.approx(100.0, rel=1e-12)
    # LL parameters given: a one-step schedule still costs Simple's launch and hop (its hops after
    # the first use them: the ring test below)
    given = CostModel(fab, PLAIN, replace(PLAIN, launch_us=0.5, step_overhead_us=0.25))
    assert given.schedule_time_us(s, 8, "ll") == pytest.approx(3.0 + 2.0 + 1.0 + 2 * 4 / 20e3, rel=1e-12)


def test_a_machine_takes_nccls_ring_ll_latencies_scaled_by_its_fitted_ratio():
    topo = get_preset("dgx-h100")
    scale = DEFAULT_PARAMS.latency_scale("sm90", "LL")
    launch, hop, net = step_costs_us(topo, protocol="ll")
    assert (launch, hop) == pytest.approx((6.6 * scale, 0.6 * scale), rel=1e-12)
    assert net == pytest.approx(2.7 + DEFAULT_PARAMS.net_latency_us("ib", "LL"), rel=1e-12)
    fab = build_fabric(topo)
    ring = baseline("ring", fab, "allgather")                    # one chain of 7 hops over NVLink
    one = (1,)
    simple = CostModel(fab, replace(cost_params_for(fab), pipeline_slices=one),
                       replace(cost_params_for(fab, protocol="ll"), pipeline_slices=one))
    wire = fab.channel_latency_us(0, 1)
    ll = simple.estimate(ring, 1 << 20, "ll")
    # Simple's launch and first hop, then NCCL's LL hop, or the wire where the wire alone is slower
    s_scale = DEFAULT_PARAMS.latency_scale("sm90", "Simple")
    assert ll.fixed_us == pytest.approx(8.4 * s_scale + max(3.4 * s_scale, wire) + 6 * max(0.6 * scale, wire),
                                        rel=1e-12)
    assert ll.bandwidth_us == pytest.approx(2 * simple.estimate(ring, 1 << 20).bandwidth_us, rel=1e-12)
    assert simple.estimate(ring, 8).fixed_us == pytest.approx(8.4 * s_scale + 7 * max(3.4 * s_scale, wire), rel=1e-12)
    # LL's latency wins small messages, its doubled bytes lose big ones
    assert simple.schedule_time_us(ring, 8, "ll") < simple.schedule_time_us(ring, 8)
    assert simple.schedule_time_us(ring, 1 << 30, "ll") > simple.schedule_time_us(ring, 1 << 30)


def test_an_unknown_protocol_is_named():
    fab, s = pair()
    with pytest.raises(InvalidArgument, match="protocol must be one of simple, ll, got 'll128'"):
        CostModel(fab, PLAIN).estimate(s, 8, "ll128")
    with pytest.raises(InvalidArgument, match="got 'LL'"):
        cost_params_for(get_preset("dgx-h100"), protocol="LL")


@pytest.mark.parametrize("preset", ["dgx1-v100", "dgx-a100", "dgx-h100", "mi300x", "pcie-8gpu-2socket"])
def test_every_ll_time_meets_the_lower_bound(preset):
    """Every baseline of every collective under LL, 8 B - 1 MiB: at or above the bound computed
    from the same link constants (wire latency of the longest needed path plus the cut's bytes)."""
    fab = build_fabric(get_preset(preset))
    params, cost = cost_params_for(fab), CostModel(fab)
    sizes = [8 << k for k in range(0, 18, 3)] + [LL_MAX_BYTES]
    checked = 0
    for coll in ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "alltoall", "gather", "scatter"):
        root = 0 if coll in ("broadcast", "reduce", "gather", "scatter") else None
        bound = lower_bounds(fab, coll, root=root)
        for name in available_baselines(fab, coll):
            s = baseline(name, fab, coll, root=root)
            for n in sizes:
                assert cost.schedule_time_us(s, n, "ll") >= bound.time_us(n, params) - 1e-9, (coll, name, n)
                checked += 1
    assert checked >= 8 * len(sizes)


@pytest.mark.parametrize("preset", ["dgx1-v100", "dgx-a100", "dgx-h100"])
def test_our_ring_under_ll_costs_nccls_ring_ll_at_8_bytes_plus_the_simple_launch_and_first_hop(preset):
    """Like with like: at 8 B our ring all-reduce under LL and NCCL's ring/LL (NCCL_ALGO=Ring
    NCCL_PROTO=LL) are latency alone, NCCL's scaled LL base plus 14 hops; ours launches as Simple
    and its first step waits for nothing (Simple's launch and first hop), and it pays the wire where
    that is slower than NCCL's hop (DGX H100's 0.7 µs NVLink wire against LL's 0.6 µs hop)."""
    from synth.model.nccl import NcclMachine, NcclModel
    from synth.model.nccl.env import NcclEnv
    topo = get_preset(preset)
    fab = build_fabric(topo)
    ring = baseline("ring", fab, "allreduce")
    nccl = NcclModel(NcclMachine.from_topology(topo), env=NcclEnv.from_environ({"NCCL_ALGO": "Ring",
                                                                                "NCCL_PROTO": "LL"}))
    theirs = nccl.choose("allreduce", 8)
    assert (theirs.algorithm, theirs.protocol) == ("ring", "LL")
    launch, hop, _ = step_costs_us(topo, protocol="ll")
    assert theirs.time_us == pytest.approx(launch + 14 * hop, rel=1e-3)
    wire = fab.channel_latency_us(0, 1)
    s_launch, s_hop, _ = step_costs_us(topo)
    assert CostModel(fab).schedule_time_us(ring, 8, "ll") == pytest.approx(
        s_launch + max(s_hop, wire) + 13 * max(hop, wire), rel=1e-3)

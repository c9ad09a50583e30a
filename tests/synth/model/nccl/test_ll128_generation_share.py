"""LL128 on the GPU links runs at the GPU generation's share of its payload rate: NCCL's own per-channel ring
LL128 figure (``perChMaxRingLL128Bws``, NVIDIA/nccl v2.28.9-1 src/graph/tuning.cc lines 175-180) relative to
Hopper's, at most 1, in place of an A100 constant fitted on one class (``proto_eff[sm80, LL128]``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from synth.model.nccl.channel_caps import ll128_generation_share
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.params import DEFAULT_PARAMS
from synth.model.nccl.runtime import collective_time_us
from synth.model.nccl.tuning import TuneTable
from topo_probe import cluster, get_preset


@pytest.mark.parametrize("preset,share", [("dgx1-v100", 20.0 / 36.7), ("dgx-a100", 20.0 / 36.7), ("dgx-h100", 1.0),
                                          ("hgx-b200", 1.0), ("mi300x", 1.0)])
def test_share_is_the_generations_per_channel_figure_over_hoppers(preset, share):
    assert ll128_generation_share(NcclMachine.from_topology(get_preset(preset))) == pytest.approx(share)


def test_a100_ring_ll128_moves_the_share_of_its_links():
    """8 x A100, 16 MiB ring/LL128 on 24 channels: 12 links x 25 GB/s x link_eff x 120/128 x proto_eff x 20/36.7
    (hand-worked: below NCCL's own ring ceiling of 12 x 20 GB/s), plus the latency."""
    m = NcclMachine.from_topology(get_preset("dgx-a100"))
    t = TuneTable.build(m, NcclEnv(), (2, 28))
    p = replace(DEFAULT_PARAMS, proto_eff={("*", "LL"): 1.0, ("*", "LL128"): 1.0},
                link_eff={**DEFAULT_PARAMS.link_eff, ("sm80", "nvlink"): 0.8})
    size = 16 << 20
    bus = 12 * 25.0 * 0.8 * 120 / 128 * 20.0 / 36.7
    assert bus < 12 * 20.0
    wire = size * 2 * 7 / 8 / 1000.0
    slow = collective_time_us(t, "allreduce", "ring", "LL128", 24, size, p)
    fast = collective_time_us(t, "allreduce", "ring", "LL128", 24, size,
                              replace(p, proto_eff={("*", "LL"): 1.0, ("*", "LL128"): 36.7 / 20.0}))
    assert slow - fast == pytest.approx(wire / bus - wire / min(bus * 36.7 / 20.0, 12 * 20.0), rel=1e-6)


def test_only_the_ring_takes_it(monkeypatch):
    """Two DGX-1 over 4 x 100 Gb/s: the share (the ring figure's) slows ring/LL128 on the GPU links by 20/36.7 and
    leaves a tree's LL128 chain (NCCL's own tree figure, :func:`tree_ll128_cap_gbs`) and the NICs' side as they were."""
    from synth.model.nccl import runtime
    m = NcclMachine.from_topology(cluster("dgx1-v100", nodes=2, nics_per_node=4, nic_gbps=12.5))
    t = TuneTable.build(m, NcclEnv(), (2, 28))
    p = replace(DEFAULT_PARAMS, tree_ll128_channel_eff=10.0, proto_eff={("*", "LL"): 1.0, ("*", "LL128"): 0.5})
    n = t.graphs.n_channels
    before = {a: (runtime._intra_bus_gbs(t, "allreduce", a, "LL128", n, p), runtime._net_bus_gbs(t, "allreduce", a, "LL128", p))
              for a in ("ring", "tree")}
    monkeypatch.setattr(runtime, "ll128_generation_share", lambda m: 1.0)
    assert runtime._intra_bus_gbs(t, "allreduce", "ring", "LL128", n, p) == pytest.approx(before["ring"][0] * 36.7 / 20.0)
    assert runtime._intra_bus_gbs(t, "allreduce", "tree", "LL128", n, p) == before["tree"][0]
    assert runtime._net_bus_gbs(t, "allreduce", "ring", "LL128", p) == before["ring"][1]


def test_the_fit_drops_the_retired_a100_constants():
    """A committed file written before the share still holds ``proto_eff[sm80/LL128]`` and
    ``lat_scale[sm80/LL128]``: the fit starts without them (they would stack on the share), and keeps what it
    names or the defaults hold."""
    import sys

    from _paths import ROOT
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fit_nccl_model as f
    old = replace(DEFAULT_PARAMS, proto_eff={**DEFAULT_PARAMS.proto_eff, ("sm80", "LL128"): 0.6925},
                  lat_scale={**DEFAULT_PARAMS.lat_scale, ("sm80", "LL128"): 1.278})
    base = f.without_retired(old)
    assert ("sm80", "LL128") not in base.proto_eff and ("sm80", "LL128") not in base.lat_scale
    assert base.proto_eff[("*", "LL128")] == old.proto_eff[("*", "LL128")]
    assert base.lat_scale[("sm80", "Simple")] == old.lat_scale[("sm80", "Simple")]
    assert base.ring_net_eff == old.ring_net_eff

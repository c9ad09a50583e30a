"""RouteTable (synth/ir/route_table.py) against the fabric's own channel dictionary: every channel's
entries in route order, Fabric.load's array path equal to the one-by-one loop to the last bit, and
the cost model's StepRoutes equal to its one-channel look-ups (latency with the network's extra)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.ir.fabric import ARRAY_SENDS, build_fabric
from synth.ir.route_table import route_table
from synth.model.routes import ChannelRoutes, StepRoutes
from topo_probe.machines.generators import fully_connected
from topo_probe.machines.presets import get_preset

FABRICS = {"dgx-a100": build_fabric(get_preset("dgx-a100")),            # two-entry routes through NVSwitch
           "pcie": build_fabric(get_preset("pcie-8gpu-2socket")),        # PCIe / CPU routes of several hops
           "full5": build_fabric(fully_connected(5))}


def _one_by_one(fabric, sends):
    """Fabric.load's loop, written again: chunks x float(fraction), in send and route order."""
    out = {}
    for i, j, k in sends:
        for r, f in fabric.channels[(i, j)]:
            out[r] = out.get(r, 0.0) + k * float(f)
    return out


def test_every_channel_reads_back_in_route_order():
    for fab in FABRICS.values():
        t = route_table(fab)
        pairs = list(fab.channels)
        starts, idx, frac, _ = t.entries([i for i, _ in pairs], [j for _, j in pairs])
        for k, (i, j) in enumerate(pairs):
            got = [(t.names[r], f) for r, f in zip(idx[starts[k]:starts[k + 1]], frac[starts[k]:starts[k + 1]])]
            assert got == [(r, float(f)) for r, f in fab.channels[(i, j)]]
        assert route_table(fab) is t                       # made once


def test_a_pair_that_is_no_channel_or_out_of_range_gives_none():
    t = route_table(FABRICS["full5"])
    assert t.entries([0], [0]) is None and t.entries([0], [5]) is None and t.entries([-1], [2]) is None


@settings(derandomize=True, max_examples=30, deadline=None)
@given(st.sampled_from(sorted(FABRICS)), st.data())
def test_load_by_arrays_equals_the_loop_exactly(name, data):
    fab = FABRICS[name]
    pairs = list(fab.channels)
    picks = data.draw(st.lists(st.integers(0, len(pairs) - 1), min_size=ARRAY_SENDS, max_size=ARRAY_SENDS + 50))
    amounts = data.draw(st.lists(st.sampled_from([1.0, 0.5, 3.0, 1 / 3]), min_size=len(picks), max_size=len(picks)))
    sends = [(*pairs[p], a) for p, a in zip(picks, amounts)]
    got, want = fab.load(sends), _one_by_one(fab, sends)
    assert list(got) == list(want) and all(got[r] == want[r] for r in want)   # same order, same bits


def test_step_routes_match_one_channel_look_ups_with_the_network_extra():
    fab = FABRICS["pcie"]
    index = {r: k for k, r in enumerate(fab.resources)}
    network = np.array([k % 3 == 0 for k in range(len(index))])          # some resources "cross the network"
    one = ChannelRoutes(fab, index, network, 7.5)
    steps = StepRoutes(route_table(fab), fab, network, 7.5)
    pairs = list(fab.channels)
    idx, frac, lat = steps.entries([i for i, _ in pairs], [j for _, j in pairs])
    assert idx.tolist() == np.concatenate([one.get(p)[0] for p in pairs]).tolist()
    assert frac.tolist() == np.concatenate([one.get(p)[1] for p in pairs]).tolist()
    assert lat.tolist() == [one.get(p)[2] for p in pairs]
    assert any(v > fab.channel_latency_us(*p) for v, p in zip(lat.tolist(), pairs))   # the extra is charged somewhere

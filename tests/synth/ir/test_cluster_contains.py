"""``(i, j) in channels`` of a cluster fabric (the fast path for int pairs) says what the
template lookup says, and what the explicit all-pairs fabric holds, for every key tried:
all pairs, equal ranks, out of range, bools, floats, lists and junk."""

from __future__ import annotations

import pytest

from synth.ir.fabric import build_fabric
from topo_probe.machines.clusters import cluster


def _by_template(channels, key) -> bool:
    try:
        channels._template(key)
    except KeyError:
        return False
    return True


@pytest.mark.parametrize("topo", [cluster("dgx-h100", 2), cluster("dgx-a100", 4, spine_oversubscription=2.0,
                                                                  hosts_per_leaf=2, rail_optimized=True)],
                         ids=["2xdgx-h100", "4xdgx-a100-rails-spine"])
def test_membership_matches_the_templates_and_the_explicit_fabric(topo):
    structured, explicit = build_fabric(topo), build_fabric(topo, structured=False)
    ch = structured.channels
    n = structured.num_ranks
    keys = [(i, j) for i in range(-1, n + 1) for j in range(-1, n + 1)]
    keys += [(True, 1), (0, 1.0), [0, 1], (0,), (0, 1, 2), "ab", None, (n, 0), (0, -n)]
    for key in keys:
        want = _by_template(ch, key)
        assert (key in ch) == want, key
        if isinstance(key, tuple) and len(key) == 2 and all(type(x) is int for x in key):
            assert want == (key in explicit.channels), key
    assert sum((i, j) in ch for i in range(n) for j in range(n)) == len(ch)

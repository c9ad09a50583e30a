"""``(i, j) in channels`` of a cluster fabric (the fast path for int pairs) says what the
template lookup says, and what the explicit all-pairs fabric holds, for every key tried:
all pairs, equal ranks, out of range, bools, floats, lists and junk.  NumPy integer ranks are ranks (the project's
one integer rule, topo_probe.number_rules.is_int, as on a single-host fabric's dict of int pairs)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from synth.solve.cluster.compose import hierarchical
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


@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint16])
def test_numpy_integer_ranks_have_the_channels_of_python_ints(kind):
    """Reference: the explicit all-pairs fabric (a dict keyed by Python int pairs, which NumPy integers hash as)."""
    topo = cluster("dgx-a100", 2, rail_optimized=True)
    ch, explicit = build_fabric(topo).channels, build_fabric(topo, structured=False).channels
    n = build_fabric(topo).num_ranks
    for i in range(n):
        for j in range(n):
            key = (kind(i), kind(j))
            assert (key in ch) == ((i, j) in explicit), key
            if (i, j) in explicit:
                assert sorted(ch[key], key=repr) == sorted(explicit[(i, j)], key=repr), key
    assert (np.bool_(True), 1) not in ch and (True, 1) not in ch


def test_a_schedule_with_numpy_ranks_verifies_as_with_python_ints_on_a_cluster_fabric():
    f = build_fabric(cluster("dgx-a100", 2, rail_optimized=True))
    s = hierarchical(f, "allgather")
    steps = [replace(st, transfers=[replace(t, src=np.int64(t.src), dst=np.int64(t.dst)) for t in st.transfers])
             for st in s.steps]
    assert check(s.with_(steps=steps), f) == check(s, f)

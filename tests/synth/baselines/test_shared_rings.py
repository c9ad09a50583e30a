"""Ring plans are shared between fabrics of the same structure (synth.ir.shared_results): every plan
a fabric gets from the shared cache equals a fresh, uncached search (``ringsearch._search``) on a
fabric built anew, for every preset and for the random link matrices of
tests/synth/pipeline/test_link_matrix_every_command.py, and no caller can change what another gets."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from synth.baselines import ringsearch
from synth.baselines.ringsearch import SEARCH_MAX_RANKS, find_rings
from synth.ir.fabric import build_fabric
from synth.ir.shared_results import SharedResults
from topo_probe import PRESETS, get_preset
from topo_probe.machines.generators import ring
from topo_probe.parsers.link_matrix import parse_link_matrix

_EVERY_COMMAND = Path(__file__).resolve().parents[1] / "pipeline" / "test_link_matrix_every_command.py"


def _random_link_matrix(seed: int):
    """The generator of the every-command test (loaded from its file: one generator, not a copy)."""
    spec = importlib.util.spec_from_file_location("_every_command", _EVERY_COMMAND)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    name, links = module.random_link_matrix(seed)
    return parse_link_matrix({"format": "link-matrix", "name": name, "links": links, "link_bandwidth_gbps": 25.0})


def _topologies():
    yield from ((p, lambda p=p: get_preset(p)) for p in PRESETS)
    yield from ((f"link-matrix seed {s}", lambda s=s: _random_link_matrix(s)) for s in range(16))


def _deep_immutable(value) -> bool:
    if isinstance(value, tuple):
        return all(_deep_immutable(v) for v in value)
    return isinstance(value, (int, bool))


@pytest.mark.parametrize("name,make", list(_topologies()), ids=lambda v: v if isinstance(v, str) else "")
def test_a_shared_plan_equals_a_fresh_uncached_search(name, make, monkeypatch):
    monkeypatch.setattr(ringsearch, "_shared", SharedResults(ringsearch.SHARED_PLANS))   # this test's own cache
    first = build_fabric(make())
    if first.num_ranks > SEARCH_MAX_RANKS:
        pytest.skip(f"{name}: rail-aligned cluster rings, not searched (nor shared)")
    for max_rings in (64, 2):
        kept = find_rings(first, max_rings)
        searched = ringsearch._search
        monkeypatch.setattr(ringsearch, "_search", lambda *a: pytest.fail("searched again: not shared"))
        second = build_fabric(make())
        shared = find_rings(second, max_rings)               # from the cache: no search
        monkeypatch.setattr(ringsearch, "_search", searched)
        fresh = searched(build_fabric(make()), max_rings)    # the uncached search on a new fabric
        assert shared == fresh and kept == fresh, f"{name}, max_rings={max_rings}"
        assert shared is not kept and second.memo("rings")[max_rings] is shared
        assert _deep_immutable(dataclasses.astuple(shared)), "a plan must hold only tuples, ints and bools"
        with pytest.raises(dataclasses.FrozenInstanceError):
            shared.rings = ()


def test_fabrics_of_another_round_unit_do_not_share():
    """Same topology and fingerprint, half the round unit: each link of the 5-GPU ring carries 2
    chunks a round instead of 1, so (by hand) each direction's ring fits twice, 4 rings, not 2.
    A key of the fingerprint alone would hand the first fabric's 2 rings to the second."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(ringsearch, "_shared", SharedResults(ringsearch.SHARED_PLANS))
    try:
        topo = ring(5)
        plain = build_fabric(topo)
        half = build_fabric(topo, unit_gbps=plain.unit_gbps / 2)
        assert plain.fingerprint == half.fingerprint
        assert len(find_rings(plain).rings) == 2           # one ring each way, each link once
        assert len(find_rings(half).rings) == 4            # twice each way: two chunks a round
        assert len(ringsearch._shared) == 2
    finally:
        monkeypatch.undo()


def test_the_cache_is_bounded_and_drops_the_least_recently_used():
    kept = SharedResults(2)
    made = []
    for key in ("a", "b", "a", "c", "b"):
        kept.get(key, lambda key=key: made.append(key) or key.upper())
    assert made == ["a", "b", "c", "b"] and len(kept) == 2      # "b" was dropped for "c", then made again

"""The memo of a collective's size-free terms (synth.model.nccl.runtime.SizeFreeTerms): an NcclModel's times,
warm after thousands of sizes, equal the unmemoised computation bit for bit; the memo belongs to one table and one
set of params, so two machines (or params) differing in one field never share an entry.

The reference is the computation without a memo: ``latency.latency_us`` and ``runtime._intra_bus_gbs`` called
directly, and ``collective_time_us`` without a memo (each term computed for that call alone)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _random_topologies import PARTIAL_PRESETS, partial_allocation
from synth.model.nccl import DEFAULT_PARAMS, NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.latency import latency_us
from synth.model.nccl.runtime import SizeFreeTerms, _intra_bus_gbs, collective_time_us
from synth.model.nccl.tuning import NCCL_COLLS
from topo_probe import cluster, get_preset

PRESETS = ("dgx1-v100", "dgx-a100", "dgx-h100", "hgx-b200", "pcie-8gpu-2socket", "mi300x", "l40s-8gpu-pcie")
VERSIONS = ((2, 4), (2, 8), (2, 12), (2, 18), (2, 23), (2, 27), (2, 28), (2, 29, 7), None)
ENVS = ({}, {"NCCL_P2P_DISABLE": "1"}, {"NCCL_NVLS_ENABLE": "0"}, {"NCCL_BUFFSIZE": str(1 << 20)},
        {"NCCL_MAX_NCHANNELS": "4"}, {"NCCL_PROTO": "^LL128"})


@st.composite
def machines(draw) -> NcclMachine:
    """A preset on 1-4 hosts, or some GPUs of one (pairs without a link go over PCIe)."""
    if draw(st.booleans()):
        preset = draw(st.sampled_from(PARTIAL_PRESETS))
        gpus = draw(st.lists(st.integers(0, 7), min_size=2, max_size=8, unique=True))
        return NcclMachine.from_topology(partial_allocation(preset, sorted(gpus)))
    preset, nodes = draw(st.sampled_from(PRESETS)), draw(st.integers(1, 4))
    return NcclMachine.from_topology(cluster(preset, nodes=nodes) if nodes > 1 else get_preset(preset))


def _cold_us(model: NcclModel, coll: str, algo: str, proto: str, channels: int, nbytes: int) -> float:
    return collective_time_us(model.table, coll, algo, proto, channels, nbytes, model.params)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machine=machines(), env=st.sampled_from(ENVS), version=st.sampled_from(VERSIONS),
       sizes=st.lists(st.integers(0, 1 << 34), min_size=1, max_size=8),
       channels=st.lists(st.integers(1, 64), min_size=1, max_size=6))
def test_warm_memo_equals_the_unmemoised_computation(machine, env, version, sizes, channels):
    """Every enabled (collective, algorithm, protocol) at random sizes (channel counts follow from the size) and
    random channel counts, in turn through one model's memo: each value is the one computed without it."""
    model = NcclModel(machine, DEFAULT_PARAMS, NcclEnv.from_environ(env), version)
    t, p = model.table, model.params
    for coll in NCCL_COLLS:
        for algo, proto in t.enabled(coll):
            for nbytes in sizes:
                warm = model.forced(coll, algo, proto, nbytes)
                assert warm.time_us == _cold_us(model, coll, algo, proto, warm.channels, nbytes)
            for ch in channels + [model.forced(coll, algo, proto, n).channels for n in sizes]:
                assert model._size_free().latency_us(coll, algo, proto, ch) == latency_us(t, coll, algo, proto, p, ch)
                assert model._size_free().intra_bus_gbs(coll, algo, proto, ch) == _intra_bus_gbs(
                    t, coll, algo, proto, ch, p)


def _all_times(model: NcclModel) -> dict:
    sizes = [1 << e for e in range(0, 35, 3)]
    return {(c, a, p, n): model.forced(c, a, p, n)
            for c in NCCL_COLLS for a, p in model.table.enabled(c) for n in sizes}


def _all_terms(model: NcclModel) -> dict:
    """The memo's latency and GPU-link bus bandwidth of every enabled pair on 1-16 channels."""
    terms = model._size_free()
    return {(c, a, p, ch): (terms.latency_us(c, a, p, ch), terms.intra_bus_gbs(c, a, p, ch))
            for c in NCCL_COLLS for a, p in model.table.enabled(c) for ch in (1, 2, 3, 4, 8, 16)}


def _check_cold(model: NcclModel, times: dict, terms: dict) -> None:
    t, params = model.table, model.params
    for (c, a, p, n), choice in times.items():
        assert choice.time_us == _cold_us(model, c, a, p, choice.channels, n)
    for (c, a, p, ch), (lat, bus) in terms.items():
        assert (lat, bus) == (latency_us(t, c, a, p, params, ch), _intra_bus_gbs(t, c, a, p, ch, params))


@pytest.mark.parametrize("spec, field, value", [
    ("dgx-h100", "p2p", False),               # GPU hops through host memory: another latency row, another bus
    ("dgx-h100", "link_gbs", 20.0),           # the GPU links' bus bandwidth only
    ("2xdgx-h100", "net_kind", "efa"),        # another transport's extra µs per network hop only
    ("2xdgx-h100", "arch", "sm80"),           # another fitted latency scale and generation
])
def test_two_machines_differing_in_one_field_share_no_entry(spec, field, value):
    """Two models warmed in turn: each one's times and memoised terms are its own machine's unmemoised ones, the field
    moves some term both memos hold under the same key (so a shared entry would show), and one model's memo is
    refused for the other's table."""
    topo = cluster(spec[2:], nodes=2) if spec.startswith("2x") else get_preset(spec)
    a = NcclModel(NcclMachine.from_topology(topo), DEFAULT_PARAMS, NcclEnv())
    b = NcclModel(dataclasses.replace(a.machine, **{field: value}), DEFAULT_PARAMS, NcclEnv())
    times_a, terms_a = _all_times(a), _all_terms(a)
    times_b, terms_b = _all_times(b), _all_terms(b)
    _check_cold(a, times_a, terms_a)
    _check_cold(b, times_b, terms_b)
    assert any(terms_a[k] != terms_b[k] for k in terms_a.keys() & terms_b.keys())
    assert a._size_free() is not b._size_free()
    (c, al, pr, n), choice = next(iter(times_b.items()))
    with pytest.raises(ValueError, match="another table or params"):
        collective_time_us(b.table, c, al, pr, choice.channels, n, b.params, a._size_free())


def test_new_params_get_a_new_memo():
    """Params differing in one field (the fitted latency scale): the model's warm memo is not used for them, and the
    table's memo is refused for other params even when equal in value."""
    model = NcclModel(NcclMachine.from_topology(get_preset("dgx1-v100")), DEFAULT_PARAMS, NcclEnv())
    before, _ = _all_times(model), _all_terms(model)      # the memo warm under DEFAULT_PARAMS
    doubled = {k: 2.0 * v for k, v in DEFAULT_PARAMS.lat_scale.items()}
    model.params = dataclasses.replace(DEFAULT_PARAMS, lat_scale=doubled)
    after = _all_times(model)
    _check_cold(model, after, _all_terms(model))
    assert any(after[k].time_us != before[k].time_us for k in before)
    twin = dataclasses.replace(DEFAULT_PARAMS)
    memo = SizeFreeTerms(model.table, DEFAULT_PARAMS)
    assert memo.serves(model.table, DEFAULT_PARAMS) and not memo.serves(model.table, twin)


@pytest.mark.parametrize("term, wrong", [
    ("latency_us", lambda right: right + 1.0),          # a stale latency, 1 µs off
    ("intra_bus_gbs", lambda right: right / 2.0),       # a stale GPU-link bus bandwidth, half the right one
])
def test_a_wrong_memo_is_caught_by_the_unmemoised_reference(monkeypatch, term, wrong):
    """The comparisons above can fail: a memo serving a wrong term gives times that the reference (a call without a
    memo) does not, so the reference does not go through the memo's code."""
    model = NcclModel(NcclMachine.from_topology(get_preset("dgx1-v100")), DEFAULT_PARAMS, NcclEnv())
    right = getattr(SizeFreeTerms, term)
    monkeypatch.setattr(SizeFreeTerms, term, lambda self, *key: wrong(right(self, *key)))
    warm = model.forced("allreduce", "ring", "Simple", 1 << 20)
    cold = _cold_us(model, "allreduce", "ring", "Simple", warm.channels, 1 << 20)
    assert warm.time_us != cold
    monkeypatch.setattr(SizeFreeTerms, term, right)
    assert NcclModel(model.machine, DEFAULT_PARAMS, NcclEnv()).forced("allreduce", "ring", "Simple", 1 << 20).time_us \
        == cold

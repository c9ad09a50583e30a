"""synth.model.nccl.tuner_config's per-file memo: its ``choose`` gives exactly ``NcclModel.choose``
(every field, NVLS on and off, NVIDIA and AMD, sizes at and between the file's probes), and on
NVIDIA it times NCCL's own pair once: after ``forced`` of every enabled pair at a size, ``choose``
there calls the runtime model no more (the old memo timed the chosen pair a second time)."""

from __future__ import annotations

import dataclasses

import pytest

import synth.model.nccl.tuner as tuner
from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.tuner_config import PLUGIN_COLLECTIVES, _Memo, _probes, tuner_models
from topo_probe import get_preset

SIZES = [0, 1, 7, 4095, 65_537, 300_001, 8 << 20, (8 << 20) + 1, 3 << 30, 1 << 40] + _probes()[::17]


def _fields(choice) -> tuple:
    return tuple(repr(v) for v in dataclasses.astuple(choice))       # repr: nan compares equal to nan


def _models():
    for name in ("dgx-h100", "dgx1-v100", "pcie-8gpu-2socket"):
        on, off = tuner_models(get_preset(name))
        yield from ((name, m) for m in (on, off) if m is not None)
    yield "mi300x", NcclModel(NcclMachine.from_topology(get_preset("mi300x")), env=NcclEnv())   # RCCL's pick


@pytest.mark.parametrize("name,model", list(_models()), ids=lambda v: v if isinstance(v, str) else "")
def test_memo_choose_is_the_models_choose(name, model):
    memo = _Memo(model)
    for coll in PLUGIN_COLLECTIVES:
        for n in SIZES:
            assert _fields(memo.choose(coll, n)) == _fields(model.choose(coll, n)), (name, coll, n)
            assert memo.choose(coll, n) is memo.choose(coll, n)                     # memoised


def test_choose_after_forced_times_nothing_again(monkeypatch):
    on, _ = tuner_models(get_preset("dgx-h100"))
    memo, calls = _Memo(on), []
    timed = tuner.collective_time_us
    monkeypatch.setattr(tuner, "collective_time_us", lambda *a: calls.append(a[1:6]) or timed(*a))
    for coll in PLUGIN_COLLECTIVES:
        for n in SIZES:
            for a, p in on.table.enabled(coll):
                memo.forced(coll, a, p, n)
    before = len(calls)
    assert before == len(set(calls)) > 0                                  # each (pair, size) timed once
    for coll in PLUGIN_COLLECTIVES:
        for n in SIZES:
            assert (memo.choose(coll, n).algorithm, memo.choose(coll, n).protocol) in on.table.enabled(coll)
    assert len(calls) == before

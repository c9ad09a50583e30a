"""The generated buffer-misuse campaign (``tests/_buffer_misuse.py``) as a CI test: 10,000 drawn
calls of every Communicator(plan=False) collective and of run_schedule, byte orders, ndarray
subclasses, strided self-overlap, memory shared across ranks, odd dtypes and every argument type
for root, count and op.  Each call answers NumPy's reference (no other byte changed) or refuses
in one line; the oracle itself is shown to catch planted bugs.  ``TOPOCOLL_CAMPAIGN_SEED`` picks
another seed (the failures name it)."""

from __future__ import annotations

import os

import pytest
from _buffer_misuse import run_campaign

from kernels.backends import binding
from kernels.comm import communicator

SEED = int(os.environ.get("TOPOCOLL_CAMPAIGN_SEED", "0"))
CALLS = 10_000


@pytest.fixture(scope="module")
def campaign():
    return run_campaign(CALLS, SEED)


def test_no_wrong_answer_no_generic_exception_no_broken_promise(campaign):
    assert campaign["failures"] == [], "\n".join(campaign["failures"][:20])
    assert campaign["counts"]["calls"] >= CALLS


def test_the_campaign_draws_every_kind_of_misuse(campaign):
    draws, counts = campaign["draws"], campaign["counts"]
    for api in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter",
                "all_to_all", "run_schedule"):
        assert draws[f"api {api}"] >= 500, api
    for kind in ("non-native byte order", "matrix", "masked", "recarray", "mapped", "self_overlap", "strided_in",
                 "cross_rank", "shared_send", "inplace", "inplace_view", "odd_dtype", "dtype_mismatch", "bad_root",
                 "root_type", "bad_count", "count_kw", "bad_op", "repeat", "junk_needed", "none_needed"):
        assert draws[kind] >= 50, kind
    assert counts["answered"] >= 3000 and counts["refused"] >= 3000


def test_the_oracle_catches_a_planted_wrong_answer(monkeypatch):
    """Inputs that overlap their output no longer copied: the oracle sees the wrong answers."""
    monkeypatch.setattr(binding, "_copied_unless_in_place", lambda spec, sends, recvs, count: False)
    result = run_campaign(600, SEED)
    assert result["counts"]["silent wrong answers"] > 0


def test_the_oracle_catches_a_planted_missed_refusal_and_a_generic_exception(monkeypatch):
    monkeypatch.setattr(binding, "plain_ndarray", lambda a: True)           # matrix and masked let through
    monkeypatch.setattr(communicator, "check_root", lambda what, root, size: root)   # roots unchecked
    result = run_campaign(600, SEED)
    assert result["counts"]["other failures"] > 0 and result["counts"]["generic exceptions"] > 0

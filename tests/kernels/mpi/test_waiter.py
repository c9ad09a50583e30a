"""The MPI deadline: ``$TOPOCOLL_MPI_TIMEOUT`` and ``timeout_s`` must be finite seconds > 0
(``nan`` and ``inf`` would disable the deadline, so a dead rank would hang the job)."""

from __future__ import annotations

import pytest

from kernels.mpi.waiter import DEFAULT_TIMEOUT_S, Waiter, checked_timeout, default_timeout
from topo_probe.errors import InvalidArgument


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "-5", "0", "abc", "1e999"])
def test_env_timeout_refused_in_one_line(monkeypatch, raw):
    monkeypatch.setenv("TOPOCOLL_MPI_TIMEOUT", raw)
    with pytest.raises(InvalidArgument) as e:
        default_timeout()
    assert str(e.value) == f"TOPOCOLL_MPI_TIMEOUT={raw!r}: expected a finite number of seconds > 0"


@pytest.mark.parametrize("raw, seconds", [("30", 30.0), ("0.25", 0.25), (" 7 ", 7.0)])
def test_env_timeout_taken(monkeypatch, raw, seconds):
    monkeypatch.setenv("TOPOCOLL_MPI_TIMEOUT", raw)
    assert default_timeout() == seconds


def test_env_timeout_unset_or_empty_is_default(monkeypatch):
    monkeypatch.delenv("TOPOCOLL_MPI_TIMEOUT", raising=False)
    assert default_timeout() == DEFAULT_TIMEOUT_S
    monkeypatch.setenv("TOPOCOLL_MPI_TIMEOUT", "")
    assert default_timeout() == DEFAULT_TIMEOUT_S


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 0, True, "x", None])
def test_waiter_timeout_argument_checked(bad):
    if bad is None:  # None means "the default", which is fine
        assert Waiter(None, 0, None).timeout_s == default_timeout()
        return
    with pytest.raises(InvalidArgument, match="timeout_s="):
        Waiter(None, 0, bad)
    assert checked_timeout(2) == 2.0

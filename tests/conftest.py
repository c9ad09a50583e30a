"""Shared test helpers: fixture paths and seeded randomness.

One thread per BLAS/OpenMP pool: the suite runs as two xdist workers on two cores (README's
``pytest -n 2``), so a worker's (or an ``mpirun`` rank's) numerical library starting one thread per
core runs more threads than cores, and OpenBLAS's idle threads spin.  Set before NumPy, SciPy or
torch is first imported (pytest loads this file before collecting); a value the caller set wins."""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from _campaign import CAMPAIGN  # noqa: E402
from _paths import FIXTURES  # noqa: E402
from hypothesis import settings  # noqa: E402

#: ``pytest --hypothesis-profile=campaign``: the full example counts of tests/_campaign.py
settings.register_profile(CAMPAIGN, settings.get_profile("default"))


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def _no_committed_plans(monkeypatch, tmp_path_factory):
    """Tests never pick up the plans committed under results/: each starts with an empty
    results folder (tests that want a plan write one and point TOPOCOLL_RESULTS at it)."""
    monkeypatch.setenv("TOPOCOLL_RESULTS", str(tmp_path_factory.mktemp("no-results")))

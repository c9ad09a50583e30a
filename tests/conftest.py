"""Shared test helpers: fixture paths and seeded randomness.

One thread per BLAS/OpenMP pool: the suite runs as two xdist workers on two cores (README's
``pytest -n 2``), so a worker's (or an ``mpirun`` rank's) numerical library starting one thread per
core runs more threads than cores, and OpenBLAS's idle threads spin.  Set before NumPy, SciPy or
torch is first imported (pytest loads this file before collecting); a value the caller set wins."""

import os
import shutil

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from _campaign import CAMPAIGN  # noqa: E402
from _paths import FIXTURES  # noqa: E402
from hypothesis import settings  # noqa: E402

#: the suite's profile: no per-example deadline (two xdist workers on a shared 2-core machine time
#: an example at several times its idle cost; speed is measured by benchmarks, not by tests)
settings.register_profile("ci", deadline=None)
settings.load_profile("ci")
#: ``pytest --hypothesis-profile=campaign``: the full example counts of tests/_campaign.py
settings.register_profile(CAMPAIGN, settings.get_profile("ci"))


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def _no_committed_plans(monkeypatch, tmp_path_factory):
    """Tests never pick up the plans committed under results/: each starts with an empty
    results folder (tests that want a plan write one and point TOPOCOLL_RESULTS at it)."""
    monkeypatch.setenv("TOPOCOLL_RESULTS", str(tmp_path_factory.mktemp("no-results")))


#: shutil.copytree as it is before any test patches it (tests/synth/pipeline/test_output.py does)
_copytree = shutil.copytree


@pytest.fixture(scope="session")
def _synthesized_once(tmp_path_factory):
    """collectives -> a folder of ``_run(folder, collectives)``'s results (tests/_synth_results.py:
    3 fully connected GPUs), each run once per session (per xdist worker)."""
    from _synth_results import _run
    made: dict[tuple[str, ...], Path] = {}

    def folder(collectives: tuple[str, ...]) -> Path:
        if collectives not in made:
            made[collectives] = tmp_path_factory.mktemp("synthesized") / "res"
            _run(made[collectives], collectives)
        return made[collectives]
    return folder


@pytest.fixture
def synthesized(_synthesized_once):
    """``synthesized(out, collectives=OLD) -> out``: ``out`` holding what ``_run(out, collectives)``
    writes into a new folder, copied from one run per session (the results name no path of their
    own folder: the copy stands for a run into ``out``)."""
    from _synth_results import OLD

    def copy(out: Path, collectives: tuple[str, ...] = OLD) -> Path:
        _copytree(_synthesized_once(collectives), out, symlinks=True)
        return out
    return copy

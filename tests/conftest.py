"""Shared test helpers: fixture paths and seeded randomness."""

from pathlib import Path

import pytest
from _paths import FIXTURES


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True)
def _no_committed_plans(monkeypatch, tmp_path_factory):
    """Tests never pick up the plans committed under results/: each starts with an empty
    results folder (tests that want a plan write one and point TOPOCOLL_RESULTS at it)."""
    monkeypatch.setenv("TOPOCOLL_RESULTS", str(tmp_path_factory.mktemp("no-results")))

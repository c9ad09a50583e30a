"""Example counts of the property tests whose full count is a campaign rather than a CI check
(not a test module): the suite runs ``ci`` examples; ``pytest --hypothesis-profile=campaign``
(registered in tests/conftest.py) runs the ``campaign`` count.  Seeds and derandomization are
each test's own settings either way."""

from __future__ import annotations

from hypothesis import settings

CAMPAIGN = "campaign"


def examples(ci: int, campaign: int) -> int:
    """``campaign`` under the campaign profile, else ``ci`` (each at least 50: executors,
    parsers and loaders keep that many in CI)."""
    assert 50 <= ci <= campaign, (ci, campaign)
    current = getattr(settings, "get_current_profile_name", lambda: settings._current_profile)()
    return campaign if current == CAMPAIGN else ci

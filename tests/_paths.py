"""Where things are, for tests wherever they sit under tests/ (not a test module): the repository
root, the tests folder and the fixtures copied from real machines."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"

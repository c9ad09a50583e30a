"""benchmarks/fault_campaign.py writes two parts of one results file: each mode replaces only its own."""

from __future__ import annotations

import sys

from _paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import fault_campaign as bench  # noqa: E402


def test_each_mode_keeps_the_other_part(tmp_path):
    out = tmp_path / "faults.md"
    bench.write_section(out, "# Folders\n\nLosses in all: 0.\n", buffers=False)
    bench.write_section(out, "## Buffer misuse: generated calls\n\n| calls | 10 |\n", buffers=True)
    bench.write_section(out, "# Folders\n\nLosses in all: 1.\n", buffers=False)
    assert out.read_text() == ("# Folders\n\nLosses in all: 1.\n\n## Buffer misuse: generated calls\n\n"
                               "| calls | 10 |\n")
    bench.write_section(out, "## Buffer misuse: generated calls\n\n| calls | 20 |\n", buffers=True)
    assert out.read_text().count("Buffer misuse") == 1 and "| calls | 20 |" in out.read_text()
    assert out.read_text().startswith("# Folders\n\nLosses in all: 1.\n")


def test_the_buffer_section_counts_calls_and_failures():
    text, failures = bench.buffer_section(200, 0)
    assert failures == 0
    calls = int(next(ln for ln in text.splitlines() if ln.startswith("| calls")).split("|")[2])
    assert calls >= 200
    assert "| silent wrong answers | 0 |" in text and "| generic exceptions | 0 |" in text


def test_the_memory_section_is_a_third_part_the_others_keep(tmp_path):
    out = tmp_path / "faults.md"
    bench.write_section(out, "# Folders\n\nLosses in all: 0.\n")
    bench.write_section(out, "## Buffer misuse: generated calls\n\n| calls | 10 |\n", buffers=True)
    bench.write_section(out, "## Memory under a cap\n\nFailures: 0 of 1.\n", heading=bench.MEMORY_SECTION)
    bench.write_section(out, "# Folders\n\nLosses in all: 2.\n")
    bench.write_section(out, "## Buffer misuse: generated calls\n\n| calls | 30 |\n", buffers=True)
    assert out.read_text() == ("# Folders\n\nLosses in all: 2.\n\n## Buffer misuse: generated calls\n\n| calls | 30 |\n"
                               "\n## Memory under a cap\n\nFailures: 0 of 1.\n")


def test_a_memory_case_past_the_cap_is_refused_in_one_line(tmp_path, monkeypatch):
    """A 1 GiB all_reduce under a 512 MiB cap: the admission check's one line, exit 2."""
    monkeypatch.setattr(bench, "MEMORY_CASES", [("sweep", ["all_reduce", "-b", "1G", "-e", "1G", "-g", "1"])])
    rows, failures = bench.memory_trials(512, tmp_path)
    assert failures == 0 and "| 2 |" in rows[0] and "needs about" in rows[0], rows

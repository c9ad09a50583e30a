"""benchmarks/published_nccl_anchors.py: the committed check is what the script writes today, and the
class summary counts the table's own rows."""

from __future__ import annotations

import json
import re
import sys

from _paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import published_nccl_anchors as anchors  # noqa: E402

COMMITTED = ROOT / "results" / "model_validation"


def test_the_committed_anchor_results_are_what_the_script_writes(tmp_path):
    assert anchors.main(["--out", str(tmp_path)]) == 0
    for name in ("published_anchors.md", "anchor_validation.json"):
        assert (tmp_path / name).read_text() == (COMMITTED / name).read_text(), name
    assert (ROOT / "synth" / "model" / "nccl" / "anchor_validation.json").read_text() == \
        (COMMITTED / "anchor_validation.json").read_text()


def test_the_class_summary_counts_the_tables_rows():
    text = (COMMITTED / "published_anchors.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "GB/s" in line]
    assert len(rows) == len(anchors.ANCHORS) == 14
    per: dict[str, list[float]] = {}
    for row in rows:
        cls = re.search(r"\(([a-z0-9-]+)\) \|", row).group(1)
        per.setdefault(cls, []).append(abs(float(row.rstrip(" |").rsplit("|", 1)[1].strip(" %")) / 100))
    doc = json.loads((COMMITTED / "anchor_validation.json").read_text())["classes"]
    assert set(doc) == set(per) == {"b200-nvswitch-1host", "b200-nvl72"}
    for cls, errs in per.items():
        assert doc[cls]["figures"] == len(errs)
        assert doc[cls]["within_15"] == sum(e <= 0.15 for e in errs)

"""The end-to-end synthesis times README.md and docs/synthesis.md quote are those of the committed run they name,
results/scale/e2e.md (its ``cpu_s`` and ``peak_mb`` columns, read here from the file, rounded as the text rounds)."""

from __future__ import annotations

import re

import pytest
from _paths import ROOT


@pytest.fixture(scope="module")
def e2e() -> dict[str, tuple[float, float]]:
    """machine -> (cpu_s, peak_mb) of the "all eight" rows of the table with a ``cpu_s`` column."""
    lines = (ROOT / "results" / "scale" / "e2e.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| gpus | machine | collectives | code |"))
    cols = [c.strip() for c in lines[header].strip("|").split("|")]
    out = {}
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        row = dict(zip(cols, (c.strip() for c in line.strip("|").split("|"))))
        if row["collectives"] == "all eight":
            out[row["machine"]] = (float(row["cpu_s"]), float(row["peak_mb"]))
    return out


def _one_decimal(x: float) -> str:
    return f"{x:.1f}"


def test_readme_quotes_the_256_and_1024_gpu_run(e2e):
    text = " ".join((ROOT / "README.md").read_text().split())
    (cpu256, _), (cpu1024, mb1024) = e2e["32 x dgx-h100"], e2e["128 x dgx-h100"]
    want = (f"eight collectives on 256 GPUs take {_one_decimal(cpu256)} s of CPU, on 1,024 GPUs "
            f"{_one_decimal(cpu1024)} s and {mb1024 / 1000:.1f} GB on 2 cores "
            "([results/scale/e2e.md](results/scale/e2e.md)")
    assert want in text


def test_synthesis_doc_quotes_every_row_of_the_run(e2e):
    text = " ".join((ROOT / "docs" / "synthesis.md").read_text().split())
    m = re.search(r"all eight collectives in ([\d.]+)-([\d.]+) s CPU on 8 GPUs \(dgx-a100, dgx-h100\), ([\d.]+) s on "
                  r"2 x dgx-h100, ([\d.]+) s on 4, ([\d.]+) s on 8 x dgx-a100, ([\d.]+) s on 256 GPUs and ([\d.]+) s "
                  r"\(([\d.]+) GB peak\) on 1,024 \(the `cpu_s` column of `results/scale/e2e.md`", text)
    assert m, "the end-to-end sentence of docs/synthesis.md"
    eight = sorted(e2e[k][0] for k in ("dgx-a100", "dgx-h100"))
    want = [*eight, *(e2e[k][0] for k in ("2 x dgx-h100", "4 x dgx-h100", "8 x dgx-a100", "32 x dgx-h100",
                                          "128 x dgx-h100")), e2e["128 x dgx-h100"][1] / 1000]
    assert list(m.groups()) == [_one_decimal(x) for x in want]

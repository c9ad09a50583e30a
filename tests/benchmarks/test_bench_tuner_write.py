"""benchmarks/bench_tuner_write.py: its row for dgx-h100 against the committed tuner file."""

from __future__ import annotations

import importlib.util

from _paths import ROOT


def test_the_dgx_h100_row_counts_the_committed_files_lines_and_six_smaller_communicators():
    spec = importlib.util.spec_from_file_location("bench_tuner_write", ROOT / "benchmarks" / "bench_tuner_write.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    name, make = bench.MACHINES[0]
    cells = [c.strip() for c in bench.row(name, make).strip("|").split("|")]
    committed = (ROOT / "results" / "dgx-h100" / "nccl_tuner.conf").read_text().splitlines()
    lines = sum(1 for line in committed if line and not line.startswith("#"))   # the CSV header and its lines
    # one host of 8 GPUs: communicators of 2 .. 7 GPUs get lines of their own (docs/synthesis.md)
    assert cells[:4] == ["dgx-h100", "8", "6", str(lines)] and float(cells[4]) > 0

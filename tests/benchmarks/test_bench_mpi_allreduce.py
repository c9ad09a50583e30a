"""benchmarks/bench_mpi_allreduce.py: a tiny run under mpirun writes a checked CSV and report."""

from __future__ import annotations

import csv
import importlib.util

import pytest

from _paths import ROOT
from _mpi import run_mpi

BENCH = ROOT / "benchmarks" / "bench_mpi_allreduce.py"


def bench():
    spec = importlib.util.spec_from_file_location("bench_mpi_allreduce", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("text,want", [("1K", 1024), ("256M", 256 << 20), ("4096", 4096), ("1.5k", 1536)])
def test_sizes_parse_as_powers_of_1024(text, want):
    assert bench().parse_size(text) == want


def test_report_is_built_from_the_csvs(tmp_path):
    mod = bench()
    row = dict.fromkeys(mod.FIELDS, "")
    row.update(ranks=2, bytes=1 << 20, count=1 << 18, schedule="ring", steps=2, chunks_per_rank=1, ours_us=150.0,
               mpi_us=100.0, ratio=1.5, ours_busbw_gbps=7.0, mpi_busbw_gbps=10.5, correct=True, load_avg=0.5,
               command="mpirun -n 2 python bench")
    mod.write_csv(tmp_path / "allreduce_n2.csv", [row])
    text = mod.write_report(tmp_path).read_text()
    assert "| 1 MB | ring (2, 1) | 150.0 | 100.0 | 1.50 |" in text
    assert "ratio median 1.50, max 1.50" in text and "Command: `mpirun -n 2 python bench`" in text


def test_tiny_mpi_run_writes_correct_rows(tmp_path):
    proc = run_mpi(2, [str(BENCH), "--min", "1K", "--max", "16K", "--rounds", "1", "--passes", "1",
                       "--budget", "0.005", "--out", str(tmp_path)], timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "allreduce_n2.csv").open()))
    assert [int(r["bytes"]) for r in rows] == [1024, 4096, 16384]
    assert all(r["correct"] == "True" and float(r["ours_us"]) > 0 and float(r["mpi_us"]) > 0 for r in rows)
    for r in rows:   # ratio and bus bandwidth follow from the times (nccl-tests factor 2(n-1)/n = 1)
        assert float(r["ratio"]) == pytest.approx(float(r["ours_us"]) / float(r["mpi_us"]), rel=2e-2)
        assert float(r["ours_busbw_gbps"]) == pytest.approx(int(r["bytes"]) / float(r["ours_us"]) / 1e3, rel=2e-2)
    assert (tmp_path / "report.md").read_text().count("| 16 KB |") == 1

"""benchmarks/bench_mpi_leaving.py refuses a bad ``--out`` in one line, exit 2, before its ~3 minutes of
jobs (mpi69r: before, it ran every job, then a FileExistsError traceback lost the run)."""

from __future__ import annotations

import subprocess
import sys

from _paths import ROOT

BENCH = ROOT / "benchmarks" / "bench_mpi_leaving.py"


def test_an_out_that_is_a_file_is_refused_at_once(tmp_path):
    out = tmp_path / "leaving.md"
    out.write_text("keep me\n")
    proc = subprocess.run([sys.executable, str(BENCH), "--out", str(out)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == f"bench_mpi_leaving: --out {out}: not a folder", proc.stderr
    assert out.read_text() == "keep me\n"

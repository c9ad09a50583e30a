"""benchmarks/holdout_nccl_model.py: a held-out log's own constants are not fitted on it."""

from __future__ import annotations

import sys

import pytest
from _paths import ROOT

pytest.importorskip("scipy")


def test_holding_out_the_only_mi300x_log_leaves_its_constants_at_their_hand_set_values():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import holdout_nccl_model as h
    # which constants the rest of the logs move is decided before the solver runs: a short solve keeps the list
    results, untouched = h.holdout("mi300x_8gpu_1node_all_reduce.txt", max_nfev=20)
    # only the MI300X log exercises xGMI, gfx942 latencies and RCCL's MSCCL kernels (params.py's table)
    assert {"link_eff/*/xgmi", "lat_scale/gfx942/LL", "lat_scale/gfx942/Simple", "msccl_allpairs_latency_us",
            "msccl_onestep_latency_us"} <= set(untouched)
    assert "link_eff/sm90/nvlink" not in untouched          # the H100 logs still fit this one
    assert [r["collective"] for r in results] == ["allreduce"] and results[0]["rows"]


@pytest.mark.parametrize("argv", [[], ["--by-class"], ["--by-class", "--write"]])
def test_without_out_it_refuses_before_writing_anything(argv, capsys):
    """The committed reports in results/model_validation change only when a run names that folder."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import holdout_nccl_model as h
    committed = ROOT / "results" / "model_validation"
    before = {p.name: p.stat().st_mtime_ns for p in committed.iterdir()}
    with pytest.raises(SystemExit) as e:
        h.main(argv)
    assert e.value.code == 2 and "--out" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in committed.iterdir()} == before

"""benchmarks/residual_groups.py: signed errors grouped across tables, checked on hand-made tables whose medians,
quartiles and shares are worked out by hand; and the committed report's header and groups."""

from __future__ import annotations

import sys

import pytest

from _paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import residual_groups as rg  # noqa: E402


def _table(file, arch, nodes, version, errs, choice="ring/Simple/1"):
    rows = [dict(size=s, err=e, choice=choice) for s, e in errs]
    return dict(file=file, collective="allreduce", arch=arch, nodes=nodes, version=version, in_sample=rows,
                held_out=[dict(r, err=r["err"] + 0.1) for r in rows])


TABLES = [
    # medians at >= 64 KiB: +0.20 (the 8 KiB row's -9.0 left out), -0.10, +0.30
    _table("a.txt", "sm90", 2, (2, 26, 2), [(8 << 10, -9.0), (1 << 20, 0.1), (1 << 30, 0.3)]),
    _table("b.txt", "sm90", 1, (2, 26, 2), [(1 << 20, -0.1)]),
    _table("c.txt", "sm80", 1, (2, 8, 4), [(64 << 10, 0.3)], choice="tree/LL/1"),
]


def test_arch_groups_take_each_tables_median_then_the_median_over_tables():
    got = {g["group"]: g for g in rg.group_errors(TABLES, "in_sample", "arch")}
    assert got["sm90"]["tables"] == 2 and got["sm90"]["rows"] == 3          # the 8 KiB row is not counted
    assert got["sm90"]["median"] == pytest.approx((0.2 - 0.1) / 2)          # medians +0.20 and -0.10
    assert got["sm90"]["positive"] == 0.5 and got["sm80"]["positive"] == 1.0
    assert got["sm80"]["median"] == pytest.approx(0.3) and got["sm80"]["q1"] == got["sm80"]["q3"] == pytest.approx(0.3)


def test_groups_follow_rows_not_tables_for_size_and_choice():
    sizes = {g["group"]: g["tables"] for g in rg.group_errors(TABLES, "held_out", "size")}
    assert sizes == {"64 KiB-1 MiB": 1, "1-64 MiB": 2, ">64 MiB": 1}
    algos = {g["group"]: g["median"] for g in rg.group_errors(TABLES, "held_out", "algo/proto")}
    assert algos == pytest.approx({"ring/Simple": (0.3 + 0.0) / 2, "tree/LL": 0.4})
    bands = {g["group"] for g in rg.group_errors(TABLES, "held_out", "version")}
    assert bands == {"<2.10", ">=2.24"}


def test_the_committed_report_covers_every_dimension_and_both_columns():
    text = (ROOT / "results" / "model_validation" / "residual_groups.md").read_text()
    assert "Command: `python benchmarks/residual_groups.py --out results/model_validation`" in text
    for dim in rg.DIMS:
        assert f"## {dim}\n" in text
    assert "| sm90 |" in text and "| RCCL |" in text and "| several |" in text

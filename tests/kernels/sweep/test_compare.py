"""kernels.sweep.compare: series, CSV, the lower-bound curve and the PNG."""

import csv
import io

import pytest

from kernels.sweep.compare import CSV_COLUMNS, Series, _size_label, bound_series, csv_text, plot, series_from_rows
from synth.ir.fabric import build_fabric
from synth.model.bounds import lower_bounds
from synth.sweep.driver import Result, Row
from topo_probe.load import load_topology


def _rows(typ="float", root=-1):
    return [Row(s, s // 4, typ, "sum", root, Result(10.0, s / 1e4, s / 1e4 * 1.75, 0),
                Result(20.0, s / 2e4, s / 2e4 * 1.75, 0), "ring") for s in (1024, 2048)]


def test_series_group_by_type_and_root():
    assert [s.label for s in series_from_rows("ring", "sweep", _rows())] == ["ring"]
    both = series_from_rows("ring", "sweep", _rows() + _rows("half"))
    assert [s.label for s in both] == ["ring float sum root -1", "ring half sum root -1"]
    assert both[0].busbw == [1024 / 1e4 * 1.75, 2048 / 1e4 * 1.75]


def test_csv_rows_and_columns():
    bound = Series("lower bound", "bound", [1024], [5.0], [0.2048], [0.3584])
    text = csv_text(series_from_rows("ring", "sweep", _rows()) + [bound])
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == 3
    assert rows[0]["series"] == "ring" and float(rows[0]["busbw_gbps"]) == pytest.approx(0.1792)
    assert float(rows[1]["time_us_ip"]) == 20.0
    assert rows[2]["kind"] == "bound" and rows[2]["busbw_gbps"] == rows[2]["busbw_gbps_ip"] == "0.3584"


def test_bound_series_is_the_lower_bound_in_busbw():
    topo = load_topology("dgx-a100")
    fab = build_fabric(topo)
    sizes = [1 << 20, 1 << 30]
    s = bound_series(fab, "all_reduce", None, sizes, 8)
    lb = lower_bounds(fab, "allreduce")
    for k, size in enumerate(sizes):
        assert s.time_us[k] == pytest.approx(lb.time_us(size))
        assert s.busbw[k] == pytest.approx(size / lb.time_us(size) / 1e3 * 2 * 7 / 8)
    # 12 NVLink3 at 25 GB/s = 300 GB/s per port: a whole buffer must enter each GPU, so no
    # allreduce beats M / 300 GB/s, i.e. 2 * 7/8 * 300 = 525 GB/s of bus bandwidth
    assert s.busbw[-1] <= 525.0 + 1e-6
    assert s.busbw[-1] > 0.95 * 525.0


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "sub" / "p.png"
    series = series_from_rows("ring", "sweep", _rows()) + [Series("nccl", "measured", [0, 8], [1, 1], [0, 0], [0, 0])]
    plot(path, series, "title")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]   # no temporary left behind


def test_size_labels():
    assert [_size_label(v) for v in (8, 1536, 1 << 20, 4 << 30)] == ["8 B", "1.5 KiB", "1 MiB", "4 GiB"]


def test_every_curve_keeps_its_own_look(tmp_path, monkeypatch):
    """Issue 38: "tree" was drawn in the measured log's red and the modelled NCCL curve hid under
    ring (same colour and style where they overlap).  Every swept or modelled curve gets its own
    (colour, dash, marker), never the measured red or the bound's black; equal curves stay visible."""
    from matplotlib.axes import Axes
    seen = {}
    real = Axes.plot

    def spy(self, *args, **kw):
        seen[kw["label"]] = (kw.get("color"), kw.get("linestyle", "-"), kw.get("marker"))
        return real(self, *args, **kw)
    monkeypatch.setattr(Axes, "plot", spy)
    names = ["plan", "ring", "tree", "direct", "rhd", "bruck", "oneshot", "nccl"]
    same = [8, 16], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]                     # identical curves
    series = [Series(n, "sweep", *same) for n in names]
    series += [Series("NCCL measured", "measured", *same), Series("lower bound", "bound", *same)]
    plot(tmp_path / "p.png", series, "title")
    assert set(seen) == set(names) | {"NCCL measured", "lower bound"}
    measured, bound = seen["NCCL measured"], seen["lower bound"]
    ours = [seen[n] for n in names]
    assert len(set(ours)) == len(ours)                                       # no two alike
    assert all(c not in (measured[0], bound[0]) for c, _, _ in ours)
    assert len({c for c, _, _ in ours}) == len(ours)                         # eight colours, eight curves

"""``--compare`` and ``--plot``: busbw curves of several algorithms, the lower bound and a
measured nccl-tests log, as a CSV and a PNG (matplotlib, Agg backend).

A :class:`Series` is one line of the plot: sizes (nccl-tests bytes) with out-of-place and
in-place time (µs), algbw and busbw (GB/s).  The CSV has one row per (series, size)::

    series,kind,size,count,type,redop,root,time_us,algbw_gbps,busbw_gbps,time_us_ip,algbw_gbps_ip,busbw_gbps_ip

>>> s = Series("ring", "sweep", [8, 16], [1.0, 1.0], [0.008, 0.016], [0.014, 0.028])
>>> s.busbw
[0.014, 0.028]
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from synth.formats.nccl_tests.sizes import size_label
from synth.ir.schedule import atomic_write_text
from synth.sweep.driver import Row, SweepSummary
from synth.sweep.entries import entry
from topo_probe.pictures import save_png

CSV_COLUMNS = ("series", "kind", "size", "count", "type", "redop", "root", "time_us", "algbw_gbps",
               "busbw_gbps", "time_us_ip", "algbw_gbps_ip", "busbw_gbps_ip")


@dataclass
class Series:
    """One curve: ``kind`` is ``sweep`` (ours), ``bound`` (lower bound) or ``measured`` (a log)."""

    label: str
    kind: str
    sizes: list[int]
    time_us: list[float]
    algbw: list[float]
    busbw: list[float]
    rows: list[Row] = field(default_factory=list)


def series_from_rows(label: str, kind: str, rows: list[Row]) -> list[Series]:
    """One series per (type, redop, root) group of ``rows`` (labels get the group when > 1)."""
    groups: dict[tuple, list[Row]] = {}
    for r in rows:
        groups.setdefault((r.type, r.redop, r.root), []).append(r)
    out = []
    for (typ, redop, root), rs in groups.items():
        name = label if len(groups) == 1 else f"{label} {typ} {redop} root {root}"
        out.append(Series(name, kind, [r.size for r in rs], [r.out_of_place.time_us for r in rs],
                          [r.out_of_place.algbw for r in rs], [r.out_of_place.busbw for r in rs], rs))
    return out


def series_from_summary(label: str, summary: SweepSummary) -> list[Series]:
    return series_from_rows(label, "sweep", summary.rows)


def bound_series(fabric, collective: str, root: int | None, sizes: list[int], n: int,
                 params=None) -> Series | None:
    """The lower bound (:func:`synth.model.bounds.lower_bounds`) at ``sizes``, with the link rates
    of ``params`` (the cost model's :class:`~synth.model.physics.CostParams`: the achieved rates
    ``simulate`` and the tables use; None: data-sheet rates); None if unavailable."""
    try:
        from synth.model.bounds import lower_bounds
    except ImportError:
        return None
    ent = entry(collective)
    lb = lower_bounds(fabric, ent.name, root=root if ent.rooted else None)
    times = [float(lb.time_us(s, params) if params is not None else lb.time_us(s)) for s in sizes]
    bws = [ent.bandwidths(s, t, n) for s, t in zip(sizes, times)]
    return Series("lower bound", "bound", list(sizes), times, [a for a, _ in bws], [b for _, b in bws])


def side_by_side_lines(labels: list[str], summaries: list[SweepSummary], min_bw: float | None = None) -> list[str]:
    """One table for ``--compare``: per row (size, count, type, redop, root) the out-of-place
    busbw of every algorithm side by side, then the first algorithm's over the best other's
    (above 1: the first is faster); each algorithm's failing values and average busbw follow (with
    ``OK`` / ``FAILED`` against ``min_bw``, ``NCCL_TESTS_MIN_BW``:
    :func:`synth.formats.nccl_tests.writer.below_min_bw`).

    >>> from synth.sweep.driver import Result, Row, SweepSummary
    >>> def one(bw): return SweepSummary([Row(1024, 256, "float", "sum", -1, Result(1.0, bw, bw, 0), Result(1.0, bw, bw, 0))])
    >>> print(side_by_side_lines(["plan", "ring"], [one(3.0), one(2.0)])[3])
            1024           256     float     sum      -1      3.00      2.00      1.50
    """
    width = max(8, *(len(x) for x in labels))
    head = "#%11s  %12s  %8s  %6s  %6s" % ("size", "count", "type", "redop", "root")
    units = "#%11s  %12s  %8s  %6s  %6s" % ("(B)", "(elements)", "", "", "")
    head += "".join(f"  {x:>{width}}" for x in labels) + "     ratio"
    units += "".join(f"  {'(GB/s)':>{width}}" for _ in labels) + f"  {labels[0] + '/best':>8}"
    lines = [f"# busbw (GB/s, out-of-place) of {', '.join(labels)}, side by side", head, units]
    for rows in zip(*(s.rows for s in summaries)):
        r0 = rows[0]
        bws = [r.out_of_place.busbw for r in rows]
        others = max(bws[1:], default=0.0)
        ratio = f"{bws[0] / others:8.2f}" if others > 0 else "%8s" % "-"
        lines.append("%12d  %12d  %8s  %6s  %6d" % (r0.size, r0.count, r0.type, r0.redop, r0.root)
                     + "".join(f"  {bw:{width}.2f}" for bw in bws) + "  " + ratio)
    for label, s in zip(labels, summaries):
        lines.append(f"# Out of bounds values : {s.errors} {'FAILED' if s.errors else 'OK'}   ({label})")
    from synth.formats.nccl_tests.writer import below_min_bw
    for label, s in zip(labels, summaries):
        verdict = "" if min_bw is None else " FAILED" if below_min_bw(s.avg_busbw, min_bw) else " OK"
        lines.append("# Avg bus bandwidth    : %g%s   (%s)" % (s.avg_busbw, verdict, label))
    return lines + ["#"]


def csv_text(series: list[Series]) -> str:
    """The CSV document (see module docstring); bound rows repeat the time for in-place; a measurement a log
    lacks is empty cells."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for s in series:
        if s.rows:
            for r in s.rows:
                w.writerow([s.label, s.kind, r.size, r.count, r.type, r.redop, r.root,
                            *_cells(r.out_of_place), *_cells(r.in_place)])
        else:
            for k, size in enumerate(s.sizes):
                vals = [_num(s.time_us[k]), _num(s.algbw[k]), _num(s.busbw[k])]
                w.writerow([s.label, s.kind, size, "", "", "", ""] + vals + vals)
    return buf.getvalue()


def _num(x: float) -> str:
    return f"{x:.6g}"


def _cells(res) -> list[str]:
    """A measurement's time, algbw and busbw cells; empty for one not measured (None: an imported log's
    out-of-place-only row has no in-place one)."""
    return ["", "", ""] if res is None else [_num(res.time_us), _num(res.algbw), _num(res.busbw)]


def write_csv(path: str | Path, series: list[Series]) -> None:
    atomic_write_text(Path(path), csv_text(series))


#: colours, dashes and markers of the modelled or swept curves (red and black are the measured
#: log's and the bound's)
_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
_DASHES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "v", "D", "P", "*", "h")


def plot(path: str | Path, series: list[Series], title: str) -> None:
    """busbw (GB/s) against message size (bytes, log2 x axis), one line per series; PNG, atomically."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=120)
    styles = {"bound": dict(color="black", linestyle="--", linewidth=1.2),
              "measured": dict(color="tab:red", marker="x", linewidth=1.5)}
    k = 0
    for s in series:
        pts = [(x, y) for x, y in zip(s.sizes, s.busbw) if x > 0]
        if not pts:
            continue
        xs, ys = zip(*pts)
        style = styles.get(s.kind)
        if style is None:      # its own colour (never the measured red) and a dash, so equal curves stay visible
            style = dict(color=_COLOURS[k % len(_COLOURS)], linestyle=_DASHES[k % len(_DASHES)],
                         marker=_MARKERS[k % len(_MARKERS)], markersize=4, linewidth=1.5)
            k += 1
        ax.plot(xs, ys, label=s.label, **style)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _size_label(x)))
    ax.set_xlabel("message size (nccl-tests size, bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")  # busbw curves rise late: that corner stays free
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        save_png(fig, path, "sweep --plot")
    finally:
        plt.close(fig)


#: the axis' size labels: binary units, as every label a person reads (KiB, MiB, GiB)
_size_label = size_label

"""Signed errors of the NCCL model grouped by what a table has in common, not table by table.

For every real log table (``nccl_log_cases.ALL_CASES``) and both columns of the class holdout (in-sample: the
committed constants; held out: the table's machine class fitted without it, :func:`holdout_nccl_model.by_class_scores`)
each row's signed error ``pred/real - 1`` of busbw at >= 64 KiB (positive: the model is too fast), then per group the
median over tables of each table's median, the spread of those medians and the share of tables above 0.  Groups: the
algorithm/protocol the model picked, GPU architecture, one host or several, NCCL version band (RCCL on its own),
collective and size band.  A group biased the same way across many sources points at one mechanism; a table's own
miss does not.  About 3 minutes on two cores.

    python benchmarks/residual_groups.py --out results/model_validation      # residual_groups.md
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

#: rows below this size are latency-bound and left out, as the class holdout's own median does (bytes)
MIN_BYTES = 64 << 10
#: the dimensions grouped over, in the report's order
DIMS = ("algo/proto", "arch", "hosts", "version", "collective", "size")


def version_band(version: tuple, arch: str) -> str:
    """RCCL (an AMD ``gfx`` GPU) or NCCL's version band.

    >>> version_band((2, 8, 4), "sm80"), version_band((2, 19, 3), "sm90"), version_band((2, 26, 6), "gfx950")
    ('<2.10', '2.19-2.23', 'RCCL')
    """
    if arch.startswith("gfx"):
        return "RCCL"
    v = tuple(version)[:2]
    return "<2.10" if v < (2, 10) else "2.10-2.18" if v < (2, 19) else "2.19-2.23" if v < (2, 24) else ">=2.24"


def size_band(nbytes: int) -> str:
    """``64 KiB-1 MiB``, ``1-64 MiB`` or ``>64 MiB``."""
    return "64 KiB-1 MiB" if nbytes < 1 << 20 else "1-64 MiB" if nbytes <= 64 << 20 else ">64 MiB"


def row_groups(table: dict, row: dict) -> dict:
    """The group of each dimension a row of ``table`` (file, collective, arch, version, nodes) falls in."""
    algo, proto = row["choice"].split("/")[:2]
    return {"algo/proto": f"{algo}/{proto}", "arch": table["arch"], "hosts": "several" if table["nodes"] > 1 else "one",
            "version": version_band(table["version"], table["arch"]), "collective": table["collective"],
            "size": size_band(row["size"])}


def group_errors(tables: list[dict], column: str, dim: str) -> list[dict]:
    """Per group of ``dim``: tables (count), rows, the median of the tables' median signed errors, its quartiles
    and the share of tables whose median is above 0 (``column``: ``in_sample`` or ``held_out`` row lists)."""
    errs = defaultdict(lambda: defaultdict(list))
    for t in tables:
        for r in t[column]:
            if r["size"] >= MIN_BYTES:
                errs[row_groups(t, r)[dim]][(t["file"], t["collective"])].append(r["err"])
    out = []
    for group, per_table in sorted(errs.items()):
        medians = [statistics.median(v) for v in per_table.values()]
        q = statistics.quantiles(medians, n=4) if len(medians) > 1 else medians * 3
        out.append(dict(group=group, tables=len(medians), rows=sum(map(len, per_table.values())),
                        median=statistics.median(medians), q1=q[0], q3=q[2],
                        positive=sum(m > 0 for m in medians) / len(medians)))
    return out


def report(tables: list[dict]) -> str:
    """The markdown ``--out`` writes: one table per dimension, both columns side by side."""
    lines = ["# Signed errors of the NCCL model by group", "",
             "Command: `python benchmarks/residual_groups.py --out results/model_validation`", "",
             f"{len(tables)} tables; signed error pred/real - 1 of busbw at >= 64 KiB (positive: the model is too "
             "fast); per group the median of the tables' medians, its quartiles and the share of tables above 0; "
             "in-sample: the committed constants; held out: the class holdout (`holdout_by_class.md`).", ""]
    for dim in DIMS:
        held = {g["group"]: g for g in group_errors(tables, "held_out", dim)}
        lines += [f"## {dim}", "", "| group | tables | rows | in-sample median | held-out median | held-out IQR "
                  "| tables > 0 (held out) |", "|---|---|---|---|---|---|---|"]
        for g in group_errors(tables, "in_sample", dim):
            h = held[g["group"]]
            lines.append(f"| {g['group']} | {g['tables']} | {g['rows']} | {g['median']:+.1%} | {h['median']:+.1%} "
                         f"| {h['q1']:+.1%} .. {h['q3']:+.1%} | {h['positive']:.0%} |")
        lines.append("")
    return "\n".join(lines)


def tables_from_holdout() -> list[dict]:
    """Both columns of the class holdout for every table (runs :func:`holdout_nccl_model.by_class_scores`)."""
    import holdout_nccl_model

    out = []
    for ins, held in holdout_nccl_model.by_class_scores():
        case, m = held["case"], held["machine"]
        out.append(dict(file=case.file, collective=held["collective"], arch=m.arch, nodes=m.nodes,
                        version=tuple(case.version), in_sample=ins["rows"], held_out=held["rows"]))
    return out


def main(argv=None) -> int:
    from synth.ir.schedule import atomic_write_text

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder to write residual_groups.md into")
    out = p.parse_args(argv).out
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "residual_groups.md", report(tables_from_holdout()))
    print(f"wrote {out / 'residual_groups.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["DIMS", "MIN_BYTES", "group_errors", "report", "row_groups", "size_band", "version_band"]

"""Synthesis at cluster scale: DGX H100 clusters from 8 to 1,024 GPUs, rail-optimized and single switch.

Usage::

    python benchmarks/bench_scale.py [--out results/scale] [--max-gpus 1024] [--alltoall-max 256]

Every case runs in its own process (so its peak RSS is its own): build the topology
(``cluster("dgx-h100", hosts)``; 8 GPUs: the preset alone), build the fabric
(:func:`synth.ir.fabric.build_fabric`), solve (:func:`synth.solve.bwopt.optimal.bandwidth_optimal`,
which verifies and computes the cut bound), save the schedule as ``.json.gz``
(:func:`synth.formats.schedule_file.save_schedule`), load it back and verify it.  Collectives:
allgather, reducescatter, allreduce (ratio to the phased (RS + AG) / n bound), and alltoall up
to ``--alltoall-max`` GPUs (ratio to its cut bound, and the CostModel speed-up over the direct,
NCCL-style pairwise AllToAll at 1 GiB).  Extra rows: a 2:1 oversubscribed leaf-spine cluster, the
explicit all-pairs fabric build and the general tree packing at 64 GPUs (the method used before
this benchmark), hosts of 4 or 8 GPUs with 1, 2, 4 or 8 NICs (256 GPUs), and the 8-GPU mesh of
5/6 Infinity Fabric links.

Writes ``report.md``, ``results.csv`` and ``scale.png`` (log-log: solve time and transfers
against GPUs, with the fitted slopes from 64 to 1,024 GPUs) to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from shown_paths import script_command  # noqa: E402

COLLS = ("allgather", "reducescatter", "allreduce")
FIELDS = ("network", "gpus", "collective", "method", "fabric_s", "solve_s", "total_s", "peak_rss_mb", "ratio",
          "bound", "achieved", "transfers", "steps", "chunks", "file_kb", "load_verify_s", "speedup_vs_pairwise")


# ---------------------------------------------------------------------------- one case (child process)
def _topology(network: str, hosts: int, gpus_per_host: int = 8, nics: int | None = None):
    from topo_probe.machines.clusters import cluster
    from topo_probe.machines.presets import get_preset
    if hosts == 1:
        return get_preset("dgx-h100")
    if nics is not None:
        base = get_preset("dgx-h100")
        base = base if gpus_per_host == 8 else base.subset(range(gpus_per_host), f"dgx-h100x{gpus_per_host}")
        return cluster(base, hosts, rail_optimized=network.startswith("rail"), nics_per_node=nics, nic_gbps=50.0)
    if network == "spine 2:1":
        return cluster("dgx-h100", hosts, spine_oversubscription=2, hosts_per_leaf=4)
    return cluster("dgx-h100", hosts, rail_optimized=network.startswith("rail"))


def _mesh():
    from topo_probe.machines.generators import parity_mesh
    return parity_mesh(8, 25.0, 6, 5, latency_us=0.0, name="amd-mesh-5-6")


def run_case(network: str, hosts: int, coll: str, method: str, gpus_per_host: int = 8, nics: int | None = None) -> dict:
    from synth.formats.schedule_file import load_schedule, save_schedule
    from synth.ir.fabric import build_fabric
    from synth.ir.verifier import check
    from synth.solve.bwopt.optimal import bandwidth_optimal
    t0 = time.perf_counter()
    topo = _mesh() if network == "mesh" else _topology(network, hosts, gpus_per_host, nics)
    fab = build_fabric(topo, structured=method != "explicit-fabric")
    fabric_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    s = bandwidth_optimal(fab, coll, time_limit_s=240 if method != "trees" else 60,
                          method="trees" if method in ("trees", "explicit-fabric") else "auto")
    solve_s = time.perf_counter() - t1
    m = s.meta
    ratio = m.get("ratio_to_phased_bound") if coll == "allreduce" else m.get("ratio_to_bound")
    bound = m.get("phased_bound_exact") if coll == "allreduce" else m.get("bound_exact")
    if nics is not None:
        network = f"{network}, {gpus_per_host} GPUs x {nics} NICs"
    row = dict(network=network, gpus=fab.num_ranks, collective=coll, method=m["method"], fabric_s=fabric_s,
               solve_s=solve_s, total_s=fabric_s + solve_s, ratio=ratio, bound=bound, achieved=m["achieved_exact"],
               transfers=sum(len(st.transfers) for st in s.steps), steps=s.num_steps, chunks=s.chunks_per_rank)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.json.gz"
        save_schedule(s, path)
        row["file_kb"] = path.stat().st_size / 1024
        t2 = time.perf_counter()
        check(load_schedule(path), fab)
        row["load_verify_s"] = time.perf_counter() - t2
    if coll == "alltoall":
        from synth.baselines import baseline
        from synth.model.cost import CostModel
        cost = CostModel(fab)
        pair = baseline("direct", fab, "alltoall")
        row["speedup_vs_pairwise"] = cost.schedule_time_us(pair, 1 << 30) / cost.schedule_time_us(s, 1 << 30)
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


# ---------------------------------------------------------------------------- driver
def _cases(max_gpus: int, a2a_max: int) -> list[tuple]:
    out = []
    hosts = [h for h in (1, 2, 4, 8, 16, 32, 64, 128) if 8 * h <= max_gpus]
    out += [("one host", 1, coll, "auto") for coll in COLLS]
    for network in ("rail", "single switch"):
        for h in hosts[1:]:
            for coll in COLLS + (("alltoall",) if 8 * h <= a2a_max else ()):
                out.append((network, h, coll, "auto"))
    if max_gpus >= 256:
        out += [("spine 2:1", 32, coll, "auto") for coll in COLLS + ("alltoall",)]
    if max_gpus >= 256:                      # hosts of 4 or 8 GPUs with 1, 2, 4 or 8 NICs of 400 Gb/s
        out += [(net, 256 // g, "allgather", "auto", g, k) for g in (8, 4) for k in (1, 2, 4, 8)
                for net in ("rail", "single switch")]
    if max_gpus >= 64:
        out += [("rail, explicit fabric + trees", 8, "allgather", "explicit-fabric")]
    out += [("mesh", 1, "allgather", "trees")]
    return out


def _child(case: tuple, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--case", json.dumps(case)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return dict(network=case[0], gpus=8 * case[1], collective=case[2], method=f"timeout {timeout:.0f} s")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return dict(network=case[0], gpus=8 * case[1], collective=case[2], method=f"failed: {tail[:120]}")
    return json.loads(lines[-1])


def _slope(rows: list[dict], key: str, lo: int = 64) -> float | None:
    pts = [(math.log(r["gpus"]), math.log(r[key])) for r in rows if r.get(key) and r["gpus"] >= lo]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def _plot(rows: list[dict], path: Path) -> dict:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from topo_probe.pictures import save_png
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    slopes = {}
    for ax, network in zip(axes, ("rail", "single switch")):
        for coll, color in zip(COLLS + ("alltoall",), ("C0", "C1", "C2", "C3")):
            pts = sorted((r for r in rows if r.get("collective") == coll and r.get("solve_s")
                          and r.get("network") in (network, "one host")), key=lambda r: r["gpus"])
            if not pts:
                continue
            s_solve, s_tr = _slope(pts, "solve_s"), _slope(pts, "transfers")
            slopes[(network, coll)] = (s_solve, s_tr)
            gpus = [r["gpus"] for r in pts]
            ax.plot(gpus, [r["solve_s"] for r in pts], "o-", color=color,
                    label=f"{coll} solve s (slope {s_solve:.2f})" if s_solve is not None else f"{coll} solve s")
            ax.plot(gpus, [r["transfers"] / 1e5 for r in pts], "x--", color=color, alpha=0.6,
                    label=f"{coll} transfers / 1e5 (slope {s_tr:.2f})" if s_tr is not None else None)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs (DGX H100 hosts x 8)")
        ax.set_title(f"{network}: solve time and transfers (slopes fitted 64-1,024 GPUs)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6.5)
    fig.tight_layout()
    save_png(fig, path, "benchmarks/bench_scale.py", dpi=110)
    plt.close(fig)
    return slopes


def _fmt(v, nd=2) -> str:
    if v is None or v == "":
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _report(rows: list[dict], slopes: dict, out: Path, argv: list[str], wall: float, loads: tuple) -> None:
    lines = ["# Synthesis at cluster scale (DGX H100 clusters, 8 to 1,024 GPUs)", "",
             f"Command: `{script_command(__file__, argv)}` (from the repository root).  Machine: "
             f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; load average "
             f"(1 min) {loads[0]:.2f} at the start, {loads[1]:.2f} at the end (the machine is shared); total "
             f"{wall:.0f} s.", "",
             "Each row is one process: `fabric_s` builds the fabric (`synth.ir.fabric.build_fabric`), `solve_s` is "
             "`bandwidth_optimal` (hierarchical schedule on clusters, AllToAll LP, tree packing on one host; it "
             "verifies the schedule and computes the cut bound), `peak_rss_mb` is the process's peak resident set, "
             "`ratio` the schedule's bandwidth term over the cut bound (allreduce: over the phased (RS + AG) / n "
             "bound), `file_kb` the `.json.gz` schedule, `load_verify_s` loading it back and verifying it.  "
             "Targets: 1,024 GPUs within 300 s and 8 GB, 256 within 60 s, 64 within 10 s (fabric + solve), "
             "ratios within 1.02 (AllToAll 1.05 at 256).", ""]
    lines += ["| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(k), 4 if k in ("ratio", "speedup_vs_pairwise") else 2)
                                       for k in FIELDS) + " |")
    lines += ["", "![scale](scale.png)", "", "## Solve time against transfers (64 to 1,024 GPUs)", "",
              "Log-log slopes of solve time and of the number of transfers in the result against GPUs; the solve "
              "time grows no faster than the transfers when its slope is at most the transfers' slope.", "",
              "| network | collective | solve-time slope | transfers slope | solve no faster than transfers |",
              "|---|---|---|---|---|"]
    for (network, coll), (a, b) in sorted(slopes.items()):
        ok = "yes" if a is not None and b is not None and a <= b + 0.05 else "no" if a is not None else "-"
        lines.append(f"| {network} | {coll} | {_fmt(a)} | {_fmt(b)} | {ok} |")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    (out / "results.csv").write_text(buf.getvalue())
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "results" / "scale")
    p.add_argument("--max-gpus", type=int, default=1024)
    p.add_argument("--alltoall-max", type=int, default=256)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per case")
    p.add_argument("--case", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(*json.loads(args.case))))
        return 0
    from rich.progress import Progress
    args.out.mkdir(parents=True, exist_ok=True)
    t0, load0 = time.time(), os.getloadavg()[0]
    rows = []
    cases = _cases(args.max_gpus, args.alltoall_max)
    with Progress() as bar:
        task = bar.add_task("cases", total=len(cases))
        for case in cases:
            bar.update(task, description=f"{case[0]} {case[1]} hosts {case[2]} ({case[3]})")
            rows.append(_child(case, args.timeout))
            bar.advance(task)
    slopes = _plot(rows, args.out / "scale.png")
    _report(rows, slopes, args.out, sys.argv[1:] if argv is None else argv, time.time() - t0,
            (load0, os.getloadavg()[0]))
    print(f"wrote {args.out}/report.md, results.csv, scale.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

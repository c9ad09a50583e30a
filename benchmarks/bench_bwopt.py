"""Bandwidth-optimal LP-tree schedules (synth.solve.bwopt.optimal) against the cut bound and the ring baseline.

Usage::

    python benchmarks/bench_bwopt.py [--out results/bwopt] [--quick] [--time-limit 240]

For every preset (default figures), partial DGX-1 allocations, ``cluster(dgx-a100, nodes=2)``
and (unless ``--quick``) ``cluster(dgx-a100, nodes=8)`` (64 GPUs, allgather), it builds the
LP-tree schedule of allgather, reducescatter, allreduce and broadcast (root 0), checks it
with ``synth.ir.verifier.check``, and reports:

* the cut bound (``synth.model.bounds``) and the schedule's bandwidth term
  (:func:`synth.solve.bwopt.optimal.bandwidth_term`, computed from the transfers), both in rounds per block,
  and their ratio; the lock-step term (no pipelining);
* the ring baseline's bandwidth term and the modelled time of a 1 GB operation
  (:class:`synth.model.cost.CostModel`, default calibrated parameters) for both, with the speedup;
* for ``pcie-8gpu-2socket``, the ring's loss against the cut bound as the socket link
  (``upi_gbps``) varies.

Writes ``report.md``, ``results.csv`` and ``schedules/*.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import io
import platform
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from synth.baselines import baseline  # noqa: E402
from synth.ir.fabric import build_fabric  # noqa: E402
from synth.ir.schedule import atomic_write_text  # noqa: E402
from synth.ir.verifier import check  # noqa: E402
from synth.model.bounds import lower_bounds  # noqa: E402
from synth.model.cost import CostModel, CostParams  # noqa: E402
from synth.solve.bwopt.bandwidth_term import bandwidth_term, lockstep_bandwidth_term  # noqa: E402
from synth.solve.bwopt.optimal import bandwidth_optimal  # noqa: E402
from topo_probe.errors import TopocollError  # noqa: E402
from topo_probe.machines.clusters import cluster  # noqa: E402
from topo_probe.machines.presets import get_preset  # noqa: E402

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast")
NBYTES = 1e9
#: every link at its nominal rate (sensitivity of the speed-ups to the calibrated efficiencies)
NOMINAL = CostParams(nvlink_efficiency=1.0, pcie_efficiency=1.0, cpu_efficiency=1.0, network_efficiency=1.0,
                     infinity_fabric_efficiency=1.0)
MAX_SAVED_TRANSFERS = 50_000     # larger schedules are not written to schedules/ (size)
PCIE_X16_GEN4 = 31.5


def _cases(quick: bool) -> list[tuple[str, str, object, tuple[str, ...]]]:
    """(section, label, topology builder, collectives)."""
    out = [("presets", name, (lambda n=name: get_preset(n)), COLLECTIVES)
           for name in ("dgx1-v100", "dgx2", "dgx-a100", "dgx-h100", "pcie-8gpu-2socket", "mi300x")]
    for gpus in ((0, 1, 2, 3, 4, 5), (0, 1, 2, 3, 4), (0, 1, 2, 3), (0, 1, 2), (0, 1, 4, 5)):
        label = "dgx1-v100[" + ",".join(map(str, gpus)) + "]"
        out.append(("partial DGX-1", label, (lambda g=gpus: get_preset("dgx1-v100").subset(g)), COLLECTIVES))
    out.append(("clusters", "cluster(dgx-a100, nodes=2)", lambda: cluster("dgx-a100", nodes=2), COLLECTIVES))
    if not quick:
        out.append(("clusters", "cluster(dgx-a100, nodes=8)", lambda: cluster("dgx-a100", nodes=8),
                    ("allgather",)))
    return out


def _frac(x: Fraction) -> str:
    return str(x) if x.denominator <= 1000 else f"{float(x):.4f}"


def _run(label: str, fabric, coll: str, limit: float, out_dir: Path, efficiency=None, tag: str = "") -> dict:
    t0 = time.monotonic()
    s = bandwidth_optimal(fabric, coll, root=0 if coll == "broadcast" else None, time_limit_s=limit,
                          efficiency=efficiency)
    wall = time.monotonic() - t0
    check(s, fabric)
    bounds = lower_bounds(fabric, coll, 0 if coll == "broadcast" else None)
    bound = bounds.bandwidth_rounds_per_block
    phased = bounds.phased_rounds_per_block
    got = bandwidth_term(s, fabric)
    cm = CostModel(fabric)
    ring = baseline("ring", fabric, coll, root=0 if coll == "broadcast" else None)
    ring_term = bandwidth_term(ring, fabric)
    t_ours, t_ring = cm.schedule_time_us(s, NBYTES), cm.schedule_time_us(ring, NBYTES)
    t_bound = lower_bounds(fabric, coll, 0 if coll == "broadcast" else None).time_us(NBYTES, cm.params)
    nominal = CostModel(fabric, NOMINAL)
    speedup_nominal = nominal.schedule_time_us(ring, NBYTES) / nominal.schedule_time_us(s, NBYTES)
    safe = label.replace(" ", "").replace("(", "_").replace(")", "").replace(",", "-").replace("=", "")
    if sum(len(st.transfers) for st in s.steps) <= MAX_SAVED_TRANSFERS:
        s.save(out_dir / "schedules" / f"{safe}-{coll}{tag}.json")
    return {"topology": label, "gpus": fabric.num_ranks, "collective": coll + tag,
            "bound": _frac(bound), "achieved": _frac(got), "ratio": float(got / bound),
            "phased_bound": _frac(phased) if phased is not None else "",
            "ratio_phased": round(float(got / phased), 4) if phased else "",
            "lockstep": s.meta.get("lockstep_rounds_per_block", float(lockstep_bandwidth_term(s, fabric))), "steps": s.num_steps, "chunks": s.chunks_per_rank,
            "seconds": round(wall, 2), "verified": True, "ring_term": _frac(ring_term),
            "ring_over_ours": float(ring_term / got), "sim_us": round(t_ours, 1), "ring_sim_us": round(t_ring, 1),
            "speedup": round(t_ring / t_ours, 3),
            "bound_sim_us": round(t_bound, 1), "ceiling": round(t_ring / t_bound, 3),
            "speedup_nominal": round(speedup_nominal, 3)}


def _pcie_regimes(limit: float) -> list[dict]:
    rows = []
    for upi in (10.0, 4 / 7 * PCIE_X16_GEN4, PCIE_X16_GEN4, 62.4):
        f = build_fabric(get_preset("pcie-8gpu-2socket", upi_gbps=upi))
        b = lower_bounds(f, "allgather").bandwidth_rounds_per_block
        ring = baseline("ring", f, "allgather")
        s = bandwidth_optimal(f, "allgather", time_limit_s=limit)
        check(s, f)
        cm = CostModel(f)
        rows.append({"upi_gbps": round(upi, 2), "bound": _frac(b), "ring_term": _frac(bandwidth_term(ring, f)),
                     "ring_loss_vs_bound": float(bandwidth_term(ring, f) / b),
                     "achieved": _frac(bandwidth_term(s, f)),
                     "speedup_sim": round(cm.schedule_time_us(ring, NBYTES) / cm.schedule_time_us(s, NBYTES), 3)})
    return rows


NOTE_ALLREDUCE = (
    "Allreduce: `bound` is the bound valid for every schedule (a whole block must cross every cut in "
    "each direction: max over GPU subsets S of 1 / min(in(S), out(S)) per block); `phased_bound` is "
    "(RS + AG) / n, which bounds schedules whose reduce-scatter finishes before the all-gather starts. "
    "Our pipelined tree schedules overlap the phases: they meet the phased bound on every preset and "
    "beat it where the bottleneck GPU's inbound and outbound links differ (GPU 4 of GPUs 0-4 has one "
    "2-link NVLink bundle: 1/2 against 4/5, which meets the general bound); `lockstep` (no overlap) is "
    "never below the phased bound.  On symmetric machines the general bound is well below anything "
    "known to be achievable (DGX-1: 1/6 vs 7/24).\n")
NOTE_CLUSTER = (
    "`cluster(dgx-a100, nodes=2)`: the cut bound 250/221 counts each GPU's PCIe link as inbound "
    "capacity, but with NCCL-like routes (`transport='auto'`: NVLink inside a host, the network between "
    "hosts) that link only carries network data, which the host's 8 NICs (200 GB/s) limit: a host's 8 GPUs "
    "need 120 block arrivals through 8 x 300 GB/s NVLink + 200 GB/s NIC, so no channel schedule beats "
    "15/13 = 1.020 x the bound; the LP reaches exactly that.  The simulated speedup cannot reach 1.5 for "
    "any schedule: `ceiling` (ring time / the model's lower bound, which adds to the cut bound at "
    "effective bandwidth the model's least slicing cost) is below 1.5.  With the calibrated efficiencies "
    "(NVLink 0.8, network 0.96) a GPU's 300 GB/s of NVLink delivers 240 GB/s while the ring's NICs keep "
    "24 of 25 GB/s, so the 1.625 x advantage in bandwidth terms shrinks to about 1.48 x in time "
    "(`speedup_nominal`: the same schedules at nominal link rates). "
    "`-effective` rows optimise for the CostModel's per-link-kind efficiencies (`efficiency=CostParams()`); "
    "their bandwidth term is then measured at nominal bandwidth.\n")


def _cell(key: str, v) -> str:
    if isinstance(v, float):
        return f"{v:.0f}" if key.endswith("_us") else f"{v:.2f}" if key == "seconds" else f"{v:.4f}"
    return str(v)


def _table(rows: list[dict], keys: list[str]) -> str:
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        out.append("| " + " | ".join(_cell(k, r[k]) for k in keys) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "bwopt"))
    ap.add_argument("--quick", action="store_true", help="skip the 64-GPU cluster")
    ap.add_argument("--time-limit", type=float, default=240.0, help="per schedule (s)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    command = "python benchmarks/bench_bwopt.py" + (" --quick" if args.quick else "") + \
        (f" --time-limit {args.time_limit:g}" if args.time_limit != 240.0 else "")
    sections: dict[str, list[dict]] = {}
    t_all = time.monotonic()
    try:
        for section, label, build, colls in _cases(args.quick):
            t0 = time.monotonic()
            fabric = build_fabric(build())
            fab_s = time.monotonic() - t0
            for coll in colls:
                row = _run(label, fabric, coll, args.time_limit, out)
                if fabric.num_ranks >= 64:
                    row["seconds"] = round(row["seconds"] + fab_s, 2)
                sections.setdefault(section, []).append(row)
                print(f"{label:32s} {coll:13s} ratio {row['ratio']:.4f}  {row['seconds']:7.2f}s  "
                      f"speedup {row['speedup']:.3f}", flush=True)
            if section == "clusters":
                row = _run(label, fabric, "allgather", args.time_limit, out, CostParams(), "-effective")
                if fabric.num_ranks >= 64:
                    row["seconds"] = round(row["seconds"] + fab_s, 2)
                sections[section].append(row)
        pcie = _pcie_regimes(args.time_limit)
    except TopocollError as e:
        print(f"bench_bwopt: {e}", file=sys.stderr)
        return 1
    rows = [r for rs in sections.values() for r in rs]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(out / "results.csv", buf.getvalue())
    keys = ["topology", "gpus", "collective", "bound", "achieved", "ratio", "phased_bound", "ratio_phased", "lockstep", "steps", "chunks",
            "seconds", "ring_term", "ring_over_ours", "sim_us", "ring_sim_us", "bound_sim_us", "speedup",
            "ceiling", "speedup_nominal"]
    md = ["# Bandwidth-optimal LP-tree schedules (synth.solve.bwopt.optimal)\n",
          f"Command: `{command}` (from the repository root).  Machine: {platform.machine()}, "
          f"{platform.python_version()}, total {time.monotonic() - t_all:.0f} s.\n",
          "Terms are rounds per block (1 round = 1 chunk over the fabric's `unit_gbps`): `bound` is "
          "`synth.model.bounds.lower_bounds(...).bandwidth_rounds_per_block`, `achieved` is "
          "`synth.solve.bwopt.optimal.bandwidth_term(schedule, fabric)` (computed from the transfers: max over resources of "
          "total load / capacity, per block — the limit of many pipelined slices), `lockstep` the same without "
          "pipelining. `sim_us` is `CostModel(fabric).schedule_time_us(schedule, 1e9)` (default calibrated "
          "parameters), `bound_sim_us` the bound's `time_us(1e9, params)` (a lower bound of the modelled time of "
          "every correct schedule), `speedup` = ring / ours, `ceiling` = ring / `bound_sim_us`: the largest "
          "speedup over the ring any schedule can have in the model; `speedup_nominal` = ring / ours in the same "
          "model with every link at its nominal rate (all efficiencies 1.0). Every schedule "
          "passed `synth.ir.verifier.check`; `seconds` is the wall time of `bandwidth_optimal` (64 GPUs: plus "
          "building the fabric).\n"]
    for section, rs in sections.items():
        md += [f"\n## {section}\n", _table(rs, keys), ""]
        if section == "partial DGX-1":
            md.append(NOTE_ALLREDUCE)
        if section == "clusters":
            md.append(NOTE_CLUSTER)
    md += ["\n## pcie-8gpu-2socket: ring against the cut bound as the socket link varies\n",
           "GPUs: PCIe Gen4 x16, 31.5 GB/s per direction; 4 GPUs per switch per socket; the cut bound is "
           "max(7 / 31.5, 4 / upi) x 31.5 rounds per block, a ring's 7 / min(31.5, upi) x 31.5. "
           "`speedup_sim` is the CostModel ratio (1 GB), where CPU links run at half their nominal rate.\n",
           _table(pcie, list(pcie[0])), ""]
    atomic_write_text(out / "report.md", "\n".join(md))
    print(f"wrote {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Predict every real nccl-tests / rccl-tests log in tests/fixtures/real_logs with ONE parameter
set (synth.model.nccl.DEFAULT_PARAMS) and report how close the NCCL model comes.

    python benchmarks/validate_cost_model.py [--out results/model_validation]
    python benchmarks/validate_cost_model.py --fit          # search the fitted constants on all logs together

Each log is described only by what its ``# SOURCE:`` header and its own lines say: the machine
(preset, nodes, NICs and their kind), the NCCL environment the run used, and the GPUs each
process drives (the log's ``nGpus``).  Nothing is fitted per log.

Targets (per log): for sizes >= 64 KiB, median |pred/real - 1| <= 10 % and worst <= 25 % on the
out-of-place busbw; below 64 KiB worst <= 40 % on the time.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from synth.formats.nccl_tests.runs import guess_collective, load_runs  # noqa: E402
from synth.model.nccl import DEFAULT_PARAMS, ModelParams, NcclEnv, NcclMachine, NcclModel, arch_of_gpu_name  # noqa: E402
from topo_probe.cli.options import apply_machine_arguments  # noqa: E402
from topo_probe.machines.presets import get_preset  # noqa: E402

LOGS = ROOT / "tests" / "fixtures" / "real_logs"
SMALL = 64 << 10


@dataclass(frozen=True)
class Case:
    """One log and the machine its header describes."""

    file: str
    preset: str
    nodes: int = 1
    nics_per_node: int | None = None
    nic_gbps: float | None = None
    net_kind: str = "ib"
    env: dict = field(default_factory=dict)
    collective: str | None = None
    why: str = ""


CASES = [
    Case("a100_8gpu_1node_all_reduce.txt", "dgx-a100", why="8 x A100-SXM4-80GB, NVSwitch, one process (-g 8)"),
    Case("a100_8gpu_1node_sendrecv.txt", "dgx-a100", collective="sendrecv", why="8 x A100 NVSwitch, sendrecv -g 8"),
    Case("a100_aws_p4de_16gpu_2node_all_reduce.txt", "dgx-a100", 2, 4, 12.5, "efa",
         why="2 x p4de.24xlarge: 4 x 100 Gb/s EFA per node"),
    Case("h100_16gpu_2node_alltoall_sendrecv.txt", "dgx-h100", 2, collective="alltoall",
         why="2 x 8 H100, InfiniBand (8 x 400 Gb/s NDR assumed: a DGX H100 host)"),
    Case("h100_16gpu_2node_alltoall_sendrecv.txt", "dgx-h100", 2, collective="sendrecv",
         why="the same job's sendrecv test"),
    Case("h100_8gpu_1node_all_gather_ring.txt", "dgx-h100", env={"NCCL_ALGO": "RING", "NCCL_NVLS_ENABLE": "0"},
         why="8 x H100 SXM5 NVSwitch, NCCL 2.26.2, NCCL_ALGO=RING, NVLS off"),
    Case("h100_8gpu_1node_all_reduce_ring.txt", "dgx-h100",
         env={"NCCL_ALGO": "RING", "NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0"},
         why="8 x H100 SXM5 NVSwitch, NCCL 2.26.2, NCCL_ALGO=RING, NVLS off"),
    Case("h100_aws_p5_16gpu_2node_all_reduce_nccl2.22.3.txt", "dgx-h100", 2, 32, 12.5, "efa2",
         why="2 x p5.48xlarge: 32 x 100 Gb/s EFA per node, NCCL 2.22.3, NVLS on"),
    Case("h100_gcp_a3mega_16gpu_2node_all_reduce.txt", "dgx-h100", 2, 8, 25.0, "tcpxo",
         why="2 x a3-megagpu-8g: 8 x 200 Gb/s GPUDirect-TCPXO NICs per node"),
    Case("mi300x_8gpu_1node_all_reduce.txt", "mi300x", why="8 x MI300X xGMI mesh, RCCL, one process per GPU"),
    Case("v100_8gpu_dgx1_hybridcubemesh_1node_all_reduce.txt", "dgx1-v100",
         why="8 x V100-SXM2 hybrid cube mesh (DGX-1), -g 8, 2019"),
]


#: why a log misses its targets: what its rows show that the model has no term for (read off the
#: per-size tables below; the model is not changed per log)
WHY = {
    "a100_8gpu_1node_all_reduce.txt": "one process drives all 8 GPUs (-g 8); the measured curve has a dip between "
    "the LL128 and Simple regions (4-16 MiB at 70-113 GB/s) and a shoulder at 128-512 MiB that a latency + "
    "bandwidth per protocol does not follow; the median is within target.",
    "a100_8gpu_1node_sendrecv.txt": "its first row (128 MiB: 1211 us, 110 GB/s) is slower than the bandwidth of "
    "the next three rows (189-195 GB/s) allows: a first-call cost of the single-process run, not a property of "
    "the size.",
    "a100_aws_p4de_16gpu_2node_all_reduce.txt": "first-generation EFA: 64 KiB-4 MiB take 227-534 us, almost flat, "
    "then bandwidth rises; NCCL's tree over EFA pays a per-message cost the model spreads as latency plus "
    "pipeline fill.",
    "h100_aws_p5_16gpu_2node_all_reduce_nccl2.22.3.txt": "below 1 KB the log is noisy (8 B 85.7 us vs 16 B "
    "63.4 us) and 64-128 KiB dip to 96-107 us; everything >= 64 KiB is within 26 %.",
    "h100_gcp_a3mega_16gpu_2node_all_reduce.txt": "GPUDirect-TCPXO has a slow regime from 2 to 32 MiB (times grow "
    "at about 21 GB/s, 977 us at 16 MiB) before the large-message rate (339 GB/s busbw at 8 GiB); no NCCL "
    "algorithm or protocol of the model runs that slowly there.",
    "mi300x_8gpu_1node_all_reduce.txt": "RCCL switches kernels at sizes its bundled MSCCL tables decide: 128-512 B "
    "take 23 us while 1 KB takes 13.7 us, and 1-2 MiB run faster than RCCL's own ring model predicts; large "
    "sizes are within 4 %.",
}


def machine_for(case: Case, log) -> NcclMachine:
    """The NcclMachine of a case: preset (+ nodes/NICs), the log's GPU name and nGpus."""
    ns = argparse.Namespace(nodes=case.nodes if case.nodes > 1 else None, nic_gbps=case.nic_gbps,
                            nics_per_node=case.nics_per_node, rail_optimized=False)
    topo = apply_machine_arguments(get_preset(case.preset), ns)
    m = NcclMachine.from_topology(topo, gpus_per_process=log.n_gpus or 1, net_kind=case.net_kind)
    arch = arch_of_gpu_name(log.devices[0].name) if log.devices else None
    return m.with_(arch=arch) if arch else m


def evaluate(case: Case, params=DEFAULT_PARAMS) -> dict:
    """Per-row predictions and the error summary of one case."""
    runs = load_runs(LOGS / case.file)
    log = next(r for r in runs if case.collective is None or guess_collective(r, case.file) == case.collective)
    coll = case.collective or guess_collective(log, case.file)
    model = NcclModel(machine_for(case, log), params, NcclEnv.from_environ(case.env))
    rows = []
    for r in log.rows:
        if r.size <= 0 or r.out_of_place is None or not r.out_of_place.time_us:
            continue
        c = model.choose(coll, r.size)
        real_t, real_bw = r.out_of_place.time_us, r.out_of_place.busbw_gbps or 0.0
        pred_bw = real_bw * real_t / c.time_us if real_bw else 0.0       # same busbw factor as the log
        err = (c.time_us / real_t - 1) if r.size < SMALL or not real_bw else (pred_bw / real_bw - 1)
        rows.append(dict(size=r.size, real_us=real_t, pred_us=c.time_us, real_busbw=real_bw, pred_busbw=pred_bw,
                         err=err, choice=c.label))
    big = [abs(x["err"]) for x in rows if x["size"] >= SMALL]
    small = [abs(x["err"]) for x in rows if x["size"] < SMALL]
    s = dict(median_big=statistics.median(big) if big else 0.0, worst_big=max(big, default=0.0),
             worst_small=max(small, default=0.0))
    s["ok"] = s["median_big"] <= 0.10 and s["worst_big"] <= 0.25 and s["worst_small"] <= 0.40
    return dict(case=case, collective=coll, machine=model.machine, rows=rows, summary=s)


def objective(params) -> float:
    """What the fit minimises over all logs together: per log, the squared median and 80th
    percentile of the relative errors (every log weighs the same)."""
    total = 0.0
    for case in CASES:
        res = evaluate(case, params)
        errs = sorted(abs(x["err"]) for x in res["rows"])
        q = errs[int(0.8 * (len(errs) - 1))]           # robust: a band of points a log's machine
        total += statistics.median(errs) ** 2 + q ** 2  # cannot explain does not drag every constant
    return total / len(CASES)


ARCHS_IN_LOGS = ("sm70", "sm80", "sm90", "gfx942")


def fit(params=DEFAULT_PARAMS, rounds: int = 6):
    """Coordinate search over the fitted constants (all logs together); prints the result."""
    keys = [("launch_us", None), ("launch_per_gpu_us", None), ("nvls_efficiency", None), ("one_shot_us", None),
            ("p2p_net_fraction", None)] + [("link_gbps", k) for k in params.link_gbps if "pcie" not in k] + \
           [("net_latency_scale", k) for k in params.net_latency_scale] + \
           [("net_efficiency", k) for k in params.net_efficiency] + [("base_us", k) for k in params.base_us] + \
           [("hop_us", k) for k in params.hop_us if k[0] in ARCHS_IN_LOGS] + [("chunk_bytes", k) for k in params.chunk_bytes]
    best = objective(params)
    for k in range(rounds):
        factors = (0.5, 0.7, 0.85, 1.15, 1.4, 2.0) if k < 2 else (0.8, 0.9, 0.95, 1.05, 1.1, 1.25)
        for name, key in keys:
            for factor in factors:
                cand = _scaled(params, name, key, factor)
                val = objective(cand)
                if val < best:
                    best, params = val, cand
        print(f"objective {best:.5f}", flush=True)
    print(params)
    return params


#: the documented starting values the bounds refer to
START = ModelParams()
#: how far a fitted constant may move from its documented starting value (link speeds stay near
#: the vendors' and NCCL's figures; latencies and efficiencies may move further)
BOUNDS = {"link_gbps": (0.97, 1.05), "net_efficiency": (0.5, 1.1), "nvls_efficiency": (1.0, 1.0),
          "chunk_bytes": (0.25, 4.0), "base_us": (0.3, 3.0), "hop_us": (0.2, 5.0)}


def _scaled(params, name, key, factor):
    lo, hi = BOUNDS.get(name, (0.1, 10.0))
    start = getattr(START, name) if key is None else getattr(START, name)[key]
    if key is None:
        value = getattr(params, name) * factor
        return replace(params, **{name: min(max(value, lo * start), hi * start)})
    table = dict(getattr(params, name))
    table[key] = min(max(table[key] * factor, lo * start), hi * start)
    return replace(params, **{name: table})


def write_report(results: list[dict], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# NCCL model vs real nccl-tests / rccl-tests logs", "",
             "Command: `python benchmarks/validate_cost_model.py --out results/model_validation`", "",
             "One parameter set for every log (`synth.model.nccl.DEFAULT_PARAMS`); each log is described only by its "
             "machine (from its `# SOURCE:` header), its NCCL environment and the GPUs per process it printed. "
             "Error: |pred/real - 1| of the out-of-place busbw for sizes >= 64 KiB, of the time below. "
             "Targets: median <= 10 % and worst <= 25 % (>= 64 KiB), worst <= 40 % (< 64 KiB).", "",
             "| log | collective | machine | median >= 64K | worst >= 64K | worst < 64K | targets |",
             "|---|---|---|---|---|---|---|"]
    for res in results:
        c, s, m = res["case"], res["summary"], res["machine"]
        lines.append(f"| {c.file} | {res['collective']} | {m.ranks} x {m.arch}, {m.nodes} node(s), {m.intra}"
                     f"{f', {m.nics_per_node} x {m.nic_gbps:g} GB/s {m.net_kind}' if m.nodes > 1 else ''} | "
                     f"{s['median_big']:.1%} | {s['worst_big']:.1%} | {s['worst_small']:.1%} | "
                     f"{'met' if s['ok'] else '**missed**'} |")
    met = sum(r["summary"]["ok"] for r in results)
    med = sum(r["summary"]["median_big"] <= 0.10 for r in results)
    lines += ["", f"Targets met on {met} of {len(results)} logs; median within 10 % on {med} of {len(results)}. "
              "The constants (`synth/model/nccl/fitted_params.json`) were searched on all logs together "
              "(`--fit`); each log's reason for a miss is under its table.", ""]
    for res in results:
        lines += _detail(res, out)
    (out / "report.md").write_text("\n".join(lines) + "\n")


def _detail(res: dict, out: Path) -> list[str]:
    c = res["case"]
    stem = Path(c.file).stem + ("" if c.collective is None else f"_{c.collective}")
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(res["rows"][0]))
        w.writeheader()
        w.writerows(res["rows"])
    _plot(res, out / f"{stem}.png")
    why = "" if res["summary"]["ok"] else f"Why it misses: {WHY.get(c.file, 'see the table.')}"
    lines = [f"## {c.file} ({res['collective']})", "", c.why, "", *([why, ""] if why else []),
             "| size (B) | real us | pred us | real busbw | pred busbw | error | NCCL choice |", "|---|---|---|---|---|---|---|"]
    for x in res["rows"]:
        lines.append(f"| {x['size']} | {x['real_us']:.1f} | {x['pred_us']:.1f} | {x['real_busbw']:.2f} | "
                     f"{x['pred_busbw']:.2f} | {x['err']:+.1%} | {x['choice']} |")
    return lines + ["", f"![{stem}]({stem}.png)", ""]


def _plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [x for x in res["rows"] if x["real_busbw"] > 0]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([x["size"] for x in rows], [x["real_busbw"] for x in rows], "o-", label="real (nccl-tests)")
    ax.plot([x["size"] for x in rows], [x["pred_busbw"] for x in rows], "s--", label="NCCL model")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"{res['case'].file} ({res['collective']})", fontsize=9)
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "results" / "model_validation")
    p.add_argument("--fit", action="store_true", help="search the fitted constants on all logs together")
    p.add_argument("--write", action="store_true", help="with --fit: commit the result as the model's constants")
    p.add_argument("--from-start", action="store_true", help="with --fit: start from the documented values")
    args = p.parse_args(argv)
    params = fit(ModelParams() if args.from_start else DEFAULT_PARAMS) if args.fit else DEFAULT_PARAMS
    if args.fit and args.write:
        import json

        from synth.model.nccl.constants import FITTED, params_to_dict
        FITTED.write_text(json.dumps(params_to_dict(params), indent=1, sort_keys=True) + "\n")
        print(f"wrote {FITTED}")
    results = [evaluate(c, params) for c in CASES]
    for r in results:
        s = r["summary"]
        print(f"{r['case'].file:55s} {r['collective']:10s} median {s['median_big']:6.1%} worst {s['worst_big']:6.1%} "
              f"small {s['worst_small']:6.1%} {'OK' if s['ok'] else 'MISS'}")
    if not args.fit or args.write:
        write_report(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

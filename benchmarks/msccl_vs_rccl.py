"""Our synthesized schedules against AMD's production MSCCL algorithms shipped with RCCL.

Usage::

    python benchmarks/msccl_vs_rccl.py [--out results/msccl_vs_rccl] [--time-limit 20]

For each RCCL algorithm in ``tests/fixtures/msccl/`` (copied from ROCm/rccl ``tools/``): import
it (``synth.formats.msccl``) onto a topology of its rank count — the ``mi300x`` preset for 8
GPUs, ``full:16`` for 16, ``full:16 --nodes 2`` for 32 — then run our ``synthesize`` candidates
for the same collective and topology (baselines, CP-SAT step synthesis up to 8 ranks, the
bandwidth-optimal LP method) and keep the one fastest over the algorithm's own size range (its
``minBytes``..``maxBytes``; 1 KiB / 1 GiB where the file leaves them open).  Both are timed by
the cost model (``synth.model.cost.CostModel``, default parameters) at the range's ends and its
geometric middle; ours also as exported (``to_msccl_xml``) and read back, i.e. as the runtime
would run it.  Writes ``results.csv`` and ``report.md`` (with the command) to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.progress import Progress  # noqa: E402

from synth.formats.msccl import from_msccl_xml, to_msccl_xml  # noqa: E402
from synth.formats.msccl.writer import protocol_for  # noqa: E402
from synth.formats.schedule_file import load_schedule  # noqa: E402
from synth.ir.fabric import build_fabric  # noqa: E402
from synth.ir.schedule import atomic_write_text  # noqa: E402
from synth.ir.verifier import check  # noqa: E402
from synth.model.cost import CostModel  # noqa: E402
from synth.pipeline.synthesize import SynthesisOptions, synthesize_collective  # noqa: E402
from topo_probe.machines.clusters import cluster  # noqa: E402
from topo_probe.machines.presets import get_preset  # noqa: E402
from topo_probe.machines.specs import parse_generator_spec  # noqa: E402
from topo_probe.parsers.nccl_xml import parse_nccl_xml  # noqa: E402

SAMPLES = ROOT / "tests" / "fixtures" / "msccl"
FUSED = ("rcs", "rrs", "rrcs")


def fabrics_for(ranks: int) -> list[tuple[str, object]]:
    """The (name, fabric) an algorithm of ``ranks`` GPUs is timed on.  RCCL's MI250X model joins
    some GCD pairs only through PCIe, so its fabric keeps every route (``transport="all"``)."""
    if ranks == 8:
        return [("mi300x", build_fabric(get_preset("mi300x")))]
    if ranks == 16:
        text = (ROOT / "tests/fixtures/rccl_topo/topo_16p1h.xml").read_text()
        mi250 = build_fabric(parse_nccl_xml(text, source="topo_16p1h.xml"), transport="all")
        return [("full:16", build_fabric(parse_generator_spec("full:16"))),
                ("topo_16p1h.xml (RCCL's model of 16 MI250X GCDs)", mi250)]
    if ranks == 32:
        return [("full:16 --nodes 2", build_fabric(cluster(parse_generator_spec("full:16"), 2)))]
    raise SystemExit(f"no topology for {ranks} ranks")


def sizes_for(meta: dict) -> list[int]:
    lo = meta["min_bytes"] or 1024
    hi = meta["max_bytes"] or 1 << 30
    return sorted({lo, int(math.sqrt(lo * hi)), hi})


def fmt_size(n: int) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << k:
            return f"{n / (1 << k):.4g} {unit}"
    return f"{n} B"


def why(mine, theirs, ours_s, their_s) -> str:
    """Which part of the model makes ours slower (only called when it is)."""
    parts = []
    d_fixed, d_bw = mine.fixed_us - theirs.fixed_us, mine.bandwidth_us - theirs.bandwidth_us
    if d_fixed > 0.05 * (mine.time_us - theirs.time_us):
        parts.append(f"{mine.wavefronts} step waves to their {theirs.wavefronts} "
                     f"(+{d_fixed:.1f} µs of per-step overhead and latency)")
    if d_bw > 0.05 * (mine.time_us - theirs.time_us):
        parts.append(f"its busiest links carry more per wave (+{d_bw:.1f} µs of pure bandwidth time; "
                     f"{ours_s.num_rounds} rounds over {ours_s.chunks_per_rank} chunk(s)/rank vs "
                     f"{their_s.num_rounds} over {their_s.chunks_per_rank})")
    return "; ".join(parts) or "the in-step pipelining term"


def _kinds(xml: str) -> dict[str, int]:
    kinds = dict.fromkeys(("s", "r", "rrc", "re", "cpy", "nop") + FUSED, 0)
    for k in re.findall(r'type="(\w+)"', xml):
        kinds[k] = kinds.get(k, 0) + 1
    return kinds


def _candidates(fabric, coll: str, time_limit: float, tmp: Path) -> tuple[dict, float]:
    work = Path(tempfile.mkdtemp(dir=tmp))
    (work / "schedules").mkdir()
    opts = SynthesisOptions(collectives=(coll,), time_limit_s=time_limit, progress=False, log=lambda *_: None)
    t0 = time.perf_counter()
    return synthesize_collective(fabric, coll, opts, work).schedules, time.perf_counter() - t0


def run(out: Path, time_limit: float) -> tuple[list[dict], list[dict]]:
    rows, fused, cands = [], [], {}
    files = sorted(SAMPLES.glob("*.xml"))
    with Progress() as progress, tempfile.TemporaryDirectory() as tmp:
        task = progress.add_task("RCCL algorithms", total=len(files))
        for path in files:
            head = from_msccl_xml(path.read_text(), source=path.name)
            for topo_name, fabric in fabrics_for(head.ranks):
                theirs = load_schedule(path, fabric=fabric)
                check(theirs, fabric)
                key = (topo_name, theirs.collective)
                if key not in cands:
                    cands[key] = _candidates(fabric, theirs.collective, time_limit, Path(tmp))
                    fused += _fusion_rows(topo_name, fabric, cands[key][0])
                rows += _compare(path.name, topo_name, fabric, theirs, *cands[key])
            progress.advance(task)
    return rows, fused


def _fusion_rows(topo_name: str, fabric, schedules: dict) -> list[dict]:
    out = []
    for name, s in sorted(schedules.items()):
        xml = to_msccl_xml(s, name=name)
        back = from_msccl_xml(xml, fabric=fabric)
        out.append({"topology": topo_name, "schedule": name, "steps": s.num_steps, "rounds": s.num_rounds,
                    "chunks": s.chunks_per_rank, "exported_steps": back.num_steps,
                    "inplace": 'inplace="1"' in xml, **_kinds(xml)})
    return out


def _compare(file: str, topo_name: str, fabric, theirs, schedules: dict, synth_s: float) -> list[dict]:
    meta = theirs.meta["msccl"]
    sizes = sizes_for(meta)
    cost = CostModel(fabric)
    name, ours = min(schedules.items(), key=lambda kv: sum(cost.schedule_time_us(kv[1], n) for n in sizes))
    top = meta["max_bytes"] or None
    xml = to_msccl_xml(ours, name=name, min_bytes=meta["min_bytes"], max_bytes=top, proto=protocol_for(top))
    exported = from_msccl_xml(xml, fabric=fabric)
    kinds = _kinds(xml)
    rows = []
    for n in sizes:
        t_est = CostModel(fabric).estimate(theirs, n)
        o_est = CostModel(fabric).estimate(ours, n)
        x_est = CostModel(fabric).estimate(exported, n)
        rows.append({
            "rccl_file": file, "collective": theirs.collective, "ranks": theirs.ranks,
            "topology": topo_name, "proto": meta["proto"], "size": n, "size_text": fmt_size(n),
            "rccl_us": round(t_est.time_us, 2), "rccl_steps": theirs.num_steps,
            "rccl_rounds": theirs.num_rounds, "rccl_chunks": theirs.chunks_per_rank,
            "rccl_inplace": meta["inplace"], "ours": name, "ours_us": round(o_est.time_us, 2),
            "ours_steps": ours.num_steps, "ours_rounds": ours.num_rounds,
            "ours_chunks": ours.chunks_per_rank, "exported_us": round(x_est.time_us, 2),
            "exported_steps": exported.num_steps, "exported_rounds": exported.num_rounds,
            "exported_inplace": 'inplace="1"' in xml, "candidates": len(schedules), "synth_s": round(synth_s, 1),
            **{f"n_{k}": v for k, v in kinds.items()},
            "why": why(o_est, t_est, ours, theirs) if o_est.time_us > t_est.time_us * 1.001 else "",
            "why_exported": why(x_est, t_est, exported, theirs) if x_est.time_us > t_est.time_us * 1.001 else "",
        })
    return rows


def report(rows: list[dict], fused: list[dict], out: Path, command: str) -> str:
    lines = [
        "# Our schedules vs AMD's production MSCCL algorithms (RCCL)",
        "",
        f"Command: `{command}`",
        "",
        "Each RCCL algorithm (copied from ROCm/rccl `tools/msccl-algorithms` and "
        "`tools/msccl-unit-test-algorithms` into `tests/fixtures/msccl/`) is imported and verified "
        "on a topology of its rank count, then timed by the cost model (`synth.model.cost.CostModel`, "
        "default parameters) at the ends and the geometric middle of its own size range. *Ours* is the "
        "fastest `synthesize` candidate for the same collective and topology over those sizes, timed from "
        "its schedule IR and as exported to MSCCL XML and read back (*exported*: what RCCL would run, each "
        "threadblock doing one network step per round). Times in µs; steps / rounds / chunks per rank of "
        "each schedule.",
        "",
        f"Summary: over {len(rows)} (algorithm, topology, size) cells ours is faster than RCCL's in "
        f"{sum(r['ours_us'] < r['rccl_us'] * 0.999 for r in rows)}, as fast in "
        f"{sum(abs(r['ours_us'] - r['rccl_us']) <= r['rccl_us'] * 0.001 for r in rows)} and slower in "
        f"{sum(r['ours_us'] > r['rccl_us'] * 1.001 for r in rows)}; as exported and read back, slower in "
        f"{sum(r['exported_us'] > r['rccl_us'] * 1.001 for r in rows)}.",
        "",
        "| RCCL algorithm | coll | GPUs (topology) | size | RCCL µs | S/R/C | ours | ours µs | S/R/C | "
        "exported µs | exported S/R | ours/RCCL | exported/RCCL |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['rccl_file']} ({r['proto']}) | {r['collective']} | {r['ranks']} ({r['topology']}) | "
            f"{r['size_text']} | {r['rccl_us']} | {r['rccl_steps']}/{r['rccl_rounds']}/{r['rccl_chunks']} | "
            f"{r['ours']} | {r['ours_us']} | {r['ours_steps']}/{r['ours_rounds']}/{r['ours_chunks']} | "
            f"{r['exported_us']} | {r['exported_steps']}/{r['exported_rounds']} | "
            f"{r['ours_us'] / r['rccl_us']:.2f} | {r['exported_us'] / r['rccl_us']:.2f} |")
    lines += ["", "## Our exports", "",
              "Instruction counts of the exported XML (all GPUs): fused steps are `rcs` (receive, copy, "
              "send on), `rrs` (receive, reduce, send on) and `rrcs` (receive, reduce, store, send on).", "",
              "| RCCL algorithm | ours | s | r | rrc | cpy | nop | rcs | rrs | rrcs | declared in-place | "
              "candidates (synthesis s) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    seen = set()
    for r in rows:
        if (r["rccl_file"], r["topology"]) in seen:
            continue
        seen.add((r["rccl_file"], r["topology"]))
        lines.append(f"| {r['rccl_file']} ({r['topology']}) | {r['ours']} | " + " | ".join(
            str(r[f"n_{k}"]) for k in ("s", "r", "rrc", "cpy", "nop") + FUSED)
            + f" | {'yes' if r['exported_inplace'] else 'no'} (RCCL's: {'yes' if r['rccl_inplace'] else 'no'}) | "
              f"{r['candidates']} ({r['synth_s']}) |")
    lines += ["", "## Fusion in the exports of every candidate", "",
              "Every `synthesize` candidate exported to MSCCL XML (`to_msccl_xml`, default options) and read "
              "back: instruction counts over all GPUs, steps of the IR and of the export as replayed.", "",
              "| topology | schedule | S/R/C | exported steps | s | r | rrc | re | cpy | nop | rcs | rrs | rrcs "
              "| in-place |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in fused:
        lines.append(f"| {f['topology']} | {f['schedule']} | {f['steps']}/{f['rounds']}/{f['chunks']} | "
                     f"{f['exported_steps']} | " + " | ".join(str(f[k]) for k in ("s", "r", "rrc", "re", "cpy", "nop")
                                                             + FUSED) + f" | {'yes' if f['inplace'] else 'no'} |")
    lines += ["", "## Where ours is slower, and why", ""]
    if not any(r["why"] or r["why_exported"] for r in rows):
        lines.append("Nowhere: ours is at least as fast at every size measured.")
    for r in rows:
        if r["why"]:
            lines.append(f"- {r['rccl_file']} on {r['topology']} at {r['size_text']}: {r['ours']} takes "
                         f"{r['ours_us']} µs vs {r['rccl_us']} µs: {r['why']}.")
        if r["why_exported"]:
            lines.append(f"- {r['rccl_file']} on {r['topology']} at {r['size_text']}, as exported: "
                         f"{r['exported_us']} µs vs {r['rccl_us']} µs: {r['why_exported']}.")
    lines += ["", "## Reading the numbers", "",
              "- RCCL's one-step allreduce (every GPU sends all its data to every other and sums locally: n-1 "
              "times the traffic of the two-step direct schedule) has no counterpart among our candidates; "
              "the baselines' shortest allreduce is the two-step direct one and CP-SAT's Pareto search on "
              "mi300x returns two steps as its fewest. At a few KiB the second step's overhead is what "
              "RCCL saves.",
              "- On RCCL's MI250X model our bandwidth-optimal trees win in the schedule IR, where one step "
              "may put dozens of chunks on one link; exported, each chunk is a threadblock step (neighbouring "
              "chunks merge into `cnt` > 1 steps only when their buffer places are contiguous), so at small "
              "sizes the per-step overhead makes the export slower than RCCL's ring.",
              "- The cost model has no protocol term: LL's half-rate lines (8 bytes carry 4 of data) and "
              "LL128's 120/128 are not charged, for RCCL's files nor for ours; RCCL uses LL files only for "
              "small messages, where latency dominates.",
              "- RCCL's imported schedules count one round per multi-chunk step (`cnt=\"8\"`); with the "
              "fabric each step declares the rounds its load needs, so chunk-rounds are comparable.",
              "- *Exported* differs from *ours* where a threadblock serialises what the IR put in one step "
              "(more steps of one chunk each: per-step overhead), or where fused steps forward a chunk the "
              "round it lands (fewer steps).",
              "- 16 GPUs run on a generated fully connected topology (25 GB/s links) and on RCCL's own model "
              "of a 16-GCD MI250X host (tests/fixtures/rccl_topo/topo_16p1h.xml: 4-, 2- and 1-link xGMI "
              "bundles, the rest over PCIe), 32 GPUs on two `full:16` hosts joined by 200 Gb/s NICs: the "
              "comparison is between schedules on one model, not a prediction of RCCL's speed."]
    text = "\n".join(lines) + "\n"
    atomic_write_text(out / "report.md", text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "results" / "msccl_vs_rccl"))
    p.add_argument("--time-limit", type=float, default=20.0, help="synthesis time budget per collective (s)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, fused = run(out, args.time_limit)
    with open(out / "results.csv.tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out / "results.csv.tmp").replace(out / "results.csv")
    command = "python benchmarks/msccl_vs_rccl.py"
    if args.time_limit != 20.0:
        command += f" --time-limit {args.time_limit:g}"
    print(report(rows, fused, out, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())

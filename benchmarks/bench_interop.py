"""Every MSCCL XML we hand to a runtime, checked against the runtime's own rules and replayed.

Usage::

    python benchmarks/bench_interop.py [--out results/interop] [--time-limit 10] [--no-fresh]

For every XML in every ready ``msccl/`` folder under ``results/`` (the files a user points
``MSCCL_ALGO_DIR`` at; ``candidates/`` is skipped, as the runtimes skip subfolders) and in fresh
``synthesize`` runs into a temporary folder (the README presets, ``full:33`` alltoall and
:data:`OTHER_MACHINES`, machines no preset has, a 2-host dgx-a100 cluster first; allgather,
reducescatter, allreduce and alltoall only, the collectives a ready folder holds, with
``--time-limit`` seconds per solver), it writes one row: the runtime the run targeted
(``msccl_runtime`` in its summary.json, else the default for its GPUs), whether
RCCL (ROCm 6.1+) and msccl-executor-nccl load, launch and pick it
(:mod:`synth.formats.msccl.runtimes`; the first violation, if any), the power-of-two float32
calls at which it is picked, full ops, most steps per threadblock and threadblocks per GPU, our
reader's replay (:func:`synth.from_msccl_xml`: run symbolically, verified) and the replay's
modelled time over the schedule's it was written from (the cost of the lowering).  For the
committed files it also re-exports the schedule behind each with the current writer for the
same runtime and range (what regenerating the folder will give), and for every file built for
msccl-executor-nccl the RCCL export of the same schedule and range (``--msccl-runtime rccl``).

Writes ``report.md`` and ``interop.csv`` to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import io
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tests"))           # the one list of machines no preset has

from synth import from_msccl_xml, load_schedule  # noqa: E402
from synth.formats.msccl.runtimes import (FULL_OPS, MSCCL_EXECUTOR_NCCL, RCCL, check_program,  # noqa: E402
                                          check_xml, pick_violations, picked_sizes, profile_named)
from synth.formats.msccl.occupancy import gpu_of  # noqa: E402
from synth.formats.msccl.writer import Export  # noqa: E402
from synth.ir.fabric import build_fabric  # noqa: E402
from synth.ir.schedule import atomic_write_text  # noqa: E402
from synth.model.cost import CostModel  # noqa: E402
from synth.pipeline.msccl_export import default_runtime  # noqa: E402
from topo_probe import load_topology  # noqa: E402
from topo_probe.errors import TopocollError  # noqa: E402
from _other_machines import INTEROP, selection  # noqa: E402
from shown_paths import script_command, shown_command  # noqa: E402

PRESETS = ("dgx1-v100", "dgx-a100", "dgx-h100", "mi300x", "pcie-8gpu-2socket")
READY_COLLECTIVES = "allgather,reducescatter,allreduce,alltoall"
#: fresh runs on machines no preset has (tests/_other_machines.py's list, bench_interop's selection): a 2-host
#: dgx-a100 cluster, hand-written fixtures of other machines, a few GPUs of a preset, a RoCE cluster
OTHER_MACHINES = selection(INTEROP)
FIELDS = ("source", "folder", "file", "runtime", "loads_on_target", "rccl", "msccl_executor_nccl",
          "every_size_picked", "picked_float32", "full_ops", "max_steps_per_tb", "max_tbs_per_gpu", "nchannels",
          "replay", "lowering_cost", "reexport_now", "reexport_rccl")


def fresh_runs(time_limit: float) -> list[tuple[str, list[str]]]:
    """(folder name, synthesize arguments) of the fresh runs."""
    quick = ["--collectives", READY_COLLECTIVES, "--time-limit", f"{time_limit:g}"]
    runs = [(p, ["--topology", p] + quick) for p in PRESETS]
    runs.append(("full33-alltoall", ["--topology", "full:33", "--collectives", "alltoall"]))
    runs.append(("full33-alltoall-rccl", ["--topology", "full:33", "--collectives", "alltoall",
                                          "--msccl-runtime", "rccl"]))
    for name, machine in OTHER_MACHINES.items():
        runs.append((name, machine.synthesize_args() + quick))
    return runs


def _text(path: Path) -> str:
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def _sizes(sizes: list[int]) -> str:
    """``64 B-4 GiB (27)``: the first and last picked call and how many."""
    if not sizes:
        return "never"
    return f"{_bytes(sizes[0])}-{_bytes(sizes[-1])} ({len(sizes)})"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def _verdict(violations: list[str]) -> str:
    return "yes" if not violations else f"no: {violations[0][:110]}" + (f" (+{len(violations) - 1})"
                                                                         if len(violations) > 1 else "")


def _schedule_of(folder: Path, xml: Path):
    """The schedule file an XML of ``folder/msccl/`` was written from (``<slug>[-rK].xml``)."""
    slug = re.sub(r"(-r\d+)?\.xml(\.gz)?$", "", xml.name)
    for name in (f"{slug}.json", f"{slug}.json.gz"):
        if (folder / "schedules" / name).is_file():
            return folder / "schedules" / name
    return None


def _replay_cost(text: str, xml: Path, fabric, original, sizes: list[int]) -> tuple[str, str]:
    """(replay verdict, modelled time of the replay over the original's at the largest picked
    size up to 1 GiB)."""
    try:
        back = from_msccl_xml(text, source=xml.name, fabric=fabric)
    except TopocollError as e:
        return f"refused: {str(e)[:120]}", ""
    if original is None or not sizes:
        return "verified", ""
    at = max([s for s in sizes if s <= 1 << 30] or sizes[:1])
    model = CostModel(fabric)
    ratio = model.schedule_time_us(back, at) / model.schedule_time_us(original, at)
    return "verified", f"{ratio:.3f} at {_bytes(at)}"


def _reexport(original, program, runtime: str, fabric, gpu: str | None = None) -> str:
    """The current writer's export of ``original`` for ``runtime`` and the file's range: whether
    it passes the profile (every size picked) and its lowering cost (replay over original)."""
    if original is None or original.inplace:
        return ""
    try:
        ex = Export(original, runtime=runtime, gpu=gpu)
        text = ex.xml(min_bytes=program.min_bytes, max_bytes=program.max_bytes or None, proto=program.proto,
                      name=program.name)
    except TopocollError as e:
        return f"not ready: {str(e)[:110]}"
    prog, bad = check_xml(text, profile_named(runtime), every_size=True, device=gpu)
    if bad:
        return f"fails: {bad[0][:100]}"
    full = sum(prog.instruction_counts().get(k, 0) for k in FULL_OPS)
    replay, cost = _replay_cost(text, Path("reexport.xml"), fabric, original, picked_sizes(prog))
    notes = ([f"{full} full ops"] if full else []) + ([f"cost {cost}"] if cost else []) + \
        ([] if replay == "verified" else [f"replay {replay}"])
    return "passes" + (f" ({'; '.join(notes)})" if notes else "")


def folder_rows(source: str, folder: Path, label: str) -> list[dict]:
    """One row per XML in ``folder/msccl/`` (not its subfolders)."""
    xmls = sorted(p for p in (folder / "msccl").glob("*.xml*") if p.is_file())
    if not xmls:
        return []
    import json
    topo = load_topology(str(folder / "topology.json"))
    fabric = build_fabric(topo)
    summary = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").is_file() else {}
    runtime = summary.get("msccl_runtime") or default_runtime(topo)
    gpu = gpu_of(topo)                 # threadblocks resident at once: the topology's GPU, as the writer checks
    rows = []
    for xml in xmls:
        text = _text(xml)
        program, bad = check_xml(text, profile_named(runtime), xml.name, device=gpu)
        row = {"source": source, "folder": label, "file": xml.name, "runtime": runtime,
               "loads_on_target": _verdict(bad)}
        if program is None:
            rows.append(row)
            continue
        sched_file = _schedule_of(folder, xml)
        original = load_schedule(sched_file) if sched_file else None
        sizes = picked_sizes(program)
        row.update({
            "rccl": _verdict(check_program(program, RCCL, device=gpu)),
            "msccl_executor_nccl": _verdict(check_program(program, MSCCL_EXECUTOR_NCCL, device=gpu)),
            "every_size_picked": "yes" if not pick_violations(program, every_size=True) else "no",
            "picked_float32": _sizes(sizes),
            "full_ops": sum(program.instruction_counts().get(k, 0) for k in FULL_OPS),
            "max_steps_per_tb": max((len(tb.steps) for g in program.gpus for tb in g.tbs), default=0),
            "max_tbs_per_gpu": max(len(g.tbs) for g in program.gpus), "nchannels": program.nchannels})
        row["replay"], row["lowering_cost"] = _replay_cost(text, xml, fabric, original, sizes)
        if source == "committed":
            row["reexport_now"] = _reexport(original, program, runtime, fabric, gpu)
        if runtime != "rccl":          # what --msccl-runtime rccl would write for the same range
            row["reexport_rccl"] = _reexport(original, program, "rccl", fabric, gpu)
        rows.append(row)
    return rows


def run_fresh(tmp: Path, time_limit: float, log) -> list[tuple[str, Path, str, float]]:
    """Run every fresh synthesize into ``tmp``; (name, folder, command, seconds) each."""
    from synth.cli.synthesize import main
    out = []
    for name, argv in fresh_runs(time_limit):
        folder = tmp / name
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv + ["--out", str(folder), "--no-progress", "--force"])
        secs = time.perf_counter() - t
        shown = shown_command("synthesize", argv)     # a fixture by its path in the repository
        log(f"{shown}: exit {rc}, {secs:.0f} s")
        if rc != 0:       # 130: SIGTERM or Ctrl-C reached it; a report without its files would replace the last
            print(f"bench_interop: {shown} exited {rc}: stopped, no report written", file=sys.stderr)
            raise SystemExit(rc)
        out.append((name, folder, shown, secs))
    return out


def _built_for_rccl_passes(row: dict) -> bool:
    """Whether the file as the current writer builds it for RCCL passes RCCL's profile."""
    if row.get("reexport_rccl"):
        return row["reexport_rccl"].startswith("passes")
    if row["runtime"] == "rccl" and row.get("reexport_now"):
        return row["reexport_now"].startswith("passes")
    return row.get("rccl") == "yes"


def _counts(rows: list[dict]) -> list[str]:
    lines = ["| files | count | load on their runtime | RCCL | msccl-executor-nccl | replay verified | "
             "full ops | re-exported now passes | built for RCCL passes RCCL |", "|---|---|---|---|---|---|---|---|---|"]
    for source in ("committed", "fresh"):
        group = [r for r in rows if r["source"] == source]
        if not group:
            continue
        ok = lambda key: sum(1 for r in group if str(r.get(key, "")).startswith("yes"))  # noqa: E731
        reexp = sum(1 for r in group if str(r.get("reexport_now", "")).startswith("passes"))
        rccl_now = sum(1 for r in group if _built_for_rccl_passes(r))
        lines.append(f"| {source} | {len(group)} | {ok('loads_on_target')} | {ok('rccl')} | "
                     f"{ok('msccl_executor_nccl')} | {sum(1 for r in group if r.get('replay') == 'verified')} | "
                     f"{sum(int(r.get('full_ops') or 0) for r in group)} | {reexp if source == 'committed' else ''} | "
                     f"{rccl_now} |")
    return lines


def write_report(out: Path, rows: list[dict], command: str, fresh: list, seconds: float) -> None:
    lines = ["# MSCCL interop: what each runtime loads, picks and runs", "", f"    {command}", "",
             f"{len(rows)} ready-folder XML files checked in {seconds:.0f} s against the runtime profiles of "
             "`synth/formats/msccl/runtimes.py` (RCCL from ROCm 6.1: no full ops, 64 steps per threadblock, 64 "
             "threadblocks per GPU; msccl-executor-nccl: every step type, 64 steps, 1,024 threadblocks) and "
             "replayed by our MSCCL reader and verifier. \"picked\": power-of-two float32 calls (nBytes as the "
             "scheduler computes it) at which the runtime runs the file; \"every size\": every such call in "
             "[minBytes, maxBytes] is picked (RCCL's own files start at minBytes 0 and leave calls with fewer "
             "elements than chunks to the built-in algorithms; our exports raise minBytes instead). "
             "\"lowering cost\": modelled time of the replayed XML over the schedule it was written from (local "
             "`cpy`/`re` steps count as free in the model). \"reexport\": the current writer's export of the same "
             "schedule and range for the file's runtime (committed files: what regenerating gives) and for RCCL.", "",
             "Fresh runs (allgather, reducescatter, allreduce, alltoall only; solver time limits as in the "
             "command):", ""]
    lines += [f"- `{cmd}`: {secs:.0f} s" for _, _, cmd, secs in fresh]
    lines += ["", *_counts(rows), "", "| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(k, "")).replace("|", "/") for k in FIELDS) + " |")
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FIELDS)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(out / "interop.csv", buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "results" / "interop"))
    p.add_argument("--time-limit", type=float, default=10.0, help="synthesize --time-limit of the fresh runs (s)")
    p.add_argument("--no-fresh", action="store_true", help="only the committed ready folders")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    rows = []
    for folder in sorted((ROOT / "results").glob("*/msccl")):
        rows += folder_rows("committed", folder.parent, f"results/{folder.parent.name}")
    fresh = []
    if not args.no_fresh:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = run_fresh(Path(tmp), args.time_limit, lambda s: print(s, flush=True))
            for name, folder, _, _ in fresh:
                rows += folder_rows("fresh", folder, name)
    command = script_command(__file__, argv or sys.argv[1:])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_report(out, rows, command, fresh, time.perf_counter() - t0)
    print(f"wrote {out}/report.md ({len(rows)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

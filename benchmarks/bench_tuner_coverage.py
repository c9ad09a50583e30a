"""Does a tuner file leave NCCL on one channel?  Every committed ``results/*/nccl_tuner.conf``
and a freshly written file for every preset and for machines no preset has (:data:`OTHER_MACHINES`:
the hand-written fixtures of other machines, a few GPUs of a preset, clusters on RoCE and EFA) through the emulator
of NCCL's example tuner plugin (``synth.model.nccl.tuner_plugin``, rules of
``plugins/tuner/example/plugin.c`` at NCCL 2.30.3).

    python benchmarks/bench_tuner_coverage.py --out results/interop     # tuner_coverage.md

Per file: emulated ``getCollInfo`` queries (sizes 1 B-64 GiB and both sides of every line bound,
every collective; the file's own communicator with NVLS on and off; other communicators of 1-64
hosts and 2-1,024 ranks with random sets of available pairs), the queries no line takes (NCCL
then runs its own choice on one channel), all one-channel outcomes, and on the file's machine the
queries whose applied line the NCCL model times slower than NCCL's own choice; the lines that
change NCCL's modelled choice and the model's predicted gain where they applied.  Per fresh file
also every smaller communicator of its machine (``synth.model.nccl.tuner_shapes``: 2 .. G GPUs of
a host, fewer full hosts): queries slower than NCCL's own choice with the cover alone and with
the file's lines for that shape.  Writes
``OUT/tuner_coverage.md`` atomically; a few seconds per file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tests"))           # the one list of machines no preset has

from synth.ir.schedule import atomic_write_text  # noqa: E402
from synth.model.nccl.tuner_config import (  # noqa: E402
    SHAPE_TOLERANCE, is_cover_file, tuner_lines, tuner_models, tuner_text, write_tuner_config)
from synth.model.nccl.tuner_coverage import judge, judge_shapes, queries  # noqa: E402
from synth.model.nccl.tuner_shapes import comm_shapes  # noqa: E402
from synth.model.nccl.tuner_plugin import PLUGIN_BUILDS, RCCL_TUNER_LOOKUP, parse_conf  # noqa: E402
from topo_probe import get_preset  # noqa: E402
from topo_probe.errors import InvalidArgument  # noqa: E402
from _other_machines import TUNER_COVERAGE, selection  # noqa: E402

PRESETS = ("dgx1-v100", "dgx-a100", "dgx-h100", "pcie-8gpu-2socket", "mi300x")
#: machines no preset has (tests/_other_machines.py's list, this benchmark's selection): label -> Machine
OTHER_MACHINES = selection(TUNER_COVERAGE)
COMMAND = "python benchmarks/bench_tuner_coverage.py --out results/interop"


def _topology(name: str):
    return OTHER_MACHINES[name].load() if name in OTHER_MACHINES else get_preset(name)


def _gains(r) -> str:
    g = [x for v in r.gains.values() for x in v]
    if not g:
        return "-"
    return f"{min(g):.2f}x / {statistics.median(g):.2f}x / {max(g):.2f}x"


def _row(label: str, kind: str, text: str, on, off, n: int, seed: int, lines=None, shapes=()) -> tuple[str, list]:
    conf = parse_conf(text, label)
    r = judge(conf, on, off, queries(conf, on, off, n, seed=seed), frozenset((s.nodes, s.ranks) for s in shapes))
    machine = [l for l in conf.lines if (l.nodes, l.ranks) == (on.machine.nodes, on.machine.ranks)]
    smaller = sum(l.nodes != -1 and l.ranks != -1 for l in conf.lines) - len(machine)
    helps = "-" if lines is None else str(sum(l.kind == "help" for l in lines))
    row = (f"| `{label}` | {kind}{'' if is_cover_file(text) else ' (before the cover format)'} | "
           f"{len(conf.lines)} ({len(machine)} for this machine, {smaller} smaller) | {len(conf.problems)} | "
           f"{r.queries:,} | "
           f"**{r.fell_through:,}** | {r.one_channel:,} | {r.machine_queries:,} | {r.capped:,} | {r.slower:,} | "
           f"{helps} | "
           f"{r.changed:,} | {_gains(r)} | {r.checked_sum / max(r.queries, 1):.1f} / {r.checked_max} |")
    causes = ", ".join(f"{k} {v:,}" for k, v in sorted(r.causes.items()))
    return row, ([f"fall-throughs: {causes}"] if causes else []) + r.examples


def _help_table(name: str, lines, machine) -> list[str]:
    """The help lines for the whole machine (the smaller communicators' are counted in the main table)."""
    out = []
    for l in lines:
        if l.kind == "help" and (l.nodes, l.ranks) == (machine.nodes, machine.ranks):
            helps = "; ".join(n for n in l.note.splitlines() if n.startswith("help"))
            out.append(f"| {name} | {l.collective} | {l.min_bytes:,}-{l.max_bytes:,} | {l.algorithm}/{l.protocol} | "
                       f"{helps} |")
    return out


def _shape_rows(name: str, lines, shapes, n: int, seed: int) -> list[str]:
    """Per smaller communicator: slower queries under the file as branch export68 wrote it (the
    machine's lines and a cover without the ring/LL line for machines without LL128), under the
    cover alone (the file without the shapes' lines) and under this file, strictly and beyond
    :data:`SHAPE_TOLERANCE`."""
    own = {(s.nodes, s.ranks) for s in shapes}              # without them: tuner_lines(on, off), not recomputed
    cover_only = [l for l in lines if (l.nodes, l.ranks) not in own]
    before = [l for l in cover_only if not (l.kind == "cover" and (l.algorithm, l.protocol) == ("ring", "ll")
                                            and l.min_bytes > 0)]      # the LL128 band's ring/LL line
    full = parse_conf(tuner_text(lines))
    z, a = (judge_shapes(parse_conf(tuner_text(c)), shapes, n, seed) for c in (before, cover_only))
    b = judge_shapes(full, shapes, n, seed)
    c = judge_shapes(full, shapes, n, seed, tolerance=SHAPE_TOLERANCE)
    out = []
    for s in shapes:
        mine = sum(l.nodes == s.nodes and l.ranks == s.ranks for l in lines)
        out.append(f"| {name} | {s.label} | {len(s.subsets)} | {mine} | {b[s.label][0]:,} | {z[s.label][1]:,} | "
                   f"{a[s.label][1]:,} | **{b[s.label][1]:,}** | **{c[s.label][1]:,}** | {b[s.label][2]:,} | "
                   f"{z[s.label][3]:.2f}x | {b[s.label][3]:.2f}x |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "interop")
    ap.add_argument("--queries", type=int, default=2500, help="queries per NVLS state and for other shapes")
    args = ap.parse_args(argv)
    rows, helps, notes, shape_rows = [], [], [], []
    for k, path in enumerate(sorted((ROOT / "results").glob("*/nccl_tuner.conf"))):
        name = path.parent.name
        try:
            on, off = tuner_models(get_preset(name))
        except InvalidArgument as e:
            notes.append(f"- `{path.relative_to(ROOT)}`: {e}")
            continue
        row, ex = _row(str(path.relative_to(ROOT)), "committed", path.read_text(), on, off, args.queries, k)
        rows.append(row)
        notes += [f"- `{path.relative_to(ROOT)}`: {e}" for e in ex[:3]]
        print(row, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for k, name in enumerate(PRESETS + tuple(OTHER_MACHINES)):
            try:
                topo = _topology(name)
                on, off = tuner_models(topo)
            except InvalidArgument as e:
                notes.append(f"- fresh `{name}`: not written: {e}")
                continue
            shapes = comm_shapes(topo)
            lines = tuner_lines(on, off, shapes=shapes)
            path = Path(tmp) / "nccl_tuner.conf"
            write_tuner_config(path, lines, comment=f"fresh for {name}")
            row, ex = _row(f"{name} (fresh)", "synthesize --nccl-tuner-conf", path.read_text(), on, off,
                           args.queries, 100 + k, lines, shapes)
            rows.append(row)
            shape_rows += _shape_rows(name, lines, shapes, args.queries // 8, 200 + k)
            helps += _help_table(name, lines, on.machine)
            print(row, flush=True)
    build = next(b for b in PLUGIN_BUILDS if b.works)
    text = "\n".join([
        "# NCCL tuner file coverage (emulated plugin)", "", f"    {COMMAND}", "",
        f"Emulator of `{build.path}/plugin.c` (NCCL {build.releases}): the plugin sets `*nChannels = 1` "
        "before its search, so a query no line takes runs NCCL's own choice on one channel, and so does a "
        "line with channels -1. RCCL cannot load the plugin (it looks up "
        f"`ncclTunerPlugin_{RCCL_TUNER_LOOKUP[next(iter(RCCL_TUNER_LOOKUP))][0]}` only).", "",
        "Columns: fall-throughs = queries no line takes; one channel = fall-throughs plus lines with "
        "channels -1 or 1; slower = queries on the file's own machine whose applied line the NCCL model "
        "times slower than NCCL's own choice; help lines = lines that change NCCL's modelled choice (the machine's and "
        "its smaller communicators'); "
        "gain = NCCL's modelled time over the applied line's, where a line changed the choice "
        "(min / median / max over those queries). Lines with a fixed channel count are not timed. Lines checked: "
        "how many lines the plugin reads per query up to the one that applies (it makes two debug-log calls for "
        "each line it skips).", "",
        "| file | written by | lines | plugin-reads-otherwise | queries | fall-throughs | one channel | "
        "on its machine | fixed channels (not timed) | slower | help lines | queries changed | "
        "gain (min / median / max) | lines checked (mean / max) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|", *rows, "",
        "## Smaller communicators of each machine (fresh files)", "",
        "Every one-host communicator of 2 .. G GPUs of the first host and every count of full hosts below the "
        "machine's (`synth.model.nccl.tuner_shapes`): queries of that shape (every collective, sizes as above, NVLS "
        "on and off) on one subset of every class of its subsets (subsets whose NCCL models time alike are one class; "
        "the first GPUs represent theirs), each class once whatever its number of subsets; slower = the applied "
        "line timed slower than NCCL's own choice on that subset, by any margin "
        f"or by more than {SHAPE_TOLERANCE:.0%}. Before: the file as branch export68 wrote it (no lines for the "
        "shape, no ring/LL line after the cover's LL128 band); cover only: this file without the shape's lines; worst: "
        "the largest ratio of the applied line's modelled time over NCCL's own over those queries.", "",
        "| machine | communicator | GPU subsets timed | its lines | queries | slower, before | slower, cover only | "
        "slower, this file | "
        f"slower by > {SHAPE_TOLERANCE:.0%}, this file | fall-throughs | worst line / NCCL's own, before | "
        "worst, this file |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|", *shape_rows, "",
        "## Notes", "", *notes, "",
        "## Lines that change NCCL's choice (fresh files)", "",
        "The model's predicted gain over the probes in each range (8 per doubling); every other line keeps "
        "NCCL's modelled choice with NCCL's channel count.", "",
        "| machine | collective | line's bytes | line | "
        "where it changes NCCL's pick: NCCL's pick (modelled), times, gain |",
        "|---|---|---|---|---|",
        *helps, ""])
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "tuner_coverage.md", text)
    print(f"wrote {args.out / 'tuner_coverage.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

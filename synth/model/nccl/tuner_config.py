"""A configuration for NCCL's example tuner plugin (``plugins/tuner/example``, NCCL 2.30.3 or
later, read through ``NCCL_TUNER_CONFIG_FILE``) that only helps NCCL: a line changes NCCL's own
choice only where the NCCL model predicts that choice beaten, every other query takes a line that
asks for NCCL's own choice with NCCL's own channel count.

The plugin's rules (:mod:`.tuner_plugin`) decide the layout: it caps NCCL at one channel
whenever no line applies or a line's channels field is -1, an applied line always pins its
(algorithm, protocol), and a line NCCL marks unavailable is skipped.  So:

* **this machine** (its exact ``nNodes``/``nRanks``): per collective and size range, a *help*
  line (the model's fastest pair, where it beats NCCL's modelled default by at least
  :data:`MIN_GAIN`) or a *keep* line (NCCL's modelled default); where that pair is NVLS, a
  later line for the same sizes holds the choice without NVLS (NCCL skips the NVLS line there);
* **its smaller communicators** (:mod:`.tuner_shapes`: 2 .. G GPUs of a host, fewer full hosts;
  exact ``nNodes``/``nRanks``): the same from the model of that shape, judged on every class of its
  GPU subsets (:mod:`.tuner_pick`: a help or keep line only where it holds within
  :data:`SHAPE_TOLERANCE` on each, else the pair of least worst slowdown, with a warning naming the
  worst subset where that exceeds the tolerance); left out where they only keep and the cover holds as well;
* **every other shape** (``-1,-1``): a cover, since the plugin has no line that leaves NCCL's
  choice alone: ring with NCCL's own channel count, LL / LL128 / Simple by size
  (:data:`COVER_BANDS`; without LL128, LL up to :data:`COVER_LL_WITHOUT_LL128`), and at the end
  of the file every (algorithm, protocol) NCCL can offer
  for the collective over all sizes, so a table with any entry left matches;
* the whole machine's lines of every collective first (allreduce first), then per collective the
  smaller communicators' lines and its cover bands, consecutive ranges that ask for the same pair
  merged: the plugin pays two debug-log calls for every line it checks before the one that applies;
* channels always 0 (NCCL's own count), byte ranges 0 to 2^64-1.

>>> from topo_probe import get_preset
>>> on, off = tuner_models(get_preset("dgx-h100"))
>>> lines = tuner_lines(on, off, ["allreduce"])
>>> [f"{l.kind} {l.algorithm}/{l.protocol}" for l in lines if l.nodes == 1][:5]
['keep ring/ll', 'help tree/ll', 'keep ring/ll', 'keep nvls/simple', 'keep ring/ll']
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

from synth.formats.nccl_tests.sizes import size_label
from synth.ir.collectives import canonical
from synth.ir.schedule import atomic_write_text
from synth.model.nccl.constants import PROTO_NAMES
from synth.model.nccl.tuner_pick import SHAPE_TOLERANCE, holds, pick
from synth.model.nccl.tuner_plugin import ALGORITHMS, COLLECTIVES, KEEP_NCCL_CHANNELS, PROTOCOLS, SIZE_MAX
from synth.model.nccl.tuning import ALGOS_FOR, NCCL_COLLS
from topo_probe.errors import InvalidArgument

__all__ = ["TunerLine", "tuner_models", "tuner_lines", "tuner_text", "write_tuner_config", "is_cover_file",
           "MARKER", "HEADER", "MIN_GAIN", "COVER_BANDS", "PROBE_MAX_BYTES", "NVLS_ALGORITHMS", "FILE_ORDER",
           "PLUGIN_COLLECTIVES", "MAX_BYTES", "SHAPE_TOLERANCE"]

#: the collectives the plugin tunes (plugin.c parseCollType)
PLUGIN_COLLECTIVES = COLLECTIVES
#: first line of every file this module writes (the format, for readers and tests)
MARKER = "# topocoll nccl tuner cover v1"
HEADER = "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"
#: the largest byte bound a line carries (2^64 - 1: every size NCCL can ask about)
MAX_BYTES = SIZE_MAX
#: a help line needs a modelled time at most (1 - MIN_GAIN) of NCCL's default
MIN_GAIN = 0.05
#: probes run to 1 TiB; the choice at 1 TiB holds to 2^64 - 1 (the model is bandwidth-bound there)
PROBE_MAX_BYTES = 1 << 40
#: widest comment text per line (the plugin's fgets reads 255 bytes at a time)
COMMENT_WIDTH = 200
#: probes per doubling of the size
PROBES_PER_OCTAVE = 8
NVLS_ALGORITHMS = ("nvls", "nvls_tree")
#: the cover for other shapes: ring with (inclusive upper byte bound, protocol); a guess for shapes
#: the file was not written for, not a prediction (LL for small, LL128 mid, Simple large messages)
COVER_BANDS = ((64 << 10, "ll"), (8 << 20, "ll128"), (SIZE_MAX, "simple"))
#: where NCCL has no LL128, the LL128 band's sizes up to this (bytes, inclusive) take ring/LL: below the
#: smallest size from which the model times ring/Simple faster than ring/LL on a machine without LL128
#: (296,714 B: 4 x L40S pcilink dump, GPUs 0-1, broadcast; the first k GPUs, every collective, of the RTX 4090,
#: P100 and pcie-8gpu-2socket fixtures: 341,669 B, 447,391 B, 861,006 B)
COVER_LL_WITHOUT_LL128 = 256 << 10
#: after the bands, every pair NCCL can offer for the collective (``ALGOS_FOR``; NCCL 2.30.3
#: src/graph/tuning.cc lines 281-285 give the others no bandwidth) over all sizes, in this order,
#: so any table with one entry left matches
COVER_ORDER = tuple((a, p) for a in ("ring", "tree", "pat", "nvls", "nvls_tree", "collnet_direct", "collnet_chain")
                    for p in ("simple", "ll128", "ll"))
#: file order of the collectives: the plugin checks lines in order (two debug-log calls per line it
#: skips), so the most frequent collective comes first
FILE_ORDER = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")
#: what every file says about itself, above its lines
_ABOUT = (
    f"help: NCCL's own pick is modelled slower by at least {MIN_GAIN:.0%} (default margin); keep: asks for "
    "NCCL's own (modelled) pick;",
    "cover: another communicator shape. channels 0 keeps NCCL's channel count. Do not delete lines:",
    "a call that no line takes runs on one channel (the plugin sets nChannels = 1 before its search).",
)


@dataclass(frozen=True)
class TunerLine:
    """One CSV line (byte range inclusive) with why it is there: ``kind`` is ``help`` (beats
    NCCL's modelled default), ``keep`` (NCCL's modelled default), ``shared`` (a smaller communicator
    whose GPU subsets disagree: :func:`.tuner_pick.pick`) or ``cover`` (another shape);
    ``gain`` the modelled speed-up over NCCL's default (min, max over the probes in range)."""

    collective: str
    min_bytes: int
    max_bytes: int
    algorithm: str
    protocol: str
    nodes: int
    ranks: int
    kind: str
    note: str = ""
    gain: tuple = (1.0, 1.0)
    channels: int = KEEP_NCCL_CHANNELS
    #: the (min_bytes, max_bytes) ranges inside the line where it is a help line
    help_ranges: tuple = ()
    #: ``(ratio, gpus)``: a shared line's largest modelled slowdown over NCCL's own pick and the GPU
    #: subset it falls on, where that exceeds :data:`SHAPE_TOLERANCE` (a WARNING line); else empty
    worst: tuple = ()

    def csv(self) -> str:
        return (f"{self.collective},{self.min_bytes},{self.max_bytes},{self.algorithm},{self.protocol},"
                f"{self.channels},{self.nodes},{self.ranks},-1,-1")


def tuner_models(topo, version: tuple | None = None):
    """``(model, model without NVLS or None)`` for ``topo`` under NCCL's defaults (NCCL ``version``'s
    rules, None the model's default); refuses AMD machines (RCCL's loader looks up
    ``ncclTunerPlugin_v2`` only) and an NCCL older than the one build that works can be loaded by
    (:data:`~.tuner_plugin.WORKING_BUILD_LOADED_FROM`): a file no plugin applies is worse than none."""
    from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
    from synth.model.nccl.tuner_plugin import WORKING_BUILD_LOADED_FROM
    machine = NcclMachine.from_topology(topo)
    if machine.amd:
        raise InvalidArgument(f"{topo.name} has AMD GPUs: RCCL cannot load NCCL's example tuner plugin "
                              "(it looks up ncclTunerPlugin_v2 only), so no tuner file is written")
    if version is not None and tuple(version)[:2] < WORKING_BUILD_LOADED_FROM:
        raise InvalidArgument(f"NCCL {'.'.join(map(str, version))} cannot load the example tuner plugin build "
                              "that applies this file (NCCL 2.30.3's, interface v5: NCCL 2.28.3 and later), so no "
                              "tuner file is written")
    on = NcclModel(machine, env=NcclEnv(), version=version)
    if not any(a in NVLS_ALGORITHMS for c in PLUGIN_COLLECTIVES for a, _ in on.table.enabled(c)):
        return on, None
    return on, NcclModel(machine, env=NcclEnv.from_environ({"NCCL_NVLS_ENABLE": "0"}), version=version)


class _Memo:
    """``model``'s choose/forced memoised for one file (bisection, keep picks, shapes' checks ask again); on
    NVIDIA ``choose`` is ``forced`` of ``TuneTable.choose``'s pair (``NcclModel.choose``), timed once, not twice."""

    def __init__(self, model):
        self.machine, self.table, self._model, self._seen = model.machine, model.table, model, {}

    def choose(self, coll: str, nbytes: int):
        if (coll, nbytes) not in self._seen:              # RCCL's pick, p2p: the model's own
            self._seen[coll, nbytes] = self._model.choose(coll, nbytes) if self.machine.amd or coll not in \
                NCCL_COLLS else self.forced(coll, *self.table.choose(coll, nbytes)[:2], nbytes)
        return self._seen[coll, nbytes]

    def forced(self, coll: str, algorithm: str, protocol: str, nbytes: int):
        key = (coll, algorithm, protocol, nbytes)
        if key not in self._seen:
            self._seen[key] = self._model.forced(*key)
        return self._seen[key]


def _entries(on, off, coll: str, nbytes: int, min_gain: float, classes: tuple = ()) -> tuple:
    """The picks (:func:`.tuner_pick.pick`) one size gets, in file order: NVLS on, then (where that is
    NVLS) without it; ``classes`` the ``(gpus, (model, model without NVLS))`` of every GPU-subset class
    of the shape (empty: the machine itself)."""
    con = tuple((g, o) for g, (o, _) in classes)
    a = pick(on, coll, nbytes, min_gain, con)
    if off is None:
        return (a,)
    coff = tuple((g, f or o) for g, (o, f) in classes)
    b = pick(off, coll, nbytes, min_gain, coff)
    if a.algorithm in NVLS_ALGORITHMS:
        return a, b
    if a.pair == b.pair:
        return (a,)
    keep_a = pick(on, coll, nbytes, math.inf, con)        # the lines disagree: keep NCCL's choice in both
    keep_b = pick(off, coll, nbytes, math.inf, coff)
    return (keep_a, keep_b) if keep_a.algorithm in NVLS_ALGORITHMS else (keep_a,)


def _key(entries: tuple) -> tuple:
    return tuple((e.pair, e.kind, e.warns) for e in entries)


def _probes() -> list[int]:
    out = {0, 1}
    for k in range(PROBE_MAX_BYTES.bit_length()):
        out.update(round((1 << k) * 2 ** (j / PROBES_PER_OCTAVE)) for j in range(PROBES_PER_OCTAVE))
    return sorted(s for s in out if s <= PROBE_MAX_BYTES)


def _segments(on, off, coll: str, min_gain: float, classes: tuple = ()) -> list[tuple[int, int, list]]:
    """``(lo, hi, [entries per probe in range])``: sizes of one key, switch points found to the
    byte by bisection between probes."""
    def at(s):
        return _entries(on, off, coll, s, min_gain, classes)
    probes = _probes()
    segs = [[0, 0, [at(0)]]]
    for prev, s in zip(probes, probes[1:]):
        e = at(s)
        lo = prev
        while _key(e) != _key(segs[-1][2][-1]):
            hi = s                                   # key(lo) is the open segment's, key(hi) differs
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _key(at(mid)) == _key(segs[-1][2][-1]):
                    lo = mid
                else:
                    hi = mid
            segs[-1][1] = lo
            segs.append([hi, hi, [at(hi)]])
            lo = hi
        segs[-1][1] = s
        segs[-1][2].append(e)
    segs[-1][1] = SIZE_MAX
    return [(lo, hi, es) for lo, hi, es in segs]


def _segment_lines(on, off, coll: str, lo: int, hi: int, probes: list, topology: str = "") -> list[TunerLine]:
    m = on.machine
    out = []
    for k, e in enumerate(probes[0]):
        picks = [p[k] for p in probes]
        gains = [p.default_us / p.chosen_us for p in picks]
        mid = picks[len(picks) // 2]
        world = "" if off is None else (" with NVLS" if k == 0 and len(probes[0]) > 1 else
                                        " if NVLS is unavailable" if k else "")
        span = f"{size_label(lo)}-{'2^64-1 B' if hi == SIZE_MAX else size_label(hi)}"
        w = max(picks, key=lambda p: p.worst)        # the probe a shared line serves worst
        if e.helps:
            note = (f"help{world}, {span}: NCCL's own pick (modelled) {mid.default_label} {mid.default_us:.1f} us, "
                    f"this line {e.algorithm}/{e.protocol} {mid.chosen_us:.1f} us, {min(gains):.2f}x-"
                    f"{max(gains):.2f}x faster")
        elif e.kind == "keep":
            note = f"keep{world}, {span}: NCCL's own pick (modelled) {e.algorithm}/{e.protocol}, its channels"
        else:
            note = _shared_note(e.algorithm, e.protocol, world, span, m.ranks, w, topology)
        out.append(TunerLine(coll, lo, hi, e.algorithm, e.protocol.lower(), m.nodes, m.ranks,
                             e.kind, note, (min(gains), max(gains)) if e.helps else (1.0, 1.0),
                             help_ranges=((lo, hi),) if e.helps else (),
                             worst=(w.worst, w.worst_gpus) if e.kind == "shared" and w.warns else ()))
    return out


def _shared_note(algorithm: str, protocol: str, world: str, span: str, ranks: int, worst, topology: str) -> str:
    """A shared line's note: the GPU subset it serves worst (GPUs of ``topology``, the file's whole
    machine, as numbered there), and (beyond the tolerance) a warning."""
    gpus = ",".join(map(str, worst.worst_gpus))
    if not worst.warns:
        how = (f"is at most {worst.worst - 1:.1%} slower than it on any (GPUs {gpus})" if worst.worst >= 1 else
               f"is faster than it on every one, by {1 - worst.worst:.1%} or more (least on GPUs {gpus})")
        return f"shared{world}, {span}: NCCL's own pick (modelled) differs between {ranks}-GPU subsets; " \
               f"{algorithm}/{protocol} {how}"
    return (f"WARNING{world}, {span}: no one pair is within {SHAPE_TOLERANCE:.0%} of NCCL's own pick (modelled) on "
            f"every {ranks}-GPU subset; this line, {algorithm}/{protocol}, the least bad of all pairs (the cover's "
            f"among them), is up to {worst.worst:.2f}x slower than NCCL's own on GPUs {gpus} of this file's "
            f"topology ({topology}). A file written for the job's GPUs alone is the model's exact answer there "
            f"(synthesize --nccl-tuner-conf FILE with --gpus naming those GPUs as the machine numbers them)")


def _merged(parts: list[TunerLine]) -> TunerLine:
    """One line for consecutive ranges asking for the same pair (fewer lines to check)."""
    first, helps = parts[0], [p for p in parts if p.kind == "help"]
    gain = (min(p.gain[0] for p in helps), max(p.gain[1] for p in helps)) if helps else (1.0, 1.0)
    kind = "help" if helps else "shared" if any(p.kind == "shared" for p in parts) else "keep"
    return TunerLine(first.collective, first.min_bytes, parts[-1].max_bytes, first.algorithm, first.protocol,
                     first.nodes, first.ranks, kind, "\n".join(p.note for p in parts), gain,
                     help_ranges=tuple(r for p in helps for r in p.help_ranges),
                     worst=max((p.worst for p in parts if p.worst), default=()))


def _machine_lines(on, off, coll: str, min_gain: float, classes: tuple = (), topology: str = "") -> list[TunerLine]:
    """Every size's first pick (slot 0), then the picks without NVLS where slot 0 is NVLS (slot
    1): a size's slot-1 line comes after its slot-0 line, which NCCL skips without NVLS; ``topology``
    names the file's whole machine, whose GPU numbers a warning uses."""
    slots: list[list[list[TunerLine]]] = [[], []]
    for lo, hi, probes in _segments(on, off, coll, min_gain, classes):
        for k, line in enumerate(_segment_lines(on, off, coll, lo, hi, probes, topology)):
            runs = slots[k]
            prev = runs[-1][-1] if runs else None
            if prev and (prev.algorithm, prev.protocol) == (line.algorithm, line.protocol) and \
                    prev.max_bytes + 1 == line.min_bytes:
                runs[-1].append(line)
            else:
                runs.append([line])
    return [_merged(run) for runs in slots for run in runs]


def _cover_bands(coll: str) -> list[TunerLine]:
    out, lo = [], 0
    for hi, proto in COVER_BANDS:
        span = f"{size_label(lo)}-{'2^64-1 B' if hi == SIZE_MAX else size_label(hi)}"
        out.append(TunerLine(coll, lo, hi, "ring", proto, -1, -1, "cover",
                             f"cover, any other shape, {span}: ring/{proto}, NCCL's channels"))
        if proto == "ll128":                  # no LL128 (P100, RTX 4090, L40S): LL, not the Simple fallback
            top = min(hi, COVER_LL_WITHOUT_LL128)
            out.append(TunerLine(coll, lo, top, "ring", "ll", -1, -1, "cover",
                                 f"cover without LL128, {size_label(lo)}-{size_label(top)}: ring/LL"))
        lo = hi + 1
    return out


def _cover_fallbacks(coll: str) -> list[TunerLine]:
    pairs = [(a, p) for a, p in COVER_ORDER if a in ALGOS_FOR[coll]]
    return [TunerLine(coll, 0, SIZE_MAX, a, p, -1, -1, "cover",
                      "" if k else f"fallback for {coll}, any shape, any size: the first pair NCCL still offers")
            for k, (a, p) in enumerate(pairs)]


def tuner_lines(model, model_without_nvls=None, collectives=PLUGIN_COLLECTIVES,
                min_gain: float = MIN_GAIN, shapes: tuple = ()) -> list[TunerLine]:
    """The file's lines, in order (:data:`FILE_ORDER`): every collective's ranges for this machine;
    then per collective each of ``shapes``' (:func:`.tuner_shapes.comm_shapes`: smaller
    communicators of the machine, lines from their own models) and that collective's cover bands;
    then every collective's fallback pairs (reached only when NCCL has none of the pairs above)."""
    out: list[TunerLine] = []
    colls: list[str] = []
    for name in collectives:
        coll = canonical(name)
        if coll not in PLUGIN_COLLECTIVES:
            raise InvalidArgument(f"the tuner plugin has no collective {name!r} ({', '.join(PLUGIN_COLLECTIVES)})")
        colls.append(coll)
    colls = sorted(set(colls), key=FILE_ORDER.index)
    model, model_without_nvls = _Memo(model), model_without_nvls and _Memo(model_without_nvls)
    shapes = [dataclasses.replace(s, models=tuple((_Memo(o), f and _Memo(f)) for o, f in s.models)) for s in shapes]
    for coll in colls:                       # the whole machine's communicator: its query checks these only
        out += _machine_lines(model, model_without_nvls, coll, min_gain)
    for coll in colls:
        for shape in shapes:
            (on, off), classes = shape.models[0], tuple(zip(shape.subsets, shape.models))
            lines = _machine_lines(on, off, coll, min_gain, classes if len(classes) > 1 else (), model.machine.name)
            if any(l.kind == "help" for l in lines) or not _cover_holds(coll, shape, lines):
                out += _labelled(lines, shape)
        out += _cover_bands(coll)
    for coll in colls:
        out += _cover_fallbacks(coll)
    assert all(l.algorithm in ALGORITHMS and l.protocol in PROTOCOLS for l in out)
    return out


def _cover_holds(coll: str, shape, lines: list[TunerLine]) -> bool:
    """Whether the ``-1,-1`` cover alone gives ``shape`` (each GPU subset, NVLS on and off) a pair
    that :func:`.tuner_pick.holds` at every probe size and every bound of ``lines`` (the shape's own lines,
    whose bounds are NCCL's switch points there): then those lines are left out of the file."""
    cover = _cover_bands(coll) + _cover_fallbacks(coll)
    sizes = set(_probes()) | {b + d for l in cover + lines for b in (l.min_bytes, l.max_bytes) for d in (-1, 0, 1)}
    sizes = sorted(x for x in sizes if 0 <= x <= PROBE_MAX_BYTES)
    for on, off in shape.models:
        for world in (on,) if off is None else (on, off):
            enabled = world.table.enabled(coll)
            for size in sizes:
                pair = next(((l.algorithm, PROTO_NAMES[l.protocol]) for l in cover if l.min_bytes <= size <= l.max_bytes
                             and (l.algorithm, PROTO_NAMES[l.protocol]) in enabled), None)
                if pair is None or not holds(world, coll, pair, size):
                    return False
    return True


def _labelled(lines: list[TunerLine], shape) -> list[TunerLine]:
    """``lines`` of a smaller communicator, their notes saying which."""
    return [dataclasses.replace(l, note=f"for {shape.label}: " + l.note) for l in lines]


def tuner_text(lines: list[TunerLine], comment: str = "") -> str:
    """The CSV text: :data:`MARKER`, ``comment``, then each line with its note above it (the
    plugin has no comments after a field)."""
    head = [MARKER] + _comments(comment) + _comments("\n".join(_ABOUT)) + [f"# {HEADER}"]
    body = []
    for line in lines:
        body += _comments(line.note)
        body.append(line.csv())
    return "\n".join(head + body) + "\n"


def _comments(text: str) -> list[str]:
    """``#`` lines of at most :data:`COMMENT_WIDTH` characters: the plugin reads 255 at a time and
    would take the rest of a longer line as a line of its own."""
    return [f"# {part}" for c in text.splitlines() if c.strip()
            for part in textwrap.wrap(c, COMMENT_WIDTH, break_on_hyphens=False)]


def write_tuner_config(path: str | Path, lines: list[TunerLine], comment: str = "") -> None:
    """Write ``lines`` as the plugin's CSV (atomically)."""
    atomic_write_text(Path(path), tuner_text(lines, comment))


def is_cover_file(text: str) -> bool:
    """Whether ``text`` was written by this module (its first line is :data:`MARKER`)."""
    return text.split("\n", 1)[0].strip() == MARKER

"""MSCCL XML of a synthesize run: the plan's algorithms with their size ranges in ``msccl/``
(ready to be the ``MSCCL_ALGO_DIR`` of the runtime the run targets), every other verified
candidate in ``msccl/candidates/``.

Each file is built for one runtime (:mod:`synth.formats.msccl.runtimes`: ``rccl`` by default
where the GPUs are AMD, ``msccl-executor-nccl`` elsewhere) and checked against its profile
before it is written: ``msccl/`` holds only files that runtime loads, launches and picks at every
power-of-two call in their range (``minBytes`` raised to the first such call, with a note); a
plan algorithm that cannot be made to fit goes to ``candidates/`` with a note saying why.

Left out with a note in the collective's summary: schedules in which a rank talks to more than
:data:`MSCCL_MAX_PEERS` peers (MSCCL runs one threadblock per peer), or sends to or receives from
more than :data:`synth.formats.msccl.layout.RUNTIME_MAX_TBS_PER_CHANNEL` (RCCL's threadblocks
per channel; the writer would refuse them, after lowering and fusing the whole program: 30 s for
a 64-rank one-shot all-reduce); moved to ``candidates/``
with a note: plan algorithms the target runtime would refuse even after the writer cut them over
more channels (steps per threadblock, threadblocks per GPU, a ``nchunksperloop`` no power-of-two
call is a multiple of); at cluster scale, where no candidates are written, such an algorithm is
not written either (a note says why).  XML longer than :data:`GZIP_XML_BYTES` characters is
written gzip-compressed: a candidate in ``candidates/``, a plan algorithm in ``msccl/compressed/``
(never in ``msccl/`` itself: both runtimes parse every regular file of ``MSCCL_ALGO_DIR`` as XML,
RCCL 0cbce2a7 ``src/misc/msccl/msccl_lifecycle.cc`` lines 177-185, msccl-executor-nccl c6f6b36d
lines 154-165; a gzip file fails with "expecting '<'" (``msccl_parser.cc`` line 111), which ends
the scan of the folder before the algorithm handles are sized, line 201, that ``mscclInit`` then
indexes, line 263).
"""

from __future__ import annotations

import gzip
from pathlib import Path

from synth.formats.msccl.layout import RUNTIME_MAX_TBS_PER_CHANNEL
from synth.formats.msccl.occupancy import gpu_of
from synth.formats.msccl.runtimes import RuntimeProfile, profile_named
from synth.ir.collectives import ROOTED
from synth.ir.schedule import Schedule, atomic_write_bytes, atomic_write_text
from synth.pipeline.publish import MSCCL_SUBFOLDERS
from synth.plan.size_plan import Plan
from topo_probe.errors import TopocollError

#: MSCCL XML longer than this (characters) is written gzip-compressed (``.xml.gz``)
GZIP_XML_BYTES = 20_000_000
#: MSCCL runs one threadblock per peer, at most 216 per GPU (microsoft/msccl src/include/msccl.h,
#: ``MSCCL_MAX_NUM_THREAD_BLOCKS (108*2)``): schedules needing more are not exported
MSCCL_MAX_PEERS = 216


def default_runtime(topo) -> str:
    """``rccl`` where the topology's GPUs are AMD (gfx*), ``msccl-executor-nccl`` otherwise."""
    from synth.model.nccl.machine import arch_of_topology
    return "rccl" if arch_of_topology(topo).startswith("gfx") else "msccl-executor-nccl"


def _most_peers(s: Schedule) -> int:
    """Largest number of distinct peers one rank sends to or receives from."""
    out: dict[int, set] = {}
    inn: dict[int, set] = {}
    for st in s.steps:
        for t in st.transfers:
            out.setdefault(t.src, set()).add(t.dst)
            inn.setdefault(t.dst, set()).add(t.src)
    return max((len(v) for d in (out, inn) for v in d.values()), default=0)


def _msccl_ranges(plan: Plan) -> dict[str, list[tuple[int, int | None]]]:
    """Plan schedule path -> its size ranges [lo, hi) (adjacent ones joined); rooted collectives
    left out (an MSCCL algorithm carries no root, so RCCL would run it for every root)."""
    out: dict[str, list[tuple[int, int | None]]] = {}
    for e in sorted(plan.entries, key=lambda e: (e.schedule, e.min_bytes)):
        if e.collective in ROOTED:
            continue
        spans = out.setdefault(e.schedule, [])
        if spans and spans[-1][1] == e.min_bytes:
            spans[-1] = (spans[-1][0], e.max_bytes)
        else:
            spans.append((e.min_bytes, e.max_bytes))
    return out


#: subfolders of ``msccl/`` (the runtimes skip subfolders): every other candidate, and compressed plan algorithms
CANDIDATES, COMPRESSED = MSCCL_SUBFOLDERS


def _write_xml(path: Path, text: str, res, ready: bool = False) -> None:
    """``path`` (``.xml``), or beyond :data:`GZIP_XML_BYTES` a ``.xml.gz`` with a note: next to
    ``path`` (a candidate), or for a ``ready`` file of ``msccl/`` in ``msccl/compressed/``, since no
    runtime reads gzip and both parse every file of their folder."""
    if len(text) > GZIP_XML_BYTES:
        gz = (path.parent / COMPRESSED if ready else path.parent) / (path.name + ".gz")
        gz.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(gz, gzip.compress(text.encode(), 6, mtime=0))
        where, todo = ((f"{COMPRESSED}/{gz.name}", "gunzip it into msccl/ for the MSCCL runtime (it reads no gzip)")
                       if ready else (f"{CANDIDATES}/{gz.name}", "gunzip it for the MSCCL runtime"))
        res.summary.setdefault("notes", []).append(
            f"msccl/{where}: {len(text) / 1e6:.0f} MB of XML, compressed; {todo}")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)


def export_msccl(results: dict, plan: Plan, folder: Path, log, only_plan: bool = False,
                 runtime: str = "rccl", topo=None) -> None:
    """``msccl/*.xml``: the plan's algorithms, each with its size range (minBytes/maxBytes,
    inclusive, as RCCL reads them) and protocol, ready for ``MSCCL_ALGO_DIR``;
    ``msccl/candidates/*.xml``: every other verified candidate, for any size (not written with
    ``only_plan``, at cluster scale). Schedules whose ranks talk to more than
    :data:`MSCCL_MAX_PEERS` peers are left out with a note (MSCCL runs one threadblock per peer).
    Each schedule is lowered once (:class:`~synth.formats.msccl.writer.Export`) for all its size
    ranges; every file is built for ``runtime`` and the GPU of ``topo`` (at most one threadblock per
    SM/CU, :mod:`~synth.formats.msccl.occupancy`) and checked against its profile first."""
    profile, gpu = profile_named(runtime), gpu_of(topo) if topo is not None else None
    ranges = _msccl_ranges(plan)
    folder.mkdir(parents=True, exist_ok=True)
    for res in results.values():
        for name, s in res.schedules.items():
            slug = Path(res.files[name]).name.split(".json")[0]     # schedules/<slug>.json(.gz)
            spans = ranges.get(res.files[name])
            notes = res.summary.setdefault("notes", [])
            if not spans and only_plan:
                notes.append(f"msccl/{slug}.xml not written: {s.ranks} ranks, the plan does not use it")
                continue
            peers = _most_peers(s)
            if peers > min(MSCCL_MAX_PEERS, profile.max_tbs_per_gpu):
                notes.append(f"msccl/{slug}.xml not written: a rank exchanges data with {peers} peers, more than "
                             f"the {min(MSCCL_MAX_PEERS, profile.max_tbs_per_gpu)} threadblocks {profile.name} runs "
                             f"per GPU (one per peer)")
                continue
            if peers > RUNTIME_MAX_TBS_PER_CHANNEL:     # every peer has a threadblock on channel 0
                notes.append(f"msccl/{slug}.xml not written: a rank sends to or receives from {peers} peers, more "
                             f"than the {RUNTIME_MAX_TBS_PER_CHANNEL} threadblocks RCCL runs per channel")
                continue
            try:
                _export_one(s, name, slug, spans, folder, res, only_plan, profile, gpu)
            except TopocollError as e:
                log(f"  msccl export of {name} skipped: {e}")


def _export_one(s: Schedule, name: str, slug: str, spans, folder: Path, res, only_plan: bool,
                profile: RuntimeProfile, gpu: str | None = None) -> None:
    """Write one schedule's XML: a candidate (no spans), or one file per plan range built for
    ``profile`` and checked against it; what does not fit goes to ``candidates/`` with a note
    (with ``only_plan``, at cluster scale, it is not written at all)."""
    from synth.formats.msccl.writer import Export, protocol_for
    notes = res.summary.setdefault("notes", [])
    ex, why = _runtime_export(s, profile, gpu)
    if not spans:                            # never loaded (a subfolder): the generic form where it does not fit
        try:
            text = ex.xml(name=name) if ex is not None else None
        except TopocollError:
            text = None
        _write_xml(folder / CANDIDATES / f"{slug}.xml", text or Export(s).xml(name=name), res)
        return
    for k, (lo, hi) in enumerate(spans):
        top = None if hi is None else max(hi - 1, 1)
        file = f"{slug}{f'-r{k}' if k else ''}.xml"
        text = None
        if ex is not None:
            try:
                text = ex.xml(name=name, min_bytes=lo, max_bytes=top, proto=protocol_for(top))
            except TopocollError as e:
                why = str(e)
        if text is None:
            if only_plan:
                notes.append(f"msccl/{file} not written: {why}; candidates are not written at {s.ranks} ranks")
                continue
            notes.append(f"msccl/candidates/{file}: not in the algorithm folder: {why}")
            _write_xml(folder / CANDIDATES / file, Export(s).xml(name=name, min_bytes=lo, max_bytes=top,
                                                                    proto=protocol_for(top)), res)
            continue
        first = ex.first_picked_bytes()
        if first > lo:
            notes.append(f"msccl/{file}: minBytes {first} instead of {lo}: {profile.name} picks it only at calls of "
                         f"at least one element per chunk (nchunksperloop); below, its built-in algorithms run")
        _write_xml(folder / file, text, res, ready=True)


def _runtime_export(s: Schedule, profile: RuntimeProfile, gpu: str | None = None):
    """(Export built for ``profile`` and the GPU called ``gpu``, None) or (None, why it cannot be)."""
    from synth.formats.msccl.writer import Export
    try:
        return Export(s, runtime=profile, gpu=gpu), None
    except TopocollError as e:
        return None, f"{profile.name} cannot run it: {e}"

"""The schedule IR: the only contract between the solver and the kernels.

A schedule is a list of steps; a step has a number of ``rounds`` (its declared duration in
fabric rounds, see :mod:`synth.ir.fabric`) and transfers that run concurrently.  A transfer moves
one chunk (see :mod:`synth.ir.collectives` for chunk ids and buffer positions) from rank ``src``
to rank ``dst``; ``op`` is ``copy`` (dst's copy becomes src's) or ``reduce`` (dst combines
src's partial into its own).  Within a step every transfer reads the state as it was at the
start of the step.

JSON document (``format`` and ``version`` are checked on load)::

    {"format": "topocoll.schedule", "version": 1,
     "name": "ring", "collective": "allgather", "ranks": 8, "chunks_per_rank": 1,
     "root": null, "inplace": false,
     "chunks": [{"id": 0, "pre": [0], "post": [0, 1, ...]}, ...],
     "steps": [{"rounds": 1, "transfers": [{"chunk": 0, "src": 0, "dst": 1, "op": "copy"}]}],
     "topology": {"name": "dgx1-v100", "fingerprint": "..."},
     "cost": {"steps": 7, "rounds": 7, "chunks": 1},
     "meta": {...free-form: solver, solve time, bound ...}}

The ``chunks`` list is redundant with (collective, ranks, chunks_per_rank, root) and is
checked against :class:`synth.ir.collectives.CollectiveSpec` on load, so a program that knows
nothing else can still check a schedule.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth.ir.collectives import CollectiveSpec, canonical
from synth.ir.schedule_text import STEPS_HOLE, compact_steps, indented_steps
from topo_probe.capped_read import decode_utf8, gunzip_capped, read_capped
from topo_probe.errors import ScheduleFormatError, ScheduleInvalid, TopocollError, show
from topo_probe.json_guard import parse_json
from topo_probe.limits import (MAX_CHUNKS_PER_RANK, MAX_CHUNK_CELLS, MAX_GPUS, MAX_INPUT_BYTES, MAX_ROUNDS,
                               MAX_SCHEDULE_BYTES, MAX_SCHEDULE_GZIP_RATIO)
from topo_probe.number_rules import is_int
from topo_probe.topology.serialize import atomic_write

FORMAT = "topocoll.schedule"
VERSION = 1
OPS = ("copy", "reduce")
#: schedules with more transfers are written as compact JSON (no indentation)
INDENT_TRANSFERS = 50_000


@dataclass(frozen=True, slots=True)
class Transfer:
    """Send ``chunk`` from rank ``src`` to rank ``dst``; ``op`` is ``copy`` or ``reduce``.

    Slotted: a 1,024-rank run holds tens of millions of them (64 bytes each instead of 350 with
    an instance ``__dict__``)."""

    chunk: int
    src: int
    dst: int
    op: str = "copy"


@dataclass(frozen=True)
class Step:
    """Concurrent transfers taking ``rounds`` rounds of the fabric."""

    rounds: int
    transfers: tuple[Transfer, ...]


@dataclass(frozen=True)
class Schedule:
    """A schedule for one collective instance (see module docstring)."""

    collective: str
    ranks: int
    chunks_per_rank: int
    steps: tuple[Step, ...]
    root: int | None = None
    inplace: bool = False
    name: str = ""
    topology_name: str = ""
    topology_fingerprint: str = ""
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __hash__(self) -> int:
        # executors look schedules up on every call (program cache): hash the steps once.  The
        # cached value is dropped when pickled (string hashes differ between processes).
        h = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash((self.collective, self.ranks, self.chunks_per_rank, self.steps,
                                               self.root, self.inplace, self.name, self.topology_name,
                                               self.topology_fingerprint))
        return h

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @functools.cached_property
    def spec(self) -> CollectiveSpec:
        """The collective instance (built once per schedule: executors ask on every call)."""
        return CollectiveSpec(self.collective, self.ranks, self.chunks_per_rank, self.root)

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def num_rounds(self) -> int:
        return sum(s.rounds for s in self.steps)

    def with_(self, **changes) -> "Schedule":
        """A copy with some fields changed (dataclasses.replace)."""
        from dataclasses import replace
        return replace(self, **changes)

    # ------------------------------------------------------------------ JSON
    def to_dict(self, steps: bool = True) -> dict[str, Any]:
        """The JSON document as Python objects (``steps=False``: ``steps`` left empty, for
        :meth:`to_json`, which writes them as text)."""
        spec = self.spec
        return {
            "format": FORMAT, "version": VERSION, "name": self.name,
            "collective": spec.name, "ranks": self.ranks, "chunks_per_rank": self.chunks_per_rank,
            "root": self.root, "inplace": self.inplace,
            "chunks": [{"id": c.id, "pre": list(c.pre), "post": list(c.post)} for c in spec.chunks()],
            "steps": [{"rounds": s.rounds,
                       "transfers": [{"chunk": t.chunk, "src": t.src, "dst": t.dst, "op": t.op}
                                     for t in s.transfers]} for s in self.steps] if steps else [],
            "topology": {"name": self.topology_name, "fingerprint": self.topology_fingerprint},
            "cost": {"steps": self.num_steps, "rounds": self.num_rounds, "chunks": self.chunks_per_rank},
            "meta": self.meta,
        }

    def to_json(self) -> str:
        """The JSON document; indented up to :data:`INDENT_TRANSFERS` transfers, compact beyond
        (the C encoder: a 1,024-rank schedule of a million transfers in a second or two)."""
        big = sum(len(s.transfers) for s in self.steps) > INDENT_TRANSFERS
        doc = self.to_dict(steps=False)
        doc["steps"] = STEPS_HOLE
        if big:
            head, tail = json.dumps(doc, indent=None, separators=(",", ":")).split(json.dumps(STEPS_HOLE), 1)
            return head + compact_steps(self.steps) + tail
        head, tail = json.dumps(doc, indent=1).split(json.dumps(STEPS_HOLE), 1)
        return head + indented_steps(self.steps) + tail

    @classmethod
    def from_dict(cls, doc: Any, source: str = "schedule") -> "Schedule":
        """Parse and check a schedule document; errors name the source and the field."""
        return _parse(doc, source)

    def save(self, path: str | os.PathLike) -> None:
        """Write atomically (temp file + rename)."""
        atomic_write_text(Path(path), self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Schedule":
        return _parse(read_json(Path(path)), str(path))


def read_json(path: Path, what: str = "") -> Any:
    """Parse a JSON file, gzip-compressed or not (``.json.gz``, told by its magic bytes), within
    the limits of :mod:`topo_probe.limits` (size before and after gunzip, UTF-8, depth, finite
    numbers); every failure is a ScheduleFormatError naming the file (and line/column or field;
    a top-level ``meta`` may hold ``Infinity``, as solvers write it).  ``what`` is unused (kept
    for callers naming the document)."""
    text = decode_utf8(read_schedule_bytes(path), str(path), ScheduleFormatError)
    return parse_json(text, str(path), ScheduleFormatError, free_form=("meta",), schedule=True)


def read_schedule_bytes(path: Path) -> bytes:
    """The bytes of a schedule file, gunzipped when they start with the gzip magic; the file and
    its decompressed content are both capped at :data:`topo_probe.limits.MAX_SCHEDULE_BYTES`, and
    the decompressed content also at :data:`~topo_probe.limits.MAX_SCHEDULE_GZIP_RATIO` times the
    file (at least :data:`~topo_probe.limits.MAX_INPUT_BYTES`): a gzip bomb stops there."""
    data = read_capped(path, ScheduleFormatError, MAX_SCHEDULE_BYTES)
    if data[:2] == b"\x1f\x8b":
        cap = min(MAX_SCHEDULE_BYTES, max(MAX_INPUT_BYTES, MAX_SCHEDULE_GZIP_RATIO * len(data)))
        data = gunzip_capped(data, str(path), ScheduleFormatError, cap)
    return data


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename
    (:func:`topo_probe.topology.serialize.atomic_write`: mode 0o666 minus the umask, read without
    setting it), making the folder first.  An OSError names ``path`` when the failed call named no
    file (a full disk on ``write``) or only the temporary one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        atomic_write(path, data)
    except OSError as exc:
        named = Path(exc.filename) if isinstance(exc.filename, (str, os.PathLike)) else None
        if named is None or (named.parent == path.parent and named.name.startswith(f".{path.name}.")):
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc   # the user's file, not ours
        raise


def check_transfer_count(schedule: Schedule, source: str) -> Schedule:
    """Refuse, before any replay, a schedule listing fewer transfers than its collective needs
    (:attr:`CollectiveSpec.min_transfers`): it cannot be correct, and this keeps a tiny file
    naming many ranks from costing the verifier ranks x chunks.  Returns ``schedule``.

    Raises ScheduleInvalid (rule ``postcondition``, as the verifier would) naming ``source``.
    """
    spec, listed = schedule.spec, sum(len(s.transfers) for s in schedule.steps)
    if listed < spec.min_transfers:
        raise ScheduleInvalid(f"{source}: {spec.name} on {spec.ranks} ranks with {spec.chunks_per_rank} chunks per "
                              f"rank needs at least {spec.min_transfers} transfers, the schedule lists {listed} "
                              f"(rule: postcondition)", rule="postcondition")
    return schedule


def _field(doc: dict, key: str, kind, where: str, optional: bool = False, default=None):
    if key not in doc:
        if optional:
            return default
        raise ScheduleFormatError(f"{where}: missing field {key!r}")
    val = doc[key]
    if kind is int and not is_int(val):
        raise ScheduleFormatError(f"{where}.{key} must be an integer, got {show(val)}")
    if kind is not int and not isinstance(val, kind):
        raise ScheduleFormatError(f"{where}.{key} must be {getattr(kind, '__name__', kind)}, got {show(val)}")
    return int(val) if kind is int else val


def _bounded(doc: dict, key: str, where: str, hi: int, what: str) -> int:
    val = _field(doc, key, int, where)
    if not 1 <= val <= hi:
        raise ScheduleFormatError(f"{where}.{key} must be in 1..{hi} ({what}), got {show(val)}")
    return val


def _spec(doc: Any, source: str) -> CollectiveSpec:
    """The collective instance of ``doc``, its size checked before anything is enumerated."""
    if not isinstance(doc, dict):
        raise ScheduleFormatError(f"{source}: a schedule must be a JSON object")
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise ScheduleFormatError(f"{source}: format must be {FORMAT!r}, got {show(fmt)}")
    ver = doc.get("version")
    if not is_int(ver) or ver != VERSION:
        raise ScheduleFormatError(f"{source}: version {show(ver)} is not supported (this reader knows {VERSION})")
    coll = _field(doc, "collective", str, source)
    ranks = _bounded(doc, "ranks", source, MAX_GPUS, "the most ranks a schedule may have")
    cpr = _bounded(doc, "chunks_per_rank", source, MAX_CHUNKS_PER_RANK, "the most a schedule may have")
    root = doc.get("root")
    if root is not None and not is_int(root):
        raise ScheduleFormatError(f"{source}.root must be an integer or null, got {show(root)}")
    try:
        spec = CollectiveSpec(canonical(coll), ranks, cpr, None if root is None else int(root))
    except TopocollError as e:
        raise ScheduleFormatError(f"{source}: {e}") from None
    if spec.num_chunks * ranks > MAX_CHUNK_CELLS:
        raise ScheduleFormatError(f"{source}: {spec.name} with {ranks} ranks and {cpr} chunks per rank has "
                                  f"{spec.num_chunks} chunks x {ranks} ranks, more than the {MAX_CHUNK_CELLS} "
                                  f"a schedule may have")
    return spec


def _is_rank_list(x: Any) -> bool:
    return isinstance(x, list) and all(is_int(r) for r in x)


def _check_chunks(chunks: list, spec: CollectiveSpec, source: str) -> None:
    """The redundant ``chunks`` list against the collective (length first: nothing is enumerated
    beyond what the document lists)."""
    if len(chunks) != spec.num_chunks:
        raise ScheduleFormatError(f"{source}.chunks: {spec.name} with {spec.ranks} ranks and {spec.chunks_per_rank} "
                                  f"chunks per rank has {spec.num_chunks} chunks, the document lists {len(chunks)}")
    expect = spec.chunks()
    seen: dict[int, int] = {}
    for k, c in enumerate(chunks):
        where = f"{source}.chunks[{k}]"
        if not isinstance(c, dict):
            raise ScheduleFormatError(f"{where} must be an object")
        cid = _field(c, "id", int, where)
        if not 0 <= cid < len(expect):
            raise ScheduleFormatError(f"{where}.id {show(cid)} is out of range 0..{len(expect) - 1}")
        if cid in seen:
            raise ScheduleFormatError(f"{where}.id {cid} is listed twice (also chunks[{seen[cid]}])")
        seen[cid] = k
        e, pre, post = expect[cid], c.get("pre", []), c.get("post", [])
        if not _is_rank_list(pre) or not _is_rank_list(post):
            raise ScheduleFormatError(f"{where}: pre and post must be lists of ranks, got {show(pre)}/{show(post)}")
        if sorted(pre) != sorted(e.pre) or sorted(post) != sorted(e.post):
            raise ScheduleFormatError(f"{where}: pre/post {show(pre)}/{show(post)} do not match "
                                      f"{spec.name} (expected {show(list(e.pre))}/{show(list(e.post))})")


def _plain_transfer(t: Any, chunks: int, ranks: int) -> Transfer | None:
    """The Transfer of ``t`` when it is a plain JSON object of valid plain ints and op, else None
    (then :func:`_transfer` checks it and names what is wrong): the common case without building
    each transfer's place in the document."""
    if type(t) is not dict:
        return None
    chunk, src, dst, op = t.get("chunk"), t.get("src"), t.get("dst"), t.get("op", "copy")
    if (type(chunk) is int and type(src) is int and type(dst) is int and type(op) is str and 0 <= chunk < chunks
            and 0 <= src < ranks and 0 <= dst < ranks and src != dst and op in OPS):
        return Transfer(chunk, src, dst, op)
    return None


def _transfer(t: Any, spec: CollectiveSpec, tw: str) -> Transfer:
    if not isinstance(t, dict):
        raise ScheduleFormatError(f"{tw} must be an object")
    chunk = _field(t, "chunk", int, tw)
    src = _field(t, "src", int, tw)
    dst = _field(t, "dst", int, tw)
    op = _field(t, "op", str, tw, optional=True, default="copy")
    if not 0 <= chunk < spec.num_chunks:
        raise ScheduleFormatError(f"{tw}.chunk {show(chunk)} is out of range 0..{spec.num_chunks - 1}")
    for key, r in (("src", src), ("dst", dst)):
        if not 0 <= r < spec.ranks:
            raise ScheduleFormatError(f"{tw}.{key} {show(r)} is not a rank (0..{spec.ranks - 1})")
    if src == dst:
        raise ScheduleFormatError(f"{tw}: src and dst are both rank {src}")
    if op not in OPS:
        raise ScheduleFormatError(f"{tw}.op must be 'copy' or 'reduce', got {show(op)}")
    return Transfer(chunk, src, dst, op)


def _steps(doc: dict, spec: CollectiveSpec, source: str) -> tuple[Step, ...]:
    steps = []
    for si, s in enumerate(_field(doc, "steps", list, source)):
        where = f"{source}.steps[{si}]"
        if not isinstance(s, dict):
            raise ScheduleFormatError(f"{where} must be an object")
        rounds = _field(s, "rounds", int, where)
        if not 1 <= rounds <= MAX_ROUNDS:
            raise ScheduleFormatError(f"{where}.rounds must be >= 1 and at most {MAX_ROUNDS}, got {show(rounds)}")
        transfers = _field(s, "transfers", list, where)
        chunks, ranks = spec.num_chunks, spec.ranks
        steps.append(Step(rounds, tuple(_plain_transfer(t, chunks, ranks)
                                        or _transfer(t, spec, f"{where}.transfers[{ti}]")
                                        for ti, t in enumerate(transfers))))
    return tuple(steps)


def _text(doc: dict, key: str, where: str) -> str:
    val = doc.get(key, "")
    if not isinstance(val, str):
        raise ScheduleFormatError(f"{where}.{key} must be a string, got {show(val)}")
    return val


def _parse(doc: Any, source: str) -> Schedule:
    spec = _spec(doc, source)
    if "chunks" in doc:
        _check_chunks(_field(doc, "chunks", list, source), spec, source)
    steps = _steps(doc, spec, source)
    topo = doc.get("topology") or {}
    if not isinstance(topo, dict):
        raise ScheduleFormatError(f"{source}.topology must be an object")
    inplace = doc.get("inplace", False)
    if not isinstance(inplace, bool):
        raise ScheduleFormatError(f"{source}.inplace must be true or false, got {show(inplace)}")
    meta = doc.get("meta") or {}
    return Schedule(spec.name, spec.ranks, spec.chunks_per_rank, steps, spec.root, inplace,
                    _text(doc, "name", source), _text(topo, "name", f"{source}.topology"),
                    _text(topo, "fingerprint", f"{source}.topology"), meta if isinstance(meta, dict) else {})

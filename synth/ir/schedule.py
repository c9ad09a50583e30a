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
import gzip
import json
import os
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from synth.ir.collectives import CollectiveSpec, canonical
from topo_probe.errors import ScheduleFormatError, TopocollError

FORMAT = "topocoll.schedule"
VERSION = 1
OPS = ("copy", "reduce")
#: schedules with more transfers are written as compact JSON (no indentation)
INDENT_TRANSFERS = 50_000


@dataclass(frozen=True)
class Transfer:
    """Send ``chunk`` from rank ``src`` to rank ``dst``; ``op`` is ``copy`` or ``reduce``."""

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
    def to_dict(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "format": FORMAT, "version": VERSION, "name": self.name,
            "collective": spec.name, "ranks": self.ranks, "chunks_per_rank": self.chunks_per_rank,
            "root": self.root, "inplace": self.inplace,
            "chunks": [{"id": c.id, "pre": list(c.pre), "post": list(c.post)} for c in spec.chunks()],
            "steps": [{"rounds": s.rounds,
                       "transfers": [{"chunk": t.chunk, "src": t.src, "dst": t.dst, "op": t.op}
                                     for t in s.transfers]} for s in self.steps],
            "topology": {"name": self.topology_name, "fingerprint": self.topology_fingerprint},
            "cost": {"steps": self.num_steps, "rounds": self.num_rounds, "chunks": self.chunks_per_rank},
            "meta": self.meta,
        }

    def to_json(self) -> str:
        """The JSON document; indented up to :data:`INDENT_TRANSFERS` transfers, compact beyond
        (the C encoder: a 1,024-rank schedule of a million transfers in a second or two)."""
        big = sum(len(s.transfers) for s in self.steps) > INDENT_TRANSFERS
        return json.dumps(self.to_dict(), indent=None if big else 1, separators=(",", ":") if big else None)

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
    """Parse a JSON file, gzip-compressed or not (``.json.gz``, told by its magic bytes);
    unreadable files, bad gzip data and bad JSON raise ScheduleFormatError naming the file (and
    line/column)."""
    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        return json.loads(data.decode("utf-8"))
    except OSError as e:
        if isinstance(e, gzip.BadGzipFile) or not e.strerror:
            raise ScheduleFormatError(f"{path}: broken gzip data: {e}") from None
        raise ScheduleFormatError(f"{path}: cannot read{' ' + what if what else ''}: {e.strerror}") from None
    except (EOFError, zlib.error) as e:
        raise ScheduleFormatError(f"{path}: broken gzip data: {e}") from None
    except UnicodeDecodeError as e:
        raise ScheduleFormatError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ScheduleFormatError(f"{path}: line {e.lineno} column {e.colno}: invalid JSON: {e.msg}") from None


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _field(doc: dict, key: str, kind, where: str, optional: bool = False, default=None):
    if key not in doc:
        if optional:
            return default
        raise ScheduleFormatError(f"{where}: missing field {key!r}")
    val = doc[key]
    if kind is int and (isinstance(val, bool) or not isinstance(val, int)):
        raise ScheduleFormatError(f"{where}.{key} must be an integer, got {val!r}")
    if kind is not int and not isinstance(val, kind):
        raise ScheduleFormatError(f"{where}.{key} must be {getattr(kind, '__name__', kind)}, got {val!r}")
    return val


def _parse(doc: Any, source: str) -> Schedule:
    if not isinstance(doc, dict):
        raise ScheduleFormatError(f"{source}: a schedule must be a JSON object")
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise ScheduleFormatError(f"{source}: format must be {FORMAT!r}, got {fmt!r}")
    ver = doc.get("version")
    if ver != VERSION:
        raise ScheduleFormatError(f"{source}: version {ver!r} is not supported (this reader knows {VERSION})")
    coll = _field(doc, "collective", str, source)
    ranks = _field(doc, "ranks", int, source)
    cpr = _field(doc, "chunks_per_rank", int, source)
    root = doc.get("root")
    if root is not None and (isinstance(root, bool) or not isinstance(root, int)):
        raise ScheduleFormatError(f"{source}.root must be an integer or null, got {root!r}")
    try:
        spec = CollectiveSpec(canonical(coll), ranks, cpr, root)
    except TopocollError as e:
        raise ScheduleFormatError(f"{source}: {e}") from None
    if "chunks" in doc:
        expect = {c.id: c for c in spec.chunks()}
        chunks = _field(doc, "chunks", list, source)
        if len(chunks) != len(expect):
            raise ScheduleFormatError(f"{source}.chunks: {spec.name} with {ranks} ranks and {cpr} chunks per "
                                      f"rank has {len(expect)} chunks, the document lists {len(chunks)}")
        for k, c in enumerate(chunks):
            where = f"{source}.chunks[{k}]"
            cid = _field(c, "id", int, where)
            if cid not in expect:
                raise ScheduleFormatError(f"{where}.id {cid} is out of range 0..{len(expect) - 1}")
            e = expect[cid]
            if sorted(c.get("pre", [])) != sorted(e.pre) or sorted(c.get("post", [])) != sorted(e.post):
                raise ScheduleFormatError(f"{where}: pre/post {c.get('pre')}/{c.get('post')} do not match "
                                          f"{spec.name} (expected {list(e.pre)}/{list(e.post)})")
    steps = []
    for si, s in enumerate(_field(doc, "steps", list, source)):
        where = f"{source}.steps[{si}]"
        if not isinstance(s, dict):
            raise ScheduleFormatError(f"{where} must be an object")
        rounds = _field(s, "rounds", int, where)
        if rounds < 1:
            raise ScheduleFormatError(f"{where}.rounds must be >= 1, got {rounds}")
        transfers = []
        for ti, t in enumerate(_field(s, "transfers", list, where)):
            tw = f"{where}.transfers[{ti}]"
            if not isinstance(t, dict):
                raise ScheduleFormatError(f"{tw} must be an object")
            chunk = _field(t, "chunk", int, tw)
            src = _field(t, "src", int, tw)
            dst = _field(t, "dst", int, tw)
            op = _field(t, "op", str, tw, optional=True, default="copy")
            if not 0 <= chunk < spec.num_chunks:
                raise ScheduleFormatError(f"{tw}.chunk {chunk} is out of range 0..{spec.num_chunks - 1}")
            for key, r in (("src", src), ("dst", dst)):
                if not 0 <= r < ranks:
                    raise ScheduleFormatError(f"{tw}.{key} {r} is not a rank (0..{ranks - 1})")
            if src == dst:
                raise ScheduleFormatError(f"{tw}: src and dst are both rank {src}")
            if op not in OPS:
                raise ScheduleFormatError(f"{tw}.op must be 'copy' or 'reduce', got {op!r}")
            transfers.append(Transfer(chunk, src, dst, op))
        steps.append(Step(rounds, tuple(transfers)))
    topo = doc.get("topology") or {}
    if not isinstance(topo, dict):
        raise ScheduleFormatError(f"{source}.topology must be an object")
    meta = doc.get("meta") or {}
    return Schedule(spec.name, ranks, cpr, tuple(steps), root, bool(doc.get("inplace", False)),
                    str(doc.get("name", "")), str(topo.get("name", "")), str(topo.get("fingerprint", "")),
                    meta if isinstance(meta, dict) else {})

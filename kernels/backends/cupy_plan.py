"""How the CuPy backend runs a lowered program: the route, stream and events of every op.

:func:`plan_program` is plain Python that the CPU tests cover with a fake runtime
(``tests/_fake_device.py``); :class:`kernels.backends.cupy_executor.CupyLayer` carries
its :class:`Plan` out (see that module for the rules).

**Host staging of reduce chains.**  When a rank reduces two or more sources into one chunk in
one step (a chain ``d <- a op s1``, ``d <- d op s2``, ...; :func:`kernels.backends.host_reduce.fuse_reduce_chains`)
and every source must be staged (no peer access), the chain becomes: each source ``d2h``
into its own pinned area on its owner's stream (the copy engines), the destination's own
``a`` likewise on its stream; the destination stream waits for those copies' events, runs one
``host_reduce`` command (the n-way Numba kernel on the pinned buffers, in place over ``a``'s
area) and one ``h2d`` into ``d``.  That is ``k + 1`` device-to-host and one host-to-device
copy instead of ``k`` of each plus ``k`` device reduces.  A single staged reduce keeps the
``d2h``, ``h2d``, device-reduce route.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from kernels.backends.host_reduce import FusedReduce, fuse_reduce_chains, supports
from kernels.program.ops import Program, Region

ROUTES = ("local", "peer", "staged")
PINNED = "pinned"
STAGE = "stage"


@dataclass(frozen=True)
class Cmd:
    """One runtime command of a plan (kinds: enter, exit, wait, record, copy, reduce, scale,
    d2h, h2d, host_reduce).  ``stream`` is the rank whose stream runs it; ``a``/``b`` are the
    sources (a host reduce's are ``srcs``, combined by the ops ``chain``, in order)."""

    kind: str
    stream: int
    dst: Region | None = None
    a: Region | None = None
    b: Region | None = None
    event: int = -1
    op: int = -1
    route: str = ""
    events: tuple[int, ...] = ()
    srcs: tuple[Region, ...] = ()
    chain: tuple[int, ...] = ()


@dataclass
class Plan:
    """Commands in issue order plus the resources they need."""

    commands: list[Cmd]
    routes: dict[int, str]
    peer_pairs: set[tuple[int, int]]          # (accessing device, peer device)
    pinned_elems: int
    stage_elems: list[int]
    num_events: int = 0
    waits: int = field(default=0)
    host_reduces: int = 0


def plan_routes(program: Program, device_of: Sequence[int], peer_ok: Callable[[int, int], bool]) -> dict[int, str]:
    """Route of every op: local (same device or no remote read), peer or staged."""
    routes = {}
    for o in program.ops():
        if not o.remote or device_of[o.src.rank] == device_of[o.rank]:
            routes[o.id] = "local"
        elif peer_ok(device_of[o.rank], device_of[o.src.rank]):
            routes[o.id] = "peer"
        else:
            routes[o.id] = "staged"
    return routes


class _Emitter:
    """Appends commands, tracks each stream's position and skips redundant event waits."""

    def __init__(self, n: int):
        self.cmds: list[Cmd] = [Cmd("enter", r) for r in range(n)]
        self.pos = [0] * n
        self.known: dict[tuple[int, int], int] = {}     # (stream, other) -> position waited for
        self.events = 0
        self.waits = 0

    def work(self, c: Cmd) -> None:
        self.cmds.append(c)
        self.pos[c.stream] += 1

    def record(self, stream: int) -> tuple[int, int, int]:
        """Record an event after the stream's work so far: (event id, stream, position)."""
        ev, self.events = self.events, self.events + 1
        self.cmds.append(Cmd("record", stream, event=ev))
        return ev, stream, self.pos[stream]

    def wait_for(self, stream: int, mark: tuple[int, int, int]) -> None:
        ev, s, p = mark
        if s == stream or self.known.get((stream, s), -1) >= p:
            return
        self.cmds.append(Cmd("wait", stream, event=ev))
        self.known[(stream, s)] = p
        self.waits += 1


def _emit_staged(em: _Emitter, o, pin: Region, done: dict, readers: list) -> None:
    """Source stream: device -> pinned, event; destination stream: pinned -> device (+ reduce)."""
    x, y = o.src.rank, o.rank
    for d in o.src_deps:
        em.wait_for(x, done[d])
    _pin_wait(em, x, pin, readers)
    em.work(Cmd("d2h", x, pin, o.src, op=o.id, route="staged"))
    em.wait_for(y, em.record(x))
    for d in o.dst_deps:
        em.wait_for(y, done[d])
    if o.kind == "copy":
        em.work(Cmd("h2d", y, o.dst, pin, op=o.id, route="staged"))
    else:
        st = Region(y, STAGE, 0, o.dst.size)
        em.work(Cmd("h2d", y, st, pin, op=o.id, route="staged"))
        em.work(Cmd("reduce", y, o.dst, o.acc, st, op=o.id, route="staged"))
    done[o.id] = em.record(y)
    readers[:] = [r for r in readers if not (r[0] >= pin.start and r[1] <= pin.stop)]
    readers.append((pin.start, pin.stop, done[o.id]))


def _pin_wait(em: _Emitter, stream: int, pin: Region, readers: list) -> None:
    for a, b, mark in readers:                  # earlier readers of this pinned area
        if a < pin.stop and pin.start < b:
            em.wait_for(stream, mark)


def _emit_host_reduce(em: _Emitter, f: FusedReduce, pins: list[Region], done: dict, readers: list) -> None:
    """A staged reduce chain reduced on the host (see module docstring); ``pins[0]`` holds the
    destination rank's own operand and, after the host reduce, the result."""
    y, first = f.dst.rank, f.ops[0]
    marks = []
    for o, pin in zip(f.ops, pins[1:]):
        x = o.src.rank
        for d in o.src_deps:
            em.wait_for(x, done[d])
        _pin_wait(em, x, pin, readers)
        em.work(Cmd("d2h", x, pin, o.src, op=o.id, route="staged"))
        marks.append(em.record(x))
    ids = {o.id for o in f.ops}
    for o in f.ops:
        for d in o.dst_deps:
            if d not in ids:
                em.wait_for(y, done[d])
    _pin_wait(em, y, pins[0], readers)
    em.work(Cmd("d2h", y, pins[0], first.acc, op=first.id, route="staged"))
    for m in marks:
        em.wait_for(y, m)
    em.work(Cmd("host_reduce", y, pins[0], srcs=tuple(pins), chain=tuple(o.id for o in f.ops), route="staged"))
    em.work(Cmd("h2d", y, f.dst, pins[0], op=f.ops[-1].id, route="staged"))
    mark = em.record(y)
    for o in f.ops:
        done[o.id] = mark
    for pin in pins:
        readers[:] = [r for r in readers if not (r[0] >= pin.start and r[1] <= pin.stop)]
        readers.append((pin.start, pin.stop, mark))


def host_chains(program: Program, routes: dict[int, str], device_of: Sequence[int]) -> dict[int, FusedReduce]:
    """First op id -> the reduce chain reduced on the host: two or more ops, all staged but for
    those that read the destination's own device (a rank-order sum adds its own value among its
    peers', :mod:`synth.ir.sum_order`), the accumulator on the destination's device (none for
    float8, which the kernels lack)."""
    if not supports(program.dtype):
        return {}
    out = {}
    for step in program.steps:
        for f in fuse_reduce_chains(list(step)):
            if (isinstance(f, FusedReduce) and all(routes[o.id] in ("staged", "local") for o in f.ops)
                    and any(routes[o.id] == "staged" for o in f.ops)
                    and device_of[f.ops[0].acc.rank] == device_of[f.dst.rank]):
                out[f.ops[0].id] = f
    return out


def plan_program(program: Program, device_of: Sequence[int], peer_ok: Callable[[int, int], bool]) -> Plan:
    """Turn a lowered program into runtime commands (see module docstring).

    ``peer_ok(dev, peer)`` says whether device ``dev`` may read ``peer``'s memory directly.
    """
    n = program.ranks
    ops = list(program.ops())
    routes = plan_routes(program, device_of, peer_ok)
    by_id = {o.id: o for o in ops}
    read_stream = {o.id: (o.src.rank if routes[o.id] == "staged" else o.rank) for o in ops}
    needed = set()                              # ops whose completion another stream waits for
    for o in ops:
        needed.update(d for d in o.src_deps if by_id[d].rank != read_stream[o.id])
        needed.update(d for d in o.dst_deps if by_id[d].rank != o.rank)
    pos = {o.id: i for i, o in enumerate(ops)}
    chains = {i: f for i, f in host_chains(program, routes, device_of).items()
              if all(pos[d] < pos[i] for o in f.ops for d in o.deps if d not in {p.id for p in f.ops})}
    members = {o.id: f for f in chains.values() for o in f.ops}
    # pinned areas: per step, staged ops get disjoint areas (a host-reduced chain one more, for
    # the destination's own operand); even/odd steps use two halves
    half = max([sum(o.dst.size for o in step if routes[o.id] == "staged")
                + sum(o.dst.size for o in step if o.id in chains) for step in program.steps] + [0])
    stage = [0] * n
    for o in ops:
        if routes[o.id] == "staged" and o.kind == "reduce" and o.id not in members:
            stage[o.rank] = max(stage[o.rank], o.dst.size)
    em = _Emitter(n)
    done: dict[int, tuple[int, int, int]] = {}  # op id -> (event id or -1, stream, position)
    readers: list = []
    offsets: dict[int, int] = {}

    def pin(o) -> Region:
        base = (o.step % 2) * half + offsets.get(o.step, 0)
        offsets[o.step] = offsets.get(o.step, 0) + o.dst.size
        return Region(-1, PINNED, base, base + o.dst.size)

    for o in ops:
        if o.id in chains:
            f = chains[o.id]
            _emit_host_reduce(em, f, [pin(o)] + [pin(p) for p in f.ops], done, readers)
            continue
        if o.id in members:
            continue
        if routes[o.id] == "staged":
            _emit_staged(em, o, pin(o), done, readers)
            continue
        y = o.rank
        for d in o.deps:
            em.wait_for(y, done[d])
        em.work(Cmd(o.kind, y, o.dst, o.src if o.kind == "copy" else o.acc,
                    o.src if o.kind == "reduce" else None, op=o.id, route=routes[o.id]))
        done[o.id] = em.record(y) if o.id in needed else (-1, y, em.pos[y])
    finals = tuple(em.record(s)[0] for s in range(n))
    em.cmds += [Cmd("exit", r, events=finals) for r in range(n)]
    pairs = {(device_of[o.rank], device_of[o.src.rank]) for o in ops if routes[o.id] == "peer"}
    return Plan(em.cmds, routes, pairs, 2 * half, stage, em.events, em.waits, len(chains))


__all__ = ["plan_program", "plan_routes", "host_chains", "Plan", "Cmd", "ROUTES", "PINNED", "STAGE"]

"""How the CuPy backend runs a lowered program: the route, stream and events of every op.

:func:`plan_program` is plain Python that the CPU tests cover with the fake runtime of
:mod:`kernels.backends.fake_device`; :class:`kernels.backends.cupy_executor.CupyLayer` carries
its :class:`Plan` out (see that module for the rules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from kernels.program.ops import Program, Region

ROUTES = ("local", "peer", "staged")
PINNED = "pinned"
STAGE = "stage"


@dataclass(frozen=True)
class Cmd:
    """One runtime command of a plan (kinds: enter, exit, wait, record, copy, reduce, scale,
    d2h, h2d).  ``stream`` is the rank whose stream runs it; ``a``/``b`` are the sources."""

    kind: str
    stream: int
    dst: Region | None = None
    a: Region | None = None
    b: Region | None = None
    event: int = -1
    op: int = -1
    route: str = ""
    events: tuple[int, ...] = ()


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
    for a, b, mark in readers:                  # earlier readers of this pinned area
        if a < pin.stop and pin.start < b:
            em.wait_for(x, mark)
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
    # pinned areas: per step, staged ops get disjoint areas; even/odd steps use two halves
    half = max([sum(o.dst.size for o in step if routes[o.id] == "staged") for step in program.steps] + [0])
    stage = [0] * n
    for o in ops:
        if routes[o.id] == "staged" and o.kind == "reduce":
            stage[o.rank] = max(stage[o.rank], o.dst.size)
    em = _Emitter(n)
    done: dict[int, tuple[int, int, int]] = {}  # op id -> (event id or -1, stream, position)
    readers: list = []
    offsets: dict[int, int] = {}
    for o in ops:
        if routes[o.id] == "staged":
            base = (o.step % 2) * half + offsets.get(o.step, 0)
            offsets[o.step] = offsets.get(o.step, 0) + o.dst.size
            _emit_staged(em, o, Region(-1, PINNED, base, base + o.dst.size), done, readers)
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
    return Plan(em.cmds, routes, pairs, 2 * half, stage, em.events, em.waits)


__all__ = ["plan_program", "plan_routes", "Plan", "Cmd", "ROUTES", "PINNED", "STAGE"]

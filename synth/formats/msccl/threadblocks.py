"""Threadblocks of one GPU: which ops run where, and their dependencies as (depid, deps).

Runtime rules (RCCL ``msccl_parser.cc``): a threadblock has at most one send peer and one
receive peer, one channel, ids 0..k-1; a connection (channel, peer, direction) belongs to one
threadblock; a step waits on at most one (depid, deps), so extra dependencies become ``nop``
steps just before it; a step others wait on has ``hasdep="1"``.

Layout: local copies in a threadblock of their own (send = recv = -1), then per channel one
threadblock per (receive peer, send peer) pair that fused steps need, and one per remaining
receive peer and send peer.  When that is more than ``max_tbs`` threadblocks, receive-only and
send-only threadblocks of a channel are paired (the same peer first, as RCCL's own algorithms
do) until it fits; ops keep program order inside a threadblock, and since sends never wait for
their receiver, pairing cannot deadlock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from synth.formats.msccl.layout import RUNTIME_MAX_TBS_PER_CHANNEL
from synth.formats.msccl.lower import Op
from topo_probe.errors import InvalidArgument


@dataclass
class Threadblock:
    send: int
    recv: int
    chan: int
    ops: list[Op] = field(default_factory=list)


def _pair_leftovers(tbs: list[Threadblock], max_tbs: int) -> list[Threadblock]:
    recv_only = [t for t in tbs if t.send < 0 <= t.recv]
    send_only = [t for t in tbs if t.recv < 0 <= t.send]
    merged: set[int] = set()
    for same_peer in (True, False):
        for r in recv_only:
            if len(tbs) - len(merged) <= max_tbs:
                break
            if id(r) in merged:
                continue
            for s in send_only:
                if id(s) in merged or s.chan != r.chan or (same_peer and s.send != r.recv):
                    continue
                r.send = s.send
                r.ops.extend(s.ops)
                merged.add(id(s))
                break
    return [t for t in tbs if id(t) not in merged]


def assign(rank: int, ops: list[Op], pairs: set[tuple[int, int, int]], max_tbs: int,
           max_local: int | None = None) -> list[Threadblock]:
    """Threadblocks of GPU ``rank`` with their ops in program order (see the module docstring);
    an op with ``follow`` goes where that receive went; local ops fill local threadblocks of
    ``max_local`` ops each (one, when None)."""
    tbs: dict[tuple, Threadblock] = {}
    placed: dict[int, Threadblock] = {}
    local = 0
    recv_tb: dict[tuple[int, int], Threadblock] = {}
    send_tb: dict[tuple[int, int], Threadblock] = {}
    for chan, a, b in sorted(pairs):
        tb = tbs[("pair", chan, a, b)] = Threadblock(b, a, chan)
        recv_tb[(chan, a)] = send_tb[(chan, b)] = tb
    for op in ops:
        if op.follow is not None:
            tb = placed[id(op.follow)]
        elif op.recv_peer >= 0:
            tb = recv_tb.get((op.chan, op.recv_peer))
            if tb is None:
                tb = recv_tb[(op.chan, op.recv_peer)] = tbs[("recv", op.chan, op.recv_peer)] = \
                    Threadblock(-1, op.recv_peer, op.chan)
        elif op.send_peer >= 0:
            tb = send_tb.get((op.chan, op.send_peer))
            if tb is None:
                tb = send_tb[(op.chan, op.send_peer)] = tbs[("send", op.chan, op.send_peer)] = \
                    Threadblock(op.send_peer, -1, op.chan)
        else:
            key = ("local", local // max_local if max_local else 0)
            local += 1
            tb = tbs.get(key) or tbs.setdefault(key, Threadblock(-1, -1, 0))
        placed[id(op)] = tb
        tb.ops.append(op)
    out = sorted(tbs.values(), key=lambda t: (t.send >= 0 or t.recv >= 0, t.chan, t.recv, t.send))
    out = [t for t in out if t.ops]
    if len(out) > max_tbs:
        out = _pair_leftovers(out, max_tbs)
    if len(out) > max_tbs:
        raise InvalidArgument(f"gpu {rank} needs {len(out)} threadblocks even with sends and receives paired "
                              f"(one peer each way per threadblock), more than the cap of {max_tbs}; raise "
                              f"max_tbs_per_gpu")
    for chan in {t.chan for t in out}:
        for what in ("send", "recv"):
            peers = sum(1 for t in out if t.chan == chan and getattr(t, what) >= 0)
            if peers > RUNTIME_MAX_TBS_PER_CHANNEL:
                raise InvalidArgument(f"gpu {rank} channel {chan} has {peers} {what} peers, more than the "
                                      f"runtime's {RUNTIME_MAX_TBS_PER_CHANNEL} per channel")
    for t in out:
        t.ops.sort(key=lambda o: o.order)
    return out


def number_steps(tbs: list[Threadblock]) -> None:
    """Insert ``nop`` steps for extra cross-threadblock dependencies, number steps and set hasdep."""
    for tid, t in enumerate(tbs):
        for op in t.ops:
            op.tb = tid
    for tid, t in enumerate(tbs):
        out: list[Op] = []
        for op in t.ops:
            latest: dict[int, Op] = {}
            for d in op.deps:
                if d.tb != tid and (d.tb not in latest or d.order > latest[d.tb].order):
                    latest[d.tb] = d
            deps = [latest[k] for k in sorted(latest)]
            for extra in deps[1:]:
                nop = Op("nop", op.rank, None, None, op.order, tb=tid)
                nop.deps = [extra]
                out.append(nop)
            op.deps = deps[:1]
            out.append(op)
        for i, op in enumerate(out):
            op.index = i
        t.ops = out
    for t in tbs:
        for op in t.ops:
            for d in op.deps:
                d.hasdep = True

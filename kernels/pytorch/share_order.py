"""The order one rank runs its share of a schedule in on CPU tensors, and which of its sends go
out straight from the caller's tensor (no copy).

:func:`kernels.mpi.transport.rank_plan` lists a rank's ops in the lowering's global order, where a
rank may receive (and wait) before it posts a send that needs nothing it receives: in a direct
all-reduce rank 0 receives its three partial blocks before it sends any of its own, so its peers
wait for it and the step's messages cross one after the other instead of at once.
:func:`share_order` moves every send up to just after the last op it depends on (the ops that
write its source region) and after every earlier send (sends keep their order: a pair's
messages arrive in the order both ends expect, which they check); receives and local ops keep
their order.

A send then reads its source region in place (:mod:`kernels.pytorch.sockets` sends from the
tensor's memory) instead of a copy, and the first later op that writes any element of that
region waits until the send is done (its bytes are in the kernel).  Waiting for a send can
deadlock where a message cannot be taken before its receiver gets something this rank sends
only after the wait; :func:`runs_through` plays every rank's list against the others with no
buffering at all (a send is done only when its receiver has taken it) and the new order is used
only where every rank finishes; else the lowering's order with a copy per send (as before).

>>> from kernels.mpi.transport import SEND, RECV_REDUCE
>>> from kernels.program.ops import Op, Region
>>> a = Op(0, 0, "reduce", Region(0, "output", 0, 2), Region(1, "output", 0, 2), Region(0, "output", 0, 2))
>>> b = Op(1, 0, "reduce", Region(1, "output", 2, 4), Region(0, "output", 2, 4), Region(1, "output", 2, 4))
>>> [(k, o.id) for k, o, *_ in hoisted([(RECV_REDUCE, a, 16, 1, frozenset()), (SEND, b, 17, 1, frozenset())])]
[(0, 1), (2, 0)]
"""

from __future__ import annotations

from kernels.mpi.transport import LOCAL, RECV_COPY, RECV_REDUCE, SEND

#: kinds of item that receive a message
_RECEIVES = (RECV_COPY, RECV_REDUCE)


def hoisted(rows: list) -> list:
    """``rows`` (``(kind, op, tag, peer, deps)`` in the lowering's order, deps: ids of this
    rank's ops) with every send moved up as far as its deps and the earlier sends allow (module
    docstring); returns ``(kind, op, tag, peer)`` items."""
    out: list = []
    for row in rows:
        kind, deps = row[0], row[4]
        if kind != SEND:
            out.append(row)
            continue
        at = 0
        for k, (kind2, o2, _, _, _) in enumerate(out):
            if o2.id in deps or kind2 == SEND:
                at = k + 1
        out.insert(at, row)
    return [r[:4] for r in out]


def send_waits(items: list, key) -> list:
    """Per item, the indices of earlier sends it must wait for: those whose source region
    overlaps the region the item writes; ``key(buf)`` names the physical buffer a region's
    ``buf`` is (in place, input and output are one)."""
    open_sends: list = []                       # (item index, buffer, start, stop)
    waits = []
    for i, (kind, o, _, _) in enumerate(items):
        hit: list = []
        if kind in (RECV_COPY, RECV_REDUCE, LOCAL):
            d, still = o.dst, []
            for s in open_sends:
                (hit if s[1] == key(d.buf) and s[2] < d.stop and d.start < s[3] else still).append(s)
            open_sends = still
            hit = [s[0] for s in hit]
        waits.append(tuple(hit))
        if kind == SEND:
            open_sends.append((i, key(o.src.buf), o.src.start, o.src.stop))
    return waits


def runs_through(lists: list, waits: list) -> bool:
    """Whether every rank gets to the end of its items (``lists[r]``, with ``waits[r]``) when a
    send is done only once its receiver has taken it, and a receive can take a message only once
    its sender posted it (module docstring)."""
    pos, posted, taken = [0] * len(lists), set(), set()
    moved = True
    while moved:
        moved = False
        for r, items in enumerate(lists):
            while pos[r] < len(items):
                i = pos[r]
                kind, o, _, _ = items[i]
                if any(items[j][1].id not in taken for j in waits[r][i]):
                    break
                if kind == SEND:
                    posted.add(o.id)
                elif kind in _RECEIVES:
                    if o.id not in posted:
                        break
                    taken.add(o.id)
                pos[r] += 1
                moved = True
    return all(p == len(items) for p, items in zip(pos, lists))


def share_order(plans: list, keys: list) -> list | None:
    """``[(items, waits)]`` per rank from every rank's :class:`~kernels.mpi.transport.RankPlan`
    (``keys[r]``: rank ``r``'s physical-buffer naming, :func:`send_waits`), or None where the
    hoisted order with sends from the caller's memory could wait in a circle."""
    lists = [hoisted(_rows(p)) for p in plans]
    waits = [send_waits(items, keys[r]) for r, items in enumerate(lists)]
    if not runs_through(lists, waits):
        return None
    return list(zip(lists, waits))


def trailing_local(items: list, waits: list, i: int, view) -> int | None:
    """The index of a local reduce right after item ``i`` (a receive-reduce) into exactly the
    region ``i`` writes, from a region apart from it, waiting for no send (a rank-order sum that
    ends with the rank's own value: a direct all-reduce's last rank); else None.  Run range by
    range after each received piece's reduction, every element meets the same operations in the
    same order as run whole, and the region's sends can stream behind both
    (:func:`kernels.pytorch.schedule_share.run_share`); ``view(region)``: the region's tensor."""
    if i + 1 >= len(items) or items[i + 1][0] != LOCAL or waits[i + 1]:
        return None
    o, dst = items[i + 1][1], items[i][1].dst
    same = (o.dst.buf, o.dst.start, o.dst.stop) == (dst.buf, dst.start, dst.stop)
    if o.kind != "reduce" or not same or o.acc != o.dst:
        return None
    a, b = view(o.dst), view(o.src)
    lo, hi = a.data_ptr(), a.data_ptr() + a.numel() * a.element_size()
    if b.data_ptr() < hi and lo < b.data_ptr() + b.numel() * b.element_size():
        return None                         # reads what it writes at another offset: not element-wise
    return i + 1


def _rows(plan) -> list:
    rows = ([(SEND, o, tag, peer, deps) for o, tag, peer, deps in plan.sends]
            + [(RECV_COPY if o.kind == "copy" else RECV_REDUCE, o, tag, peer, deps) for o, tag, peer, deps in plan.recvs]
            + [(LOCAL, o, None, None, deps) for o, deps in plan.local])
    rows.sort(key=lambda r: r[1].id)
    return rows


__all__ = ["hoisted", "runs_through", "send_waits", "share_order", "trailing_local"]

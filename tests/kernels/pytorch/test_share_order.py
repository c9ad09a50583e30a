"""kernels.pytorch.share_order: sends move up to their dependencies (a rank no longer receives
before it posts a send that needs nothing it receives), a pair's messages keep their order, the
first op that writes a sent region waits for that send, and an order that could wait in a circle
is refused (hand-built cases; every baseline's order is run on threads with no buffering in
test_schedule_share.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from kernels.mpi.transport import LOCAL, RECV_COPY, RECV_REDUCE, SEND  # noqa: E402
from kernels.program.ops import Op, Region  # noqa: E402
from kernels.pytorch.schedule_share import _cpu_order, _planned  # noqa: E402
from kernels.pytorch.share_order import hoisted, runs_through, send_waits  # noqa: E402
from synth import baseline, build_fabric  # noqa: E402
from topo_probe.machines.generators import fully_connected  # noqa: E402


def _op(i, dst_rank, dst, src_rank, src, kind="copy"):
    return Op(i, 0, kind, Region(dst_rank, "output", *dst), Region(src_rank, "output", *src))


def test_a_direct_all_reduce_rank_sends_its_blocks_before_it_receives():
    """Rank 0 of a 4-rank direct all-reduce: in the lowering's order its three receives come
    first (its peers wait for it); hoisted, its three step-1 sends lead, and its step-2 sends
    follow the reduces they depend on."""
    sched = baseline("direct", build_fabric(fully_connected(4)), "allreduce")
    hit = _planned(sched, 64, np.dtype("float32"), True, "sum", 0)
    assert [k for k, *_ in hit[2].items][:3] == [RECV_REDUCE] * 3
    items, waits = _cpu_order(hit, True, 0)
    kinds = [k for k, *_ in items]
    assert kinds == [SEND] * 3 + [RECV_REDUCE] * 3 + [SEND] * 3 + [RECV_COPY] * 3
    assert [p for _, _, _, p in items[:3]] == [1, 2, 3]
    # each step-2 receive into block p waits for the step-1 send of block p to rank p, and only it
    assert waits[9:] == [(0,), (1,), (2,)] and all(w == () for w in waits[:9])


def test_sends_keep_their_order_and_wait_for_their_dependencies():
    recv = _op(0, 0, (0, 2), 1, (0, 2))                  # rank 0 receives into [0, 2)
    dep = _op(1, 1, (0, 2), 0, (0, 2))                  # a send of [0, 2): needs the receive
    free = _op(2, 1, (2, 4), 0, (2, 4))                 # a send of [2, 4) to the same peer: needs nothing
    rows = [(RECV_COPY, recv, 16, 1, frozenset()), (SEND, dep, 17, 1, frozenset({0})),
            (SEND, free, 18, 1, frozenset())]
    assert [o.id for _, o, _, _ in hoisted(rows)] == [0, 1, 2]     # 2 may not pass 1 (sends keep their order)
    assert [o.id for _, o, _, _ in hoisted([rows[0], rows[2]])] == [2, 0]     # alone, it leads


def test_a_write_waits_for_every_send_of_an_overlapping_region_and_no_other():
    items = [(SEND, _op(0, 1, (0, 4), 0, (0, 4)), 16, 1), (SEND, _op(1, 2, (4, 8), 0, (4, 8)), 17, 2),
             (LOCAL, Op(2, 0, "scale", Region(0, "output", 3, 5)), None, None),
             (LOCAL, Op(3, 0, "scale", Region(0, "output", 0, 1)), None, None)]
    assert send_waits(items, lambda b: b) == [(), (), (0, 1), ()]     # waited once, at the first write


def test_an_order_that_could_wait_in_a_circle_is_refused():
    """Rank 0 sends [0, 4) to rank 1, then overwrites it with what rank 1 sends; rank 1 does the
    same.  Both messages are posted before either write, so both ranks get through; but where
    rank 1 receives before it sends, rank 0's write waits for a send rank 1 takes only after
    its own receive, which waits for rank 0's second send: a circle."""
    a, b = _op(0, 1, (0, 4), 0, (0, 4)), _op(1, 0, (0, 4), 1, (0, 4))
    c = _op(2, 1, (4, 8), 0, (0, 4))
    r0 = [(SEND, a, 16, 1), (RECV_COPY, b, 17, 1), (SEND, c, 18, 1)]
    r1 = [(SEND, b, 17, 0), (RECV_COPY, a, 16, 0), (RECV_COPY, c, 18, 0)]
    waits = [send_waits(r0, lambda x: x), [(), (), ()]]
    assert waits[0] == [(), (0,), ()] and runs_through([r0, r1], waits)
    r1_late = [(RECV_COPY, c, 18, 0), (SEND, b, 17, 0), (RECV_COPY, a, 16, 0)]
    assert not runs_through([r0, r1_late], waits)


def test_trailing_local_takes_only_an_element_wise_reduce_of_the_received_region():
    """Rank 2 of a 3-rank direct all-reduce in rank order (float32): x0 is received into scratch,
    x1 reduced into it, then its own x2 added by a local reduce of the same region: that local
    reduce may run piece by piece behind the receive's (element k meets the same two operations
    in the same order).  Not where the local reduce reads the region it writes at another offset
    (piece k would read a piece not yet final), nor where it waits for a send first."""
    import dataclasses

    import torch

    from kernels.pytorch.share_order import trailing_local
    sched = baseline("direct", build_fabric(fully_connected(3)), "allreduce")
    hit = _planned(sched, 64, np.dtype("float32"), True, "sum", 2)
    items, waits = _cpu_order(hit, True, 2)
    bufs = {name: torch.zeros(size) for name, size in hit[1].sizes[2].items()}

    def view(region):
        return bufs[region.buf][region.start:region.stop]
    i = next(k for k, it in enumerate(items) if it[0] == RECV_REDUCE)
    local = items[i + 1][1]
    assert items[i + 1][0] == LOCAL and local.kind == "reduce" and local.dst == items[i][1].dst
    assert trailing_local(items, waits, i, view) == i + 1
    shifted = dataclasses.replace(local, src=dataclasses.replace(local.dst, start=local.dst.start + 1,
                                                                 stop=local.dst.stop + 1))
    bufs["scratch"] = torch.zeros(hit[1].sizes[2]["scratch"] + 1)
    assert trailing_local(items[:i + 1] + [(LOCAL, shifted, None, None)] + items[i + 2:], waits, i, view) is None
    assert trailing_local(items, waits[:i + 1] + [(0,)] + waits[i + 2:], i, view) is None
    # integers sum in any order: no rank-order local reduce follows the receive
    hit = _planned(sched, 64, np.dtype("int64"), True, "sum", 2)
    items, waits = _cpu_order(hit, True, 2)
    assert all(trailing_local(items, waits, k, view) is None for k, it in enumerate(items) if it[0] == RECV_REDUCE)

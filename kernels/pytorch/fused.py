"""A small all-reduce in one round: the call's data rides in the same message as its per-call
header, and the ranks check the headers before anything is written to the caller's tensor.

Where the plan's schedule for the call is one step (the one-shot all-reduce the cost model and
the plans pick for small messages: every rank sends its whole buffer to every peer and reduces
what it receives), the per-call agreement (:mod:`kernels.pytorch.agreement`) and the schedule's
messages are the same round trip: each rank sends its header followed by its tensor's bytes
(:func:`kernels.pytorch.agreement.agree_with_data`), receives every peer's header and bytes into
private buffers, compares the headers (the same one-line error on every rank where a rank failed
its local checks or the ranks disagree, the caller's tensor untouched), and only then runs the
schedule's receives, reductions and copies on the received bytes (:class:`OneRound`).  One
message per peer per call instead of two.

The ops are the schedule's own, in its order, element for element: :class:`OneRound` keeps this
rank's ops of the lowered program (:func:`kernels.pytorch.schedule_share.rank_ops`) without its
sends, and where every chunk of the buffer meets the same ops in the same order (the one-shot
schedule's chunks do) runs each op once over the whole buffer instead of once per chunk; every
element then goes through the same additions, in the same order and rounding, as in
:func:`~kernels.pytorch.schedule_share.run_share`.

Taken only where every condition holds on this rank: the group's transport is a
:class:`~kernels.pytorch.sockets.SocketMesh`, the tensor is on the CPU, passes the local checks
and holds 1 to :data:`~kernels.pytorch.agreement.DATA_BYTES_MAX` bytes, the op is not
``premul_sum``, the group's native executor does not take the tensor (its test backends take
CPU tensors) and the schedule is one step whose messages come from the peers' own buffers.  A
rank that does not take it sends its header alone; the header says how many bytes follow it, and
ranks that disagree on that raise :class:`~kernels.pytorch.errors.CollectiveMismatch` on every
rank like any other disagreement.
"""

from __future__ import annotations

import torch

from kernels.backends.host_reduce import copy_head_merges
from kernels.backends.kernel_twins import binop_for
from kernels.mpi.transport import LOCAL, RECV_COPY, RECV_REDUCE, SEND
from kernels.program.ops import SCRATCH
from kernels.program.reduce_op import check_reduce_op
from kernels.pytorch.agreement import DATA_BYTES_MAX, Header, agree_with_data, shape_digest
from kernels.pytorch.checks import dense, flat, layout_bits, reduce_op_ok, tensors_ok
from kernels.pytorch.dtypes import dtype_code
from kernels.pytorch.plan_choice import choose
from kernels.pytorch.schedule_share import combine, postdiv, rank_ops
from synth.plan.selector import NCCL


class OneRound:
    """``rank``'s ops of a one-step ``schedule`` (in place, blocks of ``count`` elements of
    ``dtype``, reduce op ``op``) run on its peers' whole buffers received beforehand (module
    docstring).  Each op is ``(verb, dst, acc, src, binop)``; a region is ``(where, start,
    stop)`` with ``where`` ``"user"`` (the caller's tensor), ``"scratch"`` or a peer's rank (its
    received buffer).  Raises ValueError where the schedule is not one step or a message comes
    from a peer's scratch."""

    def __init__(self, schedule, count: int, dtype: torch.dtype, op: str, rank: int) -> None:
        if len(schedule.steps) != 1:
            raise ValueError(f"{schedule.name}: {len(schedule.steps)} steps")
        op = check_reduce_op(op, schedule.collective)     # once: each op's binop below is a checked one
        prog, plan = rank_ops(schedule, count, dtype, op, rank)
        n, mine = schedule.ranks, prog.bindings[rank]
        self.scratch = prog.sizes[rank].get(SCRATCH, 0)

        def own(r):
            return None if r is None else ("user" if r.buf in mine else "scratch", r.start, r.stop)
        ops = []
        for kind, o, _, peer in plan.items:
            if kind == SEND:
                continue
            if kind in (RECV_COPY, RECV_REDUCE):
                if o.src.buf not in prog.bindings[peer]:
                    raise ValueError(f"{schedule.name}: rank {peer} sends from its {o.src.buf}")
                src = (peer, o.src.start, o.src.stop)
                ops.append(("copy" if kind == RECV_COPY else "reduce", own(o.dst), own(o.acc), src,
                            binop_for(o.premul, op, n)))
            elif kind == LOCAL:
                ops.append(("scale" if o.kind not in ("copy", "reduce") else o.kind, own(o.dst), own(o.acc),
                            own(o.src), binop_for(o.premul, op, n)))
        ops = _merge_copy_heads(ops)
        folded = _folded(ops, count)
        ops = _in_place(folded) if folded else ops
        if not any(r is not None and r[0] == "scratch" for op in ops for r in op[1:4]):
            self.scratch = 0
        sizes = {"scratch": self.scratch}
        self.ops = [(verb, *(_whole(r, sizes.get(r[0], count)) if r is not None else None for r in regions), binop)
                    for verb, *regions, binop in ops]
        self.n = n

    def run(self, flat: torch.Tensor, received: list) -> None:
        """Reduce into ``flat`` (this rank's tensor, flat) from ``received`` (per peer, its
        buffer's bytes as a tensor of ``flat``'s dtype; None for this rank)."""
        bufs: dict = {"user": flat, **{p: r for p, r in enumerate(received) if r is not None}}
        if self.scratch:
            bufs["scratch"] = torch.empty(self.scratch, dtype=flat.dtype)
        def view(region):                 # a whole buffer as it is: a slice costs as much as an add
            return bufs[region[0]] if region[1] is None else bufs[region[0]][region[1]:region[2]]
        for verb, dst, acc, src, binop in self.ops:
            if verb == "reduce":
                combine(view(dst), view(acc), view(src), binop)
            elif verb == "copy":
                view(dst).copy_(view(src))
            else:                                   # scale: integer avg's division
                postdiv(view(dst), self.n)


def _overlap(a: tuple, b: tuple) -> bool:
    """Whether regions ``(buffer key, start, stop)`` share an element."""
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def _merge_copy_heads(ops: list) -> list:
    """``ops`` with a copy followed at once by a reduce into the copy's destination (how the
    lowering starts a rank-order sum with two peers, :mod:`synth.ir.sum_order`) as that one
    reduce reading the copy's source as its accumulator: the same values in one pass.  The rule
    is :func:`kernels.backends.host_reduce.copy_head_merges`, the host's, on this module's ops
    ``(verb, dst, acc, src, binop)``."""
    out: list = []
    for op in ops:
        prev = out[-1] if out else None
        if (prev is not None and prev[0] == "copy" and op[0] == "reduce"
                and copy_head_merges((prev[1], prev[3]), op[1:4], _overlap)):
            out[-1] = ("reduce", op[1], prev[3], op[3], op[4])
            continue
        out.append(op)
    return out


def _in_place(ops: list) -> list:
    """Folded ``ops`` that build the result in scratch and end copying it to the caller's tensor
    (the one-shot schedule's in-place form) build it in the tensor itself where that changes no
    element's sequence of operations: nothing reads the tensor after the first op that writes
    scratch (that op may: an elementwise op reads each element before it writes it)."""
    last = ops[-1]
    if not (last[0] == "copy" and last[1][0] == "user" and last[3][0] == "scratch"):
        return ops
    first = next(i for i, op in enumerate(ops) if op[1] is not None and op[1][0] == "scratch")
    keys = [[r[0] for r in op[1:4] if r is not None] for op in ops[:-1]]
    if any("scratch" in k for k in keys[:first]) or any("user" in k for k in keys[first + 1:]):
        return ops

    def swap(r):
        return ("user", *r[1:]) if r is not None and r[0] == "scratch" else r
    return ops[:first] + [(op[0], *(swap(r) for r in op[1:4]), op[4]) for op in ops[first:-1]]


def _whole(region: tuple, size: int) -> tuple:
    """``region`` with start None where it covers its whole buffer of ``size`` elements."""
    return (region[0], None, None) if region[1:] == (0, size) else region


def _folded(ops: list, count: int) -> list | None:
    """``ops`` run once over the whole buffer where every chunk meets the same ops in the same
    order with every region of an op at the chunk's own offset (module docstring); else None."""
    spans = []
    for verb, *regions, binop in ops:
        ends = {(r[1], r[2]) for r in regions if r is not None}
        if len(ends) != 1:
            return None
        spans.append(ends.pop())
    cuts = sorted({0, count} | {e for span in spans for e in span})
    patterns = set()
    for lo, hi in zip(cuts, cuts[1:]):
        pattern = tuple((op[0], *(None if r is None else r[0] for r in op[1:4]), repr(op[4]))
                        for op, (a, b) in zip(ops, spans) if a <= lo and hi <= b)
        patterns.add(pattern)
    if len(patterns) != 1 or cuts[0] != 0 or cuts[-1] != count:
        return None
    first = [(op, span) for op, span in zip(ops, spans) if span[0] == 0]
    return [(op[0], *(None if r is None else (r[0], 0, count) for r in op[1:4]), op[4]) for op, _ in first]


def fused_route(runner, t: torch.Tensor, op: str):
    """``(route, OneRound, header row)`` of a one-round all-reduce of ``t`` on ``runner``'s group,
    or None where the call takes the usual two rounds (module docstring).  What depends only on
    the call's shape, dtype, op and memory layout (the route, the program, the header, the dtype check) is
    worked out once per shape; contiguity and the device are checked on every call."""
    if runner.size < 2 or t.device.type != "cpu" or not dense(t):
        return None
    shapes = runner.fused_shapes                 # kept by the runner: its selector, executor and rank
    key = (t.shape, t.dtype, op, layout_bits(t))     # the layout rides in the header: ranks must agree on it
    hit = shapes.get(key)
    if hit is None or hit[0] is not runner.selector or hit[1] is not runner.native:
        if len(shapes) >= 1024:
            shapes.clear()
        hit = shapes[key] = (runner.selector, runner.native, *_one_round(runner, t, op))
    return None if hit[3] is None else hit[2:]


def _one_round(runner, t: torch.Tensor, op: str) -> tuple:
    """``(route, OneRound or None, header row)`` for calls shaped like ``t`` (:func:`fused_route`)."""
    nbytes = t.numel() * t.element_size()
    if (op == "premul_sum" or not 0 < nbytes <= DATA_BYTES_MAX or tensors_ok([t])[0] or reduce_op_ok([t], op)[0]
            or not hasattr(runner.transports("cpu"), "gather_rows")
            or (runner.native is not None and runner.native.takes(t))):
        return None, None, b""
    route = choose(runner.selector, "allreduce", t.numel(), t.element_size(), host=True)
    try:
        program = None if route.ran == NCCL else OneRound(route.schedule, t.numel(), t.dtype, op, runner.rank)
    except ValueError:
        program = None
    row = Header("allreduce", dtype_code(t.dtype), t.numel(), -1, op, shape_digest([t.shape]), (), 0, "cpu",
                 nbytes, layout_bits(t)).row(runner.size)
    return route, program, row


def fused_allreduce(runner, t: torch.Tensor, op: str, chosen) -> None:
    """All-reduce ``t`` in place in one round (module docstring; ``chosen``: :func:`fused_route`'s
    answer); raises on every rank, ``t`` untouched, where the ranks disagree."""
    route, program, row = chosen
    mine = flat(t)                               # a channels_last tensor: its own memory, as NCCL reads it
    data = memoryview(mine.view(torch.uint8).numpy()).cast("B")
    _, extra = agree_with_data(runner.transports("cpu"), row, runner.size, runner.rank, data=data)
    received = [None if more is None else torch.frombuffer(more, dtype=t.dtype) for more in extra]
    runner.last_route, runner.last_label, runner.last_path = route, route.ran, "host"
    program.run(mine, received)


__all__ = ["OneRound", "fused_route", "fused_allreduce"]

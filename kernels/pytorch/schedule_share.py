"""Run one rank's share of a verified schedule on torch tensors, point to point over the group's
transport (:class:`kernels.pytorch.sockets.SocketMesh`; for CUDA tensors the same staged through
host memory, or NCCL send/recv where asked for).

Every process lowers the same schedule (:func:`kernels.program.lowering.lower`, in rank order,
:mod:`synth.ir.sum_order`, unless the op and dtype give the same bits in any order,
:func:`kernels.pytorch.dtypes.order_free`) and keeps the ops that concern it
(:func:`kernels.mpi.transport.rank_plan`, the MPI transport's split): a transfer is a ``send`` on
its source rank and a ``recv`` on its destination rank, tagged with its index in the schedule;
local ops run in place.  Ops run in the lowering's order (every op's dependencies come before
it), sends carry a copy of their source region, receives wait: no circle of waits is possible.
On CPU tensors each send is instead posted as early as its dependencies allow and read in place,
the first op that writes its region waiting for it, where that provably cannot wait in a circle
(:mod:`kernels.pytorch.share_order`); a send of exactly the region a received message is being
reduced into, right after that receive (a ring's next step, a direct all-reduce's all-gather;
also after a local reduce of that region that ends a rank-order sum, run piece by piece with
the receive's, :func:`~kernels.pytorch.share_order.trailing_local`), goes out piece by piece as
each piece is final, overlapping the two steps as gloo's pipelined ring does, where a core is free
to write it (:func:`overlap_pays`).  Reductions are torch operations in the element type, with floating
``avg`` as NCCL's pre-multiplied sum (:class:`kernels.backends.kernel_twins.PreMulSum`).  On CUDA tensors
every operation is enqueued on the current stream (the internal NCCL group orders its sends and receives).
"""

from __future__ import annotations

import os
import threading

import torch

from kernels.backends.kernel_twins import PreMulSum, avg_scalar, binop_for, float_minmax
from kernels.mpi.transport import LOCAL, RECV_COPY, RECV_REDUCE, SEND, rank_plan
from kernels.program.lowering import lower
from kernels.program.ops import SCRATCH
from kernels.program.reduce_op import check_reduce_op
from kernels.pytorch.dtypes import order_free
from kernels.pytorch.share_order import share_order, trailing_local
from synth.ir.schedule import Schedule

#: gloo and NCCL take any non-negative int tag; the MPI transport's bound is kept for its check
_TAG_UB = 2**31 - 1
_PLANS: dict = {}
#: the largest temporary buffer :func:`run_share` keeps for the next call (bytes)
KEEP_BYTES = 32 << 20
#: the most ranks a group may have for its sends to be streamed (:func:`overlap_pays`);
#: None: the cores this process may run on
STREAM_MAX_RANKS: int | None = None


def _rank_plan(schedule: Schedule, count: int, np_dtype, inplace: bool, op: str, rank: int):
    return _planned(schedule, count, np_dtype, inplace, op, rank)[1:3]


def _planned(schedule: Schedule, count: int, np_dtype, inplace: bool, op: str, rank: int):
    """``(schedule, program, rank plan, CPU order)``, made once per call shape; the CPU order is
    :func:`kernels.pytorch.share_order.share_order`'s ``(items, waits)`` for this rank (None:
    the plan's own items, each send from a copy), made on first use (:func:`_cpu_order`)."""
    key = (id(schedule), count, np_dtype.str, inplace, op, rank)
    hit = _PLANS.get(key)
    if hit is None or hit[0] is not schedule:
        prog = lower(schedule, count, np_dtype, inplace=inplace, op=op, rank_order=not order_free(np_dtype, op))
        hit = [schedule, prog, rank_plan(schedule, prog, rank, _TAG_UB), _UNSET]
        if len(_PLANS) > 256:
            _PLANS.clear()
        _PLANS[key] = hit
    return hit


_UNSET = object()


def _cpu_order(hit: list, inplace: bool, rank: int):
    """This rank's ``(items, waits)`` of :func:`~kernels.pytorch.share_order.share_order` for the
    call shape ``hit`` (:func:`_planned`), or None; worked out once, from every rank's plan."""
    if hit[3] is _UNSET:
        schedule, prog = hit[0], hit[1]
        plans = [hit[2] if r == rank else rank_plan(schedule, prog, r, _TAG_UB) for r in range(schedule.ranks)]

        def key_of(r):
            names = prog.bindings[r]
            return lambda buf: ("user" if inplace else names[buf]) if buf in names else buf
        both = share_order(plans, [key_of(r) for r in range(schedule.ranks)])
        hit[3] = None if both is None else both[rank]
    return hit[3]


def combine(dst: torch.Tensor, a: torch.Tensor, b: torch.Tensor, binop) -> None:
    """``dst = a (binop) b`` in the element type (``dst`` may alias ``a``); ``binop`` is an op
    name (sum/prod/max/min; max / min drop NaN as NCCL does, :func:`_minmax`) or a :class:`PreMulSum`.
    A checked op (:func:`~kernels.backends.kernel_twins.binop_for` of :func:`run_share`'s checked op) is taken
    as it is; a plain name is checked here.

    >>> d = torch.zeros(2, dtype=torch.float16); x = torch.tensor([60000.0, 2.0], dtype=torch.float16)
    >>> combine(d, x, x, PreMulSum(4, True, True)); d.tolist()
    [30000.0, 1.0]
    """
    if isinstance(binop, PreMulSum):
        s = float(avg_scalar(_np_of(dst.dtype), binop.n))
        torch.add(a * s if binop.scale_a else a, b * s if binop.scale_b else b, out=dst)
    elif check_reduce_op(binop) in ("sum", "avg"):       # a checked op as it is; avg without a scale: its sum
        torch.add(a, b, out=dst)
    elif binop == "prod":
        torch.mul(a, b, out=dst)
    else:                                   # max, min: REDUCE_OPS has no other (a test ties them)
        _minmax(dst, a, b, binop == "max")


def _minmax(dst: torch.Tensor, a: torch.Tensor, b: torch.Tensor, want_max: bool) -> None:
    """max / min by the one rule of every executor (:func:`kernels.backends.kernel_twins.float_minmax`:
    NaN dropped as NCCL's ``fmaxf`` / ``__hmax``, +0 above -0, a NaN of both operands one fixed NaN, so
    any operand order gives the same bits; no host sync on CUDA tensors); integers as torch.maximum."""
    if dst.dtype.is_floating_point:
        dst.copy_(float_minmax(torch, a, b, want_max))
    else:
        (torch.maximum if want_max else torch.minimum)(a, b, out=dst)


def postdiv(x: torch.Tensor, n: int) -> None:
    """avg's final division in place: ``x / n`` for floats, truncation toward zero for integers
    (NCCL's ``FuncSumPostDiv``, :func:`kernels.backends.kernel_twins.postdiv_host`).

    >>> v = torch.tensor([7, -7, 6]); postdiv(v, 2); v.tolist()
    [3, -3, 3]
    """
    if x.dtype.is_floating_point:
        x.div_(n)
    else:
        x.copy_(torch.div(x, n, rounding_mode="trunc"))


def _np_of(dtype: torch.dtype):
    from kernels.pytorch.dtypes import numpy_dtype
    return numpy_dtype(dtype)


class GroupTransport:
    """Point-to-point messages over an internal torch process group (``send``/``recv`` of
    ``torch.distributed.ProcessGroup``); ``timeout`` bounds every wait, so a dead peer ends the
    call with the group's error instead of a hang."""

    def __init__(self, group) -> None:
        self.group = group
        self.sends: list = []

    def isend(self, tensor: torch.Tensor, peer: int, tag: int):
        """Post a send of ``tensor`` (not to be written until the returned work's ``wait()``)."""
        work = self.group.send([tensor], peer, tag)
        self.sends.append((work, tensor))
        return work

    def recv(self, tensor: torch.Tensor, peer: int, tag: int) -> None:
        self.group.recv([tensor], peer, tag).wait()

    def stream(self, tensor: torch.Tensor, peer: int, tag: int):
        """Post a send of ``tensor`` whose bytes go as they are fed (``feed(start, stop)``,
        elements), where the group can (:meth:`~kernels.pytorch.sockets.SocketMesh.send_stream`);
        else None."""
        start = getattr(self.group, "send_stream", None)
        if start is None or tensor.device.type != "cpu" or not tensor.numel():
            return None
        work = start(tensor, peer, tag)
        self.sends.append((work, tensor))
        return work

    def recv_reduce(self, tensor: torch.Tensor, peer: int, tag: int, reduce) -> None:
        """Receive into ``tensor`` and call ``reduce(start, stop)`` on element ranges of it: as
        pieces arrive where the group has :meth:`~kernels.pytorch.sockets.SocketMesh.recv_pieces`
        (CPU tensors), else once over the whole message."""
        pieces = getattr(self.group, "recv_pieces", None)
        if pieces is None or tensor.device.type != "cpu":
            self.recv(tensor, peer, tag)
            reduce(0, tensor.numel())
        else:
            pieces(tensor, peer, tag, reduce)

    def finish(self) -> None:
        sends, self.sends = self.sends, []
        for work, _ in sends:
            work.wait()


class HostStagedGroup:
    """Point to point for CUDA tensors through host memory over a gloo group: a send copies its
    region to the host (on the current stream, waited for), a receive lands in host memory and is
    copied to the device on the current stream.  Used where ranks share a GPU (NCCL refuses two
    ranks on one device) or NCCL is missing."""

    def __init__(self, gloo) -> None:
        self.gloo = gloo

    def send(self, tensors, peer: int, tag: int):
        host = tensors[0].to("cpu")
        return _Staged(self.gloo.send([host], peer, tag), host, None)

    def recv(self, tensors, peer: int, tag: int):
        host = torch.empty(tensors[0].shape, dtype=tensors[0].dtype, device="cpu")
        return _Staged(self.gloo.recv([host], peer, tag), host, tensors[0])

    def recv_anysource(self, tensors, tag: int):
        host = torch.empty(tensors[0].shape, dtype=tensors[0].dtype, device="cpu")
        return _Staged(self.gloo.recv_anysource([host], tag), host, tensors[0])


class _Staged:
    def __init__(self, work, host, device_dst) -> None:
        self.work, self.host, self.device_dst = work, host, device_dst

    def wait(self):
        self.work.wait()
        if self.device_dst is not None:
            self.device_dst.copy_(self.host)
        return True

    def _source_rank(self) -> int:
        return self.work._source_rank()


def run_share(schedule: Schedule, send: torch.Tensor | None, recv: torch.Tensor | None, count: int, *,
              op: str, rank: int, transport: GroupTransport) -> None:
    """Run this rank's share of ``schedule`` on flat contiguous ``send`` / ``recv`` tensors
    (layout of :mod:`synth.ir.collectives`; blocks of ``count`` elements; ``send is recv`` is
    NCCL's in-place layout where the collective has one) — see the module docstring."""
    op = check_reduce_op(op, schedule.collective)      # once per call: the lowering and each piece take it as it is
    ref = send if send is not None else recv
    inplace = send is not None and recv is not None and send.data_ptr() == recv.data_ptr() and send is recv
    hit = _planned(schedule, count, _np_of(ref.dtype), inplace, op, rank)
    prog, plan = hit[1], hit[2]
    order = _cpu_order(hit, inplace, rank) if ref.device.type == "cpu" else None
    items, waits = order if order is not None else (plan.items, None)
    user = {"send": send, "recv": recv}
    bufs = {name: user[which] for name, which in prog.bindings[rank].items()}
    temps = _Temps(ref)
    scratch = prog.sizes[rank].get(SCRATCH)
    if scratch:
        bufs[SCRATCH] = temps.take(scratch)

    def view(region):
        return bufs[region.buf][region.start:region.stop]

    n = schedule.ranks
    posted: dict = {}
    streams: list = []
    folded: set = set()                     # local ops run inside a receive's pieces (trailing_local)
    overlap = overlap_pays(n)
    try:
        for i, (kind, o, tag, peer) in enumerate(items):
            for j in waits[i] if waits is not None else ():
                posted.pop(j).wait()            # a send from the region this op writes is done
            if i in posted or i in folded:
                continue                        # streamed (or reduced) behind the reduction before it
            if kind == SEND:
                src = view(o.src) if waits is not None else temps.take(o.src.size).copy_(view(o.src))
                posted[i] = transport.isend(src, peer, tag)
            elif kind == RECV_COPY:
                transport.recv(view(o.dst), peer, tag)
            elif kind == RECV_REDUCE:
                streams, then = [], None        # filled as posted: a failure aborts each one
                if waits is not None and overlap:
                    last = trailing_local(items, waits, i, view)
                    if last is not None:        # its local reduce runs piece by piece too
                        folded.add(last)
                        then = _piecewise(items[last][1], view, op, n)
                    _streams(items, i if last is None else last, view, transport, posted, streams)
                _recv_reduce(transport, temps.take(o.src.size), peer, tag, view(o.dst), view(o.acc),
                             binop_for(o.premul, op, n), streams, then)
            elif kind == LOCAL:
                _local(o, view, op, n)
        transport.finish()
    except BaseException:
        temps.forget()                      # a send may still hold one: none is used again
        for s in streams:
            s.abort()
        transport.finish()
        raise


def overlap_pays(ranks: int) -> bool:
    """Whether a send is streamed behind the reduction it waits for (:func:`_streams`): where
    this process may use as many cores as the group has ranks (:data:`STREAM_MAX_RANKS`, else
    the cores it may run on).  The pair's thread then writes on a core of its own while this one
    reduces; with fewer cores the pieces only add thread wake-ups (4 processes on 2 cores:
    0.5-1.4 ms more CPU per 16 MiB call, ``results/pytorch/report.md``)."""
    if STREAM_MAX_RANKS is not None:
        return ranks <= STREAM_MAX_RANKS
    cores = getattr(os, "sched_getaffinity", None)
    limit = len(cores(0)) if cores is not None else (os.cpu_count() or 1)
    return ranks <= limit


def _streams(items: list, i: int, view, transport, posted: dict, out: list) -> None:
    """Post, as streams fed behind item ``i``'s reduction, the sends right after it in ``items``
    that send exactly the region it writes (in the CPU order a send comes right after the op
    it depends on, and after every earlier send, :mod:`kernels.pytorch.share_order`: posting
    it while that op runs keeps each pair's messages in order); recorded in ``posted`` and
    appended to ``out``."""
    dst = view(items[i][1].dst)
    for j in range(i + 1, len(items)):
        kind, o, tag, peer = items[j]
        src = view(o.src) if kind == SEND else None
        if src is None or src.data_ptr() != dst.data_ptr() or src.numel() != dst.numel():
            break
        s = transport.stream(src, peer, tag) if hasattr(transport, "stream") else None
        if s is None:
            break
        posted[j] = s
        out.append(s)


def _piecewise(o, view, op: str, n: int):
    """``o`` (a local reduce, :func:`~kernels.pytorch.share_order.trailing_local`) as
    ``f(start, stop)`` on an element range."""
    dst, acc, src, binop = view(o.dst), view(o.acc), view(o.src), binop_for(o.premul, op, n)
    return lambda a, z: combine(dst[a:z], acc[a:z], src[a:z], binop)


class _Temps:
    """Temporary buffers of one :func:`run_share` call (scratch, the copies its sends carry, its
    receives before they are reduced), like ``ref``.  On the CPU, the buffers of a thread's last
    call are kept (up to :data:`KEEP_BYTES` each) and handed out again in the same order:
    repeated calls of one shape allocate nothing, where a fresh large buffer costs an ``mmap``
    and a page fault per page on first touch.  Every send is waited for before the call
    returns, so the next call may reuse its buffer; after an error none is reused."""

    _kept = threading.local()

    def __init__(self, ref: torch.Tensor) -> None:
        self.ref, self.taken = ref, 0
        self.pool = getattr(self._kept, "pool", None) if ref.device.type == "cpu" else None
        if self.pool is None and ref.device.type == "cpu":
            self.pool = self._kept.pool = []

    def take(self, numel: int) -> torch.Tensor:
        ref = self.ref
        if self.pool is None or numel * ref.element_size() > KEEP_BYTES:
            return torch.empty(numel, dtype=ref.dtype, device=ref.device)
        k, self.taken = self.taken, self.taken + 1
        if k < len(self.pool) and self.pool[k].numel() == numel and self.pool[k].dtype == ref.dtype:
            return self.pool[k]
        t = torch.empty(numel, dtype=ref.dtype)
        self.pool[k:k + 1] = [t]
        return t

    def forget(self) -> None:
        if self.pool is not None:
            self._kept.pool = None


def _recv_reduce(transport, tmp: torch.Tensor, peer: int, tag: int, dst, acc, binop, streams=(),
                 then=None) -> None:
    """``dst = acc (binop) message``, the message received into ``tmp``; element by element the
    same operation whether the transport hands it over whole or in pieces; each piece of ``dst``
    is then reduced by ``then(start, stop)`` where given (:func:`_piecewise`) and fed to
    ``streams`` (sends of ``dst``, :func:`_streams`)."""
    def piece(a: int, z: int) -> None:
        combine(dst[a:z], acc[a:z], tmp[a:z], binop)
        if then is not None:
            then(a, z)
        for s in streams:
            s.feed(a, z)
    if not hasattr(transport, "recv_reduce"):
        transport.recv(tmp, peer, tag)
        piece(0, tmp.numel())
        return
    transport.recv_reduce(tmp, peer, tag, piece)


def _local(o, view, op: str, n: int) -> None:
    if o.kind == "copy":
        view(o.dst).copy_(view(o.src))
    elif o.kind == "reduce":
        combine(view(o.dst), view(o.acc), view(o.src), binop_for(o.premul, op, n))
    else:                                   # scale: integer avg's division
        postdiv(view(o.dst), n)


def rank_ops(schedule: Schedule, count: int, dtype: torch.dtype, op: str, rank: int, inplace: bool = True):
    """``(program, rank plan)`` of ``schedule`` on blocks of ``count`` elements of ``dtype`` for
    ``rank`` (:func:`kernels.mpi.transport.rank_plan`; made once per call shape)."""
    op = check_reduce_op(op, schedule.collective)
    return _rank_plan(schedule, count, _np_of(dtype), inplace, op, rank)


__all__ = ["GroupTransport", "HostStagedGroup", "run_share", "rank_ops", "combine", "postdiv"]

"""A small all-reduce in one round: the call's data rides in the same message as its per-call
header, and the ranks check the headers before anything is written to the caller's tensor.

Where the plan's schedule for the call is one step (the one-shot all-reduce the cost model and
the plans pick for small messages: every rank sends its whole buffer to every peer and reduces
what it receives), the per-call agreement (:mod:`kernels.pytorch.agreement`) and the schedule's
messages are the same round trip: each rank sends its header followed by its tensor's bytes
(:func:`kernels.pytorch.agreement.agree_with_data`), receives every peer's header and bytes into
private buffers, compares the headers (the same one-line error on every rank where a rank failed
its local checks or the ranks disagree, the caller's tensor untouched), and only then runs the
schedule's receives and reductions on the received bytes
(:func:`kernels.pytorch.schedule_share.run_share` with ``received``).  One message per peer per
call instead of two; the reductions are the schedule's own, in its order.

Taken only where every condition holds on this rank: the group's transport is a
:class:`~kernels.pytorch.sockets.SocketMesh`, the tensor is on the CPU, passes the local checks
and holds 1 to :data:`~kernels.pytorch.agreement.DATA_BYTES_MAX` bytes, the op is not
``premul_sum``, the group's native executor does not take the tensor (its test backends take CPU
tensors) and the schedule is one step whose messages come from the peers' own buffers.  A
rank that does not take it sends its header alone; the header says how many bytes follow it, and
ranks that disagree on that raise :class:`~kernels.pytorch.errors.CollectiveMismatch` on every
rank like any other disagreement.
"""

from __future__ import annotations

import torch

from kernels.pytorch.agreement import DATA_BYTES_MAX, Header, agree_with_data, shape_digest
from kernels.pytorch.checks import tensors_ok
from kernels.pytorch.dtypes import dtype_code
from kernels.pytorch.plan_choice import choose
from kernels.pytorch.schedule_share import prefetchable, run_share
from synth.plan.selector import NCCL

#: why a CPU call never runs on NCCL (the route's reason)
_CPU = "CPU tensors: NCCL runs on GPUs only"


def fused_route(runner, t: torch.Tensor, op: str):
    """The route of a one-round all-reduce of ``t`` on ``runner``'s group, or None where the call
    takes the usual two rounds (module docstring)."""
    nbytes = t.numel() * t.element_size()
    if (runner.size < 2 or op == "premul_sum" or not 0 < nbytes <= DATA_BYTES_MAX or t.device.type != "cpu"
            or not hasattr(runner.transports("cpu"), "gather_rows") or tensors_ok([t])[0]
            or (runner.native is not None and runner.native.takes(t))):
        return None
    route = choose(runner.selector, "allreduce", t.numel(), t.element_size(), no_nccl=_CPU)
    if route.ran == NCCL or not prefetchable(route.schedule, t.numel(), t.dtype, op, runner.rank):
        return None
    return route


def fused_allreduce(runner, t: torch.Tensor, op: str, route) -> None:
    """All-reduce ``t`` in place in one round (module docstring); raises on every rank, ``t``
    untouched, where the ranks disagree."""
    flat = t.view(-1)
    nbytes = flat.numel() * flat.element_size()
    header = Header("allreduce", dtype_code(t.dtype), t.numel(), -1, op, shape_digest([t.shape]), (), 0, "cpu", nbytes)
    data = memoryview(flat.view(torch.uint8).numpy()).cast("B")
    _, extra = agree_with_data(runner.transports("cpu"), header, runner.size, runner.rank, data=data)
    received = [None if more is None else torch.frombuffer(more, dtype=t.dtype) for more in extra]
    runner.last_route, runner.last_label, runner.last_path = route, route.ran, "host"
    run_share(route.schedule, flat, flat, flat.numel(), op=op, rank=runner.rank, transport=None, received=received)


__all__ = ["fused_route", "fused_allreduce"]

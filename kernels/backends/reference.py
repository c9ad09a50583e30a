"""Reference executor: the ground truth, written to be obviously right rather than fast.

It follows the schedule semantics of :mod:`synth.ir.schedule` literally and shares no code with
the lowering: the state is a dict ``(rank, chunk) -> NumPy array`` (plus the set of ranks
whose contributions a partial holds).  All inputs are copied into the state first, so
in-place aliasing cannot matter; each step builds the new state from the state at its start
(several reduces into one chunk of one rank in a step, and nothing else into it, combine in
:func:`synth.ir.sum_order.reduce_order`: the senders in rank order, the receiver's own value at
its rank's position, so every rank of a one-shot all-reduce gets the same bits); at the end
every post rank's value is written to its output position.  ``avg`` is NCCL's: integers are
summed, then divided by n (truncating toward zero); floating inputs are multiplied by 1/n in
their own type as they are read, then summed (``ncclDevPreMulSum``).

>>> import numpy as np
>>> from synth.ir.schedule import Schedule, Step, Transfer
>>> s = Schedule("allreduce", 2, 1, (Step(1, (Transfer(0, 1, 0, "reduce"), Transfer(1, 0, 1, "reduce"))),
...                                   Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0)))))
>>> send = [np.array([1, 2], np.int32), np.array([10, 20], np.int32)]
>>> recv = [np.zeros(2, np.int32), np.zeros(2, np.int32)]
>>> run_reference(s, send, recv, op="sum")[1]
array([11, 22], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from kernels.backends.kernel_twins import premul_scale, reduce_copy_with
from kernels.program.ops import is_float
from kernels.program.reduce_op import check_reduce_op
from synth.ir.collectives import element_range
from synth.ir.schedule import Schedule
from synth.ir.sum_order import rank_order_groups
from topo_probe.errors import ScheduleInvalid

def _combine(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a (op) b`` in the element type as NCCL computes it (kernel_twins.reduce_copy_with: float8
    in half with saturation, floating max / min dropping a NaN operand)."""
    out = np.empty_like(a)
    reduce_copy_with(np, out, a, b, op)
    return out


def _divide(x: np.ndarray, n: int) -> np.ndarray:
    if x.dtype.kind in "iu":
        q = np.abs(x.astype(np.int64) if x.dtype.kind == "i" else x) // n
        return np.where(x < 0, -q, q).astype(x.dtype)
    return (x / x.dtype.type(n)).astype(x.dtype)


def _sum_in_rank_order(step, ranked: dict, value: dict, new_value: dict, op: str) -> None:
    """Sum each (rank, chunk) of ``ranked`` (:func:`synth.ir.sum_order.rank_order_groups`; its
    reduces checked, not combined, in listed order) from the step's starting ``value``s."""
    for (d, k), terms in ranked.items():
        operands = [value[(d, k) if i is None else (step.transfers[i].src, k)] for i in terms]
        acc = operands[0]
        for x in operands[1:]:
            acc = _combine(op, acc, x)
        new_value[(d, k)] = acc


def run_reference(schedule: Schedule, sendbufs, recvbufs, op: str = "sum"):
    """Run ``schedule`` on NumPy arrays, one per rank (see module docstring); returns ``recvbufs``.

    ``sendbufs[r]`` / ``recvbufs[r]`` follow :mod:`synth.ir.collectives` (None where the
    collective gives rank r no such buffer); ``count`` is taken from the buffer sizes.

    Raises
    ------
    ScheduleInvalid
        A rank sends or reduces a chunk it does not hold, combines a contribution twice, or
        ends without the complete chunk it must hold.
    """
    spec = schedule.spec
    n = spec.ranks
    check_reduce_op(op, spec.name)
    count = None
    for bufs, blocks in ((recvbufs, spec.output_blocks()), (sendbufs, spec.input_blocks())):
        for b in bufs:
            if b is not None and count is None:
                count = np.asarray(b).size // blocks
    chunks = spec.chunks()
    value: dict[tuple[int, int], np.ndarray] = {}
    owners: dict[tuple[int, int], frozenset] = {}
    premul = op == "avg" and spec.combining and is_float(np.asarray(next(b for b in sendbufs if b is not None)).dtype)
    for c in chunks:
        for r in c.pre:
            a, b = element_range(spec, count, spec.input_position(c.id, r))
            v = np.array(np.asarray(sendbufs[r]).reshape(-1)[a:b], copy=True)
            # the element step (one value times 1/n in its type) is the twins', as _combine's a (op) b is:
            # not circular, since the reference checks the schedule (who holds, sends and combines which
            # contribution, in which order), and the twins' arithmetic has its own hand-computed tests
            # (tests/kernels/backends/test_kernel_twins.py)
            value[(r, c.id)] = premul_scale(np, v, n) if premul else v
            owners[(r, c.id)] = frozenset([r])
    name = f"{spec.name}: schedule {schedule.name or spec.name!r}"      # errors name the collective and schedule
    for t, step in enumerate(schedule.steps):
        new_value, new_owners = dict(value), dict(owners)
        ranked = rank_order_groups(step)     # these sum in rank order after the checks below
        for i, tr in enumerate(step.transfers):
            key_src, key_dst = (tr.src, tr.chunk), (tr.dst, tr.chunk)
            if key_src not in value:
                raise ScheduleInvalid(f"{name}: step {t} transfer {i}: rank {tr.src} sends chunk "
                                      f"{tr.chunk} but does not hold it", rule="not-held", step=t,
                                      transfer=i, rank=tr.src, chunk=tr.chunk)
            if tr.op == "copy":
                new_value[key_dst] = value[key_src].copy()
                new_owners[key_dst] = owners[key_src]
                continue
            if key_dst not in new_value:
                raise ScheduleInvalid(f"{name}: step {t} transfer {i}: rank {tr.dst} reduces chunk "
                                      f"{tr.chunk} but holds no partial of it", rule="reduce-into-empty",
                                      step=t, transfer=i, rank=tr.dst, chunk=tr.chunk)
            both = new_owners[key_dst] & owners[key_src]
            if spec.combining and both:
                raise ScheduleInvalid(f"{name}: step {t} transfer {i}: reduce of chunk {tr.chunk} "
                                      f"into rank {tr.dst} counts rank(s) {sorted(both)} twice",
                                      rule="double-count", step=t, transfer=i, rank=tr.dst, chunk=tr.chunk)
            if key_dst not in ranked:
                new_value[key_dst] = _combine(op, new_value[key_dst], value[key_src])
            new_owners[key_dst] = new_owners[key_dst] | owners[key_src]
        _sum_in_rank_order(step, ranked, value, new_value, op)
        value, owners = new_value, new_owners
    for c in chunks:
        for r in c.post:
            if (r, c.id) not in value:
                raise ScheduleInvalid(f"{name}: after the last step: rank {r} does not hold chunk "
                                      f"{c.id} (it is in the chunk's post)", rule="postcondition", rank=r, chunk=c.id)
            if spec.combining and owners[(r, c.id)] != frozenset(c.pre):
                raise ScheduleInvalid(f"{name}: after the last step: rank {r} ends with chunk {c.id} "
                                      f"missing the contribution(s) of rank(s) "
                                      f"{sorted(set(c.pre) - owners[(r, c.id)])}", rule="postcondition",
                                      rank=r, chunk=c.id)
            result = value[(r, c.id)]
            if op == "avg" and spec.combining and not premul:
                result = _divide(result, n)
            a, b = element_range(spec, count, spec.output_position(c.id, r))
            recvbufs[r].reshape(-1)[a:b] = result
    return recvbufs

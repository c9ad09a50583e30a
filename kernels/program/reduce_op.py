"""The reduction ops every executor takes, and the one check of a caller's op.

:data:`REDUCE_OPS` (:mod:`synth.ir.collectives`: ``sum``, ``prod``, ``max``, ``min``, ``avg``, as
NCCL's ``ncclRedOp_t`` without ``premulsum``) is the one list; the executors' own tables (the native
kernel's and the host reduce's op codes, the NumPy twins' ufuncs) hold exactly these keys (a test
ties them).  :func:`check_reduce_op` is the one refusal, in one wording naming the call where the
caller knows it.

>>> check_reduce_op("avg", "all_reduce")
'avg'
>>> check_reduce_op("mean", "all_reduce")
Traceback (most recent call last):
...
topo_probe.errors.InvalidArgument: all_reduce: op must be one of sum, prod, max, min, avg; got 'mean'
"""

from __future__ import annotations

from synth.ir.collectives import REDUCE_OPS
from topo_probe.errors import InvalidArgument


def check_reduce_op(op, what: str = "") -> str:
    """``op`` where it is one of :data:`REDUCE_OPS` (a string); else InvalidArgument in one line,
    ``"{what}: op must be one of sum, prod, max, min, avg; got {op!r}"`` (without ``what``: from
    ``op``)."""
    if isinstance(op, str) and op in REDUCE_OPS:
        return op
    head = f"{what}: op" if what else "op"
    raise InvalidArgument(f"{head} must be one of {', '.join(REDUCE_OPS)}; got {op!r}")


__all__ = ["REDUCE_OPS", "check_reduce_op"]

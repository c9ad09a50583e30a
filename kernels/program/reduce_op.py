"""The reduction ops every executor takes, and the one check of a caller's op.

:data:`REDUCE_OPS` (``sum``, ``prod``, ``max``, ``min``, ``avg``, as NCCL's ``ncclRedOp_t`` without
``premulsum``) is the one list; the executors' own tables (the native kernel's and the host reduce's
op codes, the NumPy twins' ufuncs) hold exactly these keys (a test ties them).
:func:`check_reduce_op` is the one refusal, in one wording naming the call where the caller knows it.
Both live in :mod:`synth.ir.collectives`, where the sweep (which cannot import ``kernels``) checks
its ops too; the executors and communicators take them from here.

>>> check_reduce_op("avg", "all_reduce")
'avg'
>>> check_reduce_op("mean", "all_reduce")
Traceback (most recent call last):
...
topo_probe.errors.InvalidArgument: all_reduce: op must be one of sum, prod, max, min, avg; got 'mean'
"""

from __future__ import annotations

from synth.ir.collectives import REDUCE_OPS, check_reduce_op

__all__ = ["REDUCE_OPS", "check_reduce_op"]

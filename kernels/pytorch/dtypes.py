"""torch dtypes and reduce ops as the rest of topocoll names them: the NumPy dtype a schedule is
lowered for (:func:`kernels.backends.executor.program_for`), the op name of
:mod:`kernels.backends.kernel_twins`, and the small integer codes the per-call agreement sends.

>>> import torch
>>> numpy_dtype(torch.bfloat16).name, dtype_code(torch.uint8), reduce_op_name(torch.distributed.ReduceOp.PRODUCT)
('bfloat16', 7, 'prod')
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch
import torch.distributed as dist

from kernels.pytorch.errors import UnsupportedCall

#: torch dtype -> NumPy dtype (bfloat16 through ml_dtypes); its index + 1 is the dtype's code
_DTYPES = (
    (torch.float32, np.dtype(np.float32)), (torch.float64, np.dtype(np.float64)),
    (torch.float16, np.dtype(np.float16)), (torch.bfloat16, np.dtype(ml_dtypes.bfloat16)),
    (torch.int32, np.dtype(np.int32)), (torch.int64, np.dtype(np.int64)),
    (torch.uint8, np.dtype(np.uint8)), (torch.int8, np.dtype(np.int8)),
    (torch.int16, np.dtype(np.int16)), (torch.bool, np.dtype(np.bool_)),
)
_NP = {t: n for t, n in _DTYPES}
_CODE = {t: k + 1 for k, (t, _) in enumerate(_DTYPES)}
_BY_CODE = {k + 1: t for k, (t, _) in enumerate(_DTYPES)}
#: every torch dtype, by name (the same table on every rank of one torch); index + 1 is its
#: :func:`any_dtype_code` (the checked point-to-point header's dtype word, kernels.pytorch.checked_p2p)
ANY_DTYPES = tuple(sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str))
ANY_DTYPE_CODES = {t: k + 1 for k, t in enumerate(ANY_DTYPES)}

#: torch's RedOpType -> the op name the lowering and kernel twins take (premul_sum runs as sum of
#: inputs scaled by its factor first, in the element type, as NCCL's ncclRedOpCreatePreMulSum)
_OPS = {
    dist.ReduceOp.RedOpType.SUM: "sum", dist.ReduceOp.RedOpType.AVG: "avg",
    dist.ReduceOp.RedOpType.PRODUCT: "prod", dist.ReduceOp.RedOpType.MIN: "min",
    dist.ReduceOp.RedOpType.MAX: "max", dist.ReduceOp.RedOpType.PREMUL_SUM: "premul_sum",
}
OP_CODES = {"sum": 1, "avg": 2, "prod": 3, "min": 4, "max": 5, "premul_sum": 6}


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy dtype a schedule is lowered for; UnsupportedCall for complex and float8 types."""
    try:
        return _NP[dtype]
    except KeyError:
        raise UnsupportedCall(f"dtype {dtype} is not supported by the topocoll backend "
                              f"(supported: {', '.join(str(t) for t, _ in _DTYPES)})") from None


def dtype_code(dtype: torch.dtype) -> int:
    """Small integer naming ``dtype`` in the call header (0: unsupported)."""
    return _CODE.get(dtype, 0)


def dtype_name(dtype: torch.dtype) -> str:
    """A torch dtype's name as error messages give it: ``float32``, not ``torch.float32``."""
    return str(dtype).removeprefix("torch.")


def dtype_from_code(code: int) -> str:
    """The dtype's name for error messages."""
    t = _BY_CODE.get(int(code))
    return dtype_name(t) if t is not None else "unsupported dtype"


def any_dtype_code(dtype: torch.dtype) -> int:
    """``dtype``'s code among every torch dtype (:data:`ANY_DTYPES`, 1-based)."""
    return ANY_DTYPE_CODES[dtype]


def any_dtype_from_code(code: int) -> torch.dtype | None:
    """The torch dtype of :func:`any_dtype_code` ``code``; None for a code no dtype has.

    >>> any_dtype_from_code(any_dtype_code(torch.bfloat16)), any_dtype_from_code(0)
    (torch.bfloat16, None)
    """
    return ANY_DTYPES[code - 1] if 1 <= code <= len(ANY_DTYPES) else None


def reduce_op_name(reduce_op) -> str:
    """``"sum"``, ``"avg"``, ``"prod"``, ``"min"``, ``"max"`` or ``"premul_sum"`` for a torch
    ``ReduceOp`` (object or enum); UnsupportedCall for bitwise ops."""
    kind = getattr(reduce_op, "op", reduce_op)
    try:
        return _OPS[kind]
    except KeyError:
        raise UnsupportedCall(f"reduce op {getattr(kind, 'name', kind)} is not supported by the topocoll backend "
                              f"(supported: sum, avg, product, min, max, premul_sum)") from None


def order_free(np_dtype, op: str) -> bool:
    """Whether ``op`` over ``np_dtype`` (a dtype of :func:`numpy_dtype`) gives the same bits in
    any order of its operands, so a schedule need not sum in rank order (:mod:`synth.ir.sum_order`):
    every op of an integer or bool dtype (wrapping sums and products, integer ``avg``'s sum before
    its division) and max / min of every dtype (NaN dropped, +0 above -0, a NaN of both operands one
    fixed NaN: :func:`kernels.pytorch.schedule_share.combine`).  Floating sum, avg, product and premul_sum
    keep the rank order.

    >>> [order_free(np.dtype(t), op) for t, op in ((np.int64, "sum"), (np.float32, "sum"), (np.uint8, "min"))]
    [True, False, True]
    """
    return np_dtype.kind in "iub" or op in ("max", "min")


def premul_factor(reduce_op) -> float | torch.Tensor:
    """The factor of a ``premul_sum`` op (``dist._make_nccl_premul_sum(factor)``); 1.0 for
    every other op."""
    if reduce_op_name(reduce_op) != "premul_sum":
        return 1.0
    return reduce_op.factor


__all__ = ["numpy_dtype", "dtype_code", "dtype_name", "dtype_from_code", "reduce_op_name", "premul_factor", "OP_CODES",
           "ANY_DTYPES", "ANY_DTYPE_CODES", "any_dtype_code", "any_dtype_from_code",
           "order_free"]

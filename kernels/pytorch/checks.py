"""The local half of a call's checks: what one rank can see of its own tensors before the
ranks compare headers (:mod:`kernels.pytorch.agreement`).  Each check returns
``(failure code, one line)`` with code 0 when the tensors are fine.

>>> import torch
>>> tensors_ok([torch.zeros(4), torch.zeros(2, 4).t()])
(1, 'tensor 1 (shape (4, 2)) is not contiguous')
>>> tensors_ok([torch.zeros(3)], device_type="cpu")
(0, '')
"""

from __future__ import annotations

import torch

from kernels.pytorch.dtypes import dtype_code, dtype_name


def tensors_ok(tensors, device_type: str | None = None, cuda_device: int | None = None) -> tuple[int, str]:
    """Contiguous, on one CPU or CUDA device (``cuda_device``, the caller's current CUDA device
    when the call was made, for CUDA tensors), of one supported dtype."""
    if not tensors:
        return 0, ""
    first = tensors[0]
    for k, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            return 4, f"argument {k} is a {type(t).__name__}, not a tensor"
        if t.device.type not in ("cpu", "cuda") or t.device != first.device or (
                device_type is not None and t.device.type != device_type):
            return 2, f"tensor {k} is on {t.device}, the call's tensors on {device_type or first.device}"
        if t.device.type == "cuda" and cuda_device is not None and t.device.index != cuda_device:
            return 2, f"tensor {k} is on {t.device}, this rank's current CUDA device is cuda:{cuda_device}"
        if not t.is_contiguous():
            return 1, f"tensor {k} (shape {tuple(t.shape)}) is not contiguous"
        if dtype_code(t.dtype) == 0:
            return 3, f"tensor {k} has dtype {t.dtype}, not supported"
        if t.dtype != first.dtype:
            return 5, f"tensor {k} has dtype {t.dtype}, tensor 0 {first.dtype}"
    return 0, ""


def sizes_ok(tensors, numel: int, what: str) -> tuple[int, str]:
    """Every tensor of ``tensors`` holds ``numel`` elements."""
    for k, t in enumerate(tensors):
        if t.numel() != numel:
            return 4, f"{what} {k} has {t.numel()} elements, the call needs {numel}"
    return 0, ""


#: the dtypes torch's NCCL group takes for PREMUL_SUM ("PreMulSum Data type must be half, float, bfloat16 or double")
PREMUL_DTYPES = (torch.float16, torch.float32, torch.bfloat16, torch.float64)


def premul_ok(tensors, op: str) -> tuple[int, str]:
    """A ``premul_sum`` call's tensors are of a floating dtype NCCL's PreMulSum takes.

    >>> premul_ok([torch.zeros(2, dtype=torch.int64)], "premul_sum")[1]
    'PREMUL_SUM takes float16, float32, bfloat16 or float64 tensors, not int64'
    """
    t = tensors[0] if op == "premul_sum" and tensors else None
    if isinstance(t, torch.Tensor) and t.dtype not in PREMUL_DTYPES:
        names = [dtype_name(d) for d in PREMUL_DTYPES]
        return 8, f"PREMUL_SUM takes {', '.join(names[:-1])} or {names[-1]} tensors, not {dtype_name(t.dtype)}"
    return 0, ""


def first_failure(*results) -> tuple[int, str]:
    """The first failing result of several checks, else ``(0, "")``."""
    return next((r for r in results if r[0]), (0, ""))


__all__ = ["tensors_ok", "sizes_ok", "premul_ok", "first_failure", "PREMUL_DTYPES"]

"""The local half of a call's checks: what one rank can see of its own tensors before the
ranks compare headers (:mod:`kernels.pytorch.agreement`).  Each check returns
``(failure code, one line)`` with code 0 when the tensors are fine; :func:`flat` is the flat
view of a tensor the checks passed that every call runs on.

>>> import torch
>>> tensors_ok([torch.zeros(4), torch.zeros(2, 4).t()])
(1, 'tensor 1 (shape (4, 2), strides (1, 4)) is not contiguous in any memory format')
>>> tensors_ok([torch.zeros(2, 3, 2, 2).contiguous(memory_format=torch.channels_last)])
(0, '')
>>> tensors_ok([torch.zeros(3)], device_type="cpu")
(0, '')
"""

from __future__ import annotations

import torch

from kernels.pytorch.dtypes import dtype_code, dtype_name


def tensors_ok(tensors, device_type: str | None = None, cuda_device: int | None = None) -> tuple[int, str]:
    """Contiguous in a memory format (:func:`dense`), all in one (:func:`same_layout`), on one CPU or
    CUDA device (``cuda_device``, the caller's current CUDA device when the call was made, for CUDA
    tensors), of one supported dtype."""
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
        if not dense(t):
            return layouts_ok([t], k)
        if dtype_code(t.dtype) == 0:
            return 3, f"tensor {k} has dtype {t.dtype}, not supported"
        if t.dtype != first.dtype:
            return 5, f"tensor {k} has dtype {t.dtype}, tensor 0 {first.dtype}"
    return same_layout(tensors)


def dense(t) -> bool:
    """``t`` is a strided tensor contiguous in the memory format torch suggests for it (plain,
    ``channels_last``, ``channels_last_3d``): the rule of torch's NCCL group, whose
    ``check_gpu_single_tensor`` raises "Tensors must be contiguous" unless
    ``tensor.is_contiguous(tensor.suggest_memory_format())`` (pytorch/pytorch
    torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, commit cf1380df).  ``suggest_memory_format``
    is not in torch's Python API: it names channels_last (channels_last_3d) for a 4-d (5-d) tensor
    with such strides, so its check is the one below.  Such a tensor's elements fill ``numel``
    consecutive slots of its storage, which NCCL reads and writes as flat bytes.

    >>> dense(torch.zeros(2, 3, 4, 5, 6).contiguous(memory_format=torch.channels_last_3d)), dense(torch.zeros(4)[::2])
    (True, False)
    """
    if t.layout != torch.strided:
        return False
    other = _CHANNELS_LAST.get(t.dim())
    return t.is_contiguous() or (other is not None and t.is_contiguous(memory_format=other))


_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}
#: the memory layouts a call's bytes can be in, bit k for LAYOUTS[k] (the agreement header sends the bits)
LAYOUTS = ("contiguous", "channels_last", "channels_last_3d")
ANY_LAYOUT = (1 << len(LAYOUTS)) - 1
_CONTIGUOUS_BIT = 1 << LAYOUTS.index("contiguous")
#: tensor dim -> the bit of the channels-last layout torch suggests for it
_CHANNELS_LAST_BIT = {4: 1 << LAYOUTS.index("channels_last"), 5: 1 << LAYOUTS.index("channels_last_3d")}


def layout_bits(t) -> int:
    """The layouts a :func:`dense` tensor ``t`` is contiguous in, as bits of :data:`LAYOUTS`: a tensor
    in which two coincide (``is_contiguous()`` and ``is_contiguous(channels_last)`` both true, as for
    shape (2, 3, 1, 1)) has both, one of at most 1 element (no element order) has every layout.

    >>> layout_bits(torch.zeros(2, 3, 2, 2)), layout_bits(torch.zeros(2, 3, 1, 1)), layout_bits(torch.zeros(0, 3))
    (1, 3, 7)
    """
    if t.numel() <= 1:
        return ANY_LAYOUT
    fmt = _CHANNELS_LAST.get(t.dim())
    last = 0 if fmt is None or not t.is_contiguous(memory_format=fmt) else _CHANNELS_LAST_BIT[t.dim()]
    return (_CONTIGUOUS_BIT if t.is_contiguous() else 0) | last


def layout_names(bits: int) -> str:
    """``bits`` of :data:`LAYOUTS` in words: ``layout_names(3) == "contiguous/channels_last"``."""
    return "/".join(name for k, name in enumerate(LAYOUTS) if bits >> k & 1) or "no layout"


def common_layouts(bits) -> int:
    """The layouts in every one of ``bits`` (each bits of :data:`LAYOUTS`; 0: none; :data:`ANY_LAYOUT` of none)."""
    common = ANY_LAYOUT
    for b in bits:
        common &= b
    return common


def odd_layout(bits) -> int | None:
    """The position of the first of ``bits`` (each bits of :data:`LAYOUTS`) that shares no layout
    with every one before it, None where one layout is in all.

    >>> odd_layout([3, 2, 1]), odd_layout([3, 2, 7])
    (2, None)
    """
    common = ANY_LAYOUT
    for k, b in enumerate(bits):
        common &= b
        if not common:
            return k
    return None


def call_layouts(tensors) -> int:
    """The layouts every tensor of ``tensors`` is in (bits of :data:`LAYOUTS`; 0: none)."""
    return common_layouts(layout_bits(t) for t in tensors)


def same_layout(tensors, first: int = 0) -> tuple[int, str]:
    """The :func:`dense` ``tensors`` of one call (numbered from ``first``) share a memory layout:
    a channels_last tensor's bytes gathered into a contiguous one, or reduced with one, would be
    combined in another element order.  NCCL combines the bytes; this backend refuses (docs/pytorch.md).

    >>> same_layout([torch.zeros(2, 3, 2, 2), torch.zeros(2, 3, 2, 2).contiguous(memory_format=torch.channels_last)])
    (9, 'tensor 0 is contiguous, tensor 1 is channels_last: the tensors of one call must share a memory layout')
    """
    seen = [(k, layout_bits(t)) for k, t in enumerate(tensors, first)
            if isinstance(t, torch.Tensor) and dense(t)]    # the others are refused by the other checks
    odd = odd_layout(b for _, b in seen)
    if odd is None:
        return 0, ""
    k, bits = seen[odd]
    j, other = next(((j, b) for j, b in seen[:odd] if not b & bits), seen[0])
    return 9, (f"tensor {j} is {layout_names(other)}, tensor {k} is {layout_names(bits)}: "
               "the tensors of one call must share a memory layout")


def flat(t):
    """A :func:`dense` tensor's elements in storage order: a 1-D view of its own memory (no copy;
    writing it writes ``t``), as NCCL reads a channels_last tensor.

    >>> x = torch.arange(4.0).reshape(1, 2, 2, 1).contiguous(memory_format=torch.channels_last); flat(x).tolist()
    [0.0, 2.0, 1.0, 3.0]
    """
    return t.view(-1) if t.is_contiguous() else t.as_strided((t.numel(),), (1,))


def layouts_ok(tensors, first: int = 0) -> tuple[int, str]:
    """Every tensor of ``tensors`` (numbered from ``first``) is :func:`dense`: transposed,
    strided-slice and overlapping (expanded) tensors are refused, as torch's NCCL group does."""
    for k, t in enumerate(tensors, first):
        if isinstance(t, torch.Tensor) and not dense(t):
            return 1, (f"tensor {k} (shape {tuple(t.shape)}, strides {tuple(t.stride())}) "
                       "is not contiguous in any memory format")
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


def reduce_op_ok(tensors, op: str) -> tuple[int, str]:
    """The call's dtype is one its reduce op takes: PREMUL_SUM's floating dtypes
    (:func:`premul_ok`), and no AVG of bool tensors, which torch's NCCL group refuses ("Cannot
    use ReduceOp.AVG with boolean inputs", ``getNcclReduceOp`` in pytorch/pytorch
    ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``) and gloo too (torch 2.13: "result type
    Float can't be cast to the desired output type Bool"); run, it gave all False.

    >>> reduce_op_ok([torch.ones(2, dtype=torch.bool)], "avg")[1]
    'AVG does not take bool tensors (the mean of booleans is not a boolean)'
    """
    t = tensors[0] if op == "avg" and tensors else None
    if isinstance(t, torch.Tensor) and t.dtype == torch.bool:
        return 10, "AVG does not take bool tensors (the mean of booleans is not a boolean)"
    return premul_ok(tensors, op)


def first_failure(*results) -> tuple[int, str]:
    """The first failing result of several checks, else ``(0, "")``."""
    return next((r for r in results if r[0]), (0, ""))


__all__ = ["tensors_ok", "dense", "flat", "layouts_ok", "layout_bits", "layout_names", "common_layouts", "call_layouts",
           "odd_layout", "same_layout", "LAYOUTS", "ANY_LAYOUT", "sizes_ok", "premul_ok", "reduce_op_ok",
           "first_failure", "PREMUL_DTYPES"]

"""Non-contiguous tensors (transposed, ``channels_last``, strided slices) in a ``topocoll`` call:
torch's gloo takes them, and the schedules run on flat contiguous buffers, so a call runs on
contiguous copies and writes them back into the caller's tensors afterwards, strides kept.

>>> import torch
>>> x = torch.zeros(2, 3).t(); (ys,), staged = dense_copies([x]); ys[0].is_contiguous(), staged[0][0] is x
(True, True)
"""

from __future__ import annotations

import torch


def dense_copies(*lists):
    """``lists`` (of tensors or lists of them), each non-contiguous strided tensor replaced by a
    contiguous copy, and the (tensor, copy) pairs to write back after the call."""
    staged = []

    def dense(t):
        if isinstance(t, list):
            return [dense(u) for u in t]
        if isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_contiguous():
            copy = t.contiguous()
            staged.append((t, copy))
            return copy
        return t
    return [dense(list(ts)) for ts in lists], staged


def then_write_back(fn, staged):
    """``fn`` followed by copying each contiguous stand-in back into the caller's tensor."""
    def call():
        fn()
        for tensor, copy in staged:
            tensor.copy_(copy)
    return call


__all__ = ["dense_copies", "then_write_back"]

"""kernels/pytorch/fused.py ``_merge_copy_heads``: a copy that starts a rank-order sum merges into
its first reduce by the host's rule (kernels.backends.host_reduce.copy_head_merges), so only where
no source overlaps the destination; the merged ops give what the ops one by one give (a hand
interpreter over NumPy, and a hand-computed case)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")


def _run(ops, bufs):
    """One op at a time: copy ``dst <- src``, reduce ``dst <- acc + src`` (operands read first)."""
    def view(r):
        return bufs[r[0]][r[1]:r[2]]
    for verb, dst, acc, src, _ in ops:
        view(dst)[:] = view(src) if verb == "copy" else view(acc) + view(src)
    return bufs


@pytest.mark.parametrize("reduce_src, merges", [((1, 0, 2), True), (("user", 1, 3), False),
                                                (("user", 2, 4), True), (("scratch", 0, 2), True)])
def test_a_copy_head_merges_only_where_no_source_overlaps_the_destination(reduce_src, merges):
    from kernels.pytorch.fused import _merge_copy_heads
    dst, peer = ("user", 0, 2), (0, 0, 2)
    ops = [("copy", dst, None, peer, "add"), ("reduce", dst, dst, reduce_src, "add")]
    merged = _merge_copy_heads(list(ops))
    assert merged == ([("reduce", dst, peer, reduce_src, "add")] if merges else ops)
    fresh = {"user": np.arange(1.0, 7.0), 0: np.array([10.0, 20.0]), 1: np.array([5.0, 7.0]), "scratch": np.ones(2)}
    want = _run(ops, {k: v.copy() for k, v in fresh.items()})
    got = _run(merged, {k: v.copy() for k, v in fresh.items()})
    assert all(np.array_equal(want[k], got[k]) for k in fresh)
    if reduce_src == ("user", 1, 3):                   # x[0:2] = [10, 20], then + x[1:3] = [20, 3]
        assert want["user"][:2].tolist() == [30.0, 23.0]
    own = [("copy", dst, None, ("user", 1, 3), "add"), ops[1]]
    assert _merge_copy_heads(list(own)) == own


def test_other_ops_stay_as_they_are():
    from kernels.pytorch.fused import _merge_copy_heads
    ops = [("reduce", ("user", 0, 2), ("user", 0, 2), (1, 0, 2), "add"), ("copy", ("user", 2, 4), None, (1, 2, 4), "add"),
           ("reduce", ("user", 0, 2), ("user", 0, 2), (0, 0, 2), "add"), ("scale", ("user", 0, 4), None, None, "add")]
    assert _merge_copy_heads(list(ops)) == ops

"""The per-call agreement (kernels/pytorch/agreement.py) and local checks (checks.py), without
processes: headers of disagreeing ranks give one message naming the field and the ranks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from kernels.pytorch.agreement import Header, compare, splits_of  # noqa: E402
from kernels.pytorch.checks import tensors_ok  # noqa: E402
from kernels.pytorch.dtypes import dtype_code, numpy_dtype, reduce_op_name  # noqa: E402
from kernels.pytorch.errors import BadTensor, CollectiveMismatch, UnsupportedCall  # noqa: E402


def rows(*headers, n=None):
    n = n or len(headers)
    return [h.encode(n) for h in headers]


@pytest.mark.parametrize("field,kw,text", [
    ("dtype", {"dtype_code": 2}, "dtype: rank 0 has float32, rank 2 has float64"),
    ("count", {"count": 5}, "elements per block: rank 0 has 8, rank 2 has 5"),
    ("root", {"root": 1}, "root: rank 0 has 0, rank 2 has 1"),
    ("op", {"op": "max"}, "reduce op: rank 0 has sum, rank 2 has max"),
    ("collective", {"collective": "broadcast"}, "collective: rank 0 has reduce, rank 2 has broadcast"),
])
def test_a_disagreeing_rank_is_named_with_the_field(field, kw, text):
    base = dict(collective="reduce", dtype_code=1, count=8, root=0, op="sum")
    hs = [Header(**base), Header(**base), Header(**{**base, **kw})]
    with pytest.raises(CollectiveMismatch, match=text):
        compare(rows(*hs), [""] * 3, this_rank=1)


def test_a_local_failure_is_raised_on_every_rank_with_the_failing_ranks_note():
    good, bad = Header("allreduce", 1, 4), Header("allreduce", 1, 4, failure=1)
    with pytest.raises(BadTensor, match="rank 1: a tensor is not contiguous"):
        compare(rows(good, bad), ["", ""], this_rank=0)
    with pytest.raises(BadTensor, match="rank 1: tensor 0 .* is not contiguous"):
        compare(rows(good, bad), ["", "tensor 0 (shape (2, 4)) is not contiguous"], this_rank=1)


def test_agreeing_headers_pass_and_all_to_all_splits_come_back():
    h0 = Header("alltoall", 1, 0, splits=(1, 2, 3, 4))
    h1 = Header("alltoall", 1, 0, splits=(3, 4, 2, 4))
    rs = rows(h0, h1)
    compare(rs, ["", ""], this_rank=0)
    assert splits_of(rs) == [[1, 2, 3, 4], [3, 4, 2, 4]]          # sent to, then expected from, each rank


def test_local_checks_name_the_tensor():
    assert tensors_ok([torch.zeros(3), torch.zeros(3, dtype=torch.float64)])[0] == 5
    assert tensors_ok([torch.zeros(3, dtype=torch.complex64)])[0] == 3
    assert tensors_ok([torch.empty(3, device="meta")]) == (2, "tensor 0 is on meta, the call's tensors on meta")
    assert tensors_ok([torch.zeros(3), torch.zeros(4)]) == (0, "")


def test_dtypes_and_ops_map_to_what_the_lowering_takes():
    import torch.distributed as dist
    names = [numpy_dtype(t).name for t in (torch.float16, torch.bfloat16, torch.uint8)]
    assert names == ["float16", "bfloat16", "uint8"]
    assert dtype_code(torch.complex64) == 0
    assert reduce_op_name(dist.ReduceOp.AVG) == "avg"
    assert reduce_op_name(dist._make_nccl_premul_sum(2.0)) == "premul_sum"
    with pytest.raises(UnsupportedCall, match="BXOR"):
        reduce_op_name(dist.ReduceOp.BXOR)
    with pytest.raises(RuntimeError):                     # the class is a RuntimeError too
        numpy_dtype(torch.complex128)


_PART = st.tuples(st.lists(st.integers(0, 4), max_size=3), st.sampled_from(["float32", "float64", "int64"]),
                  st.sampled_from(["as drawn", "4-d", "4-d channels_last"]))


def _parts(spec):
    """(outputs, inputs) from (shape, dtype, layout) per part: the drawn shape, or a 4-d one
    contiguous or channels_last (the same shape in another element order)."""
    outs, ins = [], []
    for shape, dtype, layout in spec:
        t = torch.zeros((2, 3, 1, 2) if layout != "as drawn" else tuple(shape), dtype=getattr(torch, dtype))
        ins.append(t.contiguous(memory_format=torch.channels_last) if layout.endswith("channels_last") else t)
        outs.append(torch.zeros((2 * t.numel(),), dtype=t.dtype))
    return outs, ins


@settings(max_examples=200, deadline=None)
@given(a=st.lists(_PART, min_size=1, max_size=4), b=st.lists(_PART, min_size=1, max_size=4))
def test_a_coalesced_calls_digest_differs_exactly_where_its_parts_do(a, b):
    """Two ranks' coalesced calls agree on the header's shape digest iff they have as many parts,
    each of the same shapes, dtype and element order (strides) (the digest is what lets a bad later
    part raise before the first part moves)."""
    from kernels.pytorch.agreement import shape_digest
    from kernels.pytorch.calls import pairs_digest
    (oa, ia), (ob, ib) = _parts(a), _parts(b)
    same = len(ia) == len(ib) and all(x.shape == y.shape and x.dtype == y.dtype and x.stride() == y.stride()
                                      for x, y in zip(ia + oa, ib + ob))
    assert (shape_digest(pairs_digest(list(zip(oa, ia)))) == shape_digest(pairs_digest(list(zip(ob, ib))))) == same

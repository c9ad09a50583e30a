"""Collective definitions: chunk counts, pre/post, positions agree with each other and NumPy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.ir.collectives import COLLECTIVES, ROOTED, CollectiveSpec, canonical, element_range, piece_bounds
from topo_probe.errors import InvalidArgument, UnsupportedCollective


@given(count=st.integers(0, 200), pieces=st.integers(1, 40))
@settings(derandomize=True, max_examples=200)
def test_piece_bounds_match_numpy_array_split(count, pieces):
    parts = np.array_split(np.arange(count), pieces)
    for k, part in enumerate(parts):
        a, b = piece_bounds(count, pieces, k)
        assert list(range(a, b)) == part.tolist()


@pytest.mark.parametrize("name", COLLECTIVES)
@pytest.mark.parametrize("n,c", [(1, 1), (3, 2), (4, 1)])
def test_every_chunk_has_one_input_home_per_pre_rank_and_output_home_per_post_rank(name, n, c):
    spec = CollectiveSpec(name, n, c, 0 if name in ROOTED else None)
    chunks = spec.chunks()
    assert [ch.id for ch in chunks] == list(range(spec.num_chunks))
    for ch in chunks:
        for r in range(n):
            pos_in = spec.input_position(ch.id, r)
            pos_out = spec.output_position(ch.id, r)
            assert (pos_in is not None) == (r in ch.pre), (ch, r)
            assert (pos_out is not None) == (r in ch.post), (ch, r)
            if pos_in is not None:
                assert 0 <= pos_in.block < spec.input_blocks() and 0 <= pos_in.piece < spec.pieces_per_block
            if pos_out is not None:
                assert 0 <= pos_out.block < spec.output_blocks()
    # output positions of a rank never collide
    for r in range(n):
        outs = [spec.output_position(ch.id, r) for ch in chunks]
        outs = [p for p in outs if p is not None]
        assert len(outs) == len(set(outs))


def test_alltoall_layout_against_numpy_transpose():
    n, c, count = 3, 2, 5
    spec = CollectiveSpec("alltoall", n, c)
    send = [np.arange(n * count) + 100 * r for r in range(n)]
    recv = [np.full(n * count, -1) for _ in range(n)]
    for ch in spec.chunks():
        (s,), (d,) = ch.pre, ch.post
        a, b = element_range(spec, count, spec.input_position(ch.id, s))
        x, y = element_range(spec, count, spec.output_position(ch.id, d))
        recv[d][x:y] = send[s][a:b]
    expect = np.stack([s.reshape(n, count) for s in send]).transpose(1, 0, 2).reshape(n, -1)
    assert np.array_equal(np.stack(recv), expect)


def test_spellings_and_bad_input():
    assert canonical("all_reduce") == "allreduce" and canonical("reduce_scatter") == "reducescatter"
    with pytest.raises(UnsupportedCollective, match="unknown collective 'allsum'"):
        canonical("allsum")
    with pytest.raises(InvalidArgument, match="root must be a rank"):
        CollectiveSpec("broadcast", 4, 1, 4)
    with pytest.raises(InvalidArgument, match="takes no root"):
        CollectiveSpec("allgather", 4, 1, 0)


@pytest.mark.parametrize("value", [np.zeros((12, 12)), list(range(5000)), "all\nreduce" + "x" * 400],
                         ids=["2d-array", "long-list", "string-with-line-break"])
def test_an_unknown_collective_is_refused_in_one_short_line(value):
    """Like the other one-line checks: line breaks become spaces, the line is cut at 300 characters.
    Reference: that rule, and the line's start by hand.  Old: a bare repr (12 lines for a 12x12 array,
    29 000 characters for a 5000-item list)."""
    with pytest.raises(UnsupportedCollective) as info:
        canonical(value)
    line = str(info.value)
    assert "\n" not in line and len(line) <= 300, (line.count("\n"), len(line))
    assert line.startswith(f"unknown collective {' '.join(repr(value).splitlines())[:40]}"), line

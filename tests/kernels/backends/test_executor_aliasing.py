"""Buffers that share memory (kernels.backends.executor.check_buffer_layout, reached through
bind_buffers and the Communicator's prepare): NCCL's one aliasing (a rank's own sendbuf and
recvbuf in the in-place layout) and read-only sharing of send buffers work; anything else
that overlaps, and read-only outputs, raise BufferLayoutError before any byte moves.  The
property test draws random sharing patterns over every collective and checks each call either
refused before any byte changed or gave NumPy's answer."""

import warnings

import numpy as np
import pytest
from _campaign import examples
from _schedules import ALL, check_result, direct, ring
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kernels.backends.executor import check_buffer_layout, run_schedule
from kernels.comm.communicator import Communicator
from kernels.program.ops import has_input, has_output
from synth.ir.collectives import ROOTED, CollectiveSpec
from topo_probe.errors import BufferLayoutError
from topo_probe.machines.generators import fully_connected
from topo_probe.machines.generators import ring as ring_topology

SETTINGS = settings(derandomize=True, deadline=None, database=None, max_examples=6000,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
#: run_schedule's property test: its 1,500 examples cover every line and branch of kernels/ its
#: 6,000 did (coverage, branch mode); the Communicator's keeps 6,000 (its mixed in-place ranks, in
#: kernels/backends/binding.py, first come up near example 3,600)
RUN_SCHEDULE_SETTINGS = settings(SETTINGS, max_examples=examples(1500, 6000))
_COMMS: dict = {}


def _comm(n: int, topo: str) -> Communicator:
    if (n, topo) not in _COMMS:
        t = ring_topology(n) if topo == "ring" else fully_connected(n)
        _COMMS[(n, topo)] = Communicator(n, topology=t, plan=False)
    return _COMMS[(n, topo)]


def _call(c: Communicator, coll: str, ins, outs, count: int, root):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # "no plan for ...: using baseline ..."
        if coll == "allreduce":
            return c.all_reduce(ins, outs)
        if coll == "allgather":
            return c.all_gather(ins, outs, count)
        if coll == "reducescatter":
            return c.reduce_scatter(ins, outs, count)
        if coll == "broadcast":
            return c.broadcast(outs, root)
        if coll == "reduce":
            return c.reduce(ins, outs, root)
        if coll == "gather":
            return c.gather(ins, outs, root)
        if coll == "scatter":
            return c.scatter(ins, outs, root)
        return c.all_to_all(ins, outs)


def _rng_values(a: np.ndarray, rng: np.random.Generator) -> None:
    a[...] = rng.integers(-50, 50, a.size).reshape(a.shape).astype(a.dtype)


def _snapshot(roots):
    return [r.copy() for r in roots]


# ---------------------------------------------------------------------------- the cases
def _four(n=4, size=1000):
    rng = np.random.default_rng(1)
    return [rng.standard_normal(size).astype(np.float32) for _ in range(n)]


def _refused_untouched(call, arrays, match):
    before = _snapshot(arrays)
    with pytest.raises(BufferLayoutError, match=match) as err:
        call()
    assert "\n" not in str(err.value)
    for a, b in zip(arrays, before):
        assert np.array_equal(a, b)


def test_every_rank_given_the_same_output_is_refused():
    c, xs, y = _comm(4, "ring"), _four(), np.zeros(1000, np.float32)
    _refused_untouched(lambda: _call(c, "allreduce", xs, [y] * 4, 1000, None), xs + [y],
                       r"^all_reduce: rank 0's recvbuf overlaps rank 1's recvbuf \(4000 bytes")


def test_an_output_that_is_another_ranks_input_is_refused():
    c, X = _comm(4, "ring"), _four(size=262144)
    y0, e = X[1].copy(), [np.zeros(262144, np.float32) for _ in range(3)]
    _refused_untouched(lambda: _call(c, "allreduce", [X[0], y0, X[2], X[3]], [y0, *e], 262144, None), X + [y0] + e,
                       r"^all_reduce: rank 0's recvbuf overlaps rank 1's sendbuf")


def test_reduce_scatter_with_a_shared_output_is_refused():
    c, xs = _comm(4, "full"), _four(size=400)
    y, e1, e2 = (np.zeros(100, np.float32) for _ in range(3))
    _refused_untouched(lambda: _call(c, "reducescatter", xs, [y, y, e1, e2], 100, None), xs + [y, e1, e2],
                       r"^reduce_scatter: rank 0's recvbuf overlaps rank 1's recvbuf")


def test_a_read_only_output_is_refused_before_other_ranks_are_written():
    c, xs = _comm(4, "ring"), _four()
    xs[2].flags.writeable = False
    _refused_untouched(lambda: _call(c, "allreduce", xs, xs, 1000, None), xs, r"^all_reduce: rank 2's recvbuf is read-only$")


def test_an_overlap_is_refused_even_where_the_communicator_would_copy_the_input():
    """Rank 0's input overlaps its own output (the Communicator copies such an input) and rank 1's
    output overlaps that input only: refused on the caller's arrays, before the copy."""
    pool = np.arange(16, dtype=np.int32)
    ins = [pool[4:8], np.ones(4, np.int32)]
    outs = [pool[5:9], pool[1:5]]
    _refused_untouched(lambda: _call(_comm(2, "full"), "allreduce", ins, outs, 4, None), [pool, ins[1]],
                       r"^all_reduce: rank 0's sendbuf overlaps rank 1's recvbuf \(4 bytes")


def test_run_schedule_refuses_the_same_patterns():
    xs, y = _four(), np.zeros(1000, np.float32)
    _refused_untouched(lambda: run_schedule(ring("allreduce", 4), xs, [y] * 4), xs + [y],
                       r"^allreduce: rank 0's recvbuf overlaps rank 1's recvbuf")
    ys = [np.zeros(1000, np.float32) for _ in range(4)]
    ys[3].flags.writeable = False
    _refused_untouched(lambda: run_schedule(ring("allreduce", 4), xs, ys), xs + ys, r"^allreduce: rank 3's recvbuf")


def test_shared_send_buffers_and_nccl_in_place_views_are_allowed():
    x = np.arange(8, dtype=np.int64)
    ys = [np.zeros(8, np.int64) for _ in range(4)]
    run_schedule(direct("allreduce", 4), [x] * 4, ys)                      # one send array for every rank
    assert all(y.tolist() == (4 * x).tolist() for y in ys)
    big = np.zeros(4 * 4 * 2, np.int64)                                    # outputs side by side in one buffer
    outs = [big[8 * r:8 * (r + 1)] for r in range(4)]
    for r, o in enumerate(outs):
        o[2 * r:2 * r + 2] = [r, 10 * r]
    run_schedule(ring("allgather", 4), [o[2 * r:2 * r + 2] for r, o in enumerate(outs)], outs)
    assert all(o.tolist() == [0, 0, 1, 10, 2, 20, 3, 30] for o in outs)


def test_the_check_sorts_instead_of_comparing_every_pair():
    """1,024 ranks of disjoint slices of one buffer pass; the last two sharing one byte range do not."""
    big = np.zeros(2 * 1024 * 4, np.float32)
    sends = [big[8 * r:8 * r + 4] for r in range(1024)]
    recvs = [big[8 * r + 4:8 * r + 8] for r in range(1024)]
    check_buffer_layout("allreduce", sends, recvs)
    recvs[1023] = recvs[1022][1:3]
    with pytest.raises(BufferLayoutError, match="rank 1022's recvbuf overlaps rank 1023's recvbuf"):
        check_buffer_layout("allreduce", sends, recvs)


# ---------------------------------------------------------------------------- property test
def _layout(data, coll: str, n: int, count: int, root, api: str):
    """Random buffers for each rank: fresh arrays, slices of one shared pool at any offset, the
    same array again, views of earlier buffers, NCCL's in-place views, a read-only output.
    Returns (sends, recvs, roots): None where a rank has no such buffer; roots are the arrays
    every buffer is a view of."""
    spec = CollectiveSpec(coll, n, 1, root)
    kin, kout = spec.input_blocks() * count, spec.output_blocks() * count
    uses_in = [has_input(spec, r) or (api == "comm" and coll == "broadcast") for r in range(n)]
    uses_out = [has_output(spec, r) for r in range(n)]
    hostile = data.draw(st.sampled_from([0.0, 0.1, 0.3, 0.6]), label="hostility")
    inplace = data.draw(st.booleans(), label="in place") if coll != "broadcast" or api != "comm" else True
    pool = np.zeros((2 * n + 2) * max(kin, kout) + 3, np.int32)
    roots, made = [pool], []

    def buffer(size: int, what: str) -> np.ndarray:
        kind = data.draw(st.sampled_from(["pool", "same", "view"]), label=what) if (
            data.draw(st.floats(0, 1), label=f"{what} hostile?") < hostile) else "fresh"
        same = [b for b in made if b.size == size]
        bigger = [b for b in made if b.size >= size]
        if kind == "same" and same:
            return data.draw(st.sampled_from(same), label=f"{what} = earlier")
        if kind == "view" and bigger:
            b = data.draw(st.sampled_from(bigger), label=f"{what} view of")
            o = data.draw(st.integers(0, b.size - size), label=f"{what} offset")
            return b[o:o + size]
        if kind in ("pool", "same", "view"):
            o = data.draw(st.integers(0, pool.size - size), label=f"{what} pool offset")
            return pool[o:o + size]
        roots.append(np.zeros(size, np.int32))
        return roots[-1]

    sends, recvs = [None] * n, [None] * n
    for r in range(n):
        if inplace and uses_in[r] and uses_out[r]:
            if coll in ("allgather", "gather"):
                recvs[r] = buffer(kout, f"recv {r}")
                sends[r] = recvs[r][r * count:(r + 1) * count]
            elif coll in ("reducescatter", "scatter"):
                sends[r] = buffer(kin, f"send {r}")
                recvs[r] = sends[r][r * count:(r + 1) * count]
            else:
                sends[r] = recvs[r] = buffer(kout, f"recv {r}")
        else:
            sends[r] = buffer(kin, f"send {r}") if uses_in[r] else None
            recvs[r] = buffer(kout, f"recv {r}") if uses_out[r] else None
        made.extend(b for b in (sends[r], recvs[r]) if b is not None)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    for a in roots:
        _rng_values(a, rng)
    if data.draw(st.floats(0, 1), label="read-only?") < hostile / 4:
        r = data.draw(st.sampled_from([r for r in range(n) if recvs[r] is not None]), label="read-only rank")
        was, recvs[r] = recvs[r], recvs[r].view()
        recvs[r].flags.writeable = False
        if sends[r] is was:
            sends[r] = recvs[r]
    return sends, recvs, roots


def _must_refuse(sends, recvs) -> bool:
    """Independent of the code under test (np.shares_memory, pairwise): a read-only output, or a
    written buffer (an output, or an input that shares memory with its own output) sharing
    memory with another rank's buffer."""
    if any(d is not None and not d.flags.writeable for d in recvs):
        return True
    mine = [[b for b in (s, d) if b is not None] for s, d in zip(sends, recvs)]
    written = [[d] + ([s] if s is not None and np.shares_memory(s, d) else []) if d is not None else []
               for s, d in zip(sends, recvs)]
    return any(np.shares_memory(w, b) for r, ws in enumerate(written) for w in ws
               for q, bs in enumerate(mine) if q != r for b in bs)


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _nccl_in_place(coll: str, r: int, s, d, count: int) -> bool:
    if coll in ("allgather", "gather"):
        return _addr(s) == _addr(d) + r * count * s.itemsize and s.size == count
    if coll in ("reducescatter", "scatter"):
        return _addr(d) == _addr(s) + r * count * s.itemsize and d.size == count
    return _addr(s) == _addr(d) and s.size == d.size


def _may_refuse(coll: str, sends, recvs, count: int, api: str) -> bool:
    """Whether a refusal is allowed: :func:`_must_refuse`, or (run_schedule only) a rank's own
    buffers overlapping other than as NCCL's in-place layout, or in-place ranks mixed with
    out-of-place ones (the Communicator copies the input in both cases instead)."""
    if _must_refuse(sends, recvs):
        return True
    if api == "comm":
        return False
    both = [(r, s, d) for r, (s, d) in enumerate(zip(sends, recvs)) if s is not None and d is not None]
    shared = {r: np.shares_memory(s, d) for r, s, d in both}
    return len(set(shared.values())) > 1 or any(
        shared[r] and not _nccl_in_place(coll, r, s, d, count) for r, s, d in both)


def _disjoint(sends, recvs) -> bool:
    uniq = list({id(b): b for b in list(sends) + list(recvs) if b is not None}.values())
    return not any(np.shares_memory(a, b) for i, a in enumerate(uniq) for b in uniq[i + 1:])


def _case(data, api: str):
    coll = data.draw(st.sampled_from(ALL), label="collective")
    n = data.draw(st.integers(2, 6), label="ranks")
    count = data.draw(st.integers(1, 3), label="count")
    root = data.draw(st.integers(0, n - 1), label="root") if coll in ROOTED else None
    sends, recvs, roots = _layout(data, coll, n, count, root, api)
    values = [None if s is None else s.copy() for s in sends]
    if api == "comm" and coll == "broadcast":
        values = [values[root] if r == root else None for r in range(n)]
    before = _snapshot(roots)
    refuse, may_refuse = _must_refuse(sends, recvs), _may_refuse(coll, sends, recvs, count, api)
    try:
        if api == "comm":
            _call(_comm(n, data.draw(st.sampled_from(["ring", "full"]), label="topology")), coll, sends, recvs,
                  count, root)
        else:
            sched = ring(coll, n) if coll in ("allgather", "reducescatter", "allreduce") and data.draw(
                st.booleans(), label="ring") else direct(coll, n, 1, root)
            run_schedule(sched, sends, recvs, backend="host")
    except BufferLayoutError:
        event("refused")
        assert may_refuse, "refused buffers that NCCL accepts"
        for a, b in zip(roots, before):
            assert np.array_equal(a, b), "refused after writing"
        return
    event("ran, buffers shared" if not _disjoint(sends, recvs) else "ran, buffers disjoint")
    check_result(coll, n, count, values, recvs, "sum", root, np.int32)
    assert not refuse, "accepted a written buffer shared across ranks, or a read-only output"


@RUN_SCHEDULE_SETTINGS
@given(st.data())
def test_run_schedule_refuses_before_writing_or_matches_numpy(data):
    _case(data, "run_schedule")


@SETTINGS
@given(st.data())
def test_communicator_refuses_before_writing_or_matches_numpy(data):
    _case(data, "comm")

"""kernels.backends.executor.run_schedule: buffer checks, in-place rules, dispatch, and the property
test of the host and reference backends against NumPy over every baseline."""

import numpy as np
import pytest
from _schedules import DTYPES, OPS, alloc_buffers, check_result, direct, draw_schedule, make_inputs, ring, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.backends.device import DeviceLayer
from kernels.backends.executor import program_for, run_schedule
from kernels.backends.kernel_twins import postdiv_host, reduce_copy_host
from topo_probe.errors import BufferLayoutError, DeviceUnavailable, InvalidArgument

SETTINGS = settings(derandomize=True, deadline=None, database=None, max_examples=1000,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(st.data())
def test_host_and_reference_match_numpy(data):
    sched, _ = draw_schedule(data, sources=("baseline", "baseline", "random", "hand"))
    count = data.draw(st.sampled_from([0, 1, 2, 3, 5, 7, 8, 16, 31]), label="count")
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    op = data.draw(st.sampled_from(OPS), label="op")
    inplace = data.draw(st.booleans(), label="inplace")
    run_case(sched, count, dtype, op, inplace, ["reference", "host"], data.draw(st.integers(0, 2**20), label="seed"))


def _bufs(coll, n, count, dtype="float32", root=None, inplace=False):
    sends = make_inputs(coll, n, count, dtype, "sum", root, np.random.default_rng(0))
    return sends, *alloc_buffers(coll, n, count, sends, dtype, root, inplace)


@pytest.mark.parametrize("coll", ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather",
                                  "scatter", "alltoall"])
def test_in_place_each_collective(coll):
    root = 1 if coll in ("broadcast", "reduce", "gather", "scatter") else None
    sends, sb, rb = _bufs(coll, 3, 4, "int64", root, inplace=True)
    run_schedule(direct(coll, 3, 2, root), sb, rb)
    check_result(coll, 3, 4, sends, rb, "sum", root, "int64")


def test_rooted_collectives_accept_none_off_root():
    sends = [np.arange(4.0) + r for r in range(3)]
    recv = [None, np.zeros(12), None]
    run_schedule(direct("gather", 3, 1, root=1), sends, recv)
    assert recv[1].tolist() == np.concatenate(sends).tolist()
    out = [np.zeros(4) for _ in range(3)]
    run_schedule(direct("broadcast", 3, 1, root=2), [None, None, np.arange(4.0)], out)
    assert all(o.tolist() == [0, 1, 2, 3] for o in out)


def test_multidimensional_contiguous_buffers_are_flattened():
    send = [np.arange(6.0).reshape(2, 3) + 10 * r for r in range(2)]
    recv = [np.zeros((2, 3)) for _ in range(2)]
    run_schedule(ring("allreduce", 2), send, recv)
    assert recv[0].tolist() == (send[0] + send[1]).tolist()


@pytest.mark.parametrize("mutate,match", [
    (lambda s, r: (s[:2], r), r"sendbufs: need one entry per rank \(3\), got 2 entries"),
    (lambda s, r: (s, [None] + r[1:]), "rank 0: recvbuf is None but allreduce needs one"),
    (lambda s, r: (s, r[:2] + [r[2].astype(np.float64)]), "rank 2: recvbuf has dtype float64"),
    (lambda s, r: (s, r[:1] + [np.zeros(5, np.float32)] + r[2:]), "rank 1: recvbuf holds 1 block"),
    (lambda s, r: (s, [np.zeros(12, np.float32)[::2]] + r[1:]), "rank 0: recvbuf must be C-contiguous"),
    (lambda s, r: (s, [s[0][1:].copy()] + r[1:]), "rank 0: recvbuf holds 1 block"),
    (lambda s, r: (s, [list(r[0])] + r[1:]), "rank 0: recvbuf must be a numpy.ndarray"),
])
def test_buffer_errors_name_rank_and_rule(mutate, match):
    _, sb, rb = _bufs("allreduce", 3, 6)
    sb, rb = mutate(sb, rb)
    with pytest.raises(BufferLayoutError, match=match):
        run_schedule(ring("allreduce", 3), sb, rb)


def test_overlap_that_is_not_nccl_in_place_is_rejected():
    big = np.zeros(12, np.float32)
    sb = [big[1:5], np.zeros(4, np.float32)]
    rb = [big[0:8], np.zeros(8, np.float32)]
    with pytest.raises(BufferLayoutError, match="rank 0: sendbuf and recvbuf overlap but not as NCCL's in-place "
                                                r"call \(sendbuf must be block 0 of recvbuf\)"):
        run_schedule(ring("allgather", 2), sb, rb)
    _, sb, rb = _bufs("allreduce", 2, 4, inplace=True)
    rb[1] = np.zeros(4, np.float32)
    with pytest.raises(BufferLayoutError, match=r"ranks \[1\]: buffers are out-of-place while other ranks"):
        run_schedule(ring("allreduce", 2), sb, rb)


def test_bad_options():
    _, sb, rb = _bufs("allreduce", 2, 4)
    with pytest.raises(InvalidArgument, match="op must be"):
        run_schedule(ring("allreduce", 2), sb, rb, op="mean")
    with pytest.raises(InvalidArgument, match="backend must be"):
        run_schedule(ring("allreduce", 2), sb, rb, backend="tpu")
    with pytest.raises(InvalidArgument, match="p2p must be"):
        run_schedule(ring("allreduce", 2), sb, rb, p2p="always")


@pytest.mark.parametrize("schedule", ["ring", None])
def test_a_schedule_that_is_not_a_schedule_is_invalid_argument(schedule):
    _, sb, rb = _bufs("allreduce", 2, 4)
    with pytest.raises(InvalidArgument, match=r"^schedule must be a Schedule \(load one with .*\), got "
                       + type(schedule).__name__ + "$"):
        run_schedule(schedule, sb, rb)


def test_cupy_backend_without_gpu_is_device_unavailable():
    pytest.importorskip("numpy")
    try:
        import cupy  # noqa: F401
        if cupy.cuda.is_available():
            pytest.skip("a GPU is present")
    except ImportError:
        pass
    _, sb, rb = _bufs("allreduce", 2, 4)
    with pytest.raises(DeviceUnavailable, match="backend 'cupy'"):
        run_schedule(ring("allreduce", 2), sb, rb, backend="cupy")


class SerialLayer(DeviceLayer):
    """A minimal NumPy layer using the generic op loop; events are (stream, position)."""

    name = "serial"

    def __init__(self):
        self.log = []
        self.pos = {}

    def allocate(self, rank, nelems, dtype):
        return np.empty(nelems, dtype)

    def copy(self, dst, src, stream):
        self.pos[stream] = self.pos.get(stream, 0) + 1
        np.copyto(dst, src)

    def reduce_copy(self, dst, a, b, op, stream):
        self.pos[stream] = self.pos.get(stream, 0) + 1
        reduce_copy_host(dst, a, b, op)

    def scale(self, dst, divisor, stream):
        self.pos[stream] = self.pos.get(stream, 0) + 1
        postdiv_host(dst, divisor)

    def record_event(self, stream):
        self.log.append(("record", stream))
        return (stream, self.pos.get(stream, 0))

    def wait_event(self, stream, event):
        self.log.append(("wait", stream, event[0]))

    def synchronize(self):
        self.log.append(("sync",))


def test_generic_op_loop_waits_only_across_streams():
    layer = SerialLayer()
    run_case(ring("allreduce", 4, 2), 11, "float64", "avg", False, [layer], 3)
    waits = [e for e in layer.log if e[0] == "wait"]
    assert waits and all(w[1] != w[2] for w in waits)
    # ring: a rank reads what its left neighbour wrote (RAW) and overwrites what its right
    # neighbour read (WAR); it never needs to wait for anybody else
    assert {(w[1] - w[2]) % 4 for w in waits} == {1, 3}
    ops = list(program_for(ring("allreduce", 4, 2), 11, "float64", op="avg").ops())
    cross = sum(1 for o in ops for d in o.deps if ops[d].rank != o.rank)
    assert len(waits) <= cross
    assert layer.log[-1] == ("sync",)


def test_program_cache_reuses_lowering():
    s = ring("allgather", 3)
    assert program_for(s, 5, "float32") is program_for(s, 5, np.float32)
    assert program_for(s, 5, "float32") is not program_for(s, 5, "float32", inplace=True)


def test_scratch_that_does_not_fit_in_host_memory_is_refused_before_anything_moves(monkeypatch):
    """A 4-rank ring reduce-scatter keeps two partials per rank in scratch (4 ranks x 2 x 1 Mi
    float32 = 32 MiB); with 16 MiB available the call is one line, outputs untouched."""
    import kernels.backends.executor as ex
    monkeypatch.setattr(ex, "available_host_bytes", lambda: 16 << 20)
    n, count = 4, 1 << 20
    sends = [np.ones(n * count, np.float32) for _ in range(n)]
    recvs = [np.full(count, 7, np.float32) for _ in range(n)]
    with pytest.raises(InvalidArgument, match=r"reducescatter: the schedule's scratch \(1048576 elements per block\) "
                                              r"needs 32.0 MiB of host memory; 16.0 MiB available"):
        run_schedule(ring("reducescatter", n), sends, recvs)
    assert all((r == 7).all() for r in recvs)
    monkeypatch.setattr(ex, "available_host_bytes", lambda: 1 << 40)
    run_schedule(ring("reducescatter", n), sends, recvs)
    assert all((r == 4).all() for r in recvs)


# ---------------------------------------------------------------------- backend and p2p: one check, one wording
class _Counted(tuple):
    """A tuple that counts membership tests: how often the p2p rule ran."""

    asked = 0

    def __contains__(self, item):
        type(self).asked += 1
        return super().__contains__(item)


def _count_p2p_checks(monkeypatch):
    """Count every ``p2p in P2P_MODES`` from here on, wherever the rule reads the modes."""
    import kernels.backends.device as device
    import kernels.backends.executor as executor
    _Counted.asked = 0
    counted = _Counted(("auto", "never"))
    for mod in (device, executor):
        monkeypatch.setattr(mod, "P2P_MODES", counted, raising=False)


@pytest.mark.parametrize("backend", ["host", "reference"])
def test_p2p_is_checked_once_per_communicator_and_once_per_run_schedule_call(monkeypatch, backend):
    """The Communicator checks backend and p2p when it is made, never again per call; run_schedule (no
    state) checks them once per call.  Reference: counts by hand (1 for the Communicator and its 3
    calls, 1 per run_schedule call).  Old: the Communicator's check, then again in executor._layer on
    every call that prepares (host: the third replays its bound launch), and for the reference backend
    a third time in make_layer: 3 (host), 7 (reference); run_schedule 2 per call on the reference."""
    import warnings

    from kernels import Communicator
    _count_p2p_checks(monkeypatch)
    comm = Communicator(4, plan=False, backend=backend)
    xs = [np.full(8, r, np.float32) for r in range(4)]
    ys = [np.empty(8, np.float32) for _ in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            comm.all_reduce(xs, ys)
    assert ys[2].tolist() == [6.0] * 8 and _Counted.asked == 1, _Counted.asked
    _Counted.asked = 0
    _, sb, rb = _bufs("allreduce", 2, 4)
    for calls in (1, 2):
        run_schedule(ring("allreduce", 2), sb, rb, backend=backend)
        assert _Counted.asked == calls, (calls, _Counted.asked)


@pytest.mark.filterwarnings("ignore:Communicator. no plan")
@pytest.mark.parametrize("backend", ["cupy", "cupy-ops"])
def test_p2p_is_checked_once_per_communicator_and_per_run_schedule_call_on_the_gpu_layers(monkeypatch, backend):
    """On the GPU backends too (NativeLayer, CupyLayer, on the fake CUDA runtime of ``tests/_fake_device.py``):
    the Communicator's check when it is made is the only one, the layer it makes at the first call takes that
    checked value as it is; run_schedule checks once per call, its first call making the layer included.
    Reference: counts by hand (1 for the Communicator and its 3 calls; 1 per run_schedule call) and the sums
    by NumPy.  Old: the layer's constructor checked again: 2 for the Communicator, 2 for run_schedule's first
    call.  A layer made directly still refuses a bad p2p in its one line (test below)."""
    from _fake_device import FakeRuntime

    import kernels.backends.cupy_executor as cupy_executor
    import kernels.backends.executor as executor
    from kernels import Communicator
    rt = FakeRuntime(4)
    monkeypatch.setattr(cupy_executor, "CupyRuntime", lambda: rt)
    monkeypatch.setattr(executor, "_LAYERS", {})         # run_schedule's layers: made here, on the fake
    _count_p2p_checks(monkeypatch)
    comm = Communicator(4, plan=False, backend=backend)
    xs = [rt.to_device(r, np.full(8, r, np.float32)) for r in range(4)]
    ys = [rt.alloc(r, 8, np.float32) for r in range(4)]
    for _ in range(3):
        comm.all_reduce(xs, ys)
    rt.synchronize()
    assert rt.to_host(ys[2]).tolist() == [6.0] * 8 and _Counted.asked == 1, _Counted.asked
    _Counted.asked = 0
    rt = FakeRuntime(2)                                   # run_schedule's layer: its own GPUs
    for calls in (1, 2):
        sb = [rt.to_device(r, np.full(4, r + 1, np.float32)) for r in range(2)]
        rb = [rt.alloc(r, 4, np.float32) for r in range(2)]
        run_schedule(ring("allreduce", 2), sb, rb, backend=backend)
        rt.synchronize()
        assert rt.to_host(rb[1]).tolist() == [3.0] * 4
        assert _Counted.asked == calls, (calls, _Counted.asked)
    comm.p2p = "always"                                   # a plain value set later: the layer checks it
    comm._layers.clear()
    with pytest.raises(InvalidArgument) as info:
        comm.all_reduce(xs, ys)
    layer = "NativeLayer" if backend == "cupy" else "CupyLayer"
    assert str(info.value) == f"{layer}: p2p must be one of auto, never, got 'always'"


@pytest.mark.filterwarnings("ignore:Communicator. no plan")
@pytest.mark.parametrize("backend", ["host", "reference"])
def test_the_op_is_checked_once_per_communicator_or_run_schedule_call(monkeypatch, backend):
    """The reduction op is checked once per call, by the call's owner (Communicator.all_reduce, run_schedule):
    the lowering of a new program and the reference run take the op it checked as it is.  Reference: counts
    by hand (Communicator, 3 calls: host 1, its 2nd and 3rd calls replaying the first's bound launch, reference
    3; run_schedule: 1 per call) and the results by NumPy.  Old: the first call's lowering checked it again, and
    the reference run on every call: Communicator 2 (host) / 6 (reference), run_schedule's first call 2."""
    import synth.ir.collectives as collectives
    from kernels import Communicator
    _Counted.asked = 0
    monkeypatch.setattr(collectives, "REDUCE_OPS", _Counted(collectives.REDUCE_OPS))
    monkeypatch.setattr(executor_module(), "_CACHE", type(executor_module()._CACHE)())   # lowered afresh
    comm = Communicator(4, plan=False, backend=backend)
    xs = [np.full(8, r, np.float32) for r in range(4)]
    ys = [np.empty(8, np.float32) for _ in range(4)]
    for _ in range(3):
        comm.all_reduce(xs, ys, op="max")
    assert ys[1].tolist() == [3.0] * 8 and _Counted.asked == {"host": 1, "reference": 3}[backend], _Counted.asked
    _Counted.asked = 0
    for calls in (1, 2):
        _, sb, rb = _bufs("allreduce", 2, 4)
        run_schedule(ring("allreduce", 2), sb, rb, op="prod", backend=backend)
        assert np.array_equal(rb[0], sb[0] * sb[1]) and _Counted.asked == calls, (calls, _Counted.asked)


def test_a_str_enum_op_or_p2p_is_checked_as_its_value():
    """A ``str`` Enum member equal to an allowed value is that value (as NumPy and a plain ``==`` see it), also once
    checked: the checked op is ``'max'``, the checked p2p ``'never'``, not the members' ``str()`` (``Op.MAX``).
    Reference: the plain strings.  Guards the checked-value types against ``str(member)``."""
    import enum

    from kernels.backends.device import check_p2p
    from synth.ir.collectives import check_reduce_op

    class Op(str, enum.Enum):
        MAX = "max"
        NEVER = "never"
    assert check_reduce_op(Op.MAX, "all_reduce") == "max" and str(check_reduce_op(Op.MAX)) == "max"
    assert str(check_p2p(Op.NEVER, "Communicator")) == "never"

class _Liar(str):
    """A hostile ``str``: equal to everything (so ``x in REDUCE_OPS`` is True whatever it holds)."""

    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.sampled_from(["sum", "max", "avg", "auto", "never", "always", "bogus", ""]), st.text(max_size=8)))
def test_a_checked_value_is_one_the_rule_accepts_whatever_the_str_subclass_says(value):
    """The checked-value types (CheckedOp, CheckedP2PMode) are taken later without a second look, so they must
    only ever hold a value the rule accepts: the rule is applied to the value that is marked, not to the
    object's own ``__eq__``.  Reference: plain membership of the plain string in the hand-written lists.
    Old (kern74): a str subclass equal to everything was marked as checked holding 'bogus', which the
    kernels then met as an unknown op (KeyError traceback from BINARY_OP)."""
    from kernels.backends.device import check_p2p
    from synth.ir.collectives import check_reduce_op
    for rule, allowed in ((lambda v: check_reduce_op(v, "all_reduce"), ("sum", "prod", "max", "min", "avg")),
                          (lambda v: check_p2p(v, "Communicator"), ("auto", "never"))):
        if value in allowed:
            assert str.__str__(rule(_Liar(value))) == value
        else:
            with pytest.raises(InvalidArgument):
                rule(_Liar(value))


@pytest.mark.filterwarnings("ignore:Communicator. no plan")
def test_a_hostile_op_is_refused_in_the_calls_one_line_not_a_traceback():
    """Communicator.all_reduce with a str subclass that claims to equal every op: the call's one-line refusal.
    Reference: the line by hand.  Old: KeyError 'bogus' from the host layer's BINARY_OP lookup."""
    from kernels import Communicator
    comm = Communicator(2, plan=False, backend="host")
    xs = [np.ones(4, np.float32) for _ in range(2)]
    with pytest.raises(InvalidArgument) as info:
        comm.all_reduce(xs, [np.empty(4, np.float32) for _ in range(2)], op=_Liar("bogus"))
    assert str(info.value) == "all_reduce: op must be one of sum, prod, max, min, avg; got 'bogus'"


def executor_module():
    import kernels.backends.executor as executor
    return executor


def test_every_owner_refuses_a_bad_p2p_or_backend_in_the_one_wording():
    """One rule, one wording; each surface names its owner: the Communicator when it is made,
    run_schedule's call (its collective), the GPU layers' constructors.  Reference: the hand-written
    lines.  Old: the CuPy layer said "p2p must be 'auto' or 'never', got 'always'", naming no one."""
    from kernels import Communicator
    from kernels.backends.cupy_executor import CupyLayer
    from kernels.native.layer import NativeLayer
    tail = "p2p must be one of auto, never, got 'always'"
    lines = []
    for make in (lambda: Communicator(4, plan=False, p2p="always"), lambda: CupyLayer("always"),
                 lambda: NativeLayer("always"),
                 lambda: run_schedule(ring("allreduce", 2), *_bufs("allreduce", 2, 4)[1:], p2p="always")):
        with pytest.raises(InvalidArgument) as info:
            make()
        lines.append(str(info.value))
    assert lines == [f"{who}: {tail}" for who in ("Communicator", "CupyLayer", "NativeLayer", "allreduce")]
    names = "host, reference, cupy, cupy-ops or a DeviceLayer, got 'gpu'"
    with pytest.raises(InvalidArgument) as info:
        Communicator(4, plan=False, backend="gpu")
    assert str(info.value) == f"Communicator: backend must be one of auto, {names}"
    with pytest.raises(InvalidArgument) as info:
        run_schedule(ring("allreduce", 2), *_bufs("allreduce", 2, 4)[1:], backend="gpu")
    assert str(info.value) == f"allreduce: backend must be one of {names}"


@pytest.mark.parametrize("bad", ["host  ", "ho  st", "never   "])
def test_a_refused_backend_or_p2p_is_named_as_given(bad):
    """The one line names the value as passed (its repr), spaces and all: ``'host  '`` is not ``'host '``.
    Reference: Python's own repr.  Guards the one-line rule against squeezing the value's runs of spaces
    (only line breaks become spaces): that would report ``'host '``, a value the caller never passed."""
    from kernels.backends.device import check_p2p
    from kernels.backends.executor import check_backend
    with pytest.raises(InvalidArgument) as info:
        check_backend(bad, "auto", "Communicator", auto=True)
    assert str(info.value).endswith(f"or a DeviceLayer, got {bad!r}"), str(info.value)
    with pytest.raises(InvalidArgument) as info:
        check_p2p(bad, "CupyLayer")
    assert str(info.value) == f"CupyLayer: p2p must be one of auto, never, got {bad!r}"


@pytest.mark.filterwarnings("ignore:Communicator. no plan")
@pytest.mark.parametrize("bad", ["gpu", 7, ["host"]])
def test_a_backend_set_on_a_communicator_after_it_was_made_is_refused_not_run_as_the_reference(bad):
    """Communicator.backend is a plain attribute: a value set after construction that is not a backend
    name is refused at the call in check_backend's one line, never run silently on the reference backend.
    Reference: the line check_backend gives the same value, by hand.  Old: make_layer returned None (the
    reference backend) for any unknown name, and the call summed on the reference without a word."""
    from kernels import Communicator
    from kernels.backends.executor import make_layer
    comm = Communicator(2, plan=False, backend="host")
    comm.backend = bad
    xs = [np.full(4, r + 1, np.float32) for r in range(2)]
    ys = [np.zeros(4, np.float32) for _ in range(2)]
    names = "host, reference, cupy, cupy-ops or a DeviceLayer"
    with pytest.raises(InvalidArgument) as info:
        comm.all_reduce(xs, ys)
    assert str(info.value) == f"Communicator: backend must be one of {names}, got {bad!r}"
    assert ys[0].tolist() == [0.0] * 4                          # nothing ran
    with pytest.raises(InvalidArgument) as info:
        make_layer(bad)
    assert str(info.value) == f"make_layer: backend must be one of {names}, got {bad!r}"
    with pytest.raises(InvalidArgument, match="got 'auto'"):       # the Communicator resolves auto itself
        make_layer("auto")
    assert make_layer("reference") is None

"""Every refusal of ``run_schedule`` names the collective (issue 37: one line naming collective, rank,
dtype, size), for each raise site on its path: the list lengths, a missing, strided, mistyped or
mis-sized buffer, mixed in-place ranks, a bad in-place alias, read-only or shared memory, a bad op,
backend or p2p, a schedule that does not implement its collective (lowering and the reference).
The reference is the schedule's own collective and the rank / dtype / size the test broke."""

from __future__ import annotations

import numpy as np
import pytest
from _schedules import ring

from kernels.backends.executor import run_schedule
from topo_probe.errors import TopocollError

N = 4
#: collective -> (input elements, output elements) per rank for a block of 3 elements
SIZES = {"allreduce": (3, 3), "allgather": (3, 12), "reducescatter": (12, 3), "alltoall": (12, 12)}


def _bufs(coll, dtype=np.float32):
    i, o = SIZES[coll]
    return [np.ones(i, dtype) for _ in range(N)], [np.zeros(o, dtype) for _ in range(N)]


def _short(coll):
    s, d = _bufs(coll)
    return s[:3], d, {}, "need one entry per rank (4), got 3"


def _none(coll):
    s, d = _bufs(coll)
    return [None] + s[1:], d, {}, "rank 0: sendbuf is None"


def _strided(coll):
    s, d = _bufs(coll)
    return s, d[:3] + [np.zeros(2 * d[3].size, np.float32)[::2]], {}, "rank 3: recvbuf must be C-contiguous"


def _dtype(coll):
    s, d = _bufs(coll)
    return s, d[:2] + [d[2].astype(np.float64)] + d[3:], {}, "rank 2: recvbuf has dtype float64"


def _blocks(coll):
    s, d = _bufs(coll)
    return s, d[:1] + [np.zeros(d[1].size + 1, np.float32)] + d[2:], {}, "rank 1: recvbuf"


def _nctype(coll):
    s, d = _bufs(coll, np.complex64)
    return s, d, {}, "rank 0: sendbuf: dtype complex64 is not an NCCL type"


def _readonly(coll):
    s, d = _bufs(coll)
    d[1].flags.writeable = False
    return s, d, {}, "rank 1's recvbuf is read-only"


def _shared(coll):
    s, d = _bufs(coll)
    return s, d[:3] + [d[0]], {}, "overlaps rank 3's recvbuf"


def _op(coll):
    s, d = _bufs(coll)
    return s, d, {"op": "mean"}, "op must be one of"


def _backend(coll):
    s, d = _bufs(coll)
    return s, d, {"backend": "gpu"}, "backend must be one of"


def _p2p(coll):
    s, d = _bufs(coll)
    return s, d, {"p2p": "always"}, "p2p must be one of"


CASES = [_short, _none, _strided, _dtype, _blocks, _nctype, _readonly, _shared, _op, _backend, _p2p]


@pytest.mark.parametrize("backend", ["host", "reference"])
@pytest.mark.parametrize("case", CASES, ids=[c.__name__.strip("_") for c in CASES])
@pytest.mark.parametrize("coll", sorted(SIZES))
def test_every_refusal_names_the_collective_and_what_was_wrong(coll, case, backend):
    s, d, kw, words = case(coll)
    kw = {"backend": backend, **kw}
    with pytest.raises(TopocollError) as info:
        run_schedule(ring(coll, N), s, d, **kw)
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"{coll}: ") and words in line, line


def test_mixed_in_place_ranks_and_a_bad_alias_name_the_collective():
    bufs = [np.zeros(3, np.float32) for _ in range(N)]
    sends = bufs[:2] + [np.ones(3, np.float32) for _ in range(2)]
    with pytest.raises(TopocollError, match=r"^allreduce: ranks \[2, 3\]: buffers are out-of-place"):
        run_schedule(ring("allreduce", N), sends, bufs)
    outs = [np.zeros(12, np.float32) for _ in range(N)]
    with pytest.raises(TopocollError, match=r"^allgather: rank 1: sendbuf and recvbuf overlap but not as NCCL's"):
        run_schedule(ring("allgather", N), [o[0:3] for o in outs], outs)


def test_a_schedule_that_does_not_implement_its_collective_names_it_on_both_paths():
    """A ring allgather without its last step: the lowering (host) and the reference both name
    the collective and the schedule."""
    import dataclasses
    sched = ring("allgather", N)
    broken = dataclasses.replace(sched, steps=sched.steps[:-1])
    for backend in ("host", "reference"):
        s, d = _bufs("allgather")
        with pytest.raises(TopocollError) as info:
            run_schedule(broken, s, d, backend=backend)
        assert str(info.value).startswith(f"allgather: schedule {sched.name!r}: "), (backend, str(info.value))


def test_a_layers_own_placement_error_is_named_with_the_collective():
    """A device layer refusing a buffer when placing it (the GPU layers: a buffer on another GPU) says
    rank and rule only; run_schedule puts the collective in front, once."""
    from kernels.backends.host import HostLayer
    from topo_probe.errors import BufferLayoutError

    class Refusing(HostLayer):
        def place(self, bufs):
            raise BufferLayoutError("rank 1: recv buffer lives on GPU 3, its rank's device is GPU 1")

    s, d = _bufs("reducescatter")
    with pytest.raises(BufferLayoutError, match=r"^reducescatter: rank 1: recv buffer lives on GPU 3, its rank's "
                                                r"device is GPU 1$"):
        run_schedule(ring("reducescatter", N), s, d, backend=Refusing())


# ---------------------------------------------------------------------- the Communicator's surface
#: method -> (canonical collective, input elements, output elements per rank for a block of 3, root)
METHODS = {"all_reduce": ("allreduce", 3, 3, None), "all_gather": ("allgather", 3, 12, None),
           "reduce_scatter": ("reducescatter", 12, 3, None), "all_to_all": ("alltoall", 12, 12, None),
           "broadcast": ("broadcast", 3, 3, 0), "reduce": ("reduce", 3, 3, 0), "gather": ("gather", 3, 12, 0),
           "scatter": ("scatter", 12, 3, 0)}


class _RefusingLayer:
    """The host layer refusing every placement the way a GPU layer refuses a buffer on another GPU
    (rank and rule, no call)."""

    def __new__(cls):
        from kernels.backends.host import HostLayer
        from topo_probe.errors import BufferLayoutError

        class Refusing(HostLayer):
            def place(self, bufs):
                raise BufferLayoutError("rank 1: recv buffer lives on GPU 3, its rank's device is GPU 1")
        return Refusing()


def _method_call(method, kind):
    """One call of ``method`` broken as ``kind`` says: the Communicator, the bound call and its args."""
    from kernels import Communicator
    _, i, o, root = METHODS[method]
    ins = [np.ones(i, np.float32) for _ in range(N)]
    outs = ins if method == "broadcast" else [np.zeros(o, np.float32) for _ in range(N)]
    backend, kw = ("auto", {}) if kind != "layer" else (_RefusingLayer(), {})
    if kind == "short":
        ins = ins[:3]
    elif kind == "dtype":        # rank 0: the root, whose output every method writes
        outs[0] = outs[0].astype(np.float64)
    elif kind == "readonly":
        outs[0].flags.writeable = False
    elif kind == "op":
        kw["op"] = "mean"
    if root is not None:
        kw["root"] = root
    comm = Communicator(N, plan=False, backend=backend)
    args = (ins,) if method == "broadcast" else (ins, outs)
    return lambda: getattr(comm, method)(*args, **kw)


KINDS = ["layer", "short", "dtype", "readonly", "op"]


@pytest.mark.filterwarnings("ignore:Communicator. no plan")       # no plan: the baselines run, said once
@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_refusal_of_one_communicator_call_names_it_once_as_the_method(method):
    """Issue 37: one spelling per surface.  On the Communicator every refusal of a call, from the argument
    checks to the layer placing the buffers (inside prepare_call), starts with the method's name as its
    user typed it (``all_reduce: ``), once, never the schedule's collective (``allreduce: ``; old: the
    layer's refusal read ``allreduce: rank 1: ...`` while the argument checks read ``all_reduce: ...``)."""
    canon = METHODS[method][0]
    lines = {}
    for kind in KINDS:
        if kind == "op" and method not in ("all_reduce", "reduce_scatter", "reduce"):
            continue
        with pytest.raises(TopocollError) as info:
            _method_call(method, kind)()
        lines[kind] = str(info.value)
    for kind, line in lines.items():
        assert "\n" not in line and line.startswith(f"{method}: "), (kind, line)
        assert line.count(f"{method}: ") == 1 and (canon == method or f"{canon}: " not in line), (kind, line)
    assert lines["layer"] == f"{method}: rank 1: recv buffer lives on GPU 3, its rank's device is GPU 1"


@pytest.mark.parametrize("backend,p2p,words", [("gpu", "auto", "backend must be one of auto, host"),
                                               (object(), "auto", "backend must be one of auto, host"),
                                               ("host", "always", "p2p must be one of auto, never")])
def test_a_bad_backend_or_p2p_is_refused_when_the_communicator_is_made(backend, p2p, words):
    """Old: a bad backend string was refused at the first call in a line naming no call at all."""
    from kernels import Communicator
    with pytest.raises(TopocollError) as info:
        Communicator(N, plan=False, backend=backend, p2p=p2p)
    assert str(info.value).startswith(f"Communicator: {words}"), str(info.value)


# ---------------------------------------------------------------------- the MPICommunicator's surface
def _f_order(shape=(3, 3)):
    return np.zeros(shape, np.float32, order="F")


@pytest.mark.parametrize("method,call", [
    ("all_reduce", lambda c: c.all_reduce(np.ones((3, 3), np.float32), _f_order())),
    ("all_gather", lambda c: c.all_gather(np.ones(9, np.float32), _f_order())),
    ("reduce_scatter", lambda c: (lambda a: c.reduce_scatter(a, a))(_f_order())),
])
def test_an_mpi_refusal_that_names_the_method_names_it_once(method, call):
    """The MPI agreement puts ``<method>: rank <r>: `` in front of a refusal naming no rank; a refusal
    that already starts with the method's name (the output check names it) must not name it twice.
    Reference: the hand-written line.  Old: ``all_reduce: rank 0: all_reduce: the output array ...``."""
    pytest.importorskip("mpi4py")
    from kernels.mpi.communicator import MPICommunicator
    comm = MPICommunicator(plan=False, abort_on_error=False, timeout_s=20)
    with pytest.raises(TopocollError) as info:
        call(comm)
    comm.close()
    assert str(info.value) == f"{method}: rank 0: the output array is not C-contiguous (as NCCL needs)"


@pytest.mark.parametrize("plan", [123, 1.5, True, ["plan.json"]])
@pytest.mark.parametrize("n", [1, N])
def test_a_plan_argument_that_is_not_a_plan_is_refused_in_one_line_naming_the_communicator(plan, n):
    """``plan`` is a Plan, a plan.json file or folder, "auto", None or False (the class docstring);
    anything else is refused in one line naming the Communicator and the value, as the MPICommunicator
    refuses it at start-up.  Old: a TypeError from pathlib ("expected str, bytes or os.PathLike object");
    with one rank and no topology (no plan looked up), taken without a word."""
    from kernels import Communicator
    with pytest.raises(TopocollError) as info:
        Communicator(n, plan=plan)
    assert str(info.value) == (f"Communicator: plan must be a Plan, a plan.json file or folder, 'auto', None or "
                               f"False; got {type(plan).__name__} {plan!r}"), str(info.value)

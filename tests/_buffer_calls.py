"""The calls of the buffer-misuse campaign (:mod:`_buffer_misuse` draws them): where each
buffer lives (:class:`Buf`, views of fresh or memory-mapped base arrays), the call
(:class:`Call`), how it is invoked, and its oracle (:func:`judge`): the inputs as the caller
sees them, copied before the call, and the NumPy reference (:func:`_schedules.expected` within
:func:`_schedules.tolerance`).  The call must either answer (every rank with an output holds
the reference in its first ``blocks * count`` elements, NCCL's in-place layouts where one array
is passed as input and output, and no other byte of any array changed) or refuse with a
one-line :class:`~topo_probe.errors.TopocollError`, no byte changed.  Not a test module.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
from _schedules import check_result, direct, random_schedule, ring

from kernels import Communicator, run_schedule
from topo_probe.errors import TopocollError

API = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter", "all_to_all")
CANON = dict(zip(API, ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "gather", "scatter",
                       "alltoall")))
#: (input blocks, output blocks) per rank that has the buffer (NCCL's buffer sizes in counts)
BLOCKS = {"allreduce": (1, 1), "allgather": (1, "n"), "reducescatter": ("n", 1), "broadcast": (1, 1),
          "reduce": (1, 1), "gather": (1, "n"), "scatter": ("n", 1), "alltoall": ("n", "n")}
NATIVE = [np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16,
                                ml_dtypes.bfloat16, np.float32, np.float64, ml_dtypes.float8_e4m3fn,
                                ml_dtypes.float8_e5m2)]
ODD = [np.dtype(t) for t in (bool, np.int16, np.uint16, np.complex64, np.longdouble, object, "datetime64[s]",
                             "timedelta64[ms]", "U3", "S3", "f4,f4")]
OPS = ("sum", "prod", "max", "min", "avg")
BAD_ROOTS = (1.5, "1", None, float("nan"), True, np.float64(1.0), -1, "n", [0], 2**70)
BAD_COUNTS = (float("nan"), float("inf"), 1.5, "2", -1, True, [2], 2**70)
BAD_OPS = ("SUM", "nosuch", None, 1, ["sum"], b"sum", np.float64(0.0))
JUNK = ("a string", [1.0, 2.0], 3.5, {"a": 1}, b"bytes")


def has_in(coll: str, r: int, root: int) -> bool:
    return coll not in ("broadcast", "scatter") or r == root


def has_out(coll: str, r: int, root: int) -> bool:
    return coll not in ("reduce", "gather") or r == root


@dataclass
class Buf:
    """Where a buffer lives: ``bases[base][start::step]`` (``length`` elements), reshaped, wrapped."""

    base: int
    start: int
    length: int
    step: int = 1
    shape: tuple | None = None
    wrap: str = "plain"
    readonly: bool = False

    def view(self, bases: list, raw: bool = False):
        b = bases[self.base]
        stop = self.start + self.step * self.length
        v = b[self.start:stop if stop >= 0 else None:self.step]
        if self.shape is not None and self.step == 1:
            v = v.reshape(self.shape)
        if raw:
            return v
        if self.readonly:
            v = v.view()
            v.flags.writeable = False
        if self.wrap == "matrix":
            return np.asmatrix(v)
        if self.wrap == "masked":
            return np.ma.masked_array(v, mask=np.arange(v.size).reshape(v.shape) % 3 == 1)
        if self.wrap == "recarray":
            return v.view(np.recarray)
        return v


@dataclass
class Call:
    api: str
    coll: str
    n: int
    count: int                      # elements per block the call asks for
    dtype: np.dtype
    root: int
    op: str
    bases: list = field(default_factory=list)
    ins: list = field(default_factory=list)    # Buf, None, or junk per rank
    outs: list = field(default_factory=list)
    same: set = field(default_factory=set)     # ranks passing one array as input and output
    kwargs: dict = field(default_factory=dict)
    container: str = "list"
    must: str = "either"            # "answer", "refuse" or "either"
    draws: list = field(default_factory=list)
    sched_seed: int = 0
    live: tuple = ()                # the arrays passed (made once, so a repeat passes the same objects)


class Arena:
    """Fresh base arrays for a call: in memory, or views of one memory-mapped file."""

    def __init__(self, tmpdir: str):
        self.mm = np.memmap(f"{tmpdir}/arena.bin", np.uint8, "w+", shape=(1 << 22,))
        self.pos = 0

    def base(self, rng: random.Random, length: int, dtype: np.dtype, op: str, mapped: bool):
        nbytes = length * dtype.itemsize
        if mapped and not dtype.hasobject and nbytes + 64 < self.mm.size:
            if self.pos + nbytes + 64 > self.mm.size:
                self.pos = 0
            arr = self.mm[self.pos:self.pos + nbytes].view(dtype)
            self.pos += (nbytes + 63) // 64 * 64
        else:
            arr = np.empty(length, dtype)
        arr[...] = values(rng, length, dtype, op)
        return arr


def values(rng: random.Random, length: int, dtype: np.dtype, op: str):
    """Values suited to ``dtype`` and ``op`` (small, so integer sums and products stay exact)."""
    g = np.random.default_rng(rng.getrandbits(32))
    if dtype.kind == "f" or dtype in NATIVE[6:]:
        v = g.uniform(0.5, 2.0, length) * g.choice([-1.0, 1.0], length) if op == "prod" else g.uniform(-1, 1, length)
        return v.astype(dtype.newbyteorder("="))
    if dtype.kind in "iu":
        lo, hi = (0, 3) if op == "prod" else (0 if dtype.kind == "u" else -100, 100)
        return g.integers(lo, hi, length).astype(dtype.newbyteorder("="))
    if dtype.kind in "US":
        return np.array(["ab"] * length, dtype)
    if dtype.names:
        return np.zeros(length, dtype)
    return g.integers(0, 5, length).astype(dtype)


def _blocks(coll: str, n: int) -> tuple[int, int]:
    kin, kout = BLOCKS[coll]
    return (n if kin == "n" else kin), (n if kout == "n" else kout)


def regions(call: Call, r: int) -> tuple:
    """(input slice, output slice) of rank r's flat buffers the call reads and writes."""
    kin, kout = _blocks(call.coll, call.n)
    c = call.count
    if r in call.same and call.api != "run_schedule":
        if call.coll in ("allgather", "gather"):
            return slice(r * c, (r + 1) * c), slice(0, kout * c)
        if call.coll in ("reducescatter", "scatter"):
            return slice(0, kin * c), slice(r * c, (r + 1) * c)
    return slice(0, kin * c), slice(0, kout * c)


def package(call: Call, items: list):
    """The per-rank list in the container drawn (a wrong one must be refused)."""
    return {"tuple": tuple, "short": lambda x: x[:-1], "long": lambda x: x + x[:1], "dict": lambda x: dict(enumerate(x)),
            "none": lambda x: None, "iterator": iter, "list": list}[call.container](items)


def materialize(call: Call) -> None:
    ins = [b.view(call.bases) if isinstance(b, Buf) else b for b in call.ins]
    outs = [ins[r] if r in call.same else (b.view(call.bases) if isinstance(b, Buf) else b)
            for r, b in enumerate(call.outs)]
    call.live = (ins, outs)


def invoke(call: Call, comms: dict) -> None:
    ins, outs = call.live
    if call.api == "run_schedule":
        sched = schedule(call.coll, call.n, call.root, call.sched_seed)
        run_schedule(sched, package(call, ins), package(call, outs), **call.kwargs)
        return
    comm = comms.get(call.n) or comms.setdefault(call.n, Communicator(call.n, plan=False))
    if call.api == "broadcast":
        comm.broadcast(package(call, ins), **call.kwargs)
    else:
        getattr(comm, call.api)(package(call, ins), package(call, outs), **call.kwargs)


_SCHEDULES: dict = {}


def schedule(coll: str, n: int, root: int, seed: int):
    """A valid schedule: direct, ring (where one exists) or one of two random ones."""
    key = (coll, n, root, seed)
    if key not in _SCHEDULES:
        if seed == 1 and coll in ("allgather", "reducescatter", "allreduce"):
            _SCHEDULES[key] = ring(coll, n)
        elif seed >= 2:
            _SCHEDULES[key] = random_schedule(coll, n, 1, root, seed)
        else:
            _SCHEDULES[key] = direct(coll, n, 1, root)
    return _SCHEDULES[key]




def snapshot(call: Call) -> tuple[list, list]:
    """Copies of the bases, and each read input as the caller sees it (None where not an array)."""
    before = [b.copy() for b in call.bases]
    sends = [None] * call.n
    if call.must != "refuse":
        for r in range(call.n):
            a = call.live[0][r]
            if has_in(call.coll, r, call.root) and isinstance(a, np.ndarray):
                sends[r] = np.asarray(a).reshape(-1)[regions(call, r)[0]].astype(call.dtype.newbyteorder("="))
    return before, sends


def judge(call: Call, before: list, sends: list, err: BaseException | None) -> str | None:
    """None when the call answered right or refused rightly (module docstring), else why not."""
    if err is not None:
        if not isinstance(err, TopocollError):
            return f"generic {type(err).__name__}: {err}"
        if "\n" in str(err):
            return f"a multi-line error: {err!r}"
        if call.must == "answer":
            return f"refused a valid call: {err}"
        why = changed(call, before, written=False)
        return None if why is None else f"refused, but {why}"
    if call.must == "refuse":
        return "answered a call that must be refused"
    missing = [r for r in range(call.n) if has_in(call.coll, r, call.root) and sends[r] is None]
    if missing:
        return f"answered without an input array on rank(s) {missing}"
    recvs = [None] * call.n
    for r in range(call.n):
        if has_out(call.coll, r, call.root):
            recvs[r] = np.asarray(call.live[1][r]).reshape(-1)[regions(call, r)[1]]
    try:
        check_result(call.coll, call.n, call.count, sends, recvs, call.op, call.root, call.dtype.newbyteorder("="))
    except (AssertionError, ValueError, IndexError) as e:
        return f"wrong answer: {e}"
    return changed(call, before, written=True)


def changed(call: Call, before: list, written: bool) -> str | None:
    """Why not, where a byte of a base array changed outside the outputs written (if ``written``)."""
    where = [np.arange(len(b)) for b in call.bases]
    marks = [np.zeros(len(b), bool) for b in call.bases]
    for r in range(call.n) if written else ():
        buf = call.ins[r] if r in call.same else call.outs[r]
        if isinstance(buf, Buf) and has_out(call.coll, r, call.root):
            marks[buf.base][np.asarray(buf.view(where, raw=True)).reshape(-1)[regions(call, r)[1]]] = True
    for i, (old, new) in enumerate(zip(before, call.bases)):
        if not len(old):
            continue
        if old.dtype.hasobject:
            diff = np.array([x is not y and x != y for x, y in zip(old, new)])
        else:
            size = old.dtype.itemsize
            diff = (old.view(np.uint8).reshape(-1, size) != np.asarray(new).view(np.uint8).reshape(-1, size)).any(1)
        bad = np.nonzero(diff & ~marks[i])[0]
        if bad.size:
            return f"{bad.size} element(s) changed outside the outputs (base {i}, first at {bad[0]})"
    return None

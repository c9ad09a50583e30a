"""A seeded buffer-misuse campaign: generated calls of every collective of
``Communicator(n, plan=False)`` on NumPy arrays and of ``run_schedule``, with drawn byte orders,
ndarray subclasses (matrix, masked, recarray, memmap), strided and self-overlapping buffers,
memory shared across ranks, odd and mismatched dtypes, wrong sizes, lists and containers, and
every argument type for root, count and op.  Not a test module: ``tests/kernels/comm/
test_buffer_misuse_campaign.py`` and ``benchmarks/fault_campaign.py --buffers N`` run it.

Each call is judged by :func:`_buffer_calls.judge` (NumPy's reference or a one-line refusal, no
other byte changed).  Besides: a call whose every draw is valid (plain arrays of an NCCL type in
native byte order, valid arguments) must answer, and a call with a draw no answer can honour (a
non-NCCL or non-native dtype, a matrix or masked array, a bad root, count or op, a needed buffer
missing, a list of the wrong length) must refuse.  Anything else is a failure, named with its seed.
"""

from __future__ import annotations

import random
import tempfile
import time
import warnings
from collections import Counter

import numpy as np
from _buffer_calls import (
    API,
    BAD_COUNTS,
    BAD_OPS,
    BAD_ROOTS,
    CANON,
    JUNK,
    NATIVE,
    ODD,
    OPS,
    Arena,
    Buf,
    Call,
    _blocks,
    has_in,
    has_out,
    invoke,
    judge,
    materialize,
    snapshot,
    values,
)

#: draws after which an answer is required (each valid on its own), and after which a refusal is
VALID = {"separate", "arena", "inplace", "inplace_view", "self_overlap", "strided_in", "shared_send",
         "readonly_in", "recarray", "mapped", "tuple", "root_type", "count_kw", "repeat", "unneeded"}
REFUSE = {"byteorder", "odd_dtype", "dtype_mismatch", "matrix", "masked", "none_needed", "junk_needed", "short",
          "long", "dict", "none", "iterator", "bad_root", "bad_count", "bad_op", "readonly_out", "noncontig_out",
          "smaller"}
#: what run_schedule does not promise (exact sizes, contiguous inputs, NCCL's in-place layouts only)
NOT_PROMISED_BY_RUN_SCHEDULE = {"inplace", "self_overlap", "strided_in", "bigger"}
BUFFER_DRAWS = ("bigger", "smaller", "shape2d", "noncontig_out", "readonly_out", "readonly_in", "matrix", "masked",
                "recarray", "mapped", "byteorder", "odd_dtype", "dtype_mismatch", "none_needed", "junk_needed",
                "container", "repeat")
LAYOUTS = ("separate", "separate", "arena", "inplace", "inplace_view", "self_overlap", "strided_in", "cross_rank",
           "shared_send")


def draw(rng: random.Random, arena: Arena) -> Call:
    """One generated call (module docstring), its bases filled."""
    api = rng.choice(API + ("run_schedule",) * 3)
    rs = api == "run_schedule"
    coll = rng.choice(list(CANON.values())) if rs else CANON[api]
    n = rng.randint(2, 4) if rs else rng.choice((1, 2, 3, 4, 4))
    c = rng.choice((0, 1, 1, 2, 3, 4, 5, 8, 16)) if rng.random() > 0.03 else rng.randint(100, 3000)
    call = Call(api, coll, n, c, rng.choice(NATIVE), rng.randrange(n), rng.choice(OPS))
    call.sched_seed = rng.randrange(4)
    pool = list(BUFFER_DRAWS) + (["bad_root", "root_type"] if api in ("broadcast", "reduce", "gather", "scatter")
                                 else []) + (["bad_count", "count_kw"] if api in ("all_gather", "reduce_scatter")
                                             else []) + (["bad_op"] if rs or coll in ("allreduce", "reducescatter",
                                                                                       "reduce") else [])
    call.draws = [rng.choice(LAYOUTS)] + rng.sample(pool, rng.choice((0, 1, 1, 2)))
    if "container" in call.draws:
        call.container = rng.choice(("tuple", "tuple", "short", "long", "dict", "none", "iterator"))
        call.draws[call.draws.index("container")] = call.container
    if "odd_dtype" in call.draws:
        call.dtype = rng.choice(ODD)
    elif "byteorder" in call.draws and rng.random() < 0.5:
        call.dtype = rng.choice([d for d in NATIVE if d.itemsize > 1]).newbyteorder("S")
        call.draws.append("byteorder_all")
    _layout(rng, arena, call, call.draws[0])
    for what in call.draws[1:]:
        _mutate(rng, arena, call, what)
    _arguments(rng, call)
    must_refuse = REFUSE.intersection(call.draws) - ({"dict"} if rs else set())   # a dict is indexable by rank
    valid = VALID if not rs else VALID - NOT_PROMISED_BY_RUN_SCHEDULE
    call.must = "refuse" if must_refuse else "answer" if valid.issuperset(call.draws) else "either"
    materialize(call)
    return call


def _needs(call: Call, r: int) -> tuple[bool, bool]:
    if call.api == "broadcast":
        return True, True
    return has_in(call.coll, r, call.root), has_out(call.coll, r, call.root)


def _layout(rng: random.Random, arena: Arena, call: Call, how: str) -> None:
    """Bases and one Buf per needed buffer, laid out as ``how``; other ranks' entries None, an
    array or junk (ignored, as NCCL ignores them)."""
    n, c, mapped = call.n, call.count, "mapped" in call.draws
    kin, kout = _blocks(call.coll, n)
    if call.api == "broadcast":
        call.same = set(range(n))
    elif how == "inplace" and call.api in ("reduce", "gather", "scatter"):
        call.same = {call.root}                      # the root's buffer sets the count of these
    elif how == "inplace" and (call.api != "run_schedule" or kin == kout == 1):
        call.same = {r for r in range(n) if rng.random() < 0.8 or r == 0}
    sizes = {}
    for r in range(n):
        hi, ho = _needs(call, r)
        if r in call.same:
            sizes[(r, "io")] = max(kin, kout) * c
            continue
        if hi:
            sizes[(r, "in")] = kin * c
        if ho:
            sizes[(r, "out")] = kout * c
    bufs = {}
    if how == "arena":
        order = list(sizes)
        rng.shuffle(order)
        pos = []
        total = 0
        for key in order:
            total += rng.randint(0, 2)
            pos.append(total)
            total += sizes[key]
        b = _new_base(rng, arena, call, total, mapped)
        bufs = {key: Buf(b, p, sizes[key]) for key, p in zip(order, pos)}
    else:
        bufs = {key: Buf(_new_base(rng, arena, call, ln, mapped), 0, ln) for key, ln in sizes.items()}
    for r in range(n):
        if (r, "io") in bufs:
            bufs[(r, "in")] = bufs[(r, "out")] = bufs.pop((r, "io"))
    _share(rng, arena, call, how, bufs, kin, kout)
    for r in range(n):
        call.ins.append(bufs.get((r, "in"), _unneeded(rng, call, kin * c)))
        call.outs.append(bufs.get((r, "out"), _unneeded(rng, call, kout * c)))


def _share(rng, arena, call: Call, how: str, bufs: dict, kin: int, kout: int) -> None:
    """The layouts where buffers share memory (in place, overlapping, strided, across ranks)."""
    n, c, mapped = call.n, call.count, "mapped" in call.draws
    both = [r for r in range(n) if (r, "in") in bufs and (r, "out") in bufs and r not in call.same]
    if how == "inplace_view":
        for r in both:
            o, i = bufs[(r, "out")], bufs[(r, "in")]
            if kout > kin:
                bufs[(r, "in")] = Buf(o.base, o.start + r * c, c)
            elif kin > kout:
                bufs[(r, "out")] = Buf(i.base, i.start + r * c, c)
            else:
                bufs[(r, "in")] = Buf(o.base, o.start, o.length)
    elif how == "self_overlap" and both:
        for r in rng.sample(both, rng.randint(1, len(both))):
            lo, li, step = kout * c, kin * c, rng.choice((1, 2, -1))
            ln = lo + abs(step) * li + 2
            b = _new_base(rng, arena, call, ln, mapped)
            start = rng.randint(li, ln - 1) if step < 0 else rng.randint(0, lo)
            bufs[(r, "out")], bufs[(r, "in")] = Buf(b, 0, lo), Buf(b, start, li, step)
    elif how == "strided_in":
        for r in range(n):
            if (r, "in") in bufs and r not in call.same:
                li, step = kin * c, rng.choice((2, -1))
                b = _new_base(rng, arena, call, 2 * li + 1, mapped)
                bufs[(r, "in")] = Buf(b, rng.randint(0, 1) if step > 0 else 2 * li, li, step)
    elif how == "cross_rank" and n > 1:
        keys = [k for k in bufs if bufs[k].length > 0]
        if len({k[0] for k in keys}) > 1:
            x = rng.choice(keys)
            y = rng.choice([k for k in keys if k[0] != x[0]])
            lx, ly = bufs[x].length, bufs[y].length
            lap = rng.randint(1, min(lx, ly))
            b = _new_base(rng, arena, call, lx + ly - lap, mapped)
            for key, buf in ((x, Buf(b, 0, lx)), (y, Buf(b, lx - lap, ly))):
                for k in [k for k in bufs if bufs[k] is bufs[key]]:
                    bufs[k] = buf
    elif how == "shared_send":
        ins = [r for r in range(n) if (r, "in") in bufs and r not in call.same]
        for r in ins[1:]:
            if bufs[(r, "in")].length == bufs[(ins[0], "in")].length:
                bufs[(r, "in")] = bufs[(ins[0], "in")]


def _new_base(rng, arena: Arena, call: Call, length: int, mapped: bool, dtype=None) -> int:
    call.bases.append(arena.base(rng, length, call.dtype if dtype is None else dtype, call.op, mapped))
    return len(call.bases) - 1


def _unneeded(rng: random.Random, call: Call, length: int):
    """What a rank without that buffer passes: None, an array or junk (all ignored)."""
    pick = rng.random()
    if pick < 0.6:
        return None
    if "unneeded" not in call.draws:
        call.draws.append("unneeded")
    return np.zeros(length, call.dtype) if pick < 0.8 else rng.choice(JUNK)


def _mutate(rng: random.Random, arena: Arena, call: Call, what: str) -> None:
    """Apply one buffer draw to a needed buffer (rank 0's never resized: it sets the count)."""
    sides = ("out",) if what.endswith("_out") else ("in",) if what.endswith("_in") else ("in", "out")
    targets = [(r, side) for r in range(call.n) for side, lst in (("in", call.ins), ("out", call.outs))
               if side in sides and isinstance(lst[r], Buf) and _needs(call, r)[side == "out"]]
    if what in ("bigger", "smaller"):
        if {"bigger", "smaller"} <= set(call.draws):
            call.draws.remove(what)                  # one resize per call: two could cancel out
            return
        targets = [t for t in targets if t[0] != 0 and t[0] not in call.same]
        if call.draws[0] not in ("separate", "arena") or not targets or (what == "smaller" and call.count == 0):
            call.draws.remove(what)
            return
    if not targets:
        return
    r, side = rng.choice(targets)
    lst = call.ins if side == "in" else call.outs
    buf = lst[r]
    if (what == "noncontig_out" and buf.length < 2 or what in ("matrix", "masked", "recarray") and buf.wrap != "plain"
            or what == "dtype_mismatch" and call.api == "broadcast" and call.n == 1):
        call.draws.remove(what)                      # would change nothing (or undo an earlier draw)
        return
    if what in ("dtype_mismatch", "byteorder") and r in call.same and call.api != "broadcast":
        call.ins[r] = call.outs[r] = buf
        call.same.discard(r)                         # one side of the rank's buffer gets another type
    mapped = "mapped" in call.draws
    if what in ("bigger", "smaller", "noncontig_out", "dtype_mismatch", "byteorder"):
        length = buf.length + (rng.randint(1, 4) if what == "bigger" else -1 if what == "smaller" else 0)
        step = 2 if what == "noncontig_out" else 1
        dtype = call.dtype
        if what == "dtype_mismatch":
            dtype = rng.choice([d for d in NATIVE if d != call.dtype])
        elif what == "byteorder" and "byteorder_all" not in call.draws:
            dtype = rng.choice([d for d in NATIVE if d.itemsize > 1]).newbyteorder("S")
        new = Buf(_new_base(rng, arena, call, step * length + 1, mapped, dtype), 0, length, step,
                  wrap=buf.wrap, readonly=buf.readonly)     # earlier draws stay
        _replace(call, buf, new, r, lst)
    elif what in ("readonly_out", "readonly_in"):
        buf.readonly = True
        if what == "readonly_in" and (r in call.same or _overlaps_out(call, buf)):
            call.draws.append("readonly_written")     # an input that is written is refused, rightly
    elif what in ("matrix", "masked", "recarray"):
        buf.wrap = what
    elif what == "shape2d" and buf.step == 1 and buf.length:
        buf.shape = rng.choice([(1, buf.length), (buf.length, 1)] + ([(2, buf.length // 2)] if buf.length % 2 == 0
                                                                     else []))
    elif what in ("none_needed", "junk_needed"):
        value = None if what == "none_needed" else rng.choice(JUNK)
        if call.api == "broadcast" or r in call.same:
            call.ins[r] = call.outs[r] = value
        else:
            lst[r] = value
        call.same.discard(r)


def _replace(call: Call, old: Buf, new: Buf, r: int, lst: list) -> None:
    if r in call.same and call.ins[r] is old:
        call.ins[r] = call.outs[r] = new
    else:
        lst[r] = new


def _overlaps_out(call: Call, buf: Buf) -> bool:
    return any(isinstance(o, Buf) and o.base == buf.base for o in call.outs)


def _arguments(rng: random.Random, call: Call) -> None:
    """root, count and op: valid of every accepted type, or drawn from the bad ones."""
    kw = call.kwargs
    if call.api == "run_schedule":
        kw["backend"] = rng.choice(("host", "reference"))
        kw["op"] = rng.choice(BAD_OPS) if "bad_op" in call.draws else call.op
        return
    if call.api in ("broadcast", "reduce", "gather", "scatter"):
        if "bad_root" in call.draws:
            kw["root"] = rng.choice(BAD_ROOTS)
            kw["root"] = call.n if kw["root"] == "n" else kw["root"]
        elif "root_type" in call.draws:
            kw["root"] = rng.choice((np.int64, np.int32, np.uint8, int))(call.root)
        elif call.root or rng.random() < 0.5:
            kw["root"] = call.root
    if call.api in ("all_gather", "reduce_scatter"):
        if "bad_count" in call.draws:
            kw["count"] = rng.choice(BAD_COUNTS)
        elif "count_kw" in call.draws:
            if call.count and "smaller" not in call.draws and rng.random() < 0.4:
                call.count -= 1
            kw["count"] = rng.choice((int, np.int64, np.uint32))(call.count)
    if call.coll in ("allreduce", "reducescatter", "reduce"):
        if "bad_op" in call.draws:
            kw["op"] = rng.choice(BAD_OPS)
        elif call.op != "sum" or rng.random() < 0.5:
            kw["op"] = rng.choice((str, np.str_))(call.op)
        else:
            call.op = "sum"


def one_call(rng: random.Random, call: Call, comms: dict) -> list:
    """Run a drawn call (and its repeat, where drawn): [(outcome, failure or None), ...]."""
    results = []
    for attempt in range(2 if "repeat" in call.draws else 1):
        if attempt:
            for b in call.bases:
                b[...] = values(rng, len(b), b.dtype, call.op)
            if rng.random() < 0.4 and call.must != "refuse":
                writable = [a for r, a in enumerate(call.live[1]) if isinstance(a, np.ndarray)
                            and has_out(call.coll, r, call.root) and a.flags.writeable]
                if writable:
                    rng.choice(writable).flags.writeable = False
                    call.must = "refuse"                 # the repeat must notice the read-only output
        before, sends = snapshot(call)
        err = None
        try:
            invoke(call, comms)
        except Exception as e:   # noqa: BLE001 - anything but a TopocollError is a failure
            err = e
        why = judge(call, before, sends, err)
        results.append(("refused" if err is not None else "answered", why))
        if err is not None or why is not None:
            break
    return results


def run_campaign(calls: int, seed: int = 0) -> dict:
    """``calls`` drawn calls (repeats add more); counts of outcomes, draws and failures."""
    counts, draws, failures = Counter(), Counter(), []
    comms: dict = {}
    t0 = time.process_time()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arena = Arena(tmp)
        for i in range(calls):
            rng = random.Random(f"{seed}:{i}")
            call = draw(rng, arena)
            draws.update(call.draws)
            draws[f"api {call.api}"] += 1
            draws["non-native byte order"] += not call.dtype.isnative or "byteorder" in call.draws
            for outcome, why in one_call(rng, call, comms):
                counts["calls"] += 1
                counts[outcome] += 1
                if why is not None:
                    counts["failures"] += 1
                    counts[failure_kind(why)] += 1
                    failures.append(f"seed {seed} call {i}: {call.api} {call.coll} n={call.n} count={call.count} "
                                    f"{call.dtype} draws={call.draws} kwargs={call.kwargs}: {why}")
        del arena
    counts["cpu_s"] = round(time.process_time() - t0, 1)
    return {"counts": counts, "draws": draws, "failures": failures}


def failure_kind(why: str) -> str:
    """The class of a failure: a silent wrong answer, a generic exception, or another broken promise."""
    if why.startswith(("wrong answer", "answered without", *"0123456789")):
        return "silent wrong answers"
    if why.startswith("generic"):
        return "generic exceptions"
    return "other failures"

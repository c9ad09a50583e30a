"""Test helpers for the executor tests: hand-written schedules, random valid schedules,
NumPy expectations and tolerances.  Not a test module (no ``test_`` prefix).

Random schedules: non-combining collectives flood chunks from holders to random ranks
(redundant re-sends included, which exercises the read-before-write rule); combining
collectives keep, per chunk, a partition of the ranks into groups whose partials are
merged (several sources into one target in a step, sometimes both ways at once) and copied
to ranks whose partial they contain, so the generator can never get stuck.
"""

from __future__ import annotations

import random
from functools import lru_cache

import ml_dtypes  # also registers bfloat16 and float8 with NumPy
import numpy as np

from kernels.program.ops import is_float
from synth.ir.collectives import COMBINING, ROOTED, CollectiveSpec
from synth.ir.schedule import Schedule, Step, Transfer

ALL = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce", "gather", "scatter", "alltoall")


def _sched(name, coll, n, C, root, steps) -> Schedule:
    return Schedule(coll, n, C, tuple(Step(1, tuple(s)) for s in steps if s), root=root if coll in ROOTED else None,
                    name=name)


def direct(coll: str, n: int, C: int = 1, root: int | None = None) -> Schedule:
    """One or two steps, every transfer straight from holder to destination."""
    spec = CollectiveSpec(coll, n, C, root if coll in ROOTED else None)
    s1, s2 = [], []
    for ch in spec.chunks():
        k = ch.id
        if coll in COMBINING:
            owner = ch.post[0] if len(ch.post) == 1 else (k // C) % n
            s1 += [Transfer(k, s, owner, "reduce") for s in ch.pre if s != owner]
            s2 += [Transfer(k, owner, d) for d in ch.post if d != owner]
        else:
            s1 += [Transfer(k, ch.pre[0], d) for d in ch.post if d != ch.pre[0]]
    return _sched("direct", coll, n, C, root, [s1, s2])


def ring(coll: str, n: int, C: int = 1) -> Schedule:
    """Ring allgather / reducescatter / allreduce (reduce-scatter then allgather)."""
    steps = []
    if coll in ("reducescatter", "allreduce"):
        for s in range(n - 1):
            steps.append([Transfer(((r - s - 1) % n) * C + c, r, (r + 1) % n, "reduce")
                          for r in range(n) for c in range(C)])
    if coll in ("allgather", "allreduce"):
        for s in range(n - 1):
            steps.append([Transfer(((r - s) % n) * C + c, r, (r + 1) % n) for r in range(n) for c in range(C)])
    return _sched("ring", coll, n, C, None, steps)


def _random_copy(spec: CollectiveSpec, rng: random.Random) -> list[list[Transfer]]:
    n = spec.ranks
    holders = {c.id: set(c.pre) for c in spec.chunks()}
    post = {c.id: set(c.post) for c in spec.chunks()}
    steps = []
    for t in range(3 * n + 3):
        missing = [(k, d) for k in holders for d in post[k] if d not in holders[k]]
        if not missing:
            break
        step, written = [], set()
        for k in holders:
            for _ in range(rng.randint(0, 2)):
                src = rng.choice(sorted(holders[k]))
                dst = rng.choice([r for r in range(n) if r != src])
                if (dst, k) not in written:          # one write per (dst, chunk) per step
                    step.append(Transfer(k, src, dst))
                    written.add((dst, k))
        if t >= 2:
            for k, d in missing:
                if (d, k) not in written and (rng.random() < 0.6 or t > n):
                    step.append(Transfer(k, rng.choice(sorted(holders[k])), d))
                    written.add((d, k))
        rng.shuffle(step)
        for tr in step:
            holders[tr.chunk].add(tr.dst)
        steps.append(step)
    return steps


def _random_combine(spec: CollectiveSpec, rng: random.Random) -> list[list[Transfer]]:
    n = spec.ranks
    everyone = frozenset(range(n))
    sets = {(r, c.id): frozenset([r]) for c in spec.chunks() for r in range(n)}
    active = {c.id: {frozenset([r]): {r} for r in range(n)} for c in spec.chunks()}
    post = {c.id: c.post for c in spec.chunks()}
    steps = []
    for _ in range(2 * n + 4):
        if all(sets[(d, k)] == everyone for k in post for d in post[k]):
            break
        step, merges, copies = [], [], []
        for k, groups in active.items():
            used_dst, frozen = set(), set()
            if len(groups) > 1:
                pick = rng.sample(sorted(groups, key=sorted), rng.randint(2, min(4, len(groups))))
                a = rng.choice(sorted(groups[pick[0]]))
                srcs = [rng.choice(sorted(groups[g])) for g in pick[1:]]
                step += [Transfer(k, b, a, "reduce") for b in srcs]
                holders = {a}
                if len(srcs) == 1 and rng.random() < 0.4:      # both ways in one step
                    step.append(Transfer(k, a, srcs[0], "reduce"))
                    holders.add(srcs[0])
                used_dst |= holders
                frozen |= set(pick)
                merges.append((k, pick, frozenset().union(*pick), holders))
            for g in sorted(groups, key=sorted):
                if g in frozen:
                    continue
                cands = [x for x in range(n) if x not in used_dst and x not in groups[g] and sets[(x, k)] <= g]
                if g == everyone:
                    targets = [x for x in cands if x in post[k] or rng.random() < 0.2]
                elif cands and rng.random() < 0.5:
                    targets = [rng.choice(cands)]
                else:
                    targets = []
                for x in targets:
                    step.append(Transfer(k, rng.choice(sorted(groups[g])), x))
                    used_dst.add(x)
                    copies.append((k, g, x))
        for k, pick, union, holders in merges:
            for g in pick:
                del active[k][g]
            active[k][union] = set(holders)
            for h in holders:
                sets[(h, k)] = union
        for k, g, x in copies:
            sets[(x, k)] = g
            active[k][g].add(x)
        rng.shuffle(step)
        steps.append(step)
    return steps


@lru_cache(maxsize=None)
def random_schedule(coll: str, n: int, C: int, root: int | None, seed: int) -> Schedule:
    """A random schedule implementing the collective (see module docstring)."""
    spec = CollectiveSpec(coll, n, C, root if coll in ROOTED else None)
    rng = random.Random(seed)
    steps = _random_combine(spec, rng) if spec.combining else _random_copy(spec, rng)
    sched = _sched(f"random{seed}", coll, n, C, spec.root, steps)
    return sched.with_(steps=tuple(Step(rng.randint(1, 2), s.transfers) for s in sched.steps))


# ---------------------------------------------------------------------------- expectations
def make_inputs(coll: str, n: int, count: int, dtype, op: str, root, rng: np.random.Generator):
    """Random send buffers (None where unused) with values suited to dtype and op."""
    spec = CollectiveSpec(coll, n, 1, root if coll in ROOTED else None)
    dt = np.dtype(dtype)
    size = spec.input_blocks() * count
    out = []
    for r in range(n):
        if coll in ("broadcast", "scatter") and r != spec.root:
            out.append(None)
            continue
        if is_float(dt):
            if op == "prod":
                v = rng.uniform(0.5, 2.0, size) * rng.choice([-1.0, 1.0], size)
            else:
                v = rng.uniform(-1.0, 1.0, size)
            out.append(v.astype(dt))
        elif dt.kind == "u":
            hi = 3 if op == "prod" else 200
            out.append(rng.integers(0, hi, size).astype(dt))
        else:
            lo, hi = (-3, 4) if op == "prod" else (-1000, 1000)
            out.append(rng.integers(lo, hi, size).astype(dt))
    return out


def _combine(vals: list[np.ndarray], op: str, dt: np.dtype, n: int) -> np.ndarray:
    if dt.kind in "iu":
        stack = np.stack([v.astype(np.int64) for v in vals])
        if op in ("sum", "avg"):
            res = stack.sum(0).astype(dt)      # wraps like C
            if op == "avg":
                big = res.astype(np.int64)
                res = (np.sign(big) * (np.abs(big) // n)).astype(dt)
            return res
        if op == "prod":
            return stack.prod(0).astype(dt)
        return (stack.max(0) if op == "max" else stack.min(0)).astype(dt)
    stack = np.stack([v.astype(np.float64) for v in vals])
    res = {"sum": stack.sum(0), "avg": stack.sum(0) / n, "prod": stack.prod(0),
           "max": stack.max(0), "min": stack.min(0)}[op]
    return res


def expected(coll: str, n: int, count: int, sends, op: str, root, dt) -> list:
    """What each rank's receive buffer must hold (float64 for float reductions); None where unused."""
    dt = np.dtype(dt)
    blk = lambda a, b: a[b * count:(b + 1) * count]  # noqa: E731
    if coll == "allgather":
        return [np.concatenate(sends) for _ in range(n)]
    if coll == "reducescatter":
        return [_combine([blk(s, r) for s in sends], op, dt, n) for r in range(n)]
    if coll == "allreduce":
        v = _combine(sends, op, dt, n)
        return [v for _ in range(n)]
    if coll == "broadcast":
        return [sends[root] for _ in range(n)]
    if coll == "reduce":
        return [_combine(sends, op, dt, n) if r == root else None for r in range(n)]
    if coll == "gather":
        return [np.concatenate(sends) if r == root else None for r in range(n)]
    if coll == "scatter":
        return [blk(sends[root], r) for r in range(n)]
    return [np.concatenate([blk(sends[s], d) for s in range(n)]) for d in range(n)]


def tolerance(coll: str, n: int, count: int, sends, op: str, dt) -> list | float:
    """Per-rank, per-element error bounds for float reductions (0.0 when results must be exact).

    Any order of the n-1 roundings of a sum satisfies |err| <= gamma_{n-1} * sum|x_i| with
    gamma_k = k*u / (1 - k*u) (Higham, Accuracy and Stability, Thm 3.1 / Lemma 3.1; u = eps/2);
    the same gamma bounds the relative error of a product.  The bound is doubled to cover
    the float64 expectation's own rounding.  avg is NCCL's PreMulSum: every x_i is multiplied by
    fl(1/n) (relative error <= u) and each product rounded (<= u) before the sum: 3u*sum|x_i|/n
    more (generous).  ``tiny`` covers underflow (float8 and float16 subnormals are coarse).
    """
    dt = np.dtype(dt)
    if not is_float(dt) or coll not in COMBINING or op in ("max", "min"):
        return 0.0
    info = ml_dtypes.finfo(dt)
    u = float(info.eps) / 2
    gamma = (n - 1) * u / (1 - (n - 1) * u)
    tiny = float(info.smallest_subnormal) * 4 * n
    if coll == "reducescatter":
        parts = [np.stack([s[r * count:(r + 1) * count] for s in sends]).astype(np.float64) for r in range(n)]
    else:
        parts = [np.stack(sends).astype(np.float64)] * n
    out = []
    for p in parts:
        if op == "prod":
            mag = np.abs(p).prod(0)
            out.append(2 * gamma * mag + u * mag + tiny)
        elif op == "avg":
            mag = np.abs(p).sum(0)
            out.append(2 * gamma * mag / n + 3 * u * mag / n + tiny)
        else:
            out.append(2 * gamma * np.abs(p).sum(0) + tiny)
    return out


def check_result(coll, n, count, sends, recvs, op, root, dt) -> None:
    """Assert ``recvs`` match the NumPy expectation (exact for integers / data movement)."""
    exp = expected(coll, n, count, sends, op, root, dt)
    tol = tolerance(coll, n, count, sends, op, dt)
    for r in range(n):
        if exp[r] is None:
            continue
        got = recvs[r].reshape(-1)
        t = tol[r] if isinstance(tol, list) else tol
        if is_float(dt) and coll in COMBINING and op not in ("max", "min"):
            err = np.abs(got.astype(np.float64) - exp[r])
            bad = np.nonzero(err > t)[0]
            if bad.size:
                i = bad[0]
                raise AssertionError(f"rank {r} element {i}: got {got[i]!r}, expected {exp[r][i]!r} "
                                     f"(error {err[i]:.3g} > bound {np.broadcast_to(t, err.shape)[i]:.3g})")
        else:
            want = exp[r].astype(dt) if exp[r].dtype != dt else exp[r]
            if not np.array_equal(got, want):
                i = int(np.nonzero(got != want)[0][0])
                raise AssertionError(f"rank {r} element {i}: got {got[i]!r}, expected {want[i]!r}")


def alloc_buffers(coll: str, n: int, count: int, sends, dt, root, inplace: bool, fill=0):
    """(sendbufs, recvbufs) for a call, in-place aliased like NCCL when asked; sends copied."""
    spec = CollectiveSpec(coll, n, 1, root if coll in ROOTED else None)
    dt = np.dtype(dt)
    out_size = spec.output_blocks() * count
    has_out = [coll not in ("reduce", "gather") or r == spec.root for r in range(n)]
    sendbufs, recvbufs = [], []
    for r in range(n):
        s = None if sends[r] is None else sends[r].copy()
        rv = np.full(out_size, fill, dt) if has_out[r] else None
        if inplace and s is not None and rv is not None:
            if coll in ("allgather", "gather"):
                rv[r * count:(r + 1) * count] = s
                s = rv[r * count:(r + 1) * count]
            elif coll in ("reducescatter", "scatter"):
                rv = s[r * count:(r + 1) * count]
            else:
                rv[...] = s
                s = rv
        sendbufs.append(s)
        recvbufs.append(rv)
    return sendbufs, recvbufs


# ---------------------------------------------------------------------------- property cases
TOPOLOGIES = ("dgx1-v100", "dgx-a100", "dgx-h100", "pcie-8gpu-2socket", "mi300x",
              "ring3", "ring5", "full2", "full4", "torus2x3", "hub4", "line4")
#: every NCCL type (ncclDataType_t): bfloat16 and float8 through ml_dtypes
DTYPES = ("int32", "int64", "float32", "float64", "float16", "uint8", "int8", "uint32", "uint64", "bfloat16",
          "float8_e4m3fn", "float8_e5m2")
OPS = ("sum", "prod", "max", "min", "avg")


@lru_cache(maxsize=None)
def topology(name: str):
    from topo_probe.machines import generators as g
    from topo_probe.machines.presets import get_preset
    small = {"ring3": lambda: g.ring(3), "ring5": lambda: g.ring(5), "full2": lambda: g.fully_connected(2),
             "full4": lambda: g.fully_connected(4), "torus2x3": lambda: g.torus(2, 3),
             "hub4": lambda: g.hub_and_spoke(4), "line4": lambda: g.line(4)}
    return small[name]() if name in small else get_preset(name)


@lru_cache(maxsize=None)
def fabric(name: str):
    from synth.ir.fabric import build_fabric
    return build_fabric(topology(name))


@lru_cache(maxsize=None)
def available(name: str, coll: str) -> tuple[str, ...]:
    from synth.baselines import available_baselines
    return tuple(available_baselines(fabric(name), coll))


@lru_cache(maxsize=None)
def baseline_schedule(name: str, base: str, coll: str, root: int | None, chunks: int) -> Schedule:
    from synth.baselines import baseline
    return baseline(base, fabric(name), coll, root=root, chunks=chunks)


def draw_schedule(data, sources=("baseline", "random", "hand")) -> tuple[Schedule, str]:
    """Draw (schedule, description) with hypothesis ``data``: a baseline on a preset or small
    generated topology, a random valid schedule, or a hand-written one."""
    from hypothesis import strategies as st
    coll = data.draw(st.sampled_from(ALL), label="collective")
    source = data.draw(st.sampled_from(sources), label="source")
    C = data.draw(st.integers(1, 3), label="chunks")
    if source == "baseline":
        topo = data.draw(st.sampled_from(TOPOLOGIES), label="topology")
        names = available(topo, coll)
        n = topology(topo).num_gpus
        root = data.draw(st.integers(0, n - 1), label="root") if coll in ROOTED else None
        base = data.draw(st.sampled_from(names), label="baseline")
        try:
            return baseline_schedule(topo, base, coll, root, C), f"{base} on {topo}"
        except Exception:       # a baseline may not apply for some root
            return baseline_schedule(topo, base, coll, 0 if root is not None else None, C), f"{base} on {topo}"
    n = data.draw(st.integers(1, 5), label="ranks")
    root = data.draw(st.integers(0, n - 1), label="root")
    if source == "random":
        seed = data.draw(st.integers(0, 50), label="seed")
        return random_schedule(coll, n, C, root, seed), f"random{seed}"
    if coll in ("allgather", "reducescatter", "allreduce") and data.draw(st.booleans(), label="ring"):
        return ring(coll, n, C), "hand ring"
    return direct(coll, n, C, root), "hand direct"


def run_case(sched: Schedule, count: int, dtype: str, op: str, inplace: bool, backends, seed: int) -> None:
    """Run ``sched`` on every backend and check each against NumPy; inputs must stay intact."""
    from kernels.backends.executor import run_schedule
    n, coll, root = sched.ranks, sched.collective, sched.root
    rng = np.random.default_rng(seed)
    sends = make_inputs(coll, n, count, dtype, op, root, rng)
    for be in backends:
        sb, rb = alloc_buffers(coll, n, count, sends, dtype, root, inplace, fill=77)
        before = [None if x is None else x.copy() for x in sb]
        run_schedule(sched, sb, rb, op=op, backend=be)
        check_result(coll, n, count, sends, rb, op, root, dtype)
        if not inplace:
            for r, (x, y) in enumerate(zip(sb, before)):
                assert x is None or np.array_equal(x, y), f"rank {r}: input buffer was modified"


def persistent_run(sched: Schedule, sends, recvs, op: str) -> None:
    """Run ``sched``'s ops in order, every reduce through ``kernels.mpi.persistent._reducer`` (the call a bound
    MPI plan makes on a received partial ``tmp``), the other ops as the executor runs them."""
    from kernels.backends.executor import program_for
    from kernels.backends.kernel_twins import binop_for, postdiv_host
    from kernels.mpi.persistent import _reducer
    n, count = sched.ranks, recvs[0].size
    prog = program_for(sched, count, sends[0].dtype, op=op)
    user = [{"send": s, "recv": r} for s, r in zip(sends, recvs)]
    bufs = [{k: user[r][w] for k, w in prog.bindings[r].items()} for r in range(n)]
    for r, sizes in enumerate(prog.sizes):
        if "scratch" in sizes:
            bufs[r]["scratch"] = np.zeros(sizes["scratch"], sends[0].dtype)

    def view(reg):
        return bufs[reg.rank][reg.buf][reg.start:reg.stop]
    for step in prog.steps:
        staged = [(o, view(o.src).copy() if o.kind in ("copy", "reduce") else None) for o in step]
        for o, src in staged:
            if o.kind == "copy":
                view(o.dst)[...] = src
            elif o.kind == "reduce":
                _reducer(view(o.dst), view(o.acc), src, binop_for(o.premul, op, n))()
            else:
                postdiv_host(view(o.dst), n)

"""The jobs the torch backend tests run on every rank (see ``_torch_dist.run_job``): every
collective on ``topocoll`` next to the same call on a gloo group of the same ranks, bad input,
subgroups, backend strings.  Inputs are integer-valued (every sum, product, min and max is exact
in every dtype and any order), so results must equal gloo's bit for bit; random-valued sums are
held to the summation error bound (``_random_sums``)."""

from __future__ import annotations

import importlib
import math
import os
import time
from datetime import timedelta

DTYPES = ("float32", "bfloat16", "float16", "int64", "uint8")
SIZES = (0, 1, 7, 1024, 1 << 20)
#: dtypes that run 1 Mi elements on 4 ranks (all of them; narrow it here if CI's cores cannot)
FOUR_RANK_LARGE = DTYPES
#: other modules' jobs (tests/kernels/pytorch), run first by ``collectives_job`` in the same ranks:
#: part name -> ("module:function", the rank counts it runs on).  Each makes and destroys its own
#: default group on its own rendezvous (``TOPOCOLL_TEST_INIT_<NAME>``), as it did in its own spawn;
#: they start together after a barrier on ``TOPOCOLL_TEST_INIT_PARTS``'s store (``_parts``)
PARTS = {"fused": ("_fused_jobs:fused_job", (2, 4)), "p2p": ("_checked_p2p_jobs:p2p_job", (2, 4)),
         "layout": ("_layout_jobs:layout_job", (2, 4)), "sum_order": ("_sum_order_jobs:sum_order_job", (4,)),
         "robust": ("_checked_p2p_jobs:robust_job", (2,))}


class Recorder:
    """check name -> failure lines; ``__count__``: comparisons per family (name before ':')."""

    def __init__(self) -> None:
        self.out: dict = {"__count__": {}}

    def check(self, name: str, ok: bool, line: str = "") -> None:
        fam = name.split(":")[0]
        self.out["__count__"][fam] = self.out["__count__"].get(fam, 0) + 1
        self.out.setdefault(name, [])
        if not ok:
            self.out[name].append(line or "differs")


def bits_equal(a, b) -> bool:
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def ints(dtype, shape, seed: int, lo: int, hi: int):
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(getattr(torch, dtype))


def _split(s: int, d: int, size: int) -> int:
    """Elements (rows of 2 in all_to_all_single) rank s sends rank d in the uneven all-to-alls:
    about size / 2, uneven by up to 2 either way (and 0 for small sizes)."""
    return max(0, (size + 1) // 2 + (s * 3 + d * 5) % 4 - 2)


def _calls(rank: int, n: int, dtype: str, size: int):
    """(name, inputs(), call(group, inputs) -> outputs, ranks whose outputs are compared)."""
    import torch
    import torch.distributed as dist
    dt = getattr(torch, dtype)
    hi = 256 if dtype == "uint8" else 1000 if dtype == "int64" else 8
    pools = {}                              # one random draw per value range, cut at offsets k

    def x(k, shape=(size,), lo=0, top=hi):
        numel = math.prod(shape)
        pool = pools.get((lo, top))
        if pool is None:
            pool = pools[(lo, top)] = ints(dtype, (2 * n * size + 4096,), 7919 * rank + size + lo, lo, top)
        start = (k * 131) % 4096
        return pool[start:start + numel].clone().view(shape)
    E = lambda *shape: torch.empty(*shape, dtype=dt)
    every = range(n)
    rows_out = sum(_split(s, rank, size) for s in range(n))
    out = [("allreduce:" + name, (lambda k=k, lo=lo, top=top: [x(k, lo=lo, top=top)]),
            (lambda g, t, op=op: (dist.all_reduce(t[0], op=op, group=g), t)[1]), every)
           for k, (name, op, lo, top) in enumerate([
               ("sum", dist.ReduceOp.SUM, 0, hi), ("max", dist.ReduceOp.MAX, 0, hi), ("min", dist.ReduceOp.MIN, 0, hi),
               ("product", dist.ReduceOp.PRODUCT, 1, 3)])]
    out += [
        ("allgather:list", lambda: [x(10)], lambda g, t: (lambda o: (dist.all_gather(o, t[0], group=g), o)[1])(
            [E(size) for _ in range(n)]), every),
        ("allgather:into_tensor", lambda: [x(11), E(n * size)],
         lambda g, t: (dist.all_gather_into_tensor(t[1], t[0], group=g), [t[1]])[1], every),
        ("reduce_scatter:list", lambda: [E(size)] + [x(12 + d) for d in range(n)],
         lambda g, t: (dist.reduce_scatter(t[0], t[1:], group=g), [t[0]])[1], every),
        ("reduce_scatter:tensor", lambda: [E(size), x(30, (n * size,))],
         lambda g, t: (dist.reduce_scatter_tensor(t[0], t[1], group=g), [t[0]])[1], every),
        ("broadcast", lambda: [x(31)], lambda g, t: (dist.broadcast(t[0], n - 1, group=g), t)[1], every),
        ("reduce", lambda: [x(32)], lambda g, t: (dist.reduce(t[0], 1 % n, group=g), t)[1], [1 % n]),
        ("gather", lambda: [x(33)] + [E(size) for _ in range(n)],
         lambda g, t: (dist.gather(t[0], t[1:] if rank == 0 else None, 0, group=g), t[1:] if rank == 0 else [])[1],
         [0]),
        ("scatter", lambda: [E(size)] + [x(34 + d) for d in range(n)],
         lambda g, t: (dist.scatter(t[0], t[1:] if rank == 1 % n else None, 1 % n, group=g), [t[0]])[1], every),
        ("alltoall:list_even", lambda: [x(60 + d) for d in range(n)],
         lambda g, t: _list_alltoall(g, t, [E(size) for _ in range(n)]), every),
        ("alltoall:list_uneven", lambda: [x(40 + d, (_split(rank, d, size),)) for d in range(n)],
         lambda g, t: _list_alltoall(g, t, [E(_split(s, rank, size)) for s in range(n)]), every),
        ("alltoall:single_even", lambda: [x(50, (n * size,)), E(n * size)],
         lambda g, t: (dist.all_to_all_single(t[1], t[0], group=g), [t[1]])[1], every),
        ("alltoall:single_uneven", lambda: [x(51, (sum(_split(rank, d, size) for d in range(n)), 2)), E(rows_out, 2)],
         lambda g, t: (dist.all_to_all_single(t[1], t[0], [_split(s, rank, size) for s in range(n)],
                                              [_split(rank, d, size) for d in range(n)], group=g), [t[1]])[1], every),
    ]
    return out


def _list_alltoall(g, t, outs):
    """``all_to_all`` of the lists ``t`` into ``outs`` on ours (``g`` None); the reference on gloo
    is ``all_to_all_single`` of the same bytes with the same splits: gloo's list form refuses
    uneven lists, and torch 2.11's gloo has no list form at all ("Backend gloo does not support
    alltoall"; it has ``alltoall_base``, ProcessGroupGloo.hpp)."""
    import torch
    import torch.distributed as dist
    if g is None:
        dist.all_to_all(outs, t)
        return outs
    flat = outs[0].new_empty(sum(o.numel() for o in outs))
    dist.all_to_all_single(flat, torch.cat(t), [o.numel() for o in outs], [i.numel() for i in t], group=g)
    return list(torch.split(flat, [o.numel() for o in outs]))


def _compare_everything(rec: Recorder, rank: int, n: int, gloo) -> None:
    sizes = tuple(int(v) for v in os.environ["TOPOCOLL_TEST_SIZES"].split(",")) if os.environ.get(
        "TOPOCOLL_TEST_SIZES") else SIZES
    for dtype in DTYPES:
        for size in sizes:
            if n > 2 and size > 1024 and dtype not in FOUR_RANK_LARGE:
                continue
            for name, make, call, ranks in _calls(rank, n, dtype, size):
                ours, ref = call(None, make()), call(gloo, make())
                if rank in ranks:
                    bad = [k for k, (a, b) in enumerate(zip(ours, ref)) if not bits_equal(a, b)]
                    rec.check(name, not bad and len(ours) == len(ref), f"{dtype} size {size}: outputs {bad} differ")


def _parts(rank: int, n: int, store) -> dict:
    """The results of :data:`PARTS`' jobs that run on ``n`` ranks, each under its part's name.  A part
    that raises (or leaves its default group made) has ``__error__`` there and its group destroyed;
    the ranks start each part together (a barrier on ``store``), so a rank that failed early does not
    time out in the next part's rendezvous while its peers still wait in the failed one.  Where the
    peers of a failed rank stay blocked in one of the part's collectives, they never reach the barrier
    and the whole shared job ends at its timeout (every module's tests then say so)."""
    import traceback

    import torch.distributed as dist
    out = {}
    for name, (path, counts) in PARTS.items():
        if n not in counts:
            continue
        module, function = path.split(":")
        try:
            out[name] = getattr(importlib.import_module(module), function)(
                rank, n, os.environ[f"TOPOCOLL_TEST_INIT_{name.upper()}"])
        except Exception:  # noqa: BLE001  (the part's tests report it; the next parts still run)
            out[name] = {"__error__": traceback.format_exc()}
        if dist.is_initialized():
            dist.destroy_process_group()
            out[name] = dict(out[name]) if isinstance(out[name], dict) else {"__result__": out[name]}
            out[name].setdefault("__error__", f"part {name} returned with its default group still made")
        store.set(f"{name}:done:{rank}", "1")
        store.wait([f"{name}:done:{r}" for r in range(n)])
    return out


def collectives_job(rank: int, n: int, init: str) -> dict:
    """:data:`PARTS`' jobs (their results under ``__parts__``); then every collective, dtype and size
    against gloo; then the rest of the checks."""
    import torch.distributed as dist

    import kernels.pytorch  # noqa: F401
    t = time.monotonic()
    host, port = os.environ["TOPOCOLL_TEST_INIT_PARTS"].removeprefix("tcp://").rsplit(":", 1)
    store = dist.TCPStore(host, int(port), n, rank == 0, timeout=timedelta(seconds=300))   # lives to the end
    parts = _parts(rank, n, store)
    dist.init_process_group("topocoll", init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    rec = Recorder()
    rec.out["__parts__"] = parts
    rec.out["__parts_s__"] = time.monotonic() - t
    t0 = time.monotonic()
    _compare_everything(rec, rank, n, gloo)
    t1 = time.monotonic()
    from _torch_more import more_checks
    more_checks(rec, rank, n, gloo)
    t2 = time.monotonic()
    from _torch_ddp import ddp_checks
    ddp_checks(rec, rank, n, gloo)
    t3 = time.monotonic()
    from _coalesced_jobs import coalesced_refusals        # tests/kernels/pytorch: one job for every module
    from _parity_jobs import parity_checks
    coalesced_refusals(rec, rank, n)
    parity_checks(rec, rank, n, gloo)
    t4 = time.monotonic()
    dist.destroy_process_group()
    from _torch_more import backend_string_checks
    backend_string_checks(rec, rank, n)
    if n == 2:
        from _torch_ddp import fsdp_checks
        fsdp_checks(rec, rank, n)
        _dead_rank(rec, rank, n)
    rec.out["__time__"] = {"compare_s": t1 - t0, "more_s": t2 - t1, "ddp_s": t3 - t2,
                        "coalesced_and_parity_s": t4 - t3, "backend_strings_s": time.monotonic() - t4}
    return rec.out


def _dead_rank(rec: Recorder, rank: int, n: int) -> None:
    """The last rank leaves its result and exits without a word before the second call of a new
    group; the others' call must end with an error well within the group's timeout (10 s)."""
    import torch
    import torch.distributed as dist
    from _torch_dist import write_result
    dist.init_process_group("topocoll", init_method=os.environ["TOPOCOLL_TEST_INIT4"], rank=rank, world_size=n,
                            timeout=timedelta(seconds=10))
    x = torch.ones(1000)
    dist.all_reduce(x)
    if rank == n - 1:
        write_result(rank, rec.out)
        os._exit(0)
    t0 = time.monotonic()
    try:
        dist.all_reduce(x)
        error = None
    except RuntimeError as e:
        error = f"{type(e).__name__}: {e}"[:300]
    elapsed = time.monotonic() - t0
    rec.out["__dead_rank__"] = {"elapsed_s": elapsed, "error": error}
    rec.check("dead_rank", error is not None and elapsed < 10 + 5, f"after {elapsed:.1f} s: {error}")


def stuck_job(rank: int, n: int, init: str) -> dict:
    """A job that never ends on time (the harness's own test: its timeout shows where each rank was)."""
    time.sleep(120)
    return {}

"""The torch backend checks beyond "same as gloo on integer data" (see ``_torch_jobs``):
random-valued sums within the summation error bound, avg and premul_sum against float64,
async Work and futures, coalesced calls, point to point, barrier, subgroups with their own plan,
bad input raised on every rank before any data moves, and the backend strings."""

from __future__ import annotations

import time
from datetime import timedelta

#: unit roundoff of each floating dtype (2**-p, p = significand bits)
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def _gathered(t, gloo, n):
    """Every rank's ``t`` (float64), stacked, through gloo (the reference's own view)."""
    import torch
    import torch.distributed as dist
    parts = [torch.empty_like(t) for _ in range(n)]
    dist.all_gather(parts, t, group=gloo)
    return torch.stack([p.double() for p in parts])


def _random_sums(rec, rank: int, n: int, gloo) -> None:
    """Sum, avg and premul_sum of normal random values: |ours - exact| <= (n + 1) u sum|x| + u|y|
    (any summation order is within (n-1) u sum|x| of the exact sum; u: the dtype's unit
    roundoff, one more u for premul's scaling and one for the final rounding); gloo's sum is held
    to the same bound, and integer avg is gloo's sum divided by n toward zero."""
    import torch
    import torch.distributed as dist
    for dtype, u in UNIT_ROUNDOFF.items():
        dt = getattr(torch, dtype)
        for size in (7, 1024, 1 << 16):
            x = torch.randn(size, generator=torch.Generator().manual_seed(17 * rank + size)).to(dt)
            xs = _gathered(x, gloo, n)
            for name, op, scale in (("sum", dist.ReduceOp.SUM, 1.0), ("avg", dist.ReduceOp.AVG, 1.0 / n),
                                    ("premul_sum", dist._make_nccl_premul_sum(0.5), 0.5)):
                y = x.clone()
                dist.all_reduce(y, op=op)
                exact = xs.sum(0) * scale
                bound = (n + 1) * u * xs.abs().sum(0) * scale + u * exact.abs() + 1e-30
                err = (y.double() - exact).abs()
                rec.check(f"random:{name}", bool((err <= bound).all()),
                          f"{dtype} size {size}: max error {float(err.max()):.3g} over bound")
            g = x.clone()
            dist.all_reduce(g, group=gloo)
            rec.check("random:gloo_within_bound", bool(((g.double() - xs.sum(0)).abs()
                                                        <= (n + 1) * u * xs.abs().sum(0) + 1e-30).all()), dtype)
    for dtype in ("int64", "uint8"):
        x = torch.randint(0, 200, (1000,), generator=torch.Generator().manual_seed(rank)).to(getattr(torch, dtype))
        s, a = x.clone(), x.clone()
        dist.all_reduce(s, group=gloo)
        dist.all_reduce(a, op=dist.ReduceOp.AVG)
        rec.check("random:int_avg", bits_equal(a, torch.div(s, n, rounding_mode="trunc")), dtype)


def bits_equal(a, b) -> bool:
    from _torch_jobs import bits_equal as eq
    return eq(a, b)


def _async_coalesced_p2p(rec, rank: int, n: int, gloo) -> None:
    import torch
    import torch.distributed as dist
    x = torch.arange(100, dtype=torch.float32) * (rank + 1)
    ref = x.clone()
    dist.all_reduce(ref, group=gloo)
    work = dist.all_reduce(x, async_op=True)
    fut = work.get_future()
    work.wait()
    rec.check("async:future", bits_equal(fut.value()[0], ref) and fut.value()[0] is x and work.is_completed())
    a, b = torch.full((5,), float(rank)), torch.arange(9, dtype=torch.float64) + rank
    with dist._coalescing_manager():
        dist.all_reduce(a)
        dist.all_reduce(b)
    ra, rb = torch.full((5,), float(rank)), torch.arange(9, dtype=torch.float64) + rank
    dist.all_reduce(ra, group=gloo)
    dist.all_reduce(rb, group=gloo)
    rec.check("coalesced:allreduce", bits_equal(a, ra) and bits_equal(b, rb))
    outs = [torch.empty(3 * n), torch.empty(2 * n)]
    ins = [torch.full((3,), float(rank)), torch.full((2,), rank + 0.5)]
    with dist._coalescing_manager():
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    want = [torch.arange(n, dtype=torch.float32).repeat_interleave(3),
            (torch.arange(n, dtype=torch.float32) + 0.5).repeat_interleave(2)]
    rec.check("coalesced:allgather_into_tensor", all(bits_equal(o, w) for o, w in zip(outs, want)))
    right, left = (rank + 1) % n, (rank - 1) % n
    got = torch.empty(4, dtype=torch.int64)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, torch.full((4,), rank, dtype=torch.int64), right, tag=3),
                                   dist.P2POp(dist.irecv, got, left, tag=3)])
    for r in reqs:
        r.wait()
    rec.check("p2p:ring", bits_equal(got, torch.full((4,), left, dtype=torch.int64)))
    if rank == 0:
        time.sleep(0.3)
    t0 = time.monotonic()
    dist.barrier()
    waited = time.monotonic() - t0
    rec.check("barrier:waits", rank == 0 or waited > 0.2, f"returned after {waited:.3f} s")


def _subgroups(rec, rank: int, n: int) -> None:
    import torch
    import torch.distributed as dist
    ranks = [0, 1] if n > 2 else [0]
    sub = dist.new_group(ranks, backend="topocoll")
    if rank in ranks:
        x = torch.full((10,), float(rank + 1))
        dist.all_reduce(x, group=sub)
        rec.check("subgroup:allreduce", bits_equal(x, torch.full((10,), float(sum(r + 1 for r in ranks)))))
        rec.check("subgroup:own_plan", sub.runner.selector.topology.num_gpus == len(ranks),
                  f"plans for {sub.runner.selector.topology.num_gpus} ranks")
    if n == 4:                                   # DeviceMesh 2 x 2: each dimension a 2-rank topocoll group
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        for dim, peers in (("dp", [rank % 2, rank % 2 + 2]), ("tp", [rank // 2 * 2, rank // 2 * 2 + 1])):
            g = mesh.get_group(dim)
            x = torch.full((3,), float(rank))
            dist.all_reduce(x, group=g)
            rec.check("subgroup:device_mesh_" + dim, bits_equal(x, torch.full((3,), float(sum(peers))))
                      and dist.get_process_group_ranks(g) == peers and g.runner.selector.topology.num_gpus == 2,
                      f"{dist.get_process_group_ranks(g)}: {x.tolist()}")


def _expect(rec, name: str, cls: str, fn, unchanged=None, says: str = "") -> None:
    """``fn()`` raises ``cls`` (a TopocollError and a RuntimeError; its message one line, matching
    the regular expression ``says``); ``unchanged``: (tensor, copy taken before) that must still
    be equal (no data moved)."""
    import re

    from topo_probe.errors import TopocollError
    try:
        fn()
        rec.check(name, False, "no error raised")
    except RuntimeError as e:
        ok = type(e).__name__ == cls and isinstance(e, TopocollError) and (
            not says or (re.search(says, str(e)) is not None and "\n" not in str(e)))
        rec.check(name, ok, f"{type(e).__name__}: {e}")
    if unchanged is not None:
        rec.check(name + "_untouched", bits_equal(*unchanged))


def _bad_inputs(rec, rank: int, n: int) -> None:
    import torch
    import torch.distributed as dist
    last = n - 1
    x = torch.arange(8, dtype=torch.float32) + rank
    before = x.clone()
    noncontig = torch.zeros(2, 4).t() if rank == last else torch.zeros(4, 2)
    _expect(rec, "bad:noncontiguous", "BadTensor", lambda: dist.all_reduce(noncontig))
    float8 = torch.zeros(8, dtype=torch.float8_e4m3fn) if rank == last else torch.zeros(8)
    _expect(rec, "bad:unsupported_dtype", "BadTensor", lambda: dist.all_reduce(float8))
    meta = torch.empty(8, device="meta") if rank == 0 else x
    _expect(rec, "bad:device", "BadTensor", lambda: dist.all_reduce(meta), (x, before) if rank else None)
    mixed = x.double() if rank == last else x
    _expect(rec, "bad:dtype", "CollectiveMismatch", lambda: dist.all_reduce(mixed),
            (x, before) if rank != last else None)
    shaped = torch.zeros(9) if rank == last else x
    _expect(rec, "bad:shape", "CollectiveMismatch", lambda: dist.all_reduce(shaped),
            None if rank == last else (x, before))
    splits = [1] * n
    sent = [2] + [0] * (n - 1) if rank == last else splits        # the last rank sends rank 0 two
    out = torch.zeros(n)
    _expect(rec, "bad:splits", "CollectiveMismatch",
            lambda: dist.all_to_all_single(out, torch.ones(sum(sent)), splits, sent), (out, torch.zeros(n)))
    _expect(rec, "bad:split_sum", "BadTensor", lambda: dist.all_to_all_single(out, torch.ones(n), splits,
                                                                              [2] * n if rank == 0 else splits))
    _expect(rec, "bad:op", "UnsupportedCall", lambda: dist.all_reduce(x, op=dist.ReduceOp.BAND))
    dist.all_reduce(x)
    rec.check("bad:group_still_works", bits_equal(x, (torch.arange(8, dtype=torch.float32) * n + n * (n - 1) / 2)))


def premul_checks(rec, rank: int, n: int) -> None:
    """PREMUL_SUM as torch's NCCL group runs it: sum over ranks of factor x input (a float or a
    1-element tensor) on all_reduce, reduce_scatter (tensor, list, coalesced) and reduce, the
    reduce_scatter's input and the non-root's reduce tensor unchanged (float32 integer-valued
    data: exact); an integer tensor raises BadTensor on every rank, its tensor untouched."""
    import torch
    import torch.distributed as dist
    k = 4
    for name, factor, f in (("float", 2.0, 2.0), ("tensor", torch.tensor([3.0]), 3.0)):
        op = lambda: dist._make_nccl_premul_sum(factor)                                  # noqa: E731
        mine = lambda r: torch.arange(n * k, dtype=torch.float32) + 10 * r                # noqa: E731
        want = sum(f * mine(r) for r in range(n))
        inp, out = mine(rank), torch.empty(k)
        dist.reduce_scatter_tensor(out, inp, op=op())
        rec.check(f"premul:reduce_scatter_tensor_{name}", bits_equal(out, want[rank * k:(rank + 1) * k])
                  and bits_equal(inp, mine(rank)), f"{out.tolist()} input {inp.tolist()}")
        ins, out = list(mine(rank).split(k)), torch.empty(k)
        dist.reduce_scatter(out, ins, op=op())
        rec.check(f"premul:reduce_scatter_list_{name}", bits_equal(out, want[rank * k:(rank + 1) * k])
                  and bits_equal(torch.cat(ins), mine(rank)), f"{out.tolist()}")
        ins, outs = [mine(rank), mine(rank)[:2 * n]], [torch.empty(k), torch.empty(2)]
        with dist._coalescing_manager():
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i, op=op())
        rec.check(f"premul:reduce_scatter_coalesced_{name}", bits_equal(outs[0], want[rank * k:(rank + 1) * k])
                  and bits_equal(outs[1], want[:2 * n][rank * 2:rank * 2 + 2]) and bits_equal(ins[0], mine(rank)),
                  f"{[o.tolist() for o in outs]}")
        x, root = mine(rank), 1 % n
        dist.reduce(x, root, op=op())
        rec.check(f"premul:reduce_{name}", bits_equal(x, want if rank == root else mine(rank)), f"{x.tolist()}")
        x = mine(rank)
        dist.all_reduce(x, op=op())
        rec.check(f"premul:allreduce_{name}", bits_equal(x, want), f"{x.tolist()}")
    x = torch.arange(8, dtype=torch.int64) + rank
    premul = dist._make_nccl_premul_sum(2.0)
    calls = {"allreduce": lambda: dist.all_reduce(x, op=premul),
             "reduce": lambda: dist.reduce(x, 0, op=premul),
             "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(x[:8 // n], x, op=premul),
             "reduce_scatter_list": lambda: dist.reduce_scatter(x[:1], list(x[:n].split(1)), op=premul)}
    for name, call in calls.items():
        _expect(rec, "premul:int_" + name, "BadTensor", call, (x, torch.arange(8, dtype=torch.int64) + rank),
                "PREMUL_SUM takes float16, float32, bfloat16 or float64 tensors, not int64")
    y = torch.full((3,), float(rank))

    def coalesced():                           # the float tensor comes first; neither changes
        with dist._coalescing_manager():
            dist.all_reduce(y, op=premul)
            dist.all_reduce(x, op=premul)
    _expect(rec, "premul:int_allreduce_coalesced", "BadTensor", coalesced, (y, torch.full((3,), float(rank))))
    rec.check("premul:int_allreduce_coalesced_int_untouched", bits_equal(x, torch.arange(8, dtype=torch.int64) + rank))


def more_checks(rec, rank: int, n: int, gloo) -> None:
    _random_sums(rec, rank, n, gloo)
    _async_coalesced_p2p(rec, rank, n, gloo)
    _subgroups(rec, rank, n)
    _bad_inputs(rec, rank, n)
    premul_checks(rec, rank, n)


def backend_string_checks(rec, rank: int, n: int) -> None:
    """``cpu:gloo,cuda:topocoll`` leaves CPU tensors to gloo; ``cpu:topocoll,cuda:topocoll`` runs
    them on our schedules (the runner's last choice says which ran)."""
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _get_default_group
    for k, (spec, ours) in enumerate((("cpu:gloo,cuda:topocoll", False), ("cpu:topocoll,cuda:topocoll", True))):
        dist.init_process_group(spec, init_method=os.environ[f"TOPOCOLL_TEST_INIT{k + 2}"], rank=rank, world_size=n,
                                timeout=timedelta(seconds=60))
        x = torch.full((16,), float(rank))
        dist.all_reduce(x)
        pg = _get_default_group()
        ran = bool(getattr(pg, "runner", None) and pg.runner.last_label)
        rec.check("backend_string:" + spec, bits_equal(x, torch.full((16,), float(n * (n - 1) // 2))) and ran == ours,
                  f"ours ran: {ran}")
        dist.destroy_process_group()

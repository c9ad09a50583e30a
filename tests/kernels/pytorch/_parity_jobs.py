"""The checks of test_gloo_parity.py (run inside the shared ``_torch_jobs.collectives_job``): calls a
user of torch.distributed makes beyond the core collectives, each made on the default ``topocoll`` group
and on a gloo group of the same ranks, the two outcomes compared: equal values, or both refused
(``outcome``).  Object collectives, ``batch_isend_irecv`` with mixed sizes both ways, list
``all_to_all`` with uneven and empty blocks, list ``reduce_scatter`` with empty tensors,
bool / int8 / float64 / complex64 tensors under every reduce op, 0-dim tensors, several
``async_op`` works waited in reverse order with the Work API, and DTensor ``redistribute`` on a
1-D mesh (and a 2 x 2 mesh on 4 ranks) against the tensors it stands for."""

from __future__ import annotations

from _torch_jobs import Recorder, bits_equal


def outcome(fn):
    """``("ok", value)`` or ``("refused", class name)`` of ``fn()``."""
    try:
        return "ok", fn()
    except (RuntimeError, ValueError, TypeError) as e:
        return "refused", type(e).__name__ + ": " + str(e).splitlines()[0][:160]


def _same(a, b) -> bool:
    """``a`` (ours) equals ``b`` (gloo's) bit for bit; a bool tensor's bytes equal gloo's read as
    booleans (gloo's SUM of bools leaves a byte 2 in a bool tensor; ours, as NCCL's MAX, 1)."""
    import torch
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and b.dtype == torch.bool:
        return bits_equal(a, b.view(torch.uint8).ne(0))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return bits_equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def compare(rec: Recorder, name: str, ours, gloos, refused: str = "") -> None:
    """The two outcomes agree: both ran with equal values, or (where ``refused`` names the class we
    raise, else never) both refused, ours with that class."""
    (k1, v1), (k2, v2) = ours, gloos
    if refused:
        ok = k1 == k2 == "refused" and v1.startswith(refused + ":")
    else:
        ok = k1 == k2 == "ok" and _same(v1, v2)
    rec.check(name, ok, f"topocoll {k1} {v1 if k1 == 'refused' else ''} / gloo {k2} {v2 if k2 == 'refused' else ''}"
              if k1 != k2 or k1 == "refused" else f"values differ: {v1} / {v2}")


def both(rec: Recorder, name: str, call, gloo, refused: str = "") -> None:
    """``call(group)`` (returns what it wrote) on topocoll (the default group) and on gloo; ``refused``:
    the class we raise where both refuse (:func:`compare`)."""
    compare(rec, name, outcome(lambda: call(None)), outcome(lambda: call(gloo)), refused)


def where_gloo_refuses(rec: Recorder, name: str, call, gloo, want) -> None:
    """Where we follow NCCL and gloo refuses: gloo refuses, ours equals ``want`` (an independent
    reference)."""
    ours, theirs = outcome(lambda: call(None)), outcome(lambda: call(gloo))
    rec.check(name, theirs[0] == "refused" and ours[0] == "ok" and _same(ours[1], want),
              f"topocoll {ours} / gloo {theirs[0]} / want {want}")


def refused_like_nccl(rec: Recorder, name: str, call, cls: str) -> None:
    """Where we follow NCCL's refusal (gloo runs it): ours raises ``cls`` on every rank."""
    ours = outcome(lambda: call(None))
    rec.check(name, ours[0] == "refused" and ours[1].startswith(cls + ":"), str(ours))


def _objects(rec: Recorder, rank: int, n: int, gloo) -> None:
    import torch.distributed as dist
    mine = {"rank": rank, "pad": "x" * (37 * rank + 1), "list": list(range(rank))}

    def gather_all(g):
        out = [None] * n
        dist.all_gather_object(out, mine, group=g)
        return out

    def bcast(g):
        objs = [mine, rank * 1.5] if rank == 1 % n else [None, None]
        dist.broadcast_object_list(objs, src=1 % n, group=g)
        return objs

    def gather_to_root(g):
        out = [None] * n if rank == 0 else None
        dist.gather_object(mine, out, dst=0, group=g)
        return out

    def scatter_from_root(g):
        out = [None]
        dist.scatter_object_list(out, [{"to": d, "blob": "y" * d} for d in range(n)] if rank == 0 else None, src=0,
                                 group=g)
        return out
    for name, call in (("all_gather_object", gather_all), ("broadcast_object_list", bcast),
                       ("gather_object", gather_to_root), ("scatter_object_list", scatter_from_root)):
        both(rec, "objects:" + name, call, gloo)


def _p2p_and_lists(rec: Recorder, rank: int, n: int, gloo) -> None:
    import torch
    import torch.distributed as dist
    right, left = (rank + 1) % n, (rank - 1) % n

    def batch(g):
        got_l, got_r = torch.empty(3 + left, dtype=torch.int64), torch.empty(50 + right)
        ops = [dist.P2POp(dist.isend, torch.arange(3 + rank, dtype=torch.int64), right, g),
               dist.P2POp(dist.irecv, got_l, left, g),
               dist.P2POp(dist.isend, torch.full((50 + rank,), rank + 0.5), left, g),
               dist.P2POp(dist.irecv, got_r, right, g)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return [got_l, got_r]
    both(rec, "lists:batch_isend_irecv", batch, gloo)

    def size(s, d):                                  # elements rank s sends rank d: uneven, some empty
        return (s * 3 + d * 5) % 4

    def a2a(g):
        ins = [torch.arange(size(rank, d), dtype=torch.float32) + 100 * rank + 10 * d for d in range(n)]
        outs = [torch.full((size(s, rank),), -1.0) for s in range(n)]
        dist.all_to_all(outs, ins, group=g)
        return outs
    want = [torch.arange(size(s, rank), dtype=torch.float32) + 100 * s + 10 * rank for s in range(n)]
    where_gloo_refuses(rec, "lists:all_to_all_uneven", a2a, gloo, want)    # gloo 2.13: "invalid tensor size"

    def rs_empty(g):
        out = torch.full((0,), -1.0)
        dist.reduce_scatter(out, [torch.zeros(0) for _ in range(n)], group=g)
        return [out]
    both(rec, "lists:reduce_scatter_empty", rs_empty, gloo)

    def rs_uneven(g):                                # rank d's block has d + 1 elements
        out = torch.full((rank + 1,), -1.0)
        dist.reduce_scatter(out, [torch.arange(d + 1, dtype=torch.float32) * (rank + 1) + d for d in range(n)],
                            group=g)
        return [out]
    both(rec, "lists:reduce_scatter_uneven", rs_uneven, gloo)
    s = n * (n + 1) // 2
    kind, got = outcome(lambda: rs_uneven(None))
    want = torch.arange(rank + 1, dtype=torch.float32) * s + n * rank
    rec.check("lists:reduce_scatter_uneven_by_hand", kind == "ok" and bits_equal(got[0], want), f"{got} != {want}")
    for name, op in (("max", dist.ReduceOp.MAX), ("product", dist.ReduceOp.PRODUCT)):   # padding never shows
        both(rec, f"lists:reduce_scatter_uneven_{name}", lambda g, op=op: (lambda o: (dist.reduce_scatter(
            o, [torch.arange(d + 1, dtype=torch.float32) + rank + 1 for d in range(n)], op=op, group=g), [o])[1])(
            torch.full((rank + 1,), -1.0)), gloo)

    def ag_uneven(g):
        outs = [torch.full((s + 1,), -1.0) for s in range(n)]
        dist.all_gather(outs, torch.full((rank + 1,), float(rank)), group=g)
        return outs
    both(rec, "lists:all_gather_uneven", ag_uneven, gloo, refused="BadTensor")     # gloo: "invalid tensor size"


def _dtypes_and_0dim(rec: Recorder, rank: int, n: int, gloo) -> None:
    import torch
    import torch.distributed as dist
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
           "product": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.AVG, "band": dist.ReduceOp.BAND}
    values = {"bool": torch.tensor([True, False, rank % 2 == 0, False]),
              "int8": torch.tensor([1, -2, 3, rank - 1], dtype=torch.int8),
              "float64": torch.tensor([0.5, -1.25, 3.0, rank + 0.125], dtype=torch.float64),
              "complex64": torch.tensor([1 + 2j, -0.5j, 3, rank + 1j], dtype=torch.complex64)}
    for dtype, base in values.items():
        for name, op in ops.items():
            call = lambda g, base=base, op=op: (lambda t: (dist.all_reduce(t, op=op, group=g), t)[1])(base.clone())
            if name == "band" and dtype in ("bool", "int8"):      # NCCL: "Cannot use ReduceOp.BAND with NCCL"
                refused_like_nccl(rec, f"dtypes:allreduce_{dtype}_{name}", call, "UnsupportedCall")
            elif name == "avg" and dtype == "bool":             # gloo and NCCL refuse; it gave all False
                refused_like_nccl(rec, f"dtypes:allreduce_{dtype}_{name}", call, "BadTensor")
            elif name == "avg" and dtype == "int8":             # NCCL's avg of integers: the sum / n toward 0
                s = base.clone().to(torch.int64)
                dist.all_reduce(s, group=gloo)
                where_gloo_refuses(rec, f"dtypes:allreduce_{dtype}_{name}", call, gloo,
                                   torch.div(s, n, rounding_mode="trunc").to(torch.int8))
            else:                                               # torch refuses complex max/min/product/band
                both(rec, f"dtypes:allreduce_{dtype}_{name}", call, gloo, refused="ValueError" if (
                    dtype == "complex64" and name != "sum" and name != "avg") else "UnsupportedCall" if (
                    name == "band") else "")

        def gather(g, base=base):
            out = torch.empty(n * 4, dtype=base.dtype)
            dist.all_gather_into_tensor(out, base.clone(), group=g)
            return out
        both(rec, f"dtypes:allgather_{dtype}", gather, gloo)

        def bcast(g, base=base):
            t = base.clone()
            dist.broadcast(t, 1 % n, group=g)
            return t
        both(rec, f"dtypes:broadcast_{dtype}", bcast, gloo)
    zero = torch.tensor(float(rank + 2))
    calls = {"allreduce": lambda g: (lambda t: (dist.all_reduce(t, group=g), t)[1])(zero.clone()),
             "broadcast": lambda g: (lambda t: (dist.broadcast(t, 0, group=g), t)[1])(zero.clone()),
             "all_gather": lambda g: (lambda o: (dist.all_gather(o, zero.clone(), group=g), o)[1])(
                 [torch.tensor(-1.0) for _ in range(n)]),
             "all_gather_into_tensor": lambda g: (lambda o: (dist.all_gather_into_tensor(o, zero.clone(), group=g),
                                                             o)[1])(torch.empty(n)),
             "reduce": lambda g: (lambda t: (dist.reduce(t, 0, group=g), t if rank == 0 else None)[1])(zero.clone())}
    for name, call in calls.items():
        if name == "all_gather_into_tensor":               # NCCL checks elements only; gloo the shapes
            where_gloo_refuses(rec, "zero_dim:" + name, call, gloo, torch.arange(n, dtype=torch.float32) + 2)
        else:
            both(rec, "zero_dim:" + name, call, gloo)


def _work_api(rec: Recorder, rank: int, n: int, gloo) -> None:
    """Five async calls outstanding, waited in reverse order; is_completed, exception, a chained future."""
    import torch
    import torch.distributed as dist

    def run(g):
        ts = [torch.full((2 ** k,), float(rank + k)) for k in range(5)]
        works = [dist.all_reduce(t, group=g, async_op=True) for t in ts]
        chained = works[2].get_future().then(lambda f: f.value()[0] * 2)
        for w in reversed(works):
            w.wait()
        flags = [w.is_completed() for w in works] + [w.exception() is None for w in works]
        return [*ts, chained.wait(), torch.tensor(flags)]
    both(rec, "work:reverse_wait", run, gloo)


def _dtensor(rec: Recorder, rank: int, n: int) -> None:
    """DTensor redistribute on a 1-D mesh (and 2 x 2 on 4 ranks): each placement change's local
    shard and full tensor against the global tensor it stands for (a Partial's: the sum of every
    rank's local tensor)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
    full = torch.arange(4.0 * n * 3).reshape(4 * n, 3)
    meshes = [("1d", init_device_mesh("cpu", (n,)))]
    if n == 4:
        meshes.append(("2x2", init_device_mesh("cpu", (2, 2))))
    for mname, mesh in meshes:
        dims = mesh.ndim
        rep, sh = [Replicate()] * dims, [Shard(0)] * dims
        d = DTensor.from_local(full.clone(), mesh, rep)
        s = d.redistribute(mesh, sh)
        rows = 4 * n // n if dims == 1 else 4 * n // 4
        k = rank
        rec.check(f"dtensor:{mname}_replicate_to_shard", bits_equal(s.to_local(), full[k * rows:(k + 1) * rows]))
        r = s.redistribute(mesh, rep)
        rec.check(f"dtensor:{mname}_shard_to_replicate", bits_equal(r.to_local(), full))
        mine = full * (rank + 1)
        total = full * sum(range(1, n + 1))
        p = DTensor.from_local(mine, mesh, [Partial()] * dims)
        rec.check(f"dtensor:{mname}_partial_to_replicate", bits_equal(p.redistribute(mesh, rep).to_local(), total))
        p = DTensor.from_local(mine, mesh, [Partial()] * dims)
        rec.check(f"dtensor:{mname}_partial_to_shard", bits_equal(p.redistribute(mesh, sh).to_local(),
                                                                  total[k * rows:(k + 1) * rows]))



def parity_checks(rec: Recorder, rank: int, n: int, gloo) -> None:
    """Every family of test_gloo_parity.py, ``gloo`` a gloo group of the same ranks."""
    _objects(rec, rank, n, gloo)
    _p2p_and_lists(rec, rank, n, gloo)
    _dtypes_and_0dim(rec, rank, n, gloo)
    _work_api(rec, rank, n, gloo)
    _dtensor(rec, rank, n)
    _strides_and_coalesced_lists(rec, rank, n, gloo)
    _exact_ops(rec, rank, n, gloo)
    from _ddp_options_jobs import ddp_options
    ddp_options(rec, rank, n, gloo)


def _odd(t, rank: int):
    """``t``'s values in a tensor whose size-1 dimensions have a stride that depends on ``rank``
    (1 + 3 * rank): contiguous for torch (``is_contiguous()`` skips them), strides unlike another
    rank's."""
    import torch
    stride = [1 + 3 * rank if d == 1 else s for d, s in zip(t.shape, t.contiguous().stride())]
    return torch.as_strided(t.contiguous().clone(), t.shape, stride)


def _strides_and_coalesced_lists(rec: Recorder, rank: int, n: int, gloo) -> None:
    """Tensors whose size-1 dimensions have rank-dependent strides (a [4, 1] tensor with strides
    (1, 1) on rank 0, (1, 4) on rank 1 ...; a [2, 3, 1, 1] one) in list all_gather,
    all_gather_into_tensor and all_gather_coalesced equal gloo's; all_gather_coalesced in torch's
    documented layout (``outs[r][k]``: rank r's k-th input; before, ours read ``outs[k][r]``: n
    inputs of one size came back transposed, other shapes were refused) equals gloo's, and one
    list for n ranks is refused by both; a transposed input on one rank: BadTensor on every rank."""
    import warnings

    import torch
    import torch.distributed as dist
    warnings.simplefilter("ignore", FutureWarning)
    col = lambda r: torch.arange(4.0).view(4, 1) + 10 * r       # noqa: E731
    img = lambda r: torch.arange(6.0).view(2, 3, 1, 1) - r       # noqa: E731

    def listed(make):
        def call(g):
            outs = [_odd(torch.zeros_like(make(0)), (rank + k) % n) for k in range(n)]
            dist.all_gather(outs, _odd(make(rank), rank), group=g)
            return [o.contiguous() for o in outs]
        return call
    both(rec, "strides:list_col", listed(col), gloo)
    both(rec, "strides:list_img", listed(img), gloo)
    both(rec, "strides:into_tensor", lambda g: (lambda o: (dist.all_gather_into_tensor(
        o, _odd(col(rank), rank), group=g), o)[1])(torch.zeros(4 * n, 1)), gloo)

    def coalesced(shapes, lists=n, odd=False):
        def call(g):
            ins = [torch.full(s, float(10 * rank + k)) for k, s in enumerate(shapes)]
            ins = [_odd(t, rank) for t in ins] if odd else ins
            outs = [[torch.full(s, -1.0) for s in shapes] for _ in range(lists)]
            dist.all_gather_coalesced(outs, ins, group=g)
            return [[o.contiguous() for o in lst] for lst in outs]
        return call
    both(rec, "strides:coalesced_same_shapes", coalesced([(3,)] * n), gloo)
    both(rec, "strides:coalesced_mixed_shapes", coalesced([(2,), (3,), (1,)]), gloo)
    both(rec, "strides:coalesced_odd_strides", coalesced([(4, 1), (2, 3, 1, 1)], odd=True), gloo)
    both(rec, "strides:coalesced_one_list", coalesced([(2,), (3,)], lists=1), gloo, refused="BadTensor")
    bad = torch.arange(8.0).view(2, 4).t() if rank == n - 1 else torch.zeros(4, 2)
    got = outcome(lambda: dist.all_gather([torch.zeros(4, 2) for _ in range(n)], bad))
    rec.check("strides:noncontiguous_refused", got[0] == "refused" and got[1].startswith("BadTensor:"), str(got))


def _exact_ops(rec: Recorder, rank: int, n: int, gloo) -> None:
    """Ops exact in any order, now reduced in the transfers' order (``dtypes.order_free``), equal
    gloo's bit for bit: int64 / uint8 / float32 max and min, int64 sum (wrapping), on tensors over
    the 2 MiB the fused one-round path takes, so the schedule's share runs them; float32 holds
    infinities (no NaN or signed zeros: gloo's rule for them is its own)."""
    import torch
    import torch.distributed as dist
    g = torch.Generator().manual_seed(rank)
    big = (2 << 20) // 4 + 7                    # elements: more than 2 MiB of float32
    values = {"int64": torch.randint(-2**62, 2**62, (big,), generator=g),
              "uint8": torch.randint(0, 256, (big * 4,), generator=g, dtype=torch.uint8),
              "float32": torch.randn(big, generator=g)}
    values["float32"][rank::7] = float("inf") if rank % 2 else -float("inf")
    cases = [(d, op) for d in values for op in (dist.ReduceOp.MAX, dist.ReduceOp.MIN)] + [("int64", dist.ReduceOp.SUM)]
    for dtype, op in cases:
        call = lambda grp, t=values[dtype], op=op: (lambda x: (dist.all_reduce(x, op=op, group=grp), x)[1])(t.clone())
        both(rec, f"exact:allreduce_{dtype}_{str(op).rsplit('.', 1)[-1].lower()}", call, gloo)

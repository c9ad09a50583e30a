"""The job of test_layouts_and_reinit.py (run on spawned ranks by ``_torch_dist.run_job``): the
``topocoll`` group made, destroyed and made again on the same store in one process (as a script
under torchrun does: the agent's store outlives the group) runs its calls; collectives on dense
``channels_last`` and ``channels_last_3d`` tensors (which torch's NCCL group takes) equal torch's
gloo on plain contiguous copies of the same values bit for bit, outputs in their own layout; and a
transposed, strided-slice or overlapping (expanded) tensor on one rank raises BadTensor on every
rank, the others' tensors untouched, after which the group goes on in step; so do tensors of one call
in different memory layouts (BadTensor) and ranks in different layouts (CollectiveMismatch), while
tensors whose layouts coincide run as on gloo."""

from __future__ import annotations

from datetime import timedelta

from _fused_jobs import _expect_everywhere, _in_step
from _torch_jobs import Recorder, bits_equal


def _dense_inputs(rank: int):
    """format name -> (a float32 tensor in that memory format, distinct per rank: exact sums, format)."""
    import torch
    base = torch.arange(96, dtype=torch.float32) + 1000 * rank
    return {"channels_last": (base[:48].reshape(2, 3, 2, 4).contiguous(memory_format=torch.channels_last),
                              torch.channels_last),
            "channels_last_3d": (base.reshape(2, 3, 2, 2, 4).contiguous(memory_format=torch.channels_last_3d),
                                 torch.channels_last_3d)}


def _calls(n: int):
    """name -> call(t, group) returning the tensors it wrote; outputs made in ``t``'s memory format."""
    import torch
    import torch.distributed as dist

    def like(t, rows):                     # t's layout, ``rows`` along dim 0
        return torch.empty((rows, *t.shape[1:])).contiguous(memory_format=_format(t))

    def gather_into(t, g):
        out = like(t, n * t.shape[0])
        dist.all_gather_into_tensor(out, t, group=g)
        return [out]

    def scatter_from(t, g):
        big = torch.cat([t * (k + 1) for k in range(n)]).contiguous(memory_format=_format(t))
        out = like(t, t.shape[0])
        dist.reduce_scatter_tensor(out, big, group=g)
        return [out]

    def all_to_all(t, g):
        big = torch.cat([t + k for k in range(n)]).contiguous(memory_format=_format(t))
        out = like(t, n * t.shape[0])
        dist.all_to_all_single(out, big, group=g)
        return [out]

    def all_gather(t, g):
        outs = [like(t, t.shape[0]) for _ in range(n)]
        dist.all_gather(outs, t, group=g)
        return outs

    def coalesced(t, g):
        pair = [t.clone(memory_format=torch.preserve_format), t * 2]
        dist.all_reduce_coalesced(pair, group=g)
        return pair
    return {
        "all_reduce": lambda t, g: (dist.all_reduce(t, group=g), [t])[1],
        "broadcast": lambda t, g: (dist.broadcast(t, src=n - 1, group=g), [t])[1],
        "reduce": lambda t, g: (dist.reduce(t, dst=0, group=g), [t])[1],
        "all_gather": all_gather, "all_gather_into_tensor": gather_into, "reduce_scatter_tensor": scatter_from,
        "all_to_all_single": all_to_all, "coalesced": coalesced,
    }


def _format(t):
    """``t``'s memory format: channels_last(_3d) where it is laid out so, else contiguous."""
    import torch
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(t.dim())
    return fmt if fmt is not None and not t.is_contiguous() and t.is_contiguous(memory_format=fmt) \
        else torch.contiguous_format


def _ours_then_gloo(rec: Recorder, name: str, call, ours, theirs, gloo):
    """``(call(ours, None), call(theirs, gloo))``: the topocoll group's outputs, then gloo's; None
    (and a failed check) where ours raised."""
    try:
        got = call(ours, None)
    except RuntimeError as e:
        rec.check(name, False, f"{type(e).__name__}: {e}")
        return None
    return got, call(theirs, gloo)


def _dense_layouts(rec: Recorder, rank: int, n: int, gloo) -> None:
    import torch
    for call_name, call in _calls(n).items():
        for kind, (t, fmt) in _dense_inputs(rank).items():
            ran = _ours_then_gloo(rec, f"layout:{call_name}:{kind}", call, t.clone(memory_format=torch.preserve_format),
                                  t.contiguous(), gloo)
            if ran is None:
                continue
            got, want = ran
            if call_name == "reduce" and rank != 0:       # only the root's output is defined
                continue
            same = len(got) == len(want) and all(bits_equal(a, b) for a, b in zip(got, want))
            kept = all(a.is_contiguous(memory_format=fmt) and not a.is_contiguous() for a in got)
            rec.check(f"layout:{call_name}:{kind}", same and kept,
                      f"kept {kept}: {[a.flatten().tolist()[:6] for a in got]} != "
                      f"{[b.flatten().tolist()[:6] for b in want]}")


def _strided_refused(rec: Recorder, rank: int, n: int) -> None:
    """A non-dense tensor on the last rank: BadTensor everywhere, before any byte moves."""
    import torch
    import torch.distributed as dist
    last = rank == n - 1
    bad = {"transposed": lambda: torch.zeros(4, n).t(), "strided": lambda: torch.zeros(8 * n)[::2].view(n, 4),
           "overlapping": lambda: torch.zeros(1, 4).expand(n, 4)}
    for kind, make in bad.items():
        mine = make() if last else torch.arange(4.0 * n).reshape(n, 4) + rank
        out, gathered = torch.full((n, 4), -1.0), torch.full((n * n, 4), -1.0)
        calls = {"all_reduce": (lambda: dist.all_reduce(mine), mine),
                 "broadcast": (lambda: dist.broadcast(mine, src=0), mine),
                 "all_gather_into_tensor": (lambda: dist.all_gather_into_tensor(gathered, mine), gathered),
                 "coalesced": (lambda: dist.all_reduce_coalesced([torch.ones(3), mine]), mine),
                 "all_to_all_single": (lambda: dist.all_to_all_single(out, mine), out)}
        for call_name, (fn, watched) in calls.items():
            name = f"refused:{call_name}:{kind}"
            _expect_everywhere(rec, name, "BadTensor", fn, watched, "not contiguous")
            _in_step(rec, name, rank, n)


def _cl(t):
    import torch
    return t.contiguous(memory_format=torch.channels_last)


def _layout_calls(n: int, mine, out_like):
    """name -> (call, watched tensor) on ``mine`` (a 4-d tensor); outputs made by ``out_like(rows)``."""
    import torch
    import torch.distributed as dist
    rows = mine.shape[0]
    gathered, scattered, swapped = out_like(n * rows), out_like(rows // n or 1), out_like(rows)
    pair = [mine.clone(memory_format=torch.preserve_format), mine * 2]
    return {"all_reduce": (lambda: dist.all_reduce(mine), mine),
            "broadcast": (lambda: dist.broadcast(mine, src=0), mine),
            "all_gather_into_tensor": (lambda: dist.all_gather_into_tensor(gathered, mine), gathered),
            "reduce_scatter_tensor": (lambda: dist.reduce_scatter_tensor(scattered, mine), scattered),
            "all_to_all_single": (lambda: dist.all_to_all_single(swapped, mine), swapped),
            "coalesced": (lambda: dist.all_reduce_coalesced(pair), pair[0])}


def _mixed_across_ranks(rec: Recorder, rank: int, n: int) -> None:
    """Rank 0's tensors channels_last, every other rank's contiguous (same shapes): CollectiveMismatch
    naming rank 1 on every rank, tensors untouched, in step after; a one-round (48 elements) and a
    two-round (2.25 MiB) all_reduce alike."""
    import torch
    for rows, size in ((2 * n, "small"), (4 * n, "big")):
        hw = 2 if size == "small" else 48
        x = torch.arange(float(rows * 3 * hw * hw)).reshape(rows, 3, hw, hw) + rank
        mine = _cl(x) if rank == 0 else x

        def out_like(r, mine=mine):
            return torch.full((r, 3, hw, hw), -1.0).contiguous(memory_format=_format(mine))
        for call_name, (fn, watched) in _layout_calls(n, mine, out_like).items():
            name = f"across:{call_name}:{size}"
            _expect_everywhere(rec, name, "CollectiveMismatch", fn, watched,
                               "memory layout: rank 0 has channels_last, rank 1 has contiguous")
            _in_step(rec, name, rank, n)


def _mixed_within_a_call(rec: Recorder, rank: int, n: int) -> None:
    """A channels_last tensor with a contiguous one in one call, on every rank or on the last
    only: BadTensor on every rank naming the layouts, every tensor untouched, in step after."""
    import torch
    x = torch.arange(float(2 * n * 24)).reshape(2 * n, 3, 2, 4) + rank
    for where in ("every", "last"):
        mixed = where == "every" or rank == n - 1
        mine = _cl(x) if mixed else x

        def out_like(r):
            return torch.full((r, 3, 2, 4), -1.0)             # contiguous
        calls = _layout_calls(n, mine, out_like)
        del calls["all_reduce"], calls["broadcast"]            # one tensor: nothing to mix
        pair = [mine.clone(memory_format=torch.preserve_format), x.clone()]
        calls["coalesced"] = (lambda pair=pair: torch.distributed.all_reduce_coalesced(pair), pair[0])
        outs = [torch.full((2 * n, 3, 2, 4), -1.0) for _ in range(n)]
        calls["all_gather"] = (lambda outs=outs, mine=mine: torch.distributed.all_gather(outs, mine), outs[0])
        for call_name, (fn, watched) in calls.items():
            name = f"within:{call_name}:{where}"
            text = "is channels_last" if mixed else "different memory layouts"
            _expect_everywhere(rec, name, "BadTensor", fn, watched, text)
            _in_step(rec, name, rank, n)


def _coinciding_layouts(rec: Recorder, rank: int, n: int, gloo) -> None:
    """Tensors whose layouts coincide (shape (2n, 3, 1, 1), 1 element, 0 elements) made channels_last
    on rank 0 and contiguous elsewhere, or beside another layout in one call, run and equal gloo."""
    import torch
    import torch.distributed as dist
    col = torch.arange(float(6 * n)).reshape(2 * n, 3, 1, 1) + rank
    cl = _cl(torch.arange(48.0).reshape(2, 3, 2, 4) + rank)
    cases = {"all_reduce:coinciding": lambda g, c: (dist.all_reduce(c[0], group=g), c)[1],
             "all_gather_into_tensor:coinciding": lambda g, c: (dist.all_gather_into_tensor(c[1], c[0], group=g), c)[1],
             "coalesced:one_and_no_element": lambda g, c: (dist.all_reduce_coalesced(c[2:], group=g), c[2:])[1]}
    for name, call in cases.items():
        ours = [_cl(col) if rank == 0 else col.clone(), torch.zeros(2 * n * n, 3, 1, 1),
                cl.clone(memory_format=torch.preserve_format), torch.ones(1, 1, 1, 1) * rank, torch.zeros(0)]
        ran = _ours_then_gloo(rec, f"coincide:{name}", lambda c, g: call(g, c), ours, [t.contiguous() for t in ours],
                              gloo)
        if ran is None:
            continue
        got, want = ran
        rec.check(f"coincide:{name}", all(bits_equal(a, b) for a, b in zip(got, want)),
                  f"{[a.flatten().tolist()[:6] for a in got]} != {[b.flatten().tolist()[:6] for b in want]}")


def layout_job(rank: int, n: int, init: str) -> dict:
    import torch
    import torch.distributed as dist

    import kernels.pytorch  # noqa: F401  (registers the backend)
    rec = Recorder()
    host, port = init.rsplit("/", 1)[-1].split(":")
    store = dist.TCPStore(host, int(port), n, rank == 0, timeout=timedelta(seconds=60))
    for making in range(3):                  # made, destroyed, made again on the same store
        dist.init_process_group("topocoll", store=store, rank=rank, world_size=n, timeout=timedelta(seconds=20))
        x = torch.full((3,), float(rank + making))
        dist.all_reduce(x)
        rec.check(f"remade:{making}", x.tolist() == [float(sum(range(n)) + n * making)] * 3, str(x.tolist()))
        if making < 2:
            dist.destroy_process_group()
    gloo = dist.new_group(backend="gloo")
    _dense_layouts(rec, rank, n, gloo)
    _strided_refused(rec, rank, n)
    _mixed_across_ranks(rec, rank, n)
    _mixed_within_a_call(rec, rank, n)
    _coinciding_layouts(rec, rank, n, gloo)
    dist.destroy_process_group()
    return rec.out

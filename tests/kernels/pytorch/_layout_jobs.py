"""The job of test_layouts_and_reinit.py (run on spawned ranks by ``_torch_dist.run_job``): the
``topocoll`` group made, destroyed and made again on the same store in one process (as a script
under torchrun does: the agent's store outlives the group) runs its calls; collectives on dense
``channels_last`` and ``channels_last_3d`` tensors (which torch's NCCL group takes) equal torch's
gloo on plain contiguous copies of the same values bit for bit, outputs in their own layout; and a
transposed, strided-slice or overlapping (expanded) tensor on one rank raises BadTensor on every
rank, the others' tensors untouched, after which the group goes on in step."""

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


def _dense_layouts(rec: Recorder, rank: int, n: int, gloo) -> None:
    import torch
    for call_name, call in _calls(n).items():
        for kind, (t, fmt) in _dense_inputs(rank).items():
            ours, theirs = t.clone(memory_format=torch.preserve_format), t.contiguous()
            try:
                got = call(ours, None)
            except RuntimeError as e:
                rec.check(f"layout:{call_name}:{kind}", False, f"{type(e).__name__}: {e}")
                continue
            want = call(theirs, gloo)
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
    _dense_layouts(rec, rank, n, dist.new_group(backend="gloo"))
    _strided_refused(rec, rank, n)
    dist.destroy_process_group()
    return rec.out

"""The job of test_layouts_and_reinit.py (run on spawned ranks by ``_torch_dist.run_job``): the
``topocoll`` group made, destroyed and made again on the same store in one process (as a script
under torchrun does: the agent's store outlives the group) runs its calls, and calls on
non-contiguous tensors (transposed, channels_last, a strided slice) equal torch's gloo on the
same tensors bit for bit, where they raised BadTensor before (all-to-alls: gloo refuses them too)."""

from __future__ import annotations

from datetime import timedelta

from _torch_jobs import Recorder, bits_equal


def _inputs(rank: int):
    """Non-contiguous tensors of float32, distinct per rank (exact sums)."""
    import torch
    base = torch.arange(48, dtype=torch.float32) + 100 * rank
    return {"transposed": base[:12].reshape(3, 4).t(),
            "channels_last": base.reshape(2, 3, 2, 4).contiguous(memory_format=torch.channels_last),
            "strided": base[::2]}


def _calls(n: int):
    """name -> call(tensor, group) returning the tensors it wrote; each leaves its input as it found it."""
    import torch
    import torch.distributed as dist

    def all_gather(t, g):
        outs = [torch.zeros(t.shape[::-1]).t() if t.dim() == 2 else torch.zeros_like(t) for _ in range(n)]
        dist.all_gather(outs, t, group=g)
        return outs

    def reduce_scatter(t, g):
        out = torch.zeros(2 * n, 3).t()
        dist.reduce_scatter_tensor(out, torch.arange(6.0 * n * n).reshape(3 * n, 2 * n) * t.reshape(-1)[0], group=g)
        return [out]

    def coalesced(t, g):
        pair = [t.clone(), (t * 2).clone()]
        dist.all_reduce_coalesced(pair, group=g)
        return pair
    return {
        "all_reduce": lambda t, g: (dist.all_reduce(t, group=g), [t])[1],
        "broadcast": lambda t, g: (dist.broadcast(t, src=n - 1, group=g), [t])[1],
        "reduce": lambda t, g: (dist.reduce(t, dst=0, group=g), [t])[1],
        "all_gather": all_gather, "reduce_scatter": reduce_scatter, "coalesced": coalesced,
    }


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
    for call_name, call in _calls(n).items():
        for kind, t in _inputs(rank).items():
            if call_name == "reduce_scatter" and kind != "transposed":
                continue
            ours, theirs = t.clone(memory_format=torch.preserve_format), t.clone(memory_format=torch.preserve_format)
            try:
                got = call(ours, None)
            except RuntimeError as e:
                rec.check(f"layout:{call_name}:{kind}", False, f"{type(e).__name__}: {e}")
                continue
            want = call(theirs, gloo)
            if call_name == "reduce" and rank != 0:       # only the root's output is defined (gloo writes partial sums)
                continue
            same = len(got) == len(want) and all(bits_equal(a, b) and a.stride() == b.stride()
                                                 for a, b in zip(got, want))
            rec.check(f"layout:{call_name}:{kind}", same, f"{[a.tolist() for a in got]} != {[b.tolist() for b in want]}")
    dist.destroy_process_group()
    return rec.out

"""The job of test_sum_order_ranks.py (run on spawned ranks by ``_torch_dist.run_job``): CPU
all_reduces of float32, float16 and bfloat16 tensors of 7 to 100 Ki elements (the one-shot
all-reduce's sizes) and a float32 avg; each rank rebuilds every rank's input from its seed and
checks its result against the rank-order fold ((x_0 + x_1) + x_2) + ... bit for bit, and hands
back a digest of its result bytes, which the test compares across ranks."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from _torch_jobs import Recorder, bits_equal

SIZES = (7, 1000, 100 * 1024)
DTYPES = ("float32", "float16", "bfloat16")


def _input(r: int, size: int, dtype, seed: int):
    import torch
    g = torch.Generator().manual_seed(seed * 1009 + r)
    mag = 10.0 ** torch.randint(-3, 4, (size,), generator=g)
    return (torch.randn(size, generator=g, dtype=torch.float64) * mag).to(dtype)


def _fold(xs: list, op: str):
    n = len(xs)
    terms = [x * (1.0 / n) for x in xs] if op == "avg" else xs      # float32 premul: 1/n in float32
    acc = terms[0].clone()
    for x in terms[1:]:
        acc = acc + x
    return acc


def sum_order_job(rank: int, n: int, init: str) -> dict:
    import torch
    import torch.distributed as dist

    import kernels.pytorch  # noqa: F401
    dist.init_process_group("topocoll", init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=60))
    rec = Recorder()
    digests = {}
    cases = [(d, s, "sum") for d in DTYPES for s in SIZES] + [("float32", 1000, "avg")]
    for seed, (name, size, op) in enumerate(cases):
        dtype = getattr(torch, name)
        xs = [_input(r, size, dtype, seed) for r in range(n)]
        t = xs[rank].clone()
        dist.all_reduce(t, op=dist.ReduceOp.AVG if op == "avg" else dist.ReduceOp.SUM)
        want = _fold(xs, op)
        key = f"{name}:{size}:{op}"
        rec.check("sum_order:" + key, bits_equal(t, want),
                  f"{int((t.view(-1).float() != want.view(-1).float()).sum())} of {size} elements differ")
        digests[key] = hashlib.sha256(t.view(torch.uint8).numpy().tobytes()).hexdigest()
    rec.out["__digests__"] = digests
    dist.destroy_process_group()
    return rec.out

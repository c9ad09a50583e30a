"""DDP checks run inside the collectives job (``_torch_jobs``): 50 training steps of the same
model, seeds and data on gloo, on ``topocoll`` and with the topocoll comm hook, final parameters
compared; the hook's compressed mean against :func:`kernels.comm.compression.error_bound`."""

from __future__ import annotations

from datetime import timedelta

STEPS = 50
#: max |parameter - gloo's| after 50 steps: float32 gradients summed in another order differ by
#: rounding only (observed 0 on 2 and 4 ranks); fp16/bf16 compression rounds each gradient twice
#: (observed 7.8e-6 and 6.7e-5 on 2 ranks)
TOLERANCE = {"topocoll": 1e-5, "hook:none": 1e-5, "hook:fp16": 1e-4, "hook:bf16": 1e-3}


def _train(group, hook_state=None):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    import torch.distributed as dist

    from kernels.pytorch.hooks import topocoll_hook
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 8))
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.015)      # two buckets per step
    if hook_state is not None:
        ddp.register_comm_hook(hook_state, topocoll_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    losses = []
    for _ in range(STEPS):
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]), losses


def ddp_checks(rec, rank: int, n: int, gloo) -> None:
    import torch.distributed as dist

    from kernels.pytorch.hooks import TopocollHookState
    ref, ref_losses = _train(gloo)
    runs = {"topocoll": (None, None)}
    for comp in ("none", "fp16", "bf16") if n == 2 else ("bf16",):    # 4 ranks: the other two cost 10 s
        runs[f"hook:{comp}"] = (gloo, TopocollHookState.create(comp))
    diffs = {}
    for name, (group, state) in runs.items():
        params, losses = _train(group if group is not None else dist.group.WORLD, state)
        diffs[name] = float((params - ref).abs().max())
        rec.check("ddp:" + name, diffs[name] <= TOLERANCE[name] and len(losses) == len(ref_losses) == STEPS,
                  f"max |param - gloo's| = {diffs[name]:.3g} (tolerance {TOLERANCE[name]})")
    rec.out["__ddp_max_diff__"] = diffs
    _compressed_bound(rec, rank, n, gloo)


def _compressed_bound(rec, rank: int, n: int, gloo) -> None:
    import numpy as np
    import torch
    import torch.distributed as dist

    from kernels.comm.compression import error_bound
    from kernels.pytorch.hooks import WIRE_DTYPES, TopocollHookState, compressed_mean
    state = TopocollHookState.create("bf16")
    for comp, wire in WIRE_DTYPES.items():
        for size in (1, 1000, 4099):
            x = torch.randn(size, generator=torch.Generator().manual_seed(rank * 7 + size)) * (rank + 1)
            parts = [torch.empty_like(x) for _ in range(n)]
            dist.all_gather(parts, x, group=gloo)
            y = x.clone()
            state.group.submit_call(lambda y=y, wire=wire: compressed_mean(state.group.runner, y, wire), [y]).wait()
            exact = torch.stack([p.double() for p in parts]).mean(0).numpy()
            bound = error_bound([p.numpy() for p in parts], comp, op="avg", out_dtype=np.float32)
            err = np.abs(y.double().numpy() - exact)
            rec.check("hook:bound", bool((err <= bound).all()), f"{comp} size {size}: max error {err.max():.3g}")


def _fsdp_params(backend: str, init: str, rank: int, n: int):
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=60))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(10):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    params = torch.cat([p.full_tensor().detach().reshape(-1) for p in model.parameters()])
    dist.destroy_process_group()
    return params


def fsdp_checks(rec, rank: int, n: int) -> None:
    """FSDP2 (``fully_shard``: all_gather_into_tensor, reduce_scatter_tensor) for 10 steps on
    ``topocoll`` and on gloo, same seeds: the same parameters (observed: identical)."""
    import os
    ours = _fsdp_params("topocoll", os.environ["TOPOCOLL_TEST_INIT5"], rank, n)
    ref = _fsdp_params("gloo", os.environ["TOPOCOLL_TEST_INIT6"], rank, n)
    diff = float((ours - ref).abs().max())
    rec.check("ddp:fsdp2", diff <= 1e-6, f"max |param - gloo's| = {diff:.3g}")

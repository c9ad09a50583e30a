"""DDP's options on the ``topocoll`` group, and the comm hook against torch's own compression
hooks (run inside ``_parity_jobs.parity_job``): the same model, seeds and data trained with DDP
on ``topocoll`` and on gloo under ``no_sync`` gradient accumulation, ``static_graph=True``,
``find_unused_parameters=True`` (a branch some steps skip), ``gradient_as_bucket_view=True``
and bfloat16 parameters; and on gloo with ``topocoll_hook`` fp16 / bf16 against torch's
``fp16_compress_hook`` / ``bf16_compress_hook`` (torch.distributed.algorithms.ddp_comm_hooks),
final parameters compared within ``_torch_ddp.TOLERANCE``."""

from __future__ import annotations

import hashlib

STEPS = 12


#: most bf16 ulps (of gloo's parameter) a bf16 model may end apart after STEPS steps
BF16_ULPS = 2


def bf16_ulps(ours, ref) -> float:
    """max |ours - ref| in units of bf16's spacing at each ``ref`` element (2^(e - 7), e its exponent)."""
    import torch
    spacing = torch.exp2(torch.floor(torch.log2(ref.abs().clamp_min(2.0 ** -126))) - 7)
    return float(((ours - ref).abs() / spacing).max())


def _model(dtype):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.skip = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4), torch.nn.Linear(32, 4)

        def forward(self, x, use_skip=True):
            h = torch.relu(self.a(x))
            return self.b(h) + (self.skip(h) if use_skip else 0)
    torch.manual_seed(0)
    return Net().to(dtype)


def train(group, *, dtype=None, accumulate=False, skip_some=False, hook=None, **ddp_kw):
    """Parameters (float64, flat) after :data:`STEPS` SGD steps of DDP on ``group``."""
    import contextlib

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dtype = dtype or torch.float32
    model = _model(dtype)
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.004, **ddp_kw)        # a few buckets per step
    if hook is not None:
        ddp.register_comm_hook(*hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    for step in range(STEPS):
        opt.zero_grad()
        for micro in range(2 if accumulate else 1):
            x, y = torch.randn(8, 16, generator=g).to(dtype), torch.randn(8, 4, generator=g).to(dtype)
            quiet = ddp.no_sync() if accumulate and micro == 0 else contextlib.nullcontext()
            with quiet:
                loss = torch.nn.functional.mse_loss(ddp(x, use_skip=not (skip_some and step % 3 == 1)), y)
                loss.backward()
        opt.step()
    return torch.cat([p.detach().double().reshape(-1) for p in model.parameters()])


def ddp_options(rec, rank: int, n: int, gloo) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from _torch_ddp import TOLERANCE
    from kernels.pytorch.hooks import TopocollHookState, topocoll_hook
    world = dist.group.WORLD
    cases = {"no_sync": dict(accumulate=True), "static_graph": dict(static_graph=True),
             "find_unused": dict(skip_some=True, find_unused_parameters=True),
             "bucket_view": dict(gradient_as_bucket_view=True)}
    diffs = {}
    for name, kw in cases.items():
        diffs[name] = float((train(world, **kw) - train(gloo, **kw)).abs().max())
        rec.check("ddp_options:" + name, diffs[name] <= TOLERANCE["topocoll"], f"max |ours - gloo's| {diffs[name]:.3g}")
    # bfloat16 parameters (a bucket of bf16).  Against gloo on 2 ranks only: on 4 the one-shot
    # all-reduce sums in rank order, gloo's ring in its own, so they differ in the last bits; every
    # rank's replica is the same bits (its digest, compared across ranks by the test)
    ours_bf16 = train(world, dtype=torch.bfloat16)
    rec.out["__bf16_params_sha__"] = hashlib.sha256(ours_bf16.numpy().tobytes()).hexdigest()
    diffs["bf16_params"] = bf16_ulps(ours_bf16, train(gloo, dtype=torch.bfloat16))
    if n == 2:
        rec.check("ddp_options:bf16_params", diffs["bf16_params"] <= BF16_ULPS,
                  f"max |ours - gloo's| {diffs['bf16_params']} bf16 ulps")
    def bf16_on_cpu(state, bucket):        # DDP refuses bf16_compress_hook by name without CUDA/NCCL
        return default_hooks.bf16_compress_hook(state, bucket)
    theirs = {"fp16": default_hooks.fp16_compress_hook, "bf16": bf16_on_cpu}
    for comp, torch_hook in theirs.items():
        ours = train(gloo, hook=(TopocollHookState.create(comp), topocoll_hook))
        ref = train(gloo, hook=(gloo, torch_hook))
        diffs["hook_" + comp] = float((ours - ref).abs().max())
        rec.check("ddp_options:hook_" + comp, diffs["hook_" + comp] <= TOLERANCE["hook:" + comp],
                  f"max |topocoll_hook - torch's {comp}_compress_hook| {diffs['hook_' + comp]:.3g}")
    bf16 = torch.bfloat16                   # the hook on a bucket of bf16 parameters
    for comp, ref_hook in (("none", None), ("fp16", (gloo, default_hooks.fp16_compress_hook))):
        ours = train(gloo, dtype=bf16, hook=(TopocollHookState.create(comp), topocoll_hook))
        ref = train(gloo, dtype=bf16, hook=ref_hook)
        diffs["hook_bf16_params_" + comp] = d = bf16_ulps(ours, ref)
        if n == 2 or comp != "none":        # "none" all-reduces on topocoll: the one-shot's order, as above
            rec.check("ddp_options:hook_bf16_params_" + comp, d <= BF16_ULPS, f"max difference {d} bf16 ulps")
    rec.out["__ddp_options__"] = diffs

"""Train a small model with DistributedDataParallel on the ``topocoll`` backend (or gloo / nccl
to compare), printing the loss and the step time.

Run::

    torchrun --nproc-per-node 4 examples/pytorch/train_ddp.py --backend topocoll
    torchrun --nproc-per-node 4 examples/pytorch/train_ddp.py --backend gloo
    torchrun --nproc-per-node 2 examples/pytorch/train_ddp.py --backend gloo --hook bf16  # our buckets
    mpirun -n 2 python examples/pytorch/train_ddp.py --backend topocoll       # as root: --allow-run-as-root

The two lines that make a PyTorch script use topocoll are marked ``# topocoll``.  The model is a
3-layer MLP on synthetic regression data (the same seeds on every backend, so the losses can be
compared line by line); ``--device cuda`` puts one rank per GPU (``LOCAL_RANK``; ranks share the
cards when there are more ranks than GPUs, which NCCL refuses and ``topocoll`` runs natively).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import kernels.pytorch  # noqa: F401                              # topocoll: registers the "topocoll" backend
from kernels.pytorch.hooks import TopocollHookState, topocoll_hook


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="topocoll", help="topocoll, gloo, nccl, or a device map such as "
                                                         "cpu:gloo,cuda:topocoll")
    p.add_argument("--hook", choices=["off", "none", "fp16", "bf16"], default="off",
                   help="register topocoll_hook on DDP (none: no compression)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--every", type=int, default=10, help="print every N steps")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    dist.init_process_group(args.backend)                          # topocoll: --backend topocoll
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, 1)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if args.hook != "off":
        ddp.register_comm_hook(TopocollHookState.create(args.hook), topocoll_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1000 + rank)
    w_true = torch.randn(64, 1, generator=torch.Generator().manual_seed(7))
    times = []
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch, 64, generator=gen)
        y = x @ w_true + 0.1 * torch.randn(args.batch, 1, generator=gen)
        x, y = x.to(device), y.to(device)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if rank == 0 and (step % args.every == 0 or step == 1):
            print(f"step {step:4d}  loss {loss.item():.6f}  step {times[-1] * 1e3:.2f} ms", flush=True)
    if rank == 0:
        tail = sorted(times[len(times) // 5:])
        print(f"backend {args.backend} hook {args.hook}: {world} ranks, median step "
              f"{tail[len(tail) // 2] * 1e3:.2f} ms", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

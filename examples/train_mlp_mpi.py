"""Data-parallel training of a small NumPy MLP on scikit-learn's digits, one MPI process per rank.

Run::

    mpirun -n 4 python examples/train_mlp_mpi.py --epochs 10 --fusion size --bucket-mb 0.01
    mpirun -n 4 python examples/train_mlp_mpi.py --compression bf16
    python examples/train_mlp_mpi.py --single          # the single-process reference

(As root add ``--allow-run-as-root``; on a machine with fewer cores than ranks add
``--oversubscribe`` for Open MPI.)

Every rank holds the full model (64-H-10, tanh, softmax cross-entropy, float64) and, for each
global mini-batch (same shuffled order on every rank), computes the gradient of its shard of
the batch, scaled by ``1 / global batch size``.  The gradients (4 tensors) are summed with
:meth:`kernels.mpi.communicator.MPICommunicator.fused_all_reduce`: fusion buckets ``auto`` (one
64 MiB bucket), ``size`` (``--bucket-mb``) or ``index`` (``--split``), optionally over an
fp16/bf16/fp8 wire (``--compression``).  The sum of shard gradients is the full-batch
gradient, so without compression every epoch's loss equals single-process training up to
float64 summation order (relative differences ~1e-15).  With compression each gradient is
rounded twice (before and after the reduction, :mod:`kernels.comm.compression`), so the loss
curve deviates slightly; see examples/README.md for measured figures.

Rank 0 prints the mean training loss per epoch and the final test accuracy; ``--json OUT``
writes them (rank 0, atomically, only after training finished).  The digits data ships with
scikit-learn (nothing is downloaded); rank 0 loads it and broadcasts it to the other ranks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def load_data(seed: int = 0, comm=None):
    """(X_train, y_train, X_test, y_test): pixels scaled to [0, 1], a fixed 1500/297 split.

    With ``comm`` only rank 0 imports scikit-learn; the others get the arrays by broadcast.
    """
    if comm is None or comm.rank == 0:
        from sklearn.datasets import load_digits
        d = load_digits()
        x, y = d.data.astype(np.float64), d.target.astype(np.int64)
    if comm is not None:
        shape = np.array(x.shape if comm.rank == 0 else (0, 0), np.int64)
        comm.broadcast(shape, root=0)
        if comm.rank != 0:
            x, y = np.empty(tuple(shape)), np.empty(shape[0], np.int64)
        comm.broadcast(x, root=0)
        comm.broadcast(y, root=0)
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order] / 16.0, y[order]
    return x[:1500], y[:1500], x[1500:], y[1500:]


def init_params(hidden: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    return [rng.normal(0, 1 / 8, (64, hidden)), np.zeros(hidden),
            rng.normal(0, 1 / np.sqrt(hidden), (hidden, 10)), np.zeros(10)]


def forward(params, x):
    w1, b1, w2, b2 = params
    h = np.tanh(x @ w1 + b1)
    z = h @ w2 + b2
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return h, p / p.sum(axis=1, keepdims=True)


def loss_and_grads(params, x, y, scale: float):
    """(sum of cross-entropy losses over the rows, gradients of that sum times ``scale``)."""
    w1, b1, w2, b2 = params
    h, p = forward(params, x)
    loss = float(-np.log(p[np.arange(len(y)), y] + 1e-300).sum())
    dz = p.copy()
    dz[np.arange(len(y)), y] -= 1.0
    dz *= scale
    dh = (dz @ w2.T) * (1 - h * h)
    return loss, [x.T @ dh, dh.sum(axis=0), h.T @ dz, dz.sum(axis=0)]


def train(args, comm=None) -> dict:
    """Train; ``comm`` None is the single-process reference.  Returns losses and accuracy."""
    rank, size = (0, 1) if comm is None else (comm.rank, comm.size)
    xtr, ytr, xte, yte = load_data(args.seed, comm)
    params = init_params(args.hidden, args.seed)
    n = len(ytr)
    losses = []
    for epoch in range(args.epochs):
        order = np.random.default_rng([args.seed, epoch]).permutation(n)
        total = 0.0
        for start in range(0, n, args.batch):
            batch = order[start:start + args.batch]
            mine = np.array_split(batch, size)[rank]
            loss, grads = loss_and_grads(params, xtr[mine], ytr[mine], 1.0 / len(batch))
            total += loss
            if comm is not None:
                kw = {"split_points": args.split} if args.fusion == "index" else {}
                comm.fused_all_reduce(grads, mode=args.fusion, bucket_mb=args.bucket_mb, op="sum",
                                      compression=None if args.compression == "none" else args.compression, **kw)
            for p, g in zip(params, grads):
                p -= args.lr * g
        if comm is not None:
            acc = np.array([total])
            comm.all_reduce(acc, acc)
            total = float(acc[0])
        losses.append(total / n)
        if rank == 0:
            print(f"epoch {epoch:3d}  loss {losses[-1]:.12f}", flush=True)
    accuracy = float((forward(params, xte)[1].argmax(axis=1) == yte).mean())
    if rank == 0:
        print(f"test accuracy {accuracy:.4f} ({size} rank{'s' if size > 1 else ''}, fusion {args.fusion}, "
              f"compression {args.compression})", flush=True)
    return {"losses": losses, "accuracy": accuracy, "ranks": size, "fusion": args.fusion,
            "compression": args.compression, "epochs": args.epochs, "batch": args.batch}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Data-parallel NumPy MLP on digits over MPI (topocoll).")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=64, help="global mini-batch (split across ranks)")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fusion", choices=("auto", "size", "index"), default="auto")
    p.add_argument("--bucket-mb", type=float, default=64.0, help="bucket size for --fusion size (MiB)")
    p.add_argument("--split", type=int, nargs="+", default=[2], help="bucket starts for --fusion index")
    p.add_argument("--compression", choices=("none", "fp16", "bf16", "fp8"), default="none")
    p.add_argument("--topology", default=None, help="preset, spec or topology file (default fully connected)")
    p.add_argument("--json", default=None, help="write losses and accuracy here (rank 0)")
    p.add_argument("--single", action="store_true", help="train in this process only (the reference)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.epochs < 1 or args.batch < 1 or args.bucket_mb <= 0:
        print("train_mlp_mpi: error: --epochs, --batch and --bucket-mb must be positive", file=sys.stderr)
        return 2
    comm = None
    if not args.single:
        from kernels.mpi.communicator import MPICommunicator
        comm = MPICommunicator.from_mpi(topology=args.topology, plan="auto")
    try:
        result = train(args, comm)
    except ValueError as exc:   # bad fusion split points, ...: one line, every rank stops
        if comm is None:
            print(f"train_mlp_mpi: error: {exc}", file=sys.stderr)
            return 2
        comm.abort(exc)
    if args.json and (comm is None or comm.rank == 0):
        from synth.ir.schedule import atomic_write_text
        atomic_write_text(Path(args.json), json.dumps(result, indent=1))
    if comm is not None:
        comm.barrier()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

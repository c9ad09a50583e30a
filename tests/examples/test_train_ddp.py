"""examples/pytorch/train_ddp.py under torchrun on 2 CPU processes with the topocoll backend:
the losses it prints equal single-process training on both ranks' batches at once (the DDP
mean of two equal-sized batches' gradients is the gradient of their union), computed here
without torch.distributed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _paths import ROOT  # noqa: E402

STEPS, BATCH, WIDTH = 20, 16, 32


def _reference_losses(n: int = 2) -> dict[int, float]:
    """Rank 0's loss at each step, training on the union of every rank's batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH),
                                torch.nn.ReLU(), torch.nn.Linear(WIDTH, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gens = [torch.Generator().manual_seed(1000 + r) for r in range(n)]
    w_true = torch.randn(64, 1, generator=torch.Generator().manual_seed(7))
    out = {}
    for step in range(1, STEPS + 1):
        batches = []
        for g in gens:
            x = torch.randn(BATCH, 64, generator=g)
            batches.append((x, x @ w_true + 0.1 * torch.randn(BATCH, 1, generator=g)))
        opt.zero_grad()
        losses = [torch.nn.functional.mse_loss(model(x), y) for x, y in batches]
        (sum(losses) / n).backward()
        opt.step()
        out[step] = float(losses[0])
    return out


@pytest.mark.slow
def test_torchrun_with_topocoll_prints_the_losses_of_single_process_training(tmp_path):
    torchrun = Path(sys.executable).parent / "torchrun"
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this Python")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", TOPOCOLL_RESULTS=str(tmp_path))
    res = subprocess.run([str(torchrun), "--nproc-per-node", "2", "examples/pytorch/train_ddp.py", "--backend",
                          "topocoll", "--steps", str(STEPS), "--batch", str(BATCH), "--width", str(WIDTH),
                          "--every", "5"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    printed = {int(s): float(v) for s, v in re.findall(r"step\s+(\d+)\s+loss ([\d.]+)", res.stdout)}
    assert sorted(printed) == [1, 5, 10, 15, 20], res.stdout
    ref = _reference_losses()
    for step, loss in printed.items():
        assert loss == pytest.approx(ref[step], rel=1e-4, abs=1e-6), (step, loss, ref[step])
    assert "backend topocoll hook off: 2 ranks, median step" in res.stdout
    # no plan: rank 0's one warning points at the script's DDP(...) line, whose start-up all-gather runs on the
    # group's worker thread (before: concurrent/futures/thread.py:58)
    script = ROOT / "examples" / "pytorch" / "train_ddp.py"
    line = next(k for k, text in enumerate(script.read_text().splitlines(), 1) if " = DDP(" in text)
    warned = re.findall(r"^(\S+):(\d+): UserWarning: topocoll process group: no plan for", res.stderr, re.M)
    assert warned == [(str(script), str(line))], res.stderr[-3000:]

"""The torch backend on 4 spawned ranks: small CPU all_reduces (the one-shot, one round) give
every rank the same bits, the rank-order sum NumPy's fold gives (``_sum_order_jobs.sum_order_job``).
Before the fix rank d summed its own tensor first and floating results differed between ranks."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")


@pytest.mark.parametrize("job_results", [4], indirect=True, ids=["4-ranks"])
def test_small_all_reduces_are_the_rank_order_sum_on_every_rank(job_results):
    """``_sum_order_jobs.sum_order_job``, a part of the shared ``job_results`` job (conftest.py) on 4 ranks."""
    from _sum_order_jobs import DTYPES, SIZES
    from _torch_dist import checked, merged, part_results
    results = part_results(job_results, "sum_order")
    assert checked(results, "sum_order") == 4 * (len(DTYPES) * len(SIZES) + 1)
    assert not merged(results, "sum_order")
    digests = [res["__digests__"] for res in results]
    assert all(d == digests[0] for d in digests[1:])


def test_the_one_round_program_of_rank_2_starts_from_peers_0_and_1():
    """In process: rank 2 of a 4-rank one-shot reduces peer 0's and peer 1's buffers first (the
    copy of peer 0's merged into that reduce), then its own, then peer 3's: rank order, one pass
    each; run on given buffers it equals the rank-order fold bit for bit."""
    import torch

    from kernels.pytorch.fused import OneRound
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.generators import fully_connected
    sched = baseline("oneshot", build_fabric(fully_connected(4)), "allreduce")
    prog = OneRound(sched, 64, torch.bfloat16, "sum", 2)
    assert [op[0] for op in prog.ops] == ["reduce", "reduce", "reduce", "copy"]     # then back into the tensor
    assert prog.ops[0][2][0] == 0 and prog.ops[0][3][0] == 1 and prog.ops[1][3][0] == "user"
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(64, generator=g).to(torch.bfloat16) for _ in range(4)]
    mine = xs[2].clone()
    prog.run(mine, [xs[0], xs[1], None, xs[3]])
    want = ((xs[0] + xs[1]) + xs[2]) + xs[3]
    assert torch.equal(mine.view(torch.int16), want.view(torch.int16))

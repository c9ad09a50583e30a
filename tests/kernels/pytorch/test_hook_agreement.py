"""``TopocollHookState.create`` on several ranks: the group is made first, then every rank's reading of its
``compression=`` is compared over it, so a name refused on one rank stops every rank at once with that rank's line
and the ranks that refused, and ranks that read different wire formats (``fp16`` on one, ``bf16`` on another) get
an error at creation instead of buckets cast to different wire dtypes.  Aliases that name the same format
(``FP16`` and ``float16``) agree."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")

from _torch_dist import run_job  # noqa: E402

GOOD_S = 20
#: case -> every rank's compression= (rank order)
CASES = {"fp4-on-1": ["fp16", "fp4"], "fp8-on-2": ["bf16", "bf16", "e4m3"], "fp16-bf16": ["fp16", "bf16"],
         "none-fp16": ["none", "fp16"], "aliases": ["FP16", "float16"]}


def create_job(rank: int, n: int, init_method: str) -> dict:
    """Every rank calls ``TopocollHookState.create`` with the case's value for its rank; what it raised (class,
    line) and how long that took, or the state's compression and the compressed mean of ``rank + 1``."""
    import torch
    import torch.distributed as dist

    from kernels.pytorch.hooks import WIRE_DTYPES, TopocollHookState, compressed_mean
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=n,
                            timeout=timedelta(seconds=GOOD_S))
    t0 = time.monotonic()
    try:
        state = TopocollHookState.create(CASES[os.environ["TOPOCOLL_TEST_CASE"]][rank])
        got = {"raised": None, "compression": state.compression, "plain": type(state.compression) is str}
        x = torch.full((5,), float(rank + 1))
        state.group.submit_call(lambda: compressed_mean(state.group.runner, x, WIRE_DTYPES[state.compression]),
                                [x]).wait()
        got["mean"] = x.tolist()
    except Exception as exc:  # noqa: BLE001 - compared by the test
        got = {"raised": type(exc).__name__, "message": str(exc)}
    got["seconds"] = time.monotonic() - t0
    dist.destroy_process_group()
    return got


@pytest.mark.parametrize("case,cls,want", [
    ("fp4-on-1", "UnsupportedCall", "TopocollHookState.create: compression must be one of none, fp16, bf16; got "
                                    "'fp4' (refused on ranks [1] of the group's ranks [0, 1])"),
    ("fp8-on-2", "UnsupportedCall", "TopocollHookState.create: compression 'e4m3' (fp8) is not run by the DDP hook; "
                                    "use none, fp16 or bf16 (refused on ranks [2] of the group's ranks [0, 1, 2])"),
    ("fp16-bf16", "CollectiveMismatch", "TopocollHookState.create: ranks disagree on compression: ranks [0] 'fp16', "
                                        "ranks [1] 'bf16'; every rank must give the same wire format"),
    ("none-fp16", "CollectiveMismatch", "TopocollHookState.create: ranks disagree on compression: ranks [0] 'none', "
                                        "ranks [1] 'fp16'; every rank must give the same wire format")])
def test_a_refusal_or_a_disagreement_on_one_rank_stops_every_rank_at_once(case, cls, want):
    """Reference: the lines written by hand (get_format's line, the hook's fp8 line, the ranks).  Old: the refusing
    rank raised alone before new_group and the others waited in it out their whole 20 s timeout (then gloo's
    multi-line store error); fp16 on one rank and bf16 on the other made the states without a word."""
    n = len(CASES[case])
    results = run_job(create_job, n, env={"TOPOCOLL_TEST_CASE": case}, timeout_s=150)
    for r, got in enumerate(results):
        assert (got["raised"], got.get("message")) == (cls, want), (r, results)
        assert got["seconds"] < 10, (r, results)


def test_aliases_of_one_format_agree_and_run():
    """``FP16`` on rank 0 and ``float16`` on rank 1 are one format: both states keep the plain ``fp16`` and the
    compressed mean of 1 and 2 is 1.5 (exact in fp16).  Reference: the mean by hand."""
    results = run_job(create_job, 2, env={"TOPOCOLL_TEST_CASE": "aliases"}, timeout_s=150)
    for r, got in enumerate(results):
        assert (got["raised"], got.get("compression"), got.get("plain"), got.get("mean")) == \
            (None, "fp16", True, [1.5] * 5), (r, results)

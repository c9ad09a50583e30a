"""The checks of test_coalesced_refusals.py (run inside the shared ``_torch_jobs.collectives_job``): a
coalesced call (``_coalescing_manager`` around ``all_gather_into_tensor`` / ``reduce_scatter_tensor``
/ ``all_reduce``, which torch hands the group as one ``allgather_into_tensor_coalesced`` /
``reduce_scatter_tensor_coalesced`` / ``allreduce_coalesced``) whose 2nd or 3rd part is bad raises
the same error class on every rank before any byte of any part moves: the 1st part's output is
untouched on every rank (it held a sentinel, or its own input for all_reduce), and the group is
in step after.  Before, each part was agreed and run in turn, so the 1st part's output was
written before the bad part raised."""

from __future__ import annotations

from _fused_jobs import _in_step
from _torch_jobs import Recorder, bits_equal

SENTINEL = -7.0


def _gather_parts(rank: int, n: int, bad: str):
    """(outputs, inputs) of 3 all_gather_into_tensor parts; ``bad``: which part is wrong where."""
    import torch
    ins = [torch.full((3,), float(rank)), torch.full((2,), rank + 0.5), torch.full((4,), rank + 0.25)]
    outs = [torch.full((n * t.numel(),), SENTINEL) for t in ins]
    if bad == "second_output_size_on_rank0" and rank == 0:
        outs[1] = torch.full((n * 2 + 1,), SENTINEL)            # locally wrong: this rank alone knows
    if bad == "third_count_on_last_rank" and rank == n - 1:
        ins[2], outs[2] = torch.full((5,), 1.0), torch.full((n * 5,), SENTINEL)   # locally fine, ranks differ
    if bad == "second_dtype_on_last_rank" and rank == n - 1:
        ins[1], outs[1] = ins[1].double(), outs[1].double()
    if bad == "third_strided_on_rank0" and rank == 0:
        outs[2] = torch.full((n * 4, 2), SENTINEL)[:, 0]         # not contiguous
    return outs, ins


def _scatter_parts(rank: int, n: int, bad: str):
    """(outputs, inputs) of 3 reduce_scatter_tensor parts (as :func:`_gather_parts`)."""
    import torch
    outs = [torch.full((k,), SENTINEL) for k in (3, 2, 4)]
    ins = [torch.arange(n * o.numel(), dtype=torch.float32) + rank for o in outs]
    if bad == "second_input_size_on_rank0" and rank == 0:
        ins[1] = torch.zeros(n * 2 + 1)
    if bad == "third_count_on_last_rank" and rank == n - 1:
        outs[2], ins[2] = torch.full((5,), SENTINEL), torch.zeros(n * 5)
    if bad == "second_dtype_on_last_rank" and rank == n - 1:
        outs[1], ins[1] = outs[1].double(), ins[1].double()
    return outs, ins


def _coalesced(call, outs, ins, **kw):
    import torch.distributed as dist

    def run():
        with dist._coalescing_manager():
            for o, i in zip(outs, ins):
                call(o, i, **kw)
    return run


def _expect_same_error(rec: Recorder, name: str, cls: str, fn, first, before) -> None:
    """``fn()`` raises ``cls`` (its message kept for the cross-rank comparison); ``first`` (the
    1st part's output) equals ``before`` bit for bit afterwards."""
    try:
        fn()
        rec.check(name, False, "no error raised")
    except RuntimeError as e:
        rec.check(name, type(e).__name__ == cls, f"{type(e).__name__}: {e}")
        rec.out.setdefault("__coalesced_messages__", {})[name] = f"{type(e).__name__}: {e}"
    rec.check(name + ":first_untouched", bits_equal(first, before), f"{first.tolist()} was {before.tolist()}")


def coalesced_refusals(rec: Recorder, rank: int, n: int) -> None:
    import torch
    import torch.distributed as dist
    gather = {"second_output_size_on_rank0": "BadTensor", "third_count_on_last_rank": "CollectiveMismatch",
              "second_dtype_on_last_rank": "CollectiveMismatch", "third_strided_on_rank0": "BadTensor"}
    scatter = {"second_input_size_on_rank0": "BadTensor", "third_count_on_last_rank": "CollectiveMismatch",
               "second_dtype_on_last_rank": "CollectiveMismatch"}
    for name, call, parts, cases in (("allgather", dist.all_gather_into_tensor, _gather_parts, gather),
                                     ("reduce_scatter", dist.reduce_scatter_tensor, _scatter_parts, scatter)):
        for bad, cls in cases.items():
            outs, ins = parts(rank, n, bad)
            _expect_same_error(rec, f"parts_refused:{name}:{bad}", cls, _coalesced(call, outs, ins), outs[0],
                               torch.full_like(outs[0], SENTINEL))
            _in_step(rec, f"parts_refused:{name}:{bad}", rank, n)
    # all_reduce_coalesced: one buffer per dtype; the float64 part's count differs on the last rank
    a = torch.full((3,), float(rank + 1))
    b = torch.arange(5 if rank == n - 1 else 4, dtype=torch.float64)

    def allreduce():
        with dist._coalescing_manager():
            dist.all_reduce(a)
            dist.all_reduce(b)
    _expect_same_error(rec, "parts_refused:allreduce:second_dtype_count_on_last_rank", "CollectiveMismatch",
                       allreduce, a, torch.full((3,), float(rank + 1)))
    _in_step(rec, "parts_refused:allreduce:second_dtype_count_on_last_rank", rank, n)
    _gather_lists_refused(rec, rank, n)
    _good_parts_still_run(rec, rank, n)


def _gather_lists_refused(rec: Recorder, rank: int, n: int) -> None:
    """``all_gather_coalesced`` (torch 2.13 keeps it, deprecated; it hands the group one output
    list per rank, ``outs[r][k]`` for rank r's k-th input, in one ``allgather_coalesced``): a 2nd
    input one element short on rank 0, a 3rd input on the last rank alone.  Before, each pair was
    agreed and run in turn: the 1st pair's outputs were written, and ranks with another number of
    pairs fell out of step."""
    import warnings

    import torch
    import torch.distributed as dist
    for bad, cls in (("second_input_size_on_rank0", "BadTensor"), ("third_pair_on_last_rank", "CollectiveMismatch")):
        ins = [torch.full((2,), float(rank)), torch.full((2 if bad.endswith("rank0") and rank == 0 else 3,), 1.0)]
        third = bad.startswith("third") and rank == n - 1
        if third:
            ins.append(torch.ones(4))
        outs = [[torch.full((t,), SENTINEL) for t in ((2, 3, 4) if third else (2, 3))] for _ in range(n)]

        def call(outs=outs, ins=ins):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                dist.all_gather_coalesced(outs, ins)
        name = f"parts_refused:allgather_lists:{bad}"
        _expect_same_error(rec, name, cls, call, outs[1 % n][0], torch.full((2,), SENTINEL))
        _in_step(rec, name, rank, n)


def _good_parts_still_run(rec: Recorder, rank: int, n: int) -> None:
    """Three good parts of mixed dtypes and sizes (one empty) equal the blocks built by hand from
    every rank's rank-valued inputs."""
    import torch
    import torch.distributed as dist

    def gather_ins(r):
        return [torch.full((3,), float(r)), torch.arange(2, dtype=torch.float64) + r, torch.zeros(0)]
    ins = gather_ins(rank)
    outs = [torch.empty(n * t.numel(), dtype=t.dtype) for t in ins]
    _coalesced(dist.all_gather_into_tensor, outs, ins)()
    for k, o in enumerate(outs):
        want = torch.cat([gather_ins(r)[k] for r in range(n)])
        rec.check("parts_mixed:allgather_mixed", bits_equal(o, want), f"{o.tolist()} != {want.tolist()}")
    outs = [torch.empty(3), torch.empty(2, dtype=torch.float64), torch.empty(0)]
    ins = [torch.arange(n * o.numel(), dtype=o.dtype) * (rank + 1) for o in outs]
    _coalesced(dist.reduce_scatter_tensor, outs, ins)()
    for o in outs:                       # sum over ranks r of arange * (r + 1), this rank's block
        k = o.numel()
        want = (torch.arange(n * k, dtype=o.dtype) * (n * (n + 1) // 2))[rank * k:(rank + 1) * k]
        rec.check("parts_mixed:reduce_scatter_mixed", bits_equal(o, want), f"{o.tolist()} != {want.tolist()}")

"""A DDP communication hook that all-reduces gradient buckets on topocoll's schedules, for
users who keep NCCL (or gloo) as DDP's process group::

    state = TopocollHookState.create(compression="bf16")      # every rank, after init_process_group
    model.register_comm_hook(state, topocoll_hook)

``compression="none"`` divides the bucket by the world size and all-reduces it (sum) on the
``topocoll`` group, as DDP's own ``allreduce_hook`` does on its group
(``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``, torch 2.13).  ``"fp16"`` /
``"bf16"`` run the compressed all-reduce of :mod:`kernels.comm.compression`: each rank casts
its bucket to the wire format in n zero-padded blocks, an ``all_to_all`` gives rank d every
rank's block d, rank d sums them in float32 and divides by n, casts the mean back to the wire
format, and an ``all_gather`` spreads the blocks; every value is rounded twice whatever n is,
and :func:`kernels.comm.compression.error_bound` (``op="avg"``) bounds the result.  Both
collectives run the plan's ``alltoall`` / ``allgather`` schedules, as one call on the group's
worker thread, so the hook returns at once and DDP overlaps it with the backward pass.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist

from kernels.comm.compression_casts import get_format
from kernels.pytorch.errors import CollectiveMismatch, UnsupportedCall
from topo_probe.errors import InvalidArgument, show

WIRE_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
OWNER = "TopocollHookState.create"


def hook_compression(compression) -> str:
    """``compression`` as the hook's wire format name: ``"none"`` (any case), else the format of
    :func:`kernels.comm.compression_casts.get_format` (the project's one compression-name rule, owner
    :data:`OWNER`, aliases such as ``"bfloat16"`` taken) when the hook runs it (fp16, bf16);
    :class:`~kernels.pytorch.errors.UnsupportedCall` (a TopocollError and a RuntimeError, as the backend's other
    refusals) in one line otherwise: a name the rule refuses gets the rule's line with the hook's own choices.

    >>> hook_compression("BFloat16"), hook_compression("NONE")
    ('bf16', 'none')
    >>> hook_compression("fp4")
    Traceback (most recent call last):
    ...
    kernels.pytorch.errors.UnsupportedCall: TopocollHookState.create: compression must be one of none, fp16, \
bf16; got 'fp4'
    """
    if isinstance(compression, str) and str.lower(str.__str__(compression)) == "none":
        return "none"
    try:
        name = get_format(compression, OWNER).name
    except InvalidArgument:         # the rule's line would offer fp8, which the hook does not run, and not none
        raise UnsupportedCall(f"{OWNER}: compression must be one of none, fp16, bf16; got {show(compression)}") \
            from None
    if name not in WIRE_DTYPES:
        raise UnsupportedCall(f"{OWNER}: compression {show(compression)} ({name}) is not run by the DDP hook; "
                              f"use none, fp16 or bf16")
    return name


@dataclass
class TopocollHookState:
    """The hook's state: the ``topocoll`` group that carries the buckets and the wire format
    (``"none"``, ``"fp16"`` or ``"bf16"``: :func:`hook_compression`)."""

    group: "dist.ProcessGroup"
    compression: str = "none"

    @classmethod
    def create(cls, compression: str = "none", ranks=None) -> "TopocollHookState":  # noqa: D102
        """A new ``topocoll`` group of ``ranks`` (all by default; every rank must call this)."""
        import kernels.pytorch  # noqa: F401  (registers the backend)
        try:
            answer = ("ok", hook_compression(compression))
        except UnsupportedCall as exc:     # raised after the group is made, on every rank (agreed_compression)
            if not dist.is_initialized():  # no group can be made, so no peer waits in one: refused here
                raise
            answer = ("refused", str(exc))
        group = dist.new_group(ranks, backend="topocoll")
        return cls(group, agreed_compression(group, answer))


def agreed_compression(group, answer: tuple[str, str]) -> str:
    """The wire format every rank of ``group`` read (``answer``: this rank's ``("ok", name)`` or
    ``("refused", line)``), compared over the group (``all_gather_object``, once per group made): a refusal on any
    rank raises its line on every rank, naming the ranks that refused (UnsupportedCall), and ranks that read
    different formats raise CollectiveMismatch (their buckets would go out in different wire dtypes).  A rank
    outside ``group`` (``new_group``'s non-member) answers for itself."""
    if not isinstance(group, dist.ProcessGroup):   # not a member: nothing to compare with
        if answer[0] != "ok":
            raise UnsupportedCall(answer[1])
        return answer[1]
    answers, members = [None] * group.size(), dist.get_process_group_ranks(group)
    dist.all_gather_object(answers, answer, group=group)
    refused = [members[i] for i, (kind, _) in enumerate(answers) if kind != "ok"]
    if refused:
        line = next(text for kind, text in answers if kind != "ok")
        raise UnsupportedCall(f"{line} (refused on ranks {refused} of the group's ranks {members})")
    names: dict[str, list[int]] = {}
    for rank, (_, name) in zip(members, answers):
        names.setdefault(name, []).append(rank)
    if len(names) > 1:
        said = ", ".join(f"ranks {rs} {name!r}" for name, rs in names.items())
        raise CollectiveMismatch(f"{OWNER}: ranks disagree on compression: {said}; every rank must give the same "
                                 f"wire format")
    return answer[1]


def compressed_mean(runner, flat: torch.Tensor, wire_dtype: torch.dtype) -> None:
    """``flat`` becomes the mean over ranks of ``flat`` with ``wire_dtype`` on the wire (module
    docstring); ``runner`` is the group's :class:`~kernels.pytorch.calls.CallRunner`."""
    n, count = runner.size, flat.numel()
    block = -(-count // n)
    if block == 0:
        return
    send = torch.zeros(n * block, dtype=wire_dtype, device=flat.device)
    send[:count].copy_(flat)
    recv = torch.empty_like(send)
    runner.alltoall([recv], [send], [block] * n, [block] * n)
    mine = recv.view(n, block).to(torch.float32).sum(0).div_(n).to(wire_dtype)
    gathered = torch.empty_like(send)
    runner.allgather_into(gathered, mine)
    flat.copy_(gathered[:count])


def topocoll_hook(state: TopocollHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook (module docstring): the bucket's mean over ranks, as a future."""
    buf = bucket.buffer()
    group = state.group
    if state.compression == "none":
        buf.div_(group.size())
        fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])
    wire = WIRE_DTYPES[state.compression]
    work = group.submit_call(lambda: compressed_mean(group.runner, buf, wire), [buf], buf.device)
    return work.get_future().then(lambda f: f.value()[0])


__all__ = ["TopocollHookState", "topocoll_hook", "compressed_mean", "hook_compression", "agreed_compression",
           "WIRE_DTYPES", "OWNER"]

"""``TopocollProcessGroup``: the ``topocoll`` backend of torch.distributed, a Python
``ProcessGroup`` (PyTorch's supported way for a backend written in Python on torch 2.4-2.14:
``torch.distributed.ProcessGroup`` subclassed, as PyTorch's ``test/distributed/test_c10d_pypg.py``
does; every method returns a ``Work`` with a future).

Created by torch (``init_process_group("topocoll")``, ``new_group(..., backend="topocoll")``)
through the creator :func:`create` that :mod:`kernels.pytorch` registers.  It holds, made from
the same store: a :class:`~kernels.pytorch.sockets.SocketMesh` that carries the schedules'
transfers and the per-call headers (``TOPOCOLL_TORCH_TRANSPORT=gloo``: a gloo group instead), a
gloo group of the same ranks (devices the backend string gives to gloo), the user's
``send``/``recv`` (each message after a header, on two gloo groups of their own:
:mod:`kernels.pytorch.checked_p2p`; ``TOPOCOLL_P2P_CHECK=0``: the gloo group), an NCCL
group made on the first CUDA call where it can run, the native executor for CUDA tensors
(:class:`~kernels.pytorch.native_exec.NativeExecutor`, over the same transport), its
:class:`~synth.plan.selector.ScheduleSelector` (its own plan: a subgroup of k ranks plans for k
ranks), and one worker thread (:class:`~kernels.pytorch.work.CallQueue`).

Where the group's backend string maps a device to ``gloo`` or ``nccl``
(``"cpu:gloo,cuda:topocoll"``), calls on that device's tensors go to torch's own backend as they
are: torch hands a Python group every call whatever the device.
"""

from __future__ import annotations

import math
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from kernels.pytorch.calls import CallRunner
from kernels.pytorch.dtypes import premul_factor, reduce_op_name
from kernels.pytorch.checks import dense, flat
from kernels.pytorch.native_exec import NativeExecutor
from kernels.pytorch.checked_p2p import make_p2p
from kernels.pytorch.plan_choice import make_selector
from kernels.pytorch.schedule_share import HostStagedGroup
from kernels.pytorch.sockets import SocketMesh
from kernels.pytorch.start_check import check_timeouts
from kernels.pytorch.work import CallQueue

BACKEND_NAME = "topocoll"


class TopocollProcessGroup(dist.ProcessGroup):
    """One rank of a ``topocoll`` group of ``size`` ranks (module docstring)."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._store, self._timeout = store, timeout
        # torch's gloo: devices the backend string gives to gloo
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("topocoll/gloo/", store), rank, size, timeout)
        # the user's send/recv, checked on two gloo groups of their own (kernels.pytorch.checked_p2p: a mismatch
        # raises, gloo would abort); TOPOCOLL_P2P_CHECK=0: self._gloo
        self._p2p = make_p2p(store, rank, size, timeout, self._gloo)
        if os.environ.get("TOPOCOLL_TORCH_TRANSPORT") == "gloo":
            self._mesh = dist.ProcessGroupGloo(dist.PrefixStore("topocoll/data/", store), rank, size, timeout)
        else:
            self._mesh = SocketMesh(dist.PrefixStore("topocoll/mesh/", store), rank, size, timeout.total_seconds())
        self._nccl = None
        self._native_map = None
        self.runner = CallRunner(rank, size, make_selector(size, rank=rank), self._transport)
        self.runner.native = NativeExecutor(self._mesh, rank, size) if size > 1 else None
        self._queue = CallQueue(f"topocoll-r{rank}")

    def getBackendName(self) -> str:
        return BACKEND_NAME

    # torch sets a group's name and description after creating it; a Python group keeps its own
    # (DeviceMesh reads ``group_name``; test_c10d_pypg.py's DummyAttrProcessGroup does the same)
    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    def _set_group_desc(self, desc: str) -> None:
        self._group_desc = desc

    def getGroupName(self) -> str:
        return getattr(self, "_group_name", "")

    def getGroupDesc(self) -> str:
        return getattr(self, "_group_desc", "")

    @property
    def group_name(self) -> str:
        return self.getGroupName()

    @property
    def group_desc(self) -> str:
        return self.getGroupDesc()

    @property
    def timeout(self) -> timedelta:
        return self._timeout

    # ------------------------------------------------------------------ internal groups
    def _transport(self, kind: str):
        """The internal group for ``cpu`` / ``cuda`` messages (:func:`cuda_messages`), or
        torch's NCCL group (``nccl``; None where NCCL cannot run: :func:`nccl_usable`)."""
        if kind == "cpu":
            return self._mesh
        if kind == "cuda" and cuda_messages() == "host":
            return HostStagedGroup(self._mesh)
        if not nccl_usable():
            return None
        if self._nccl is None:
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = self._timeout
            self._nccl = dist.ProcessGroupNCCL(dist.PrefixStore("topocoll/nccl/", self._store), self.rank(),
                                               self.size(), opts)
        return self._nccl

    def _torch_backend(self, tensors):
        """torch's own group for these tensors' device where the backend string maps it to gloo
        or nccl, else None (ours)."""
        if self._native_map is None:
            try:
                config = str(dist.get_backend_config(self))
            except (RuntimeError, ValueError, KeyError):
                config = BACKEND_NAME
            self._native_map = dict(part.split(":") for part in config.split(",") if ":" in part)
        dev = next((t.device.type for t in tensors if isinstance(t, torch.Tensor)), "cpu")
        name = self._native_map.get(dev, BACKEND_NAME)
        if name == "gloo":
            return self._gloo
        if name == "nccl":
            return self._transport("nccl")
        return None

    def _submit(self, tensors, result, fn, native, opts=None):
        group = self._torch_backend(tensors)
        if group is not None:
            return native(group)
        dev = next((t.device for t in tensors if isinstance(t, torch.Tensor)), None)
        current = torch.cuda.current_device() if dev is not None and dev.type == "cuda" else None

        def call():
            self.runner.cuda_device = current       # the device check compares with the caller's
            fn()
        return self._queue.submit(call, result, dev, inline=opts is not None and not getattr(opts, "asyncOp", True))

    def submit_call(self, fn, result: list, device=None):
        """Run ``fn()`` on the group's worker thread after the calls before it (the DDP hook's
        compressed all-reduce); returns its Work."""
        return self._queue.submit(fn, result, device)

    # ------------------------------------------------------------------ collectives
    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        op = reduce_op_name(opts.reduceOp)
        factor = premul_factor(opts.reduceOp) if op == "premul_sum" else 1.0
        return self._submit(tensors, tensors, lambda: self.runner.allreduce(tensors, op, factor, opts),
                            lambda g: g.allreduce(tensors, opts), opts)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        op = reduce_op_name(opts.reduceOp)

        def run():                  # one flat buffer per dtype, every one agreed before any data moves
            groups = _by_dtype(tensors)
            packs = [torch.cat([flat(t) for t in group]) if all(map(dense, group))  # else agree refuses them
                     else group[0].new_empty(sum(t.numel() for t in group)) for group in groups]
            self.runner.allreduce(packs, op, premul_factor(opts.reduceOp), originals=tensors)
            for group, packed in zip(groups, packs):
                for t, piece in zip(group, torch.split(packed, [t.numel() for t in group])):
                    flat(t).copy_(piece)
        return self._submit(tensors, tensors, run, lambda g: g.allreduce_coalesced(tensors, opts), opts)

    def allgather(self, output_lists, inputs, opts=None):
        def run():
            self.runner.allgather_lists(output_lists, (0, ""), inputs)
        return self._submit(inputs, output_lists, run,
                            lambda g: g.allgather(output_lists, inputs, opts or dist.AllgatherOptions()), opts)

    def all_gather_single(self, output, inp, opts=None):
        return self._submit([inp], [output], lambda: self.runner.allgather_into(output, inp),
                            lambda g: g._allgather_base(output, inp, opts or dist.AllgatherOptions()), opts)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        def run():
            self.runner.allgather_pairs(outputs, inputs)
        return self._submit(inputs, outputs, run,
                            lambda g: g.allgather_into_tensor_coalesced(outputs, inputs,
                                                                        opts or dist.AllgatherOptions()), opts)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        """``all_gather_coalesced``: ``output_lists[r][k]`` gets rank ``r``'s ``inputs[k]`` (torch's
        documented layout, one list per rank, which gloo's ``allgather_coalesced`` checks: "output
        lists should be equal to world size"), run as one list all-gather per input."""
        def run():
            self.runner.allgather_lists(*_by_input(output_lists, len(inputs), self.runner.size), inputs)
        return self._submit(inputs, output_lists, run, lambda g: g.allgather_coalesced(
            output_lists, inputs, opts or dist.AllgatherOptions()), opts)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op, factor = reduce_op_name(opts.reduceOp), premul_factor(opts.reduceOp)

        def run():
            for out, ins in zip(outputs, input_lists):
                self.runner.reduce_scatter_list(out, ins, op, factor)
        return self._submit(outputs, outputs, run, lambda g: g.reduce_scatter(outputs, input_lists, opts), opts)

    def reduce_scatter_single(self, output, inp, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op, factor = reduce_op_name(opts.reduceOp), premul_factor(opts.reduceOp)
        return self._submit([inp], [output], lambda: self.runner.reduce_scatter_into(output, inp, op, factor),
                            lambda g: g._reduce_scatter_base(output, inp, opts), opts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op, factor = reduce_op_name(opts.reduceOp), premul_factor(opts.reduceOp)

        def run():
            self.runner.reduce_scatter_pairs(outputs, inputs, op, factor)
        return self._submit(inputs, outputs, run,
                            lambda g: g.reduce_scatter_tensor_coalesced(outputs, inputs, opts), opts)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        return self._submit(tensors, tensors, lambda: self.runner.broadcast(tensors, opts.rootRank),
                            lambda g: g.broadcast(tensors, opts), opts)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        op, factor = reduce_op_name(opts.reduceOp), premul_factor(opts.reduceOp)
        return self._submit(tensors, tensors, lambda: self.runner.reduce(tensors, opts.rootRank, op, factor),
                            lambda g: g.reduce(tensors, opts), opts)

    def gather(self, output_lists, inputs, opts=None):
        opts = opts or dist.GatherOptions()
        outs = output_lists[0] if output_lists else []
        return self._submit(inputs, output_lists, lambda: self.runner.gather(outs, inputs[0], opts.rootRank),
                            lambda g: g.gather(output_lists, inputs, opts), opts)

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ScatterOptions()
        ins = input_lists[0] if input_lists else []
        return self._submit(outputs, outputs, lambda: self.runner.scatter(outputs[0], ins, opts.rootRank),
                            lambda g: g.scatter(outputs, input_lists, opts), opts)

    def alltoall(self, outputs, inputs, opts=None):
        send = [t.numel() for t in inputs]
        recv = [t.numel() for t in outputs]
        return self._submit(inputs, outputs, lambda: self.runner.alltoall(outputs, inputs, send, recv, "alltoall_list"),
                            lambda g: g.alltoall(outputs, inputs, opts or dist.AllToAllOptions()), opts)

    def all_to_all_single(self, output, inp, output_split_sizes, input_split_sizes, opts=None):
        n = self.size()
        send = _element_splits(inp, input_split_sizes, n)
        recv = _element_splits(output, output_split_sizes, n)
        return self._submit([inp], [output], lambda: self.runner.alltoall([output], [inp], send, recv),
                            lambda g: g.alltoall_base(output, inp, output_split_sizes, input_split_sizes,
                                                      opts or dist.AllToAllOptions()), opts)

    alltoall_base = all_to_all_single

    def barrier(self, opts=None):
        dev = getattr(opts, "device", None) if opts is not None else None
        kind = dev.type if isinstance(dev, torch.device) else "cpu"
        return self._queue.submit(lambda: self.runner.barrier(kind), [], None,
                                  inline=opts is not None and not getattr(opts, "asyncOp", True))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        self.barrier().wait()

    # ------------------------------------------------------------------ point to point
    def send(self, tensors, dst: int, tag: int = 0):
        group = self._torch_backend(tensors) or self._p2p_group(tensors)
        return group.send(tensors, dst, tag)

    def recv(self, tensors, src: int, tag: int = 0):
        group = self._torch_backend(tensors) or self._p2p_group(tensors)
        return group.recv(tensors, src, tag)

    def _p2p_group(self, tensors):
        """The user's send/recv: gloo for CPU tensors; NCCL for CUDA tensors where usable, else
        staged through the host."""
        if not tensors[0].is_cuda:
            return self._p2p
        return self._transport("nccl") or HostStagedGroup(self._p2p)

    def recv_anysource(self, tensors, tag: int = 0):
        group = self._torch_backend(tensors)
        if group is not None:
            return group.recv_anysource(tensors, tag)
        return (HostStagedGroup(self._p2p) if tensors[0].is_cuda else self._p2p).recv_anysource(tensors, tag)

    def shutdown(self) -> None:
        self._queue.shutdown()
        if self.runner.native is not None:
            self.runner.native.close()
        if hasattr(self._mesh, "close"):
            self._mesh.close()

    def abort(self) -> None:
        self.shutdown()


def nccl_usable() -> bool:
    """NCCL is built in, CUDA is up and this node has a GPU per rank (``LOCAL_WORLD_SIZE``, as
    torchrun sets it): NCCL refuses two ranks on one device."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return dist.is_nccl_available() and torch.cuda.is_available() and torch.cuda.device_count() >= local


def cuda_messages() -> str:
    """How a schedule's messages between CUDA tensors travel: ``host`` (default: staged through
    host memory over gloo) or ``nccl`` (``TOPOCOLL_TORCH_CUDA_TRANSPORT=nccl``, NCCL send/recv,
    where :func:`nccl_usable`).  NCCL puts a pair's sends and receives on one stream, in the
    order they are posted; two ranks that each send to the other before receiving can then wait
    on each other once a message outgrows NCCL's buffers, so NCCL messages are opt-in.

    >>> import os; os.environ.pop("TOPOCOLL_TORCH_CUDA_TRANSPORT", None); cuda_messages()
    'host'
    """
    if os.environ.get("TOPOCOLL_TORCH_CUDA_TRANSPORT") == "nccl" and nccl_usable():
        return "nccl"
    return "host"


def _by_input(per_rank, inputs: int, size: int):
    """``(per_input, failure)``: ``per_rank[r][k]`` regrouped as ``per_input[k][r]``, and a check
    of the layout (one list per rank, each with one tensor per input; ``(0, "")`` where it holds).

    >>> _by_input([["a0", "a1"], ["b0", "b1"]], 2, 2)
    ([['a0', 'b0'], ['a1', 'b1']], (0, ''))
    >>> _by_input([["a0", "a1"]], 2, 2)[1][1]
    '1 output lists, one per rank of the group (2)'
    """
    per_input = [[lst[k] for lst in per_rank if k < len(lst)] for k in range(inputs)]
    if len(per_rank) != size:
        return per_input, (4, f"{len(per_rank)} output lists, one per rank of the group ({size})")
    odd = next((r for r, lst in enumerate(per_rank) if len(lst) != inputs), None)
    if odd is not None:
        return per_input, (4, f"output list {odd} holds {len(per_rank[odd])} tensors for {inputs} input tensors")
    return per_input, (0, "")


def _by_dtype(tensors):
    groups: dict = {}
    for t in tensors:
        groups.setdefault((t.dtype, t.device), []).append(t)
    return list(groups.values())


def _element_splits(t, splits, n: int) -> list[int]:
    """all_to_all_single's split sizes (rows of dim 0) in elements; none: dim 0 cut evenly."""
    row = math.prod(t.shape[1:]) if t.dim() else 1
    if not splits:
        rows = t.shape[0] if t.dim() else t.numel()
        return [rows // n * row] * n
    return [int(s) * row for s in splits]


def create(store, rank: int, size: int, timeout: timedelta) -> TopocollProcessGroup:
    """The creator torch calls for ``init_process_group("topocoll")`` and ``new_group``.

    Each making of a group gets keys of its own under ``store``: ``destroy_process_group`` sets
    torch's group counter back to 0 (torch 2.13 distributed_c10d.py, ``destroy_process_group``:
    ``_world.group_count = 0``), so a group made again in the same process has the destroyed one's
    store prefix, and under torchrun (whose agent's store outlives the group) the destroyed
    group's addresses are still there: the new group's connections went to closed listeners and
    the second ``init_process_group`` hung.  Every rank of one making adds 1 before any connects,
    so ``(count - 1) // size`` is the same on all of them and new for each making.  Each rank's
    ``timeout`` is checked first, every rank hearing of a refusal (:mod:`kernels.pytorch.start_check`)."""
    generation = (store.add("topocoll/makings", 1) - 1) // size
    store = dist.PrefixStore(f"topocoll/{generation}/", store)
    check_timeouts(store, rank, size, timeout)   # refused on any rank: raised on every rank (start_check)
    return TopocollProcessGroup(store, rank, size, timeout)


__all__ = ["TopocollProcessGroup", "create", "BACKEND_NAME"]

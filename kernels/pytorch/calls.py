"""torch.distributed's collectives as topocoll schedule calls, run on one rank (inside the
process group's worker thread, :mod:`kernels.pytorch.process_group`).

Each call: local checks (:mod:`kernels.pytorch.checks`) -> every rank agrees on the call
(:func:`kernels.pytorch.agreement.agree`, raises on every rank before any data moves) -> the plan's
choice (:func:`kernels.pytorch.plan_choice.choose`) -> one rank's share of that schedule over the
transport (:func:`kernels.pytorch.schedule_share.run_share`), or torch's own NCCL group for CUDA
tensors where the plan says NCCL. A small CPU all-reduce whose schedule is one step does the
agreement and the data in one round (:mod:`kernels.pytorch.fused`). On CUDA tensors a schedule runs
natively where the group can (:class:`~kernels.pytorch.native_exec.NativeExecutor`: one launch per
process, peers' memory through CUDA IPC), else staged through the host;
:attr:`CallRunner.last_path` says which ran. torch's list forms (``all_gather`` into a list,
``gather``, ``scatter``, ``reduce_scatter`` from a list) are packed into one flat buffer and
unpacked after; an uneven all-to-all pads every block to the largest split and runs the
``alltoall`` schedule.  A coalesced call (several parts) is agreed whole, every part checked, before
its first part's data moves (:meth:`CallRunner.agree_pairs`, :func:`pairs_digest`).
"""

from __future__ import annotations

import torch

from kernels.pytorch.agreement import Header, agree, shape_digest, splits_of
from kernels.pytorch.checks import (ANY_LAYOUT, call_layouts, first_failure, flat, layout_bits, layouts_ok,
                                    reduce_op_ok, same_layout, sizes_ok, tensors_ok)
from kernels.pytorch.dtypes import dtype_code
from kernels.pytorch.errors import CollectiveMismatch
from kernels.pytorch.fused import fused_allreduce, fused_route
from kernels.pytorch.plan_choice import choose
from kernels.pytorch.schedule_share import GroupTransport, run_share
from synth.plan.selector import NCCL


class CallRunner:
    """Runs calls for ``rank`` of ``size`` (module docstring).  ``transports(kind)`` returns the
    internal group that carries a schedule's messages for ``cpu`` / ``cuda`` tensors, and for
    ``nccl`` torch's NCCL group (None where NCCL is not used);
    ``selector`` is the group's :class:`~synth.plan.selector.ScheduleSelector`."""

    def __init__(self, rank: int, size: int, selector, transports) -> None:
        self.rank, self.size, self.selector, self.transports = rank, size, selector, transports
        self.last_label = ""                 # what the last call ran (a plan file, best:..., nccl)
        self.last_route = None               # its kernels.comm.route.Route: what plan.json says, what ran, why
        self.cuda_device: int | None = None  # the caller's current CUDA device when the call was made
        self.native = None                   # a NativeExecutor for CUDA tensors (None: host staging)
        self.last_path = ""                  # how the last call's data moved: native, host, nccl or local
        #: (shape, dtype, op, layout bits) -> what a one-round all-reduce of that shape needs (kernels.pytorch.fused)
        self.fused_shapes: dict = {}

    # ------------------------------------------------------------------ shared steps
    def agree(self, collective: str, tensors, *, count: int, root: int = -1, op: str = "", shapes=(),
              splits=(), extra=(0, ""), originals=None) -> list:
        """``originals``: the caller's own tensors where ``tensors`` are packed copies of them (coalesced
        calls): each must be dense, all in one memory layout, and the header sends their layouts."""
        if originals is not None:
            extra = first_failure(extra, layouts_ok(originals), same_layout(originals))
        code, note = first_failure(tensors_ok(tensors, cuda_device=self.cuda_device), reduce_op_ok(tensors, op), extra)
        ref = tensors[0] if tensors else None
        layouts = ANY_LAYOUT if code else call_layouts(tensors if originals is None else originals)
        header = Header(collective, dtype_code(ref.dtype) if ref is not None else 0, count, root, op,
                        shape_digest(shapes), tuple(splits), code,
                        ref.device.type if isinstance(ref, torch.Tensor) else "cpu", layouts=layouts)
        return agree(self.transports("cpu"), header, self.size, self.rank, note)

    def run(self, collective: str, send, recv, count: int, *, op: str = "sum", root: int | None = None,
            nccl_call=None) -> None:
        """Run the plan's schedule for ``collective`` on flat ``send``/``recv`` (either None
        where this rank has none; the same tensor for in place)."""
        if count == 0:
            self.last_path = "local"
            return
        ref = send if send is not None else recv
        group = []

        def no_nccl() -> str:                # asked only where plan.json says nccl
            if not ref.is_cuda:
                return "CPU tensors: NCCL runs on GPUs only"
            if nccl_call is None:
                return f"the topocoll process group has no NCCL call for {collective}"
            group.append(self.transports("nccl"))
            return "" if group[0] is not None else "torch's NCCL group cannot run here (no NCCL, or ranks share a GPU)"
        route = choose(self.selector, collective, count, ref.element_size(), root, no_nccl=no_nccl,
                       host=not ref.is_cuda)
        self.last_route, self.last_label = route, route.ran
        self.last_path = data_path(route.ran, self.native is not None and self.native.takes(ref))
        if self.last_path == "nccl":         # plan.json says NCCL and it can run: torch's own NCCL group runs it
            nccl_call(group[0] if group else self.transports("nccl")).wait()
            return
        if self.last_path == "native" and self.native.run(route.schedule, send, recv, count, op, route.protocol):
            return
        if self.last_path == "native":       # every rank together: the native path is off (native.why_not)
            self.last_path = "host"
        run_share(route.schedule, send, recv, count, op=op, rank=self.rank,
                  transport=GroupTransport(self.transports(ref.device.type)))

    # ------------------------------------------------------------------ collectives
    def allreduce(self, tensors, op: str, factor=1.0, nccl_opts=None, originals=None) -> None:
        """``originals``: the caller's tensors packed into ``tensors`` (coalesced calls; :meth:`agree`)."""
        route = fused_route(self, tensors[0], op) if len(tensors) == 1 and originals is None else None
        if route is not None:                # a small call: header and data in one round
            fused_allreduce(self, tensors[0], op, route)
            return
        shapes = None                        # coalesced: the whole call in every header (pairs_digest)
        if originals is not None:
            shapes = pairs_digest([(t, t) for t in originals], layouts=False)
        for t in tensors:                    # every part agreed on every rank before any part's data moves
            self.agree("allreduce" if shapes is None else "allreduce_coalesced", [t], count=t.numel(), op=op,
                       shapes=shapes or [t.shape], originals=originals)
        for t in tensors:
            buf, run_op = premul(flat(t), op, factor, copy=False)
            if self.size == 1:
                continue
            nccl = None if run_op != op or nccl_opts is None else (lambda g, t=t: g.allreduce([t], nccl_opts))
            self.run("allreduce", buf, buf, buf.numel(), op=run_op, nccl_call=nccl)

    def allgather_into(self, out, inp) -> None:
        """``out`` (flat, n blocks) gets every rank's ``inp``."""
        self.agree("allgather", [out, inp], count=inp.numel(), shapes=[inp.shape],
                   extra=sizes_ok([out], self.size * inp.numel(), "output tensor"))
        self._allgather(flat(out), flat(inp))

    def allgather_pairs(self, outputs, inputs) -> None:
        """``all_gather_into_tensor_coalesced``: every pair checked, on every rank, in one header
        (:meth:`agree_pairs`) before any pair's data moves."""
        self.agree_pairs("allgather_coalesced", list(zip(outputs, inputs)), lambda o, i: (
            i.numel(), sizes_ok([o], self.size * i.numel(), "output tensor")),
            failure=_count_ok(outputs, len(inputs), "output tensors"))
        for out, inp in zip(outputs, inputs):
            self._allgather(flat(out), flat(inp))

    def reduce_scatter_pairs(self, outputs, inputs, op: str, factor=1.0) -> None:
        """``reduce_scatter_tensor_coalesced``, checked as :meth:`allgather_pairs`."""
        self.agree_pairs("reducescatter_coalesced", list(zip(outputs, inputs)), lambda o, i: (
            o.numel(), sizes_ok([i], self.size * o.numel(), "input tensor")), op=op,
            failure=_count_ok(outputs, len(inputs), "output tensors"))
        for out, inp in zip(outputs, inputs):
            self._reduce_scatter(flat(out), *premul(flat(inp), op, factor))

    def agree_pairs(self, collective: str, parts, needs, op: str = "", failure=(0, "")) -> None:
        """One agreement for a coalesced call: ``parts`` holds each part's tensors (an (output,
        input) pair, or an input and its output list), ``needs(*part)`` gives a part's elements per
        block and its size check, ``failure`` a check of the whole call (how many parts); the header
        carries the first part's fields, the first local failure (``pair k: ...`` where there are
        several parts) and a digest of every part (:func:`pairs_digest`), so a bad later part, or
        ranks with different parts, raise on every rank before any byte moves."""
        count = 0
        for k, part in enumerate(parts):
            code, note = tensors_ok(list(part), cuda_device=self.cuda_device)
            if not code:
                elements, (code, note) = needs(*part)
                count = count if k else elements
                code, note = first_failure((code, note), reduce_op_ok(list(part[-1:]), op))
            if code and not failure[0]:
                failure = (code, f"pair {k}: {note}" if len(parts) > 1 else note)
        self.agree(collective, list(parts[0]) if parts else [], count=count, op=op, shapes=pairs_digest(parts),
                   extra=failure)

    def _allgather(self, out, inp) -> None:
        if self.size == 1:
            out.copy_(inp)
            return
        self.run("allgather", inp, out, inp.numel(),
                 nccl_call=lambda g: g.all_gather_single(out, inp, _opts("AllgatherOptions")))

    def allgather_lists(self, output_lists, failure, inputs) -> None:
        """``all_gather`` into a list per input (``all_gather_coalesced``: several, ``failure`` its
        check of the caller's lists): one agreement for every (input, output list) part
        (:meth:`agree_pairs`) before any part's data moves."""
        self.agree_pairs("allgather_list", [(inp, *outputs) for outputs, inp in zip(output_lists, inputs)],
                         lambda inp, *outputs: (inp.numel(), first_failure(
                             sizes_ok(outputs, inp.numel(), "output tensor"), _count_ok(outputs, self.size))),
                         failure=first_failure(failure, _count_ok(output_lists, len(inputs), "output lists")))
        for outputs, inp in zip(output_lists, inputs):
            packed = torch.empty(self.size * inp.numel(), dtype=inp.dtype, device=inp.device)
            self._allgather(packed, flat(inp))
            for r, o in enumerate(outputs):
                flat(o).copy_(packed[r * inp.numel():(r + 1) * inp.numel()])

    def reduce_scatter_into(self, out, inp, op: str, factor=1.0) -> None:
        self.agree("reducescatter", [out, inp], count=out.numel(), op=op, shapes=[out.shape],
                   extra=sizes_ok([inp], self.size * out.numel(), "input tensor"))
        self._reduce_scatter(flat(out), *premul(flat(inp), op, factor))

    def _reduce_scatter(self, out, inp, op: str) -> None:
        """``inp`` and ``op`` as :func:`premul` gives them (premul_sum: a scaled copy, summed)."""
        if self.size == 1:
            out.copy_(inp)
            return
        self.run("reducescatter", inp, out, out.numel(), op=op)

    def reduce_scatter_list(self, out, inputs, op: str, factor=1.0) -> None:
        """``inputs[d]``: rank ``d``'s block, the same sizes on every rank, ``out`` this rank's size;
        uneven blocks (gloo and torch's NCCL group take them) run padded to the largest."""
        sizes = [t.numel() for t in inputs]
        block = max(sizes, default=out.numel())
        mine = sizes[self.rank] if len(sizes) == self.size else out.numel()
        self.agree("reducescatter_list", [out, *inputs], count=block, op=op, shapes=[t.shape for t in inputs],
                   extra=first_failure(_count_ok(inputs, self.size), sizes_ok([out], mine, "output tensor")))
        even = all(k == block for k in sizes)
        if even:
            packed, target = torch.cat([flat(t) for t in inputs]) if inputs else out.new_empty(0), flat(out)  # a copy
        else:
            packed, target = out.new_zeros(self.size * block), out.new_empty(block)
            for d, t in enumerate(inputs):
                packed[d * block:d * block + t.numel()].copy_(flat(t))
        self._reduce_scatter(target, *premul(packed, op, factor, copy=False))
        if not even:
            flat(out).copy_(target[:out.numel()])

    def broadcast(self, tensors, root: int) -> None:
        for t in tensors:
            self.agree("broadcast", [t], count=t.numel(), root=root, shapes=[t.shape], extra=self._root_ok(root))
        if self.size > 1:
            for t in tensors:
                buf = flat(t)
                self.run("broadcast", buf, buf, buf.numel(), root=root)

    def reduce(self, tensors, root: int, op: str, factor=1.0) -> None:
        """premul_sum: the schedule runs on a scaled copy, written back on the root only (NCCL
        leaves the other ranks' buffers as they were)."""
        for t in tensors:
            self.agree("reduce", [t], count=t.numel(), root=root, op=op, shapes=[t.shape], extra=self._root_ok(root))
        for t in tensors:
            mine = flat(t)
            buf, run_op = premul(mine, op, factor)
            if self.size > 1:
                self.run("reduce", buf, buf if self.rank == root else None, mine.numel(), op=run_op, root=root)
            if buf is not mine and self.rank == root:
                mine.copy_(buf)

    def gather(self, outputs, inp, root: int) -> None:
        mine = self.rank == root
        self.agree("gather", [inp, *outputs], count=inp.numel(), root=root, shapes=[inp.shape],
                   extra=first_failure(self._root_ok(root), sizes_ok(outputs, inp.numel(), "output tensor"),
                                       _count_ok(outputs, self.size) if mine else (0, "")))
        packed = torch.empty(self.size * inp.numel(), dtype=inp.dtype, device=inp.device) if mine else None
        if self.size == 1:
            packed.copy_(flat(inp))
        else:
            self.run("gather", flat(inp), packed, inp.numel(), root=root)
        for r, o in enumerate(outputs if mine else ()):
            flat(o).copy_(packed[r * inp.numel():(r + 1) * inp.numel()])

    def scatter(self, out, inputs, root: int) -> None:
        mine = self.rank == root
        self.agree("scatter", [out, *inputs], count=out.numel(), root=root, shapes=[out.shape],
                   extra=first_failure(self._root_ok(root), sizes_ok(inputs, out.numel(), "input tensor"),
                                       _count_ok(inputs, self.size) if mine else (0, "")))
        packed = torch.cat([flat(t) for t in inputs]) if mine else None
        if self.size == 1:
            flat(out).copy_(packed)
        else:
            self.run("scatter", packed, flat(out), out.numel(), root=root)

    def alltoall(self, outputs, inputs, send_splits, recv_splits, collective="alltoall") -> None:
        """Block ``d`` of ``inputs`` (``send_splits[d]`` elements) goes to rank ``d``; block ``s``
        of ``outputs`` (``recv_splits[s]`` elements) comes from rank ``s``; ``inputs`` /
        ``outputs``: flat tensors (one per peer, or one tensor cut by the splits)."""
        rows = self.agree(collective, [*outputs, *inputs], count=0, splits=[*send_splits, *recv_splits],
                          extra=first_failure(_splits_ok(inputs, send_splits, self.size, "input"),
                                              _splits_ok(outputs, recv_splits, self.size, "output")))
        table = splits_of(rows)
        n = self.size
        bad = [(s, d) for s in range(n) for d in range(n) if table[s][d] != table[d][n + s]]
        if bad:
            s, d = bad[0]
            raise CollectiveMismatch(f"{collective}: rank {s} sends {table[s][d]} elements to rank {d}, which "
                                     f"expects {table[d][n + s]} (every rank raises this before any data moves)")
        block = max(max(row[:n]) for row in table)
        if block == 0:
            return
        ref = (inputs or outputs)[0]
        send = _pack(inputs, send_splits, block, ref)
        recv = torch.empty(n * block, dtype=ref.dtype, device=ref.device)
        if n == 1:
            recv.copy_(send)
        else:
            self.run("alltoall", send, recv, block)
        _unpack(recv, outputs, recv_splits, block)

    def barrier(self, device_type: str = "cpu") -> None:
        t = torch.zeros(1, dtype=torch.uint8, device="cuda" if device_type == "cuda" else "cpu")
        self.agree("barrier", [t], count=1)
        if self.size > 1:
            self.run("allreduce", t, t, 1, op="max")

    def _root_ok(self, root: int) -> tuple[int, str]:
        return (0, "") if 0 <= root < self.size else (6, f"root {root} is not a rank of a group of {self.size}")


def data_path(ran: str, native: bool) -> str:
    """How a call's data moves: ``nccl`` where the route ran NCCL, ``native`` for a schedule the
    group's native executor takes (CUDA tensors), else ``host`` (the schedule's messages over
    the group's transport; CUDA tensors staged through host memory).

    >>> data_path("nccl", True), data_path("best:ring", True), data_path("best:ring", False)
    ('nccl', 'native', 'host')
    """
    if ran == NCCL:
        return "nccl"
    return "native" if native else "host"


def premul(flat, op: str, factor, *, copy: bool = True):
    """``(buffer, op)`` a schedule runs for a reducing call: for ``premul_sum`` (NCCL's
    ncclRedOpCreatePreMulSum) ``flat`` scaled by ``factor`` in its own dtype (a copy, or ``flat``
    itself where ``copy`` is False) and ``"sum"``; for any other op ``flat`` and ``op`` unchanged.

    >>> buf, op = premul(torch.ones(2), "premul_sum", 0.5); buf.tolist(), op
    ([0.5, 0.5], 'sum')
    """
    if op != "premul_sum":
        return flat, op
    return scale(flat.clone() if copy else flat, factor), "sum"


def scale(flat, factor):
    """``flat`` times a premul_sum factor (a float or a 1-element tensor), in place, in its own
    dtype (NCCL's PreMulSum scales each input in the element type); returns ``flat``."""
    return flat.mul_(factor.to(flat.device) if isinstance(factor, torch.Tensor) else factor)


def pairs_digest(pairs, layouts: bool = True) -> list:
    """What :func:`~kernels.pytorch.agreement.shape_digest` hashes for a coalesced call: per
    (output, input) pair both shapes, the dtype code and (``layouts``) the memory layout bits
    (ranks must agree on each; a pair that is not a pair of tensors counts as an empty shape).
    ``all_reduce_coalesced`` leaves the layouts out: its tensors share one, which its header's
    layout field carries."""
    rows = [(len(pairs),)]
    for pair in pairs:
        for t in pair:
            ok = isinstance(t, torch.Tensor)
            rows += [tuple(t.shape) if ok else (),
                     (dtype_code(t.dtype), layout_bits(t) if layouts else 0) if ok else (-1,)]
    return rows


def _count_ok(tensors, n: int, what: str = "") -> tuple[int, str]:
    if len(tensors) == n:
        return 0, ""
    return 4, f"{len(tensors)} {what} for {n} input tensors" if what else (
        f"{len(tensors)} tensors in the list, the group has {n} ranks")


def _splits_ok(tensors, splits, n: int, what: str) -> tuple[int, str]:
    """An all-to-all's ``splits`` (elements per peer) fit its tensors: one tensor per peer, or
    one tensor holding them all."""
    if len(tensors) > 1:
        return _count_ok(tensors, n)
    if len(splits) != n or min(splits, default=0) < 0:
        return 7, f"{what} split sizes {list(splits)} are not {n} non-negative numbers"
    held = sum(t.numel() for t in tensors)
    if sum(splits) != held:
        return 7, f"{what} split sizes sum to {sum(splits)} elements, the {what} tensor holds {held}"
    return 0, ""


def _opts(name: str):
    import torch.distributed as dist
    return getattr(dist, name)()


def _pieces(tensors, splits):
    """Flat pieces: one per tensor, or one tensor cut by ``splits`` (elements)."""
    if len(tensors) == 1 and len(splits) > 1:
        return list(torch.split(flat(tensors[0]), list(splits)))
    return [flat(t) for t in tensors]


def _pack(inputs, splits, block: int, ref) -> torch.Tensor:
    pieces = _pieces(inputs, splits)
    if all(p.numel() == block for p in pieces) and len(inputs) == 1:
        return flat(inputs[0])
    send = torch.zeros(len(splits) * block, dtype=ref.dtype, device=ref.device)
    for d, p in enumerate(pieces):
        send[d * block:d * block + p.numel()].copy_(p)
    return send


def _unpack(recv, outputs, splits, block: int) -> None:
    for s, p in enumerate(_pieces(outputs, splits)):
        if p.numel():
            p.copy_(recv[s * block:s * block + p.numel()])


__all__ = ["CallRunner", "data_path"]

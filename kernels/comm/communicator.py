"""A drop-in collective Communicator for one process holding every rank's buffer.

Method names and arguments follow ``cupyx.distributed`` / ``cupy.cuda.nccl`` (``all_reduce(in,
out, op='sum', stream=None)``...) except that every buffer argument is a **list with one array
per rank** (NumPy arrays: host backend; CuPy arrays: one per GPU).  Arrays are flat buffers as
in NCCL: any shape, C-contiguous outputs, ``count`` elements per *block* (see
:mod:`synth.ir.collectives`).  In-place calls pass the same array as input and output (or the
NCCL alias views: all_gather's input = block r of rank r's output, ...).

``count`` (elements of one block) defaults to: in size (all_reduce, all_gather, reduce,
gather, broadcast), out size (reduce_scatter, scatter), in size / n (all_to_all, and the
one-buffer in-place forms of all_gather / reduce_scatter / gather / scatter).  Larger
buffers are fine (the first elements are used); smaller ones raise.  Rooted collectives
take ``None`` (or any array, ignored as NCCL ignores it) for buffers off the root.  Inputs
that overlap their output other than as NCCL's in-place layout, or in-place ranks mixed
with out-of-place ones, are copied first so the result is always the out-of-place one.
Buffers shared across ranks (except send buffers that are only read) and read-only outputs
raise ``BufferLayoutError`` before any byte moves.

Schedule choice (:func:`kernels.comm.route.plan_route` over
:class:`synth.plan.selector.ScheduleSelector`, shared with the MPI communicator and the sweep):
a collective of S bytes (nccl-tests size: max of send and receive buffer bytes) runs what the
plan entry covering S (and the root) says: its schedule, or NCCL (the decision was made when
the plan was built, :mod:`synth.plan.decision`; nothing is modelled per call), or where the
entry says ``nccl`` and NCCL cannot run the call, the entry's fallback schedule;
:attr:`Communicator.last_route` says what ran and why where it differs from plan.json.  Without
a plan or an entry it runs the fastest applicable baseline at that size by the cost model (as NCCL's
tuning picks ring or tree) and warns once per collective and baseline.  Where that fallback is
ring or tree and every buffer lives on one GPU (ranks sharing a card), it runs ``direct``
instead: on one card every schedule moves its bytes through the same memory, and pipelines only
pay off across links, so the direct schedule (fewest dependent steps, no more bytes) is the
fastest there.  Every schedule is
verified against the fabric before its first use and cached.

Argument validation and buffer preparation live in :mod:`kernels.comm.validation`,
send / recv pairing in :mod:`kernels.comm.p2p`.

Example
-------
>>> import numpy as np
>>> comm = Communicator(4, plan=False)
>>> xs = [np.full(5, r, np.float32) for r in range(4)]
>>> ys = [np.empty(5, np.float32) for _ in range(4)]
>>> comm.all_reduce(xs, ys, op="sum")[3].tolist()
[6.0, 6.0, 6.0, 6.0, 6.0]
"""

from __future__ import annotations

import functools

import numpy as np

from kernels.backends.device import DeviceLayer
from kernels.backends.executor import check_backend, make_layer
from kernels.comm import p2p as _p2p
from kernels.comm.interface import CommunicatorBase
from kernels.comm.machine import probe_devices, resolve_topology, typed_topology
from kernels.comm.repeat import repeatable as _repeatable
from kernels.comm.route import Route, check_plan_files, plan_route, substituted
from kernels.comm.route import one_gpu as _one_gpu
from kernels.comm.validation import (
    _inplace_count,
    _is_cupy,
    _ptr,
    _size,
    bind_lists,
    check_array,
    check_ranks_or_devices,
    check_root,
    same_slot,
)
from kernels.program.reduce_op import check_reduce_op
from synth.ir.collectives import ROOTED, CollectiveSpec, canonical
from synth.ir.schedule import Schedule
from synth.plan.selector import NCCL, ScheduleSelector, check_plan_arg
from synth.plan.user_warning import warn_user
from topo_probe.errors import BufferLayoutError, InvalidArgument


def nccl_bytes(collective: str, count: int, itemsize: int, n: int) -> int:
    """nccl-tests message size: max(send, recv) buffer bytes for blocks of ``count`` elements.

    >>> nccl_bytes("allgather", 10, 4, 8), nccl_bytes("allreduce", 10, 4, 8)
    (320, 40)
    """
    return _max_blocks(canonical(collective), n) * count * itemsize


@functools.lru_cache(maxsize=256)
def _max_blocks(name: str, n: int) -> int:
    spec = CollectiveSpec(name, n, 1, 0 if name in ROOTED else None)
    return max(spec.input_blocks(), spec.output_blocks())


class Communicator(CommunicatorBase):
    """Collectives over ``n`` ranks held by this process (see module docstring).

    Parameters
    ----------
    devices_or_nranks : int or sequence of int
        Number of ranks, or the CUDA device of each rank (rank r uses ``devices[r]``).
    topology : Topology, str or path, optional
        The machine (preset name or file accepted); default ``fully_connected(n)``.
    plan : Plan, path, results folder, "auto", None or False
        Size-based schedule plan (:func:`synth.plan.selector.find_plan`): a plan or plan.json
        must match the topology; a folder, None or "auto" (``$TOPOCOLL_RESULTS``, else
        ``results``) is searched for the plan of the topology's fingerprint; False: baselines only.
    backend : "auto", "host", "reference", "cupy" or a DeviceLayer
        Executor backend; "auto" picks host for NumPy and cupy for CuPy arrays.
    p2p : str
        Passed to :func:`kernels.backends.executor.run_schedule`.

    Notes
    -----
    Every refusal of a call is one line starting with the method's name (``all_reduce: ...``).
    ``stream`` arguments exist for signature compatibility with cupyx and are ignored (the
    executor orders its own work).  ``send``/``recv`` take the calling rank as ``rank=``
    because one process holds every rank; see :meth:`send`.
    """

    def __init__(self, devices_or_nranks, *, topology=None, plan=None, backend="auto", p2p="auto") -> None:
        n, self.devices = check_ranks_or_devices(devices_or_nranks)
        if self.devices is not None and topology is None and n > 1:
            topology = probe_devices(self.devices)
        self.topology = resolve_topology(topology, n) if (topology is not None or n > 1) else None
        if self.topology is not None and self.topology.num_gpus != n:
            raise InvalidArgument(f"Communicator: topology {self.topology.name!r} has {self.topology.num_gpus} "
                             f"GPUs but {n} ranks were asked for")
        self.size = n
        if self.topology is None:             # one rank, no selector: its plan argument is checked all the same
            check_plan_arg(plan, "Communicator")
        self.selector = (ScheduleSelector(self.topology, plan=plan, owner="Communicator",
                                          typed=typed_topology(topology)) if self.topology is not None else None)
        self.plan = self.selector.plan if self.selector is not None else None
        if self.selector is not None:
            check_plan_files(self.selector)     # a bad entry is refused now, naming file, entry, field
        self.backend, self.p2p = check_backend(backend, p2p, "Communicator", auto=True)   # refused now, named
        self._nccl, self._nccl_reason = None, ""     # NcclRuntime once made, False (and why) where it cannot run
        self._bound: dict[tuple, tuple] = {}      # repeated-call key -> (bound launch, arrays)
        self._bound_call = None
        self._routes: dict[tuple, Route] = {}     # call shape -> its route (_run)
        self._call = None                         # the BoundCall of the call in progress (_prepare)
        self._layers: dict = {}                   # backend name -> this communicator's DeviceLayer
        #: the schedule the last collective call ran (None before the first, and when NCCL ran)
        self.last_schedule: Schedule | None = None
        #: what ran for the last collective call, against plan.json (:class:`kernels.comm.route.Route`)
        self.last_route: Route | None = None
        self._sends, self._recvs = {}, {}         # (src, dst) -> deque of unmatched posts (kernels.comm.p2p)
        self._closed = False

    def close(self) -> None:
        """Release what this communicator holds: its layers (the host layer's thread pool), bound
        launches, NCCL's communicators (``destroy()``, as ``cupy.cuda.nccl.NcclCommunicator``) and
        unmatched send / recv posts.  Idempotent; every later collective, send, recv or send_recv
        raises InvalidArgument in one line naming the call (NCCL's communicator is unusable after
        ``ncclCommDestroy``); the lookups ``schedule_for``, ``route`` and ``pending`` still answer.
        One thread at a time, as an NCCL communicator (NCCL user guide, Thread Safety): a close()
        while another thread's call runs is not supported."""
        layers, self._layers, self._bound, self._routes = self._layers, {}, {}, {}
        self._closed, self._bound_call, self._call = True, None, None
        self._sends.clear()
        self._recvs.clear()
        for layer in layers.values():
            getattr(layer, "close", lambda: None)()
        for comm in getattr(self._nccl, "comms", None) or ():
            getattr(comm, "destroy", lambda: None)()
        self._nccl, self._nccl_reason = False, "this Communicator was closed"   # None would start NCCL again (route)

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise InvalidArgument(f"{what}: this Communicator was closed ({self!r}); make a new one")

    def __repr__(self) -> str:
        name = self.topology.name if self.topology is not None else "single"
        return f"Communicator({self.size} ranks, topology={name!r}, plan={'yes' if self.plan else 'no'})"

    # ------------------------------------------------------------------ schedules
    @property
    def fabric(self):
        return self.selector.fabric

    def route(self, collective: str, nbytes: int, root: int | None = None, dtype=None, op: str = "sum", *,
              on_gpus: bool = True, layer: str = "") -> "Route":
        """What the plan says runs for ``collective`` of ``nbytes`` (nccl-tests size), ``dtype``,
        ``op`` and ``root`` and what runs here (:func:`kernels.comm.route.plan_route`: a lookup,
        NCCL started only where the plan says ``nccl``); ``on_gpus`` False: the host path."""
        no_nccl = self._nccl_why if on_gpus else f"host arrays ({layer or 'host'} backend): NCCL runs on GPU memory only"
        return plan_route(self.selector, collective, nbytes, root, dtype=dtype, op=op, no_nccl=no_nccl, layer=layer)

    def _run(self, name: str, sends: list, recvs: list, count: int, *, root=None, op="sum"):
        ref, count = next(a for a in sends + recvs if a is not None), int(count)   # np.int8(4) x 8 bytes: -128
        if count == 0:
            return recvs
        if self.size == 1:
            return _single_rank(name, sends, recvs, op)
        backend = self.backend
        if backend == "auto":
            backend = "cupy" if _is_cupy(ref) else "host"
        layer = backend if isinstance(backend, str) else getattr(backend, "name", type(backend).__name__)
        on_gpus = layer in ("cupy", "cupy-ops")
        one_gpu = on_gpus and _one_gpu(sends, recvs)
        shape = (name, count * ref.dtype.itemsize, root, ref.dtype, on_gpus, layer, one_gpu)
        route = self._routes.get(shape)
        if route is None:
            route = self._routes[shape] = self._route_of(name, count, ref.dtype, root, op, on_gpus, layer, one_gpu)
        self.last_route = route if route.ran == NCCL else route.with_layer(layer)
        self.last_schedule = route.schedule
        if route.ran == NCCL:
            return self._nccl.run(name, sends, recvs, count, op=op, root=root or 0)
        if on_gpus:
            return self._run_native(route.schedule, sends, recvs, op, backend, protocol=route.protocol)
        return self._run_layer(route.schedule, sends, recvs, op, backend, False, route.protocol)

    def _run_native(self, schedule, sends, recvs, op, backend, *, protocol: str | None = None):
        return self._run_layer(schedule, sends, recvs, op, backend, True, protocol)

    def _route_of(self, name, count, dtype, root, op, on_gpus, layer, one_gpu) -> Route:
        """The route of one call shape (memoised by :meth:`_run`: plan.json's answer is fixed)."""
        route = self.route(name, nccl_bytes(name, count, dtype.itemsize, self.size), root, dtype, op,
                           on_gpus=on_gpus, layer=layer)
        if one_gpu and route.ran in ("best:ring", "best:tree"):
            direct = self.selector.select_baseline("direct", name, root)
            if direct is not None:
                route = substituted(route, direct, "every buffer on one GPU: direct instead of ring or tree")
        return route

    def _run_layer(self, schedule, sends, recvs, op, backend, on_gpus: bool, protocol: str | None = None):
        """Run ``schedule``; where the layer binds the call (native launch, host ops resolved) and
        no send buffer is a copy (:attr:`BoundCall.copied`), keep the bound
        launch for the identical repeated call (:mod:`kernels.comm.repeat`).  ``protocol``: the
        plan entry's for the native executor (None: the layer's own)."""
        from kernels.backends.device import RankBuffers
        from kernels.backends.executor import prepare_bound
        layer, program, bufs = prepare_bound(schedule, self._call, self._layer(backend), op=op)   # all checked
        if program is None or not program.num_ops:
            return recvs
        how = {"protocol": protocol} if protocol and getattr(layer, "protocol", None) else {}
        call = layer.bound(program, RankBuffers(bufs), **how) if hasattr(layer, "bound") else None
        if call is None:
            layer.execute(program, RankBuffers(bufs), **how)
        else:
            call()
            if not self._call.copied:        # a replay would read the copy, stale
                self._bound_call = call
        if on_gpus:
            self.last_route = self.last_route.with_layer("native" if call is not None else "cupy-ops")
        return recvs

    def _layer(self, backend):
        """This communicator's own layer of ``backend`` (made at first use on its devices and topology: no P2P there,
        via the host; None: the reference); a DeviceLayer as it is; a value set later, not a name, refused."""
        if isinstance(backend, DeviceLayer):
            return backend
        if not isinstance(backend, str) or backend not in self._layers:     # make_layer refuses a non-name
            self._layers[backend] = make_layer(backend, self.p2p, devices=self.devices, topology=self.topology,
                                               owner="Communicator")
        return self._layers[backend]

    def _nccl_why(self) -> str:
        """'' where NCCL runs the plan's ``nccl`` ranges here (CuPy with NCCL and one GPU per
        rank), else why not: started once, at the first call the plan gives to NCCL."""
        if self._nccl is None:
            from kernels.comm.nccl_runtime import NO_NCCL, nccl_runtime_or_reason
            devices = self.devices if self.devices is not None else list(range(self.size))
            runtime, self._nccl_reason = nccl_runtime_or_reason(devices)
            self._nccl = runtime or False
            if not runtime and self._nccl_reason != NO_NCCL:     # NCCL is here but cannot run: say so once
                warn_user(f"Communicator: NCCL cannot run this communicator: {self._nccl_reason}; the plan's "
                          f"nccl ranges run the plan's fallback schedule (last_route says so)", RuntimeWarning)
        return "" if self._nccl else self._nccl_reason

    # ------------------------------------------------------------------ validation
    def _prepare(self, what, name, ins, outs, count, root=None, in_need=None, out_need=None, sized=None):
        """:func:`kernels.comm.validation.bind_lists` (each array checked once, flat views, NCCL
        in-place aliasing, the call bound): the call's sends and receives."""
        self._call = bind_lists(what, name, ins, outs, count, root, in_need, out_need, size=self.size,
                                devices=self.devices, sized=sized)
        return list(self._call.sends), list(self._call.recvs)

    # ------------------------------------------------------------------ collectives
    @_repeatable
    def all_reduce(self, in_arrays, out_arrays, op: str = "sum", stream=None) -> list:
        """``out[r] = op over ranks of in[*]`` (count = in size). ``stream`` is accepted and ignored."""
        op = check_reduce_op(op, "all_reduce")     # checked: the lowering takes it as is
        count = _size(in_arrays, "all_reduce")
        s, d = self._prepare("all_reduce", "allreduce", in_arrays, out_arrays, count, sized=in_arrays)
        self._run("allreduce", s, d, count, op=op)
        return out_arrays

    @_repeatable
    def all_gather(self, in_arrays, out_arrays, count: int | None = None, stream=None) -> list:
        """Block r of every ``out`` is rank r's input (``count`` elements, default in size)."""
        sized = None
        if count is None:
            count = _inplace_count(in_arrays, out_arrays, self.size)
            count, sized = (count, None) if count else (_size(in_arrays, "all_gather"), in_arrays)
        s, d = self._prepare("all_gather", "allgather", in_arrays, out_arrays, count, sized=sized)
        self._run("allgather", s, d, count)
        return out_arrays

    @_repeatable
    def reduce_scatter(self, in_arrays, out_arrays, count: int | None = None, op: str = "sum",
                       stream=None) -> list:
        """``out[r]`` = reduction of block r of every input (``count`` = out size by default)."""
        op = check_reduce_op(op, "reduce_scatter")
        sized = None
        if count is None:
            count = _inplace_count(in_arrays, out_arrays, self.size)
            count, sized = (count, None) if count else (_size(out_arrays, "reduce_scatter"), out_arrays)
        s, d = self._prepare("reduce_scatter", "reducescatter", in_arrays, out_arrays, count, sized=sized)
        self._run("reducescatter", s, d, count, op=op)
        return out_arrays

    @_repeatable
    def broadcast(self, in_out_arrays, root: int = 0, stream=None) -> list:
        """Copy rank ``root``'s buffer into every rank's (in place)."""
        root = self._root("broadcast", root)
        count = _size(in_out_arrays, "broadcast")
        s, d = self._prepare("broadcast", "broadcast", in_out_arrays, in_out_arrays, count, root, sized=in_out_arrays)
        self._run("broadcast", s, d, count, root=root)
        return in_out_arrays

    @_repeatable
    def reduce(self, in_arrays, out_arrays, root: int = 0, op: str = "sum", stream=None) -> list:
        """``out[root]`` = reduction of all inputs; other outputs may be None (untouched)."""
        op = check_reduce_op(op, "reduce")
        root = self._root("reduce", root)
        count = _size(in_arrays, "reduce")
        s, d = self._prepare("reduce", "reduce", in_arrays, out_arrays, count, root, out_need={root}, sized=in_arrays)
        self._run("reduce", s, d, count, root=root, op=op)
        return out_arrays

    @_repeatable
    def gather(self, in_arrays, out_arrays, root: int = 0, stream=None) -> list:
        """Block r of ``out[root]`` is rank r's input; other outputs may be None."""
        root = self._root("gather", root)
        count = _size(in_arrays, "gather")
        if same_slot(in_arrays, out_arrays, root, self.size):
            count = check_array(in_arrays[root], "gather", root).size // self.size
        s, d = self._prepare("gather", "gather", in_arrays, out_arrays, count, root, out_need={root}, sized=in_arrays)
        self._run("gather", s, d, count, root=root)
        return out_arrays

    @_repeatable
    def scatter(self, in_arrays, out_arrays, root: int = 0, stream=None) -> list:
        """``out[r]`` = block r of ``in[root]`` (count = out size); other inputs may be None."""
        root = self._root("scatter", root)
        count = _size(out_arrays, "scatter")
        if same_slot(in_arrays, out_arrays, root, self.size):
            count = check_array(out_arrays[root], "scatter", root).size // self.size
        s, d = self._prepare("scatter", "scatter", in_arrays, out_arrays, count, root, in_need={root}, sized=out_arrays)
        self._run("scatter", s, d, count, root=root)
        return out_arrays

    @_repeatable
    def all_to_all(self, in_arrays, out_arrays, stream=None) -> list:
        """Block d of ``in[s]`` lands in block s of ``out[d]`` (in size must divide by n)."""
        total = _size(in_arrays, "all_to_all")
        if total % self.size:
            raise BufferLayoutError(f"all_to_all: in_arrays hold {total} elements, not a multiple of {self.size} ranks")
        count = total // self.size
        s, d = self._prepare("all_to_all", "alltoall", in_arrays, out_arrays, count, sized=in_arrays)
        self._run("alltoall", s, d, count)
        return out_arrays

    # ------------------------------------------------------------------ point to point
    def send_recv(self, src_rank: int, dst_rank: int, src_array, dst_array) -> None:
        """Copy ``src_array`` (held by ``src_rank``) into ``dst_array`` (held by ``dst_rank``)."""
        self._check_open("send_recv")
        _p2p.send_recv(src_rank, dst_rank, src_array, dst_array, size=self.size, devices=self.devices)

    def send(self, array, peer: int, *, rank: int, stream=None) -> None:
        """Post a send of ``array`` from ``rank`` to ``peer``; it completes (copies) as soon as
        ``peer`` posts the matching :meth:`recv` (FIFO per (rank, peer) pair, like NCCL)."""
        self._post(self._sends, self._recvs, (rank, peer), array, sending=True)

    def recv(self, array, peer: int, *, rank: int, stream=None) -> None:
        """Post a receive into ``array`` at ``rank`` from ``peer`` (see :meth:`send`)."""
        self._post(self._recvs, self._sends, (peer, rank), array, sending=False)

    def pending(self) -> list[tuple[str, int, int]]:
        """Unmatched posts: ``("send" | "recv", src, dst)`` each."""
        return _p2p.pending(self._sends, self._recvs)

    def _post(self, mine, theirs, pair, array, sending: bool) -> None:
        self._check_open("send" if sending else "recv")
        _p2p.post(mine, theirs, pair, array, sending=sending, size=self.size, devices=self.devices)  # errors: send/recv

    def _root(self, what: str, root: int) -> int:
        return check_root(what, root, self.size)


# ---------------------------------------------------------------------- helpers
def _single_rank(name: str, sends, recvs, op: str):
    """n = 1: every collective copies the input to the output (avg of one value is itself)."""
    s, d = sends[0], recvs[0]
    if s is not None and d is not None and _ptr(s) != _ptr(d):
        d[...] = s
    return recvs

"""CuPy backend: one GPU per rank, one stream per rank, events between dependent ops.

The decisions live in :func:`kernels.backends.cupy_plan.plan_program`, plain Python that the
CPU tests cover with a fake runtime (``tests/_fake_device.py``):

* **route** of each op: ``local`` (same GPU: a device copy / reduce kernel), ``peer`` (zero
  copy: ``cudaMemcpyPeerAsync``, or the reduce kernel reading the peer's memory) when peer
  access is allowed for that pair, else ``staged``: the source rank's stream copies into a
  pinned, portable host buffer, records an event, and the destination rank's stream waits
  for it, copies host -> device and reduces locally; a staged *chain* (two or more staged
  sources reduced into one chunk in one step) is instead reduced on the host in one pass
  (``host_reduce``, the Numba kernel of :mod:`kernels.backends.host_reduce`) and copied to
  the device once;
* **stream**: an op runs on the stream of the rank it writes (a staged op's first half on the
  source rank's stream);
* **events**: an op waits for the completion event of each dependency (from
  :mod:`kernels.program.lowering`) that ran on another stream, unless that stream already waited for
  a later point of it; pinned staging areas are double-buffered by step and a staged copy
  waits for the previous readers of its area.

No device-wide synchronisation happens inside a collective: each rank's stream first waits
for the caller's current stream on its GPU, and at the end every GPU's current stream waits
for all the collective's streams (like NCCL on ``stream=current``).  Reading results on the
host therefore needs a sync of the current stream (``cupy.ndarray.get()`` does it).

``p2p="auto"`` uses peer access where the runtime's ``canAccessPeer`` (and the topology's
:meth:`topo_probe.topology.model.Topology.p2p`, when given) allow it; ``"never"`` always stages.
Enabling peer access happens once per pair; if it fails, the pair falls back to staging with
a single warning and the result is still right.  The CUDA calls themselves go through
:class:`~kernels.backends.cupy_runtime.CupyRuntime` (importable from here too).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from kernels.backends.cupy_plan import PINNED, ROUTES, STAGE, Cmd, Plan, plan_program, plan_routes  # noqa: F401
from kernels.backends.cupy_runtime import CupyRuntime, EventPools
from kernels.backends.device import BINARY_OP, DeviceLayer, RankBuffers, layer_p2p
from kernels.backends.host_reduce import warm
from kernels.backends.kernel_twins import binop_for
from kernels.program.ops import Program, Region
from synth.plan.user_warning import warn_user
from topo_probe.errors import BufferLayoutError, DeviceUnavailable

#: plans a CupyLayer keeps (per lowered program and GPU layout)
PLANS_KEPT = 64


# ====================================================================== the layer
class CupyLayer(DeviceLayer):
    """Device layer over CuPy (or any object with :class:`CupyRuntime`'s methods).

    Parameters
    ----------
    p2p : "auto" or "never"
        Use peer access where allowed, or always stage through pinned host memory.
    devices : sequence of int, optional
        GPU of each rank (default: the GPU its buffers live on; rank r on GPU r for a rank
        with none).  Several ranks may share a GPU.
    topology : Topology, optional
        When given, a pair also needs ``topology.p2p(src, dst).supported``, the topology's GPU
        index being the device id, or with ``topology_ranks`` (a Communicator's topology, whose
        GPU i is rank i) the first rank that runs on the device (``devices``, else where the
        buffers live).
    runtime : object, optional
        The CUDA runtime wrapper (default :class:`CupyRuntime`, created on first use; tests pass
        the tests' fake runtime).
    """

    name = "cupy"

    def __init__(self, p2p: str = "auto", *, devices: Sequence[int] | None = None, topology: Any = None,
                 runtime: Any = None, topology_ranks: bool = False):
        self.p2p = layer_p2p(p2p, type(self).__name__)       # checked once: here, or by who made the layer
        self.devices = None if devices is None else [int(d) for d in devices]
        self.topology, self.topology_ranks = topology, topology_ranks
        self._runtime = runtime
        self._peer_state: dict[tuple[int, int], bool] = {}
        self._can: dict[tuple[int, int], bool] = {}
        self._streams: dict[int, Any] = {}
        self._pinned: np.ndarray | None = None
        self._last_finals: list = []
        self._placed: list[int] | None = None     # ranks' GPUs read off their buffers (place)
        self._events = EventPools()
        self._plans: OrderedDict[tuple, tuple[Program, Plan]] = OrderedDict()

    # ------------------------------------------------------------------ setup
    @property
    def runtime(self) -> Any:
        if self._runtime is None:
            self._runtime = CupyRuntime()
        return self._runtime

    def place(self, buffers: list[dict]) -> None:
        """Without ``devices``, each rank runs on the GPU its buffers live on (one GPU per rank)."""
        if self.devices is not None:
            return
        rt, placed = self.runtime, []
        for r, bufs in enumerate(buffers):
            devs = {rt.device_of_array(a) for a in bufs.values() if rt.is_array(a)}
            if len(devs) > 1:
                raise BufferLayoutError(f"rank {r}: buffers live on GPUs {sorted(devs, key=str)}; "
                                        f"one rank's buffers must share a GPU")
            placed.append(devs.pop() if devs else r)
        self._placed = placed

    def device_of(self, ranks: int) -> list[int]:
        """GPU of each rank for a collective of ``ranks`` ranks."""
        devs = self._layout(ranks)
        count = self.runtime.device_count()
        if len(devs) < ranks or any(not 0 <= d < count for d in devs[:ranks]):
            raise DeviceUnavailable(f"backend 'cupy': {ranks} ranks need devices {devs[:ranks]} but "
                                    f"{count} GPU(s) are visible; pass devices=[...]")
        return devs[:ranks]

    def peer_allowed(self, dev: int, peer: int) -> bool:
        """Whether ``dev`` may read ``peer``'s memory directly (before enabling is tried)."""
        if dev == peer:
            return True
        if self.p2p == "never" or self._peer_state.get((dev, peer)) is False:
            return False
        if self.topology is not None and not self.topology.p2p(self.topology_gpu(peer),
                                                               self.topology_gpu(dev)).supported:
            return False
        if (dev, peer) not in self._can:
            self._can[(dev, peer)] = bool(self.runtime.can_access_peer(dev, peer))
        return self._can[(dev, peer)]

    def topology_gpu(self, dev: int) -> int:
        """The topology's GPU index of CUDA device ``dev`` (class docstring)."""
        layout = self.devices if self.devices is not None else self._placed
        return layout.index(dev) if self.topology_ranks and layout is not None and dev in layout else dev

    def plan(self, program: Program) -> Plan:
        """Plan ``program``; enable peer access for new pairs once, re-planning around failures.

        Plans are kept per program and GPU layout (up to :data:`PLANS_KEPT`): once its peer pairs
        are enabled a plan never changes, and planning was most of the layer's host time."""
        devs = self.device_of(program.ranks)
        key = (id(program), tuple(devs))
        kept = self._plans.get(key)
        if kept is not None and kept[0] is program:
            self._plans.move_to_end(key)
            return kept[1]
        plan = self._plan(program, devs)
        self._plans[key] = (program, plan)
        if len(self._plans) > PLANS_KEPT:
            self._plans.popitem(last=False)
        return plan

    def _plan(self, program: Program, devs: list[int]) -> Plan:
        plan = plan_program(program, devs, self.peer_allowed)
        failed = []
        for pair in sorted(plan.peer_pairs):
            if pair in self._peer_state:
                continue
            try:
                self.runtime.enable_peer_access(*pair)
                self._peer_state[pair] = True
            except Exception as exc:  # noqa: BLE001 - any failure means: stage this pair
                self._peer_state[pair] = False
                failed.append(f"GPU {pair[0]} -> GPU {pair[1]} ({type(exc).__name__}: {exc})")
        if failed:
            warn_user(f"cupy backend: enabling peer access failed for {'; '.join(failed)}; "
                      f"staging those transfers through host memory", RuntimeWarning)
            plan = plan_program(program, devs, self.peer_allowed)
        return plan

    # ------------------------------------------------------------------ DeviceLayer primitives
    def check_array(self, arr: Any, what: str) -> None:
        if not self.runtime.is_array(arr):
            raise BufferLayoutError(f"{what} must be a device array of the cupy backend, got {type(arr).__name__}")

    def _layout(self, ranks: int) -> list[int]:
        """``devices``, else the GPUs :meth:`place` read off the buffers, else rank r on GPU r."""
        if self.devices is not None:
            return self.devices
        if self._placed is not None and len(self._placed) >= ranks:
            return self._placed
        return list(range(ranks))

    def allocate(self, rank: int, nelems: int, dtype: Any) -> Any:
        return self.runtime.alloc(self._dev(rank), nelems, dtype)

    def _stream(self, rank: int, dev: int) -> Any:
        if (rank, dev) not in self._streams:
            self._streams[(rank, dev)] = self.runtime.stream(dev)
        return self._streams[(rank, dev)]

    def _dev(self, rank: int) -> int:
        return self._layout(rank + 1)[rank]

    def copy(self, dst: Any, src: Any, stream: int) -> None:
        rt = self.runtime
        s = self._stream(stream, self._dev(stream))
        if rt.device_of_array(dst) == rt.device_of_array(src):
            rt.copy(dst, src, s)
        else:
            rt.copy_peer(dst, src, s)

    def reduce_copy(self, dst: Any, a: Any, b: Any, op: str, stream: int) -> None:
        self.runtime.reduce(dst, a, b, op, self._stream(stream, self._dev(stream)))

    def scale(self, dst: Any, divisor: int, stream: int) -> None:
        self.runtime.postdiv(dst, divisor, self._stream(stream, self._dev(stream)))

    def record_event(self, stream: int) -> Any:
        ev = self.runtime.event(self._dev(stream))
        self.runtime.record(ev, self._stream(stream, self._dev(stream)))
        return ev

    def wait_event(self, stream: int, event: Any) -> None:
        self.runtime.wait(self._stream(stream, self._dev(stream)), event)

    def synchronize(self) -> None:
        self.runtime.synchronize()

    # ------------------------------------------------------------------ execution
    def _pinned_area(self, nbytes: int) -> np.ndarray:
        if self._pinned is None or self._pinned.size < nbytes:
            self._pinned = self.runtime.alloc_pinned(max(nbytes, 1 << 20))
        return self._pinned

    def execute(self, program: Program, buffers: RankBuffers) -> None:
        rt = self.runtime
        devs = self.device_of(program.ranks)
        for r, bufs in enumerate(buffers.bufs):
            for name, arr in bufs.items():
                if rt.device_of_array(arr) != devs[r]:
                    raise BufferLayoutError(f"rank {r}: {name} buffer lives on GPU {rt.device_of_array(arr)}, "
                                            f"rank {r} runs on GPU {devs[r]}")
        plan = self.plan(program)
        if plan.host_reduces:
            warm(program.dtype)
        item = program.dtype.itemsize
        pinned = self._pinned_area(plan.pinned_elems * item)[:plan.pinned_elems * item].view(program.dtype)
        stage = [rt.alloc(devs[r], plan.stage_elems[r], program.dtype) if plan.stage_elems[r] else None
                 for r in range(program.ranks)]
        streams = [self._stream(r, devs[r]) for r in range(program.ranks)]

        def view(reg: Region) -> Any:
            if reg.buf == PINNED:
                return pinned[reg.start:reg.stop]
            if reg.buf == STAGE:
                return stage[reg.rank][reg.start:reg.stop]
            return buffers.view(reg)

        events: dict[int, Any] = {}
        new_event = self._events.for_call(rt)
        binop = BINARY_OP[program.op]
        premul = {o.id: o.premul for o in program.ops() if o.premul != (False, False)} if program.op == "avg" else {}
        finals = []
        for c in plan.commands:
            s = streams[c.stream]
            k = c.kind
            if k == "enter":
                ev = new_event(devs[c.stream])
                rt.record(ev, rt.current_stream(devs[c.stream]))
                rt.wait(s, ev)
                for old in self._last_finals:
                    rt.wait(s, old)
            elif k == "record":
                ev = new_event(devs[c.stream])
                rt.record(ev, s)
                events[c.event] = ev
            elif k == "wait":
                rt.wait(s, events[c.event])
            elif k == "copy":
                (rt.copy_peer if c.route == "peer" else rt.copy)(view(c.dst), view(c.a), s)
            elif k == "reduce":
                rt.reduce(view(c.dst), view(c.a), view(c.b),
                          binop_for(premul[c.op], binop, program.ranks) if c.op in premul else binop, s)
            elif k == "scale":
                rt.postdiv(view(c.dst), program.ranks, s)
            elif k == "d2h":
                rt.d2h(view(c.dst), view(c.a), s)
            elif k == "h2d":
                rt.h2d(view(c.dst), view(c.a), s)
            elif k == "host_reduce":
                rt.host_reduce(view(c.dst), [view(r) for r in c.srcs],
                               [binop_for(premul[i], binop, program.ranks) if i in premul else binop
                                for i in c.chain], s)
            elif k == "exit":
                cur = rt.current_stream(devs[c.stream])
                finals = [events[e] for e in c.events]
                for ev in finals:
                    rt.wait(cur, ev)
        self._last_finals = finals

    def finish(self, program: Program, buffers: RankBuffers) -> None:
        """Nothing: the caller's current streams already wait for the collective."""

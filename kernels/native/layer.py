"""The ``cupy`` backend's default layer: programs run natively (one interpreter launch per GPU
per call, :mod:`kernels.native.launcher`) wherever every GPU involved can read its peers'
memory; otherwise (``p2p="never"``, or peer access refused) the op-by-op layer it extends
(:class:`kernels.backends.cupy_executor.CupyLayer`) stages through pinned host memory.

One :class:`~kernels.native.launcher.NativeContext` is kept per lowered program and GPU
layout (up to :data:`CONTEXTS_KEPT`), so a repeated call finds its flags, scratch, pointer
table and captured graph ready.  The buffers reach the layer bound and checked
(:func:`kernels.backends.binding.bind_call`: a rank's arrays on its GPU among them); the layer
checks nothing again.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

from kernels.backends.cupy_executor import CupyLayer
from kernels.backends.cupy_runtime import CupyRuntime
from kernels.backends.device import RankBuffers
from kernels.native.device_program import TILE_BYTES
from kernels.native.launcher import FUSE
from kernels.program.ops import SCRATCH, Program
from topo_probe.errors import InvalidArgument

#: native contexts a layer keeps (per lowered program and GPU layout)
CONTEXTS_KEPT = 32


class NativeLayer(CupyLayer):
    """:class:`CupyLayer` that runs whole programs natively where peers are reachable.

    Parameters are :class:`CupyLayer`'s (``topology_ranks`` among them), plus ``graphs``
    (replay repeated calls as CUDA graphs, default True), ``channels`` (force the channel count;
    default by size), ``fuse`` (run chains of reduces, and records that continue each other, as
    one record; default :data:`~kernels.native.launcher.FUSE`) and
    ``tile_bytes`` (large ops dealt to the channels in tiles of this size; None: contiguous
    pieces; see :mod:`kernels.native.device_program`) and ``protocol``: ``"plan"`` (default: what
    the call's plan entry says, Simple without one), or forced for every call: ``"simple"`` (data,
    then a flag), ``"ll"`` (:mod:`kernels.native.ll`: data and flag in one line, records of a block
    in one pass) or ``"auto"`` (LL for programs whose every buffer is at most
    :data:`~kernels.native.ll.LL_MAX_BYTES`, else Simple)."""

    name = "cupy"

    def __init__(self, p2p: str = "auto", *, devices: Sequence[int] | None = None, topology: Any = None,
                 runtime: Any = None, graphs: bool = True, channels: int | None = None, fuse: bool = FUSE,
                 tile_bytes: int | None = TILE_BYTES, protocol: str = "plan", topology_ranks: bool = False):
        super().__init__(p2p, devices=devices, topology=topology, runtime=runtime, topology_ranks=topology_ranks)
        self.graphs, self.channels, self.fuse, self.tile_bytes = graphs, channels, fuse, tile_bytes
        self.protocol = checked_protocol(protocol)
        self._contexts: OrderedDict[tuple, Any] = OrderedDict()
        self._native_for: dict[tuple, bool] = {}

    def native_ok(self, devs: Sequence[int]) -> bool:
        """Whether every pair of these GPUs reaches the other directly (and CuPy is the runtime)."""
        key = tuple(devs)
        ok = self._native_for.get(key)
        if ok is None:
            ok = isinstance(self.runtime, CupyRuntime) and all(
                self.peer_allowed(a, b) for a in set(devs) for b in set(devs))
            self._native_for[key] = ok
        return ok

    def allocate(self, rank: int, nelems: int, dtype: Any) -> Any:
        if self.native_ok(self._layout(rank + 1)):
            return None                      # the native context owns its scratch
        return super().allocate(rank, nelems, dtype)

    def context(self, program: Program, protocol: str | None = None) -> Any:
        """The kept :class:`NativeContext` of ``program`` on the current GPU layout, under the
        layer's forced protocol, else ``protocol`` (the plan entry's), else Simple."""
        from kernels.native.launcher import NativeContext
        devs = self.device_of(program.ranks)
        proto = resolve_protocol(program, self.protocol if self.protocol != "plan" else protocol or "simple")
        key = (id(program), tuple(devs), proto)
        kept = self._contexts.get(key)
        if kept is not None and kept.program is program:
            self._contexts.move_to_end(key)
            return kept
        ctx = NativeContext(program, devs, channels=self.channels, fuse=self.fuse, tile_bytes=self.tile_bytes,
                            protocol=proto)
        self._contexts[key] = ctx
        if len(self._contexts) > CONTEXTS_KEPT:
            self._contexts.popitem(last=False)
        return ctx

    def bound(self, program: Program, buffers: RankBuffers, protocol: str | None = None):
        """A no-argument function running ``program`` on ``buffers`` natively, or None where this
        layout runs op by op (see :meth:`NativeContext.bound`); ``protocol`` as :meth:`context`."""
        devs = self.device_of(program.ranks)
        if any(b.get(SCRATCH) is not None for b in buffers.bufs) or not self.native_ok(devs):
            return None
        return self.context(program, protocol).bound(buffers.bufs, graphs=self.graphs)

    def execute(self, program: Program, buffers: RankBuffers, protocol: str | None = None) -> None:
        devs = self.device_of(program.ranks)
        staged = any(b.get(SCRATCH) is not None for b in buffers.bufs)   # allocate() chose the op layer
        if staged or not self.native_ok(devs):
            for r, b in enumerate(buffers.bufs):
                if SCRATCH in b and b[SCRATCH] is None:
                    b[SCRATCH] = super().allocate(r, program.sizes[r][SCRATCH], program.dtype)
            return super().execute(program, buffers)
        self.context(program, protocol).run(buffers.bufs, graphs=self.graphs)


PROTOCOLS = ("plan", "simple", "ll", "auto")


def checked_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        raise InvalidArgument(f"native executor: protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    return protocol


def resolve_protocol(program: Program, protocol: str) -> str:
    """``"simple"`` or ``"ll"`` for ``program``: ``"auto"`` is LL where every buffer of every rank
    is at most :data:`~kernels.native.ll.LL_MAX_BYTES`.

    >>> from kernels.program.lowering import lower
    >>> from synth.ir.schedule import Schedule, Step, Transfer
    >>> s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
    >>> resolve_protocol(lower(s, 1024, "float32"), "auto"), resolve_protocol(lower(s, 1 << 20, "float32"), "auto")
    ('ll', 'simple')
    """
    checked_protocol(protocol)
    if protocol == "plan":
        return "simple"
    if protocol != "auto":
        return protocol
    from kernels.native.ll import LL_MAX_BYTES
    most = max((n for sizes in program.sizes for n in sizes.values()), default=0) * program.dtype.itemsize
    return "ll" if most <= LL_MAX_BYTES else "simple"


__all__ = ["NativeLayer", "CONTEXTS_KEPT", "PROTOCOLS", "resolve_protocol"]

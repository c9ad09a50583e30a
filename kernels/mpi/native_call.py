"""How :class:`kernels.mpi.communicator.MPICommunicator` runs a call natively: one interpreter
launch per call in every process, each running its rank's share (:mod:`kernels.mpi.native`).

A call, on every rank, after the per-call agreement (:mod:`kernels.mpi.agreement`) said the
ranks make the same call:

1. once per communicator: the ranks exchange where their memory is and how many blocks a
   launch may hold; if any rank cannot map every peer's memory, every rank keeps today's path
   (one warning) for good;
2. the local stream is synchronised (the inputs are written), then one ``Iallgather`` of two
   words per rank: a digest of its buffers (their IPC handles and offsets) and whether it runs
   in place.  This is also the entry barrier: no process's kernel reads a peer's buffers
   before the peer reached the call.  A rank whose buffers cannot be exported says so here,
   and every rank raises the same BufferLayoutError.  Ranks that disagree on in-place (NCCL's rule: only ranks
   with both buffers count) fall back to today's path together;
3. the share of (call digest, in-place) is found or made (device program built, fingerprint,
   flags and scratch exchanged once, :meth:`Share.connect`); the buffers of this set of digests
   are found or mapped (one exchange of handles, :meth:`Share.attach`);
4. one launch (a CUDA graph from the second call with the same buffers), the stream
   synchronised, and one ``Iallgather`` of every rank's status: the exit barrier (no process
   returns, and lets its user overwrite a buffer, while a peer may still read it), and if any
   rank's wait timed out every rank raises the same ExecutionTimeout and drops its shares (the
   next call starts on fresh flags everywhere).

Every rank keeps the same caches in the same order (the calls are agreed), so they hit and miss
together and the exchanges above are made by all ranks or none.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from kernels.comm.validation import _is_cupy
from kernels.mpi.native import Share, exports_digest
from kernels.mpi.waiter import exchange_json
from kernels.native.launcher import FUSE, channels_for, waited_for
from kernels.native.layer import resolve_protocol
from synth.plan.user_warning import warn_user
from topo_probe.errors import BufferLayoutError, ExecutionTimeout, InvalidArgument, show

#: shares (device programs with their flags) a communicator keeps
SHARES_KEPT = 8
#: in-place codes of the entry exchange: out of place, in place, one buffer only (no say)
OUT_OF_PLACE, IN_PLACE, NO_SAY = 0, 1, 2
#: the code of a rank that could not export its buffers
FAILED = -1


class NativeCall:
    """What :meth:`MPICommunicator._run` prepares for a call that may run natively: it stands
    where the wire was, and :meth:`run` either runs the share or hands back that ``wire``."""

    native = True

    def __init__(self, runner: "NativeRunner", schedule, prog, count: int, dtype, op: str, code: int,
                 user: dict, digest: int, wire, protocol: str = "simple") -> None:
        self.runner, self.schedule, self.prog, self.count = runner, schedule, prog, count
        self.dtype, self.op, self.code, self.user, self.digest, self.wire = dtype, op, code, user, digest, wire
        self.protocol = protocol

    def run(self, gate):
        """``(None, None)`` once the call ran natively, else ``(wire, gate)`` for today's path."""
        return self.runner.run(self, gate)


def plain_value(value):
    """``value`` itself where it is no str, else its plain str (``str.__str__``: the characters, not a subclass's
    ``__eq__``, ``__hash__`` or ``__str__``), the value a rule asks about and the communicator keeps."""
    return str.__str__(value) if isinstance(value, str) else value


def check_native_mode(mode):
    """``mode`` as the communicator keeps it: ``"auto"`` or ``"never"`` as a plain str (the rule asked of the plain
    value, :func:`plain_value`), or a backend object as it is; else InvalidArgument in one line (None, a bool or a
    number is no backend)."""
    mode = plain_value(mode)
    if isinstance(mode, str) and mode not in ("auto", "never") or mode is None or isinstance(mode, (bool, int, float)):
        raise InvalidArgument(f"MPICommunicator: native must be 'auto', 'never' or a backend, got {show(mode)}")
    return mode


class NativeRunner:
    """The native path of one communicator (see module docstring).

    ``mode``: ``"auto"`` (CuPy arrays, every rank on one node, ``ipc="auto"``), ``"never"``, or a
    backend object (tests: any arrays, e.g. NumPy in shared memory), as its maker checked it (the
    MPICommunicator's start-up check, :func:`check_native_mode`, where a refusal reaches every rank)."""

    def __init__(self, comm, mode="auto", *, fuse: bool = FUSE, graphs: bool = True) -> None:
        self.comm, self.mode, self.fuse, self.graphs = comm, mode, fuse, graphs
        self.backend = None if isinstance(mode, str) else mode
        self.enabled: bool | None = None
        self.capacity = 0
        self.shares: OrderedDict[tuple, Share] = OrderedDict()
        self.launches = 0

    @property
    def name(self) -> str:
        return self.mode if isinstance(self.mode, str) else "custom"

    def call(self, schedule, prog, count: int, op: str, inplace: bool, bound: dict, digest: int, wire,
             protocol: str | None = None):
        """A :class:`NativeCall` where this call may run natively, else ``wire`` itself;
        ``protocol``: the plan entry's (None: Simple)."""
        comm = self.comm
        if self.mode == "never" or comm.size < 2 or self.enabled is False:
            return wire
        sample = next(iter(bound.values()))
        if self.mode == "auto" and not (_is_cupy(sample) and comm.ipc == "auto" and len(set(comm.hosts)) == 1):
            return wire
        code = NO_SAY if len(bound) < 2 else IN_PLACE if inplace else OUT_OF_PLACE
        user = {"send": bound.get("sendbuf"), "recv": bound.get("recvbuf")}
        return NativeCall(self, schedule, prog, count, sample.dtype, op, code, user, digest, wire,
                          resolve_protocol(prog, protocol or "simple"))

    # ------------------------------------------------------------------ per call
    def run(self, call: NativeCall, gate):
        gate.wait()                                   # the same call on every rank, or raise
        if not self._setup():
            return call.wire, None
        comm, backend = self.comm, self.backend
        backend.synchronize()                         # this rank's inputs are written
        try:
            user, error = {k: (None if v is None else backend.export(v, f"rank {comm.rank}: {k}buf"))
                           for k, v in call.user.items()}, None
        except BufferLayoutError as exc:              # e.g. memory CUDA IPC cannot share
            user, error = None, exc
        codes = self._allgather([exports_digest(user), FAILED if error else call.code],
                                "native: the start of a call (every rank)")
        if (codes[:, 1] == FAILED).any():             # every rank raises the same line
            lines = exchange_json(comm._ctrl, comm.waiter, str(error or ""), comm.size, "native: errors")
            raise BufferLayoutError("; ".join(f"native: rank {q}: {t}" for q, t in enumerate(lines) if t))
        says = {int(c) for c in codes[:, 1]} - {NO_SAY}
        if len(says) > 1:                             # ranks disagree on in place: today's path, all
            return call.wire, None
        prog = call.prog
        if bool(prog.inplace) != (says == {IN_PLACE}):
            from kernels.backends.executor import program_for
            prog = program_for(call.schedule, call.count, call.dtype, inplace=not prog.inplace, op=call.op)
        share = self._share(call, prog)
        bufs = {name: call.user[which] for name, which in prog.bindings[comm.rank].items()}
        keys = tuple(int(k) for k in codes[:, 0])
        b = share.bound(keys)
        if b is None:
            every = exchange_json(comm._ctrl, comm.waiter, share.exports(bufs), comm.size,
                                  "native: exchanging buffer handles")
            b = share.attach(keys, every, bufs)
        share.launch(b)
        self.launches += 1
        backend.synchronize()
        self._exit(share)
        return None, None

    def _allgather(self, words, what: str) -> np.ndarray:
        comm = self.comm
        mine = np.asarray(words, np.int64)
        out = np.zeros((comm.size, mine.size), np.int64)
        t = comm.waiter.MPI.INT64_T
        req = comm._data.Iallgather([mine, t], [out, t])
        comm.waiter.all([req], what, lambda i: -1)
        return out

    def _setup(self) -> bool:
        """Once: whether every rank can map every peer's memory (all or none run natively), and
        the fewest blocks any rank's launch may hold."""
        if self.enabled is not None:
            return self.enabled
        comm = self.comm
        if self.backend is None:
            from kernels.mpi.native_cuda import CudaShareBackend
            self.backend = CudaShareBackend()
        where = exchange_json(comm._ctrl, comm.waiter, {"id": self.backend.identity(), "cap": self.backend.capacity()},
                              comm.size, "native: exchanging devices")
        ok = bool(self.backend.can_map([w["id"] for p, w in enumerate(where) if p != comm.rank]))
        oks = exchange_json(comm._ctrl, comm.waiter, ok, comm.size, "native: agreeing on the native path")
        self.enabled, self.capacity = all(oks), min(int(w["cap"]) for w in where)
        if not self.enabled and comm.rank == 0:
            warn_user(f"native: rank(s) {[p for p, v in enumerate(oks) if not v]} cannot map their peers' "
                      f"memory; every rank runs collectives through MPI instead")
        return self.enabled

    def _share(self, call: NativeCall, prog) -> Share:
        """The share of this call's program (made, and checked with every rank, on first use)."""
        key = (call.digest, bool(prog.inplace), call.protocol)
        share = self.shares.get(key)           # the digest names schedule, count, dtype and op
        if share is not None:
            self.shares.move_to_end(key)
            return share
        comm = self.comm
        channels = min(channels_for(prog, 1 << 30, call.protocol), self.capacity)   # each process: its own blocks
        share = Share(prog, comm.rank, self.backend, channels=channels, fuse=self.fuse, graphs=self.graphs,
                      protocol=call.protocol)
        every = exchange_json(comm._ctrl, comm.waiter, share.descriptor(), comm.size, "native: exchanging programs")
        what = (f"native {prog.collective} ({call.schedule.name or 'schedule'}, {call.count} x "
                f"{np.dtype(call.dtype).name})")
        try:
            share.connect(every, what)
        except Exception:
            share.close()
            raise
        self.shares[key] = share
        if len(self.shares) > SHARES_KEPT:
            self.shares.popitem(last=False)[1].close()
        return share

    def _exit(self, share: Share) -> None:
        """The exit barrier; every rank raises the same ExecutionTimeout if any rank's wait timed out."""
        words = self._allgather(self.backend.status(share), "native: the end of a call (every rank)")
        bad = [r for r in range(len(words)) if words[r, 0]]
        if not bad:
            return
        r = bad[0]
        _, blk, rec, wb, wj = (int(x) for x in words[r])
        dp = share.dp
        self.drop()
        raise ExecutionTimeout(
            f"native: rank {r} (channel {int(dp.block_channel[blk])}) timed out at record "
            f"{rec - int(dp.block_start[blk])} waiting for {waited_for(dp, wb, wj)}; the call was "
            f"abandoned on every rank")

    def drop(self) -> None:
        """Forget every share (their flags, scratch and peer mappings)."""
        for share in self.shares.values():
            share.close()
        self.shares.clear()


__all__ = ["NativeRunner", "NativeCall", "SHARES_KEPT"]

"""One process's share of a device program: the native executor with one process per GPU.

Every MPI rank lowers the same verified schedule and builds the same device program
(:func:`build_share_program`: blocks numbered by rank, so each rank's blocks are consecutive);
a :class:`Share` is one rank's part of it:

* its blocks (:func:`share_blocks`), run by one interpreter launch per call in this process;
* a per-process *slot table*: this rank's slots hold its own buffers' addresses, a peer's slots
  hold the address at which this process sees that peer's buffer: the base of the peer's
  allocation mapped here through CUDA IPC, plus the buffer's offset in it
  (:func:`slot_table`);
* the same for the flags: this rank's blocks publish into a flag array of this process, the
  waits on a peer's block read the peer's flag array through its mapping (:func:`flag_table`);
* under the LL protocol (:mod:`kernels.native.ll`), the same for the LL regions: each rank's
  region (slot ``(rank, "@ll")``) lives in its process and is exported with its flags and
  scratch; a producer writes its lines into the consumer's region through its mapping.

Handles travel as ``{"handle", "offset", "nbytes"}`` (the allocation base's IPC handle and the
buffer's byte offset from it), exchanged once per buffer; :class:`PeerMaps` opens each
(rank, handle) once, counts its users and closes it when the last binding using it is dropped.
The device programs of all ranks are checked once per share: each rank's
:func:`program_fingerprint` goes to every rank, and a rank whose program differs makes every
rank raise the same one-line ProcessGroupMismatch (:func:`check_fingerprints`).

The memory and the kernel are a *backend*'s: :class:`kernels.mpi.native_cuda.CudaShareBackend`
on GPUs (CuPy, CUDA IPC, the interpreter kernel built with system-scope flags); the tests run
the same shares over NumPy memory in ``multiprocessing.shared_memory`` (the same bytes at other
addresses in every process, as with CUDA IPC) and a NumPy interpreter of the resolved records.
What drives the shares call by call over MPI is :mod:`kernels.mpi.native_call`.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict

import numpy as np

from kernels.native.device_program import (
    KIND_MASK,
    KINDS,
    TILE_BYTES,
    DeviceProgram,
    resolve_records,
    resolve_sources,
    resolve_waits,
)
from kernels.native.launcher import FUSE, layout, ll_line_words
from kernels.native.ll import LL_BUF
from kernels.program.ops import SCRATCH, Program
from topo_probe.errors import BufferLayoutError, ProcessGroupMismatch

#: bindings (sets of the ranks' buffers) a share keeps resolved
BINDINGS_KEPT = 8


def build_share_program(program: Program, channels: int, *, fuse: bool = FUSE,
                        tile_bytes: int | None = TILE_BYTES, protocol: str = "simple") -> DeviceProgram:
    """The device program every rank builds alike (:func:`kernels.native.launcher.layout`, the
    single-process executor's): ``program`` in ``channels`` channels (large ops dealt in tiles of
    ``tile_bytes``) under ``protocol``, the blocks of each rank numbered consecutively (rank r
    is "device" r)."""
    return layout(program, channels, range(program.ranks), fuse=fuse, tile_bytes=tile_bytes, protocol=protocol)


def share_blocks(dp: DeviceProgram, rank: int) -> tuple[int, int]:
    """(first block, number of blocks) that ``rank`` runs."""
    return dp.device_blocks(list(range(dp.ranks)), rank)


def program_fingerprint(dp: DeviceProgram) -> str:
    """16 hex digits over everything the kernels of all ranks read (records, sources, waits,
    blocks, slots, stride, type, op): equal on two ranks iff they built the same program.

    >>> from synth.ir.schedule import Schedule, Step, Transfer
    >>> from kernels.program.lowering import lower
    >>> s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
    >>> a, b = (build_share_program(lower(s, 64, "float32"), ch) for ch in (1, 2))
    >>> program_fingerprint(a) == program_fingerprint(build_share_program(lower(s, 64, "float32"), 1)) != \\
    ...     program_fingerprint(b)
    True
    """
    h = hashlib.blake2b(digest_size=8)
    for arr in (dp.records, dp.sources, dp.block_start, dp.wait_start, dp.waits, dp.block_rank, dp.block_channel,
                dp.ll_targets):
        h.update(np.ascontiguousarray(arr).tobytes())
        h.update(str(arr.shape).encode())
    meta = [[list(s) for s in dp.slots], dp.channels, dp.stride, dp.ranks, np.dtype(dp.dtype).name, dp.op]
    h.update(json.dumps(meta).encode())
    return h.hexdigest()


def check_fingerprints(fingerprints: list[str], what: str) -> None:
    """Raise ProcessGroupMismatch (the same line on every rank, given the same list) unless every
    rank built the same device program.

    >>> check_fingerprints(["ab", "ab", "cd"], "gather")
    Traceback (most recent call last):
    ...
    topo_probe.errors.ProcessGroupMismatch: gather: ranks disagree on the device program: ranks [0, 1] ab, ranks [2] cd
    """
    groups: dict[str, list[int]] = {}
    for r, f in enumerate(fingerprints):
        groups.setdefault(f, []).append(r)
    if len(groups) > 1:
        parts = ", ".join(f"ranks {rs} {f}" for f, rs in sorted(groups.items(), key=lambda x: x[1]))
        raise ProcessGroupMismatch(f"{what}: ranks disagree on the device program: {parts}")


def exports_digest(exports) -> int:
    """62-bit digest of a rank's exported buffers (JSON-able): equal on every rank for equal input."""
    text = json.dumps(exports, sort_keys=True).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 2


def slot_table(dp: DeviceProgram, rank: int, local: dict, remote: dict) -> np.ndarray:
    """Base address of every slot as ``rank``'s process sees it: ``local[name]`` for its own
    buffers, ``remote[(peer, name)]`` (mapped base + offset) for a peer's, 0 where unknown."""
    out = np.zeros(len(dp.slots), np.uint64)
    for i, (r, name) in enumerate(dp.slots):
        out[i] = local.get(name, 0) if r == rank else remote.get((r, name), 0)
    return out


def flag_table(dp: DeviceProgram, rank: int, own_flags: int, peer_flags: dict) -> np.ndarray:
    """Address of every block's flag (uint64 words) as ``rank``'s process sees it: its own blocks'
    in ``own_flags``, a peer's blocks' in that peer's mapped flag array ``peer_flags[peer]``."""
    out = np.zeros(dp.num_blocks, np.uint64)
    for r in range(dp.ranks):
        first, nb = share_blocks(dp, r)
        base = own_flags if r == rank else peer_flags.get(r, 0)
        if nb and base:
            out[first:first + nb] = base + 8 * np.arange(nb, dtype=np.uint64)
    return out


def local_slots(dp: DeviceProgram, rank: int) -> set[int]:
    """Slots the records of ``rank``'s blocks read or write."""
    first, nb = share_blocks(dp, rank)
    if not nb:
        return set()
    rec = dp.records[int(dp.block_start[first]):int(dp.block_start[first + nb])]
    chain = (rec[:, 0] & KIND_MASK) == KINDS["reduce_chain"]
    used = set(rec[:, 1].tolist()) | set(rec[:, 5].tolist()) | set(rec[~chain, 3].tolist())
    for s, k in rec[chain][:, 3:5]:
        used |= set(dp.sources[s:s + k, 0].tolist())
    for s, k in rec[rec[:, 11] > 0][:, 10:12]:        # the LL regions its records write
        used |= set(dp.ll_targets[s:s + k, 0].tolist())
    used.discard(-1)
    return {int(u) for u in used}


def resolve_share(dp: DeviceProgram, rank: int, slot_ptrs: np.ndarray, sources_addr: int) -> tuple:
    """(records, sources) as ``rank``'s launch reads them (:func:`resolve_records`): absolute
    addresses in this process; rows of other ranks' blocks are zero.  BufferLayoutError when a
    record of this rank uses a slot with no address (a buffer that was not mapped)."""
    for s in sorted(local_slots(dp, rank)):
        if not int(slot_ptrs[s]):
            r, name = dp.slots[s]
            raise BufferLayoutError(f"native share of rank {rank}: rank {r}'s {name} buffer is used but not mapped")
    recs = resolve_records(dp, slot_ptrs, sources_addr)
    first, nb = share_blocks(dp, rank)
    lo, hi = (int(dp.block_start[first]), int(dp.block_start[first + nb])) if nb else (0, 0)
    recs[:lo] = 0
    recs[hi:] = 0
    return recs, resolve_sources(dp, slot_ptrs)


class PeerMaps:
    """Peers' allocations mapped into this process, one mapping per (rank, handle), counted by
    their users and closed (``backend.close``) when the last one lets go."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self._maps: dict[tuple, list] = {}       # (rank, handle) -> [base address, users]

    def acquire(self, rank: int, desc: dict) -> int:
        """Address of the peer buffer ``desc`` (``handle``, ``offset``) here; one more user."""
        key = (rank, desc["handle"])
        hit = self._maps.get(key)
        if hit is None:
            hit = self._maps[key] = [int(self.backend.open(desc["handle"])), 0]
        hit[1] += 1
        return hit[0] + int(desc["offset"])

    def release(self, rank: int, handle: str) -> None:
        hit = self._maps.get((rank, handle))
        if hit is not None:
            hit[1] -= 1
            if hit[1] <= 0:
                del self._maps[(rank, handle)]
                self.backend.close(hit[0])

    def open_count(self) -> int:
        return len(self._maps)

    def close(self) -> None:
        for base, _ in self._maps.values():
            self.backend.close(base)
        self._maps = {}


class Share:
    """``rank``'s share of ``program``'s device program on ``backend`` (module docstring).

    Collective use, in this order on every rank: :meth:`descriptor` (exchange the list),
    :meth:`connect`; per call, on a new set of buffers (:meth:`bound` says None) :meth:`attach`
    with every rank's :meth:`exports`; :meth:`launch`."""

    def __init__(self, program: Program, rank: int, backend, *, channels: int, fuse: bool = FUSE,
                 graphs: bool = True, tile_bytes: int | None = TILE_BYTES, protocol: str = "simple") -> None:
        self.program, self.rank, self.backend, self.graphs = program, rank, backend, graphs
        under = {} if protocol == "simple" else {"protocol": protocol}      # Simple: the builder's default
        self.dp = build_share_program(program, channels, fuse=fuse, tile_bytes=tile_bytes, **under)
        self.first, self.blocks = share_blocks(self.dp, rank)
        self.fingerprint = program_fingerprint(self.dp)
        n = program.sizes[rank].get(SCRATCH, 0)
        self.scratch = backend.empty(n, program.dtype) if n else None
        self.flags = backend.flags(max(1, self.blocks))
        lines = ll_line_words(self.dp, rank)       # LL: where peers write the lines this rank reads
        self.ll_lines = backend.flags(lines) if lines else None
        self.maps = PeerMaps(backend)
        self.bindings: OrderedDict[tuple, dict] = OrderedDict()
        self.state = None
        self.peer_scratch: dict[int, int] = {}
        self.peer_ll: dict[int, int] = {}

    def descriptor(self) -> dict:
        """What the peers need once: the fingerprint and where the flags, scratch and LL lines are."""
        b, me = self.backend, f"rank {self.rank}"
        return {"fp": self.fingerprint, "flags": b.export(self.flags, f"{me}: flags"),
                "scratch": None if self.scratch is None else b.export(self.scratch, f"{me}: scratch"),
                "ll": None if self.ll_lines is None else b.export(self.ll_lines, f"{me}: LL lines")}

    def connect(self, every: list[dict], what: str) -> None:
        """Check every rank's fingerprint, map the peers' flags, scratch and LL lines, set up the launch."""
        check_fingerprints([d["fp"] for d in every], what)
        peers = [q for q in range(len(every)) if q != self.rank]
        peer_flags = {q: self.maps.acquire(q, every[q]["flags"]) for q in peers}
        self.peer_scratch = {q: self.maps.acquire(q, every[q]["scratch"]) for q in peers if every[q]["scratch"]}
        self.peer_ll = {q: self.maps.acquire(q, every[q]["ll"]) for q in peers if every[q].get("ll")}
        self.flag_addrs = flag_table(self.dp, self.rank, self.backend.address(self.flags), peer_flags)
        self.waits = resolve_waits(self.dp, self.flag_addrs)
        self.state = self.backend.prepare(self)

    def exports(self, bufs: dict) -> dict:
        """Handles and offsets of this rank's buffers (physical name -> array)."""
        return {name: self.backend.export(arr, f"rank {self.rank}: {name} buffer") for name, arr in bufs.items()}

    def bound(self, keys: tuple) -> dict | None:
        hit = self.bindings.get(keys)
        if hit is not None:
            self.bindings.move_to_end(keys)
        return hit

    def attach(self, keys: tuple, every: list[dict], bufs: dict) -> dict:
        """Map the peers' buffers of one call (``every[q]``: rank q's exports), resolve the
        records for this process and keep them under ``keys``."""
        remote = {**{(q, SCRATCH): a for q, a in self.peer_scratch.items()},
                  **{(q, LL_BUF): a for q, a in self.peer_ll.items()}}
        used = []
        for q, exports in enumerate(every):
            if q != self.rank:
                for name, desc in exports.items():
                    remote[(q, name)] = self.maps.acquire(q, desc)
                    used.append((q, desc["handle"]))
        local = {name: self.backend.address(arr) for name, arr in bufs.items()}
        for name, own in ((SCRATCH, self.scratch), (LL_BUF, self.ll_lines)):
            if own is not None:
                local[name] = self.backend.address(own)
        table = slot_table(self.dp, self.rank, local, remote)
        b = {"calls": 0, "used": used, "table": table}
        b["sources_dev"], src_addr = self.backend.upload(resolve_sources(self.dp, table))
        b["records"], b["sources"] = resolve_share(self.dp, self.rank, table, src_addr)
        b["records_dev"], _ = self.backend.upload(b["records"].reshape(-1))
        self.bindings[keys] = b
        if len(self.bindings) > BINDINGS_KEPT:
            _, old = self.bindings.popitem(last=False)
            self._drop(old)
        return b

    def _drop(self, b: dict) -> None:
        for q, handle in b["used"]:
            self.maps.release(q, handle)

    def launch(self, b: dict) -> None:
        """This rank's blocks, once (a captured graph from the second call with ``b`` on)."""
        b["calls"] += 1
        if self.blocks:
            self.backend.launch(self, b, graph=self.graphs and b["calls"] >= 2)

    def close(self) -> None:
        for b in self.bindings.values():
            self._drop(b)
        self.bindings.clear()
        self.maps.close()


__all__ = ["Share", "PeerMaps", "build_share_program", "share_blocks", "program_fingerprint", "check_fingerprints",
           "exports_digest", "slot_table", "flag_table", "local_slots", "resolve_share", "BINDINGS_KEPT"]

"""Zero-copy transfers between MPI ranks on one node: map the peers' buffers, move only tokens.

With CuPy arrays and every rank on one host, :class:`IpcWire` replaces each data message of
:func:`kernels.mpi.transport.execute` by a 24-byte *token* naming the sender's region (buffer,
element range; the ranks' programs may differ, e.g. in-place on the root only): the sending
rank posts the token once its region is ready (the op that last wrote it is done, the device synchronised), the
receiving rank copies the region straight out of the sender's memory (mapped once through CUDA
IPC) into its destination, or into a temporary for a reduce, and answers with a one-byte *ack*
on a separate communicator.  A send completes only when its ack arrives, so an op that later
overwrites the region (the lowering's write-after-read dependency on the send) waits until the
peer has copied it.  Before each collective the ranks exchange where their physical buffers
(input, output, scratch) live (:meth:`IpcWire.attach`); temporaries come from an exportable
arena.  On the first collective the ranks also agree whether every rank can map every peer's
memory (CUDA: the peer's GPU is visible and peer access works); if any cannot, every rank sends
through MPI with the base wire instead (one warning), so the ranks never speak different
protocols.

The protocol is independent of the memory: :class:`CudaIpc` (CuPy device memory, handles from
``cudaIpcGetMemHandle`` on the allocation's base, opened once per handle) is the GPU side and
stays thin; :class:`SharedMemoryIpc` (NumPy arrays carved from ``multiprocessing.shared_memory``
blocks) is its CPU twin, which the multi-process tests run end to end.
"""

from __future__ import annotations

import ctypes

import numpy as np

from kernels.mpi.waiter import exchange_json
from kernels.comm.validation import _is_cupy
from kernels.mpi.wires import Arena, DeviceWire, HostWire, _byte
from kernels.program.ops import BUFFERS
from synth.plan.user_warning import warn_user
from topo_probe.errors import BufferLayoutError, DeviceUnavailable

#: largest JSON of one rank's buffer descriptors (bytes)
DESCRIPTOR_LIMIT = 4096


class IpcWire(HostWire):
    """Token-and-pull transport over mapped peer memory (see module docstring).

    Parameters
    ----------
    memory : SharedMemoryIpc or CudaIpc
        How buffers are allocated, exported, opened and copied.
    base : HostWire, optional
        Arithmetic (combine, copy, postdiv) and device synchronisation; default a
        :class:`HostWire` (NumPy).  Use :class:`kernels.mpi.wires.DeviceWire` for CuPy.
    """

    def __init__(self, memory, base: HostWire | None = None) -> None:
        self.memory = memory
        self.base = base if base is not None else HostWire()
        self.name = f"ipc-{self.base.name}"
        self.xp = self.base.xp
        self.arena = Arena(memory.alloc)
        self.pulls = 0          # regions copied out of a peer's memory
        self.tokens = 0         # tokens sent (one per send)
        #: None until the first :meth:`attach`; then whether every rank can map every peer
        self.enabled: bool | None = None
        self._peers: dict[int, dict] = {}
        self._pending: list = []
        self._keep: list = []
        self._ack = self._waiter = None

    # ------------------------------------------------------------------ per collective
    def begin(self) -> None:
        self.base.begin()
        self.arena.reset()
        self._pending, self._keep = [], []

    def attach(self, bufs: dict, rank: int, size: int, ctrl, waiter, ack_comm) -> None:
        """Exchange where every rank's physical buffers live and map the peers' ones.

        Collective: every rank calls it once per collective, after :meth:`begin` and before
        :func:`kernels.mpi.transport.execute`.
        """
        if self.enabled is None:
            self._agree(rank, size, ctrl, waiter)
        if not self.enabled:
            return
        dtype = next(iter(bufs.values())).dtype
        mine = {name: self.memory.export(arr, f"rank {rank}: {name} buffer") for name, arr in bufs.items()}
        every = exchange_json(ctrl, waiter, mine, size, "ipc: exchanging buffer handles", limit=DESCRIPTOR_LIMIT)
        self._peers = {p: {name: self.memory.open(desc, dtype) for name, desc in d.items()}
                       for p, d in enumerate(every) if p != rank}
        self._waiter, self._ack = waiter, ack_comm

    def _agree(self, rank: int, size: int, ctrl, waiter) -> None:
        """First call: every rank says where its memory is and whether it can map every peer's;
        all ranks then use IPC, or all fall back to the base wire (one warning on rank 0)."""
        where = exchange_json(ctrl, waiter, self.memory.identity(), size, "ipc: exchanging devices",
                              limit=DESCRIPTOR_LIMIT)
        ok = bool(self.memory.can_map([w for p, w in enumerate(where) if p != rank]))
        oks = exchange_json(ctrl, waiter, ok, size, "ipc: agreeing on zero-copy", limit=DESCRIPTOR_LIMIT)
        self.enabled = all(oks)
        if not self.enabled and rank == 0:
            bad = [p for p, v in enumerate(oks) if not v]
            warn_user(f"ipc: rank(s) {bad} cannot map their peers' memory (no peer access between "
                      f"their devices); every rank sends through MPI instead")

    finish_completes_peers = True     # the sender's request is our ack, sent by finish()

    def post_send(self, comm, peer: int, tag: int, view, region=None):
        if not self.enabled:
            return self.base.post_send(comm, peer, tag, view, region)
        self.memory.ready()
        token = np.array([BUFFERS.index(region.buf), region.start, region.stop], np.int64)
        ack = np.zeros(1, np.uint8)
        self._keep += [token, ack]
        self._pending.append(comm.Isend([token, _byte()], dest=peer, tag=tag))
        self.tokens += 1
        return self._ack.Irecv([ack, _byte()], source=peer, tag=tag), None

    def post_recv(self, comm, peer: int, tag: int, region, n: int, dtype, into=None):
        if not self.enabled:
            return self.base.post_recv(comm, peer, tag, region, n, dtype, into=into)
        dst = self.empty(n, dtype) if into is None else into
        token = np.zeros(3, np.int64)
        self._keep.append(token)
        req = comm.Irecv([token, _byte()], source=peer, tag=tag)

        def finish():
            # the sender names its own region: ranks may lower different (in-place or not) programs
            code, start, stop = (int(v) for v in token)
            name = BUFFERS[code] if 0 <= code < len(BUFFERS) else f"#{code}"
            if name not in self._peers.get(peer, {}) or stop - start != dst.size:
                raise BufferLayoutError(f"ipc: rank {peer} announced {name}[{start}:{stop}] but this rank "
                                        f"expects {dst.size} elements from an exported buffer (tag {tag})")
            self.memory.pull(dst, self._peers[peer][name][start:stop])
            self.pulls += 1
            ack = np.ones(1, np.uint8)
            self._keep.append(ack)
            self._pending.append(self._ack.Isend([ack, _byte()], dest=peer, tag=tag))
            return dst
        return req, finish

    def finish(self) -> None:
        self.base.finish()
        if self._pending:
            self._waiter.all(self._pending, "ipc: tokens and acks", lambda i: -1)
        self._pending, self._keep = [], []

    # ------------------------------------------------------------------ memory and arithmetic
    # ``empty`` is HostWire's: temporaries from ``self.arena``, which ``memory`` allocates (exportable)
    def send_buffer(self, view, pooled: bool = True):
        """Plain messages (``send``/``recv`` between two ranks) go through the base wire."""
        return self.base.send_buffer(view, pooled)

    def recv_buffer(self, n: int, dtype, into=None):
        return self.base.recv_buffer(n, dtype, into=into)

    def combine(self, dst, acc, src, op: str) -> None:
        self.base.combine(dst, acc, src, op)

    def copy(self, dst, src) -> None:
        self.base.copy(dst, src)

    def postdiv(self, dst, n: int) -> None:
        self.base.postdiv(dst, n)


# ====================================================================== CPU twin
class SharedMemoryIpc:
    """NumPy arrays in ``multiprocessing.shared_memory`` blocks; the handle is the block name.

    Only arrays from :meth:`empty` (or views of them) can be exported.  :meth:`close` unlinks
    the blocks this process created.
    """

    def __init__(self) -> None:
        self._blocks: list = []       # (address, nbytes, SharedMemory) created here
        self._opened: dict = {}

    def empty(self, n: int, dtype) -> np.ndarray:
        from multiprocessing import shared_memory
        dt = np.dtype(dtype)
        shm = shared_memory.SharedMemory(create=True, size=max(1, n * dt.itemsize))
        arr = np.ndarray(n, dt, buffer=shm.buf)
        self._blocks.append((arr.__array_interface__["data"][0], shm.size, shm))
        return arr

    def alloc(self, nbytes: int) -> np.ndarray:
        return self.empty(nbytes, np.uint8)

    def export(self, arr: np.ndarray, what: str) -> dict:
        addr = arr.__array_interface__["data"][0]
        for base, size, shm in self._blocks:
            if base <= addr and addr + arr.nbytes <= base + size:
                return {"name": shm.name, "offset": addr - base, "nbytes": arr.nbytes}
        raise BufferLayoutError(f"ipc: {what} is not in shared memory (allocate it with SharedMemoryIpc.empty)")

    def open(self, desc: dict, dtype) -> np.ndarray:
        shm = self._opened.get(desc["name"])
        if shm is None:
            from multiprocessing import resource_tracker, shared_memory
            shm = shared_memory.SharedMemory(name=desc["name"])
            try:     # the creator unlinks it; an attaching process must not (Python < 3.13)
                resource_tracker.unregister(shm._name, "shared_memory")
            except Exception:  # noqa: BLE001 - tracker internals differ between versions
                pass
            self._opened[desc["name"]] = shm
        dt = np.dtype(dtype)
        return np.ndarray(desc["nbytes"] // dt.itemsize, dt, buffer=shm.buf, offset=desc["offset"])

    def identity(self) -> dict:
        """Where this process's memory is (every process of a node shares the host)."""
        return {}

    def can_map(self, peers: list) -> bool:
        return True

    def ready(self) -> None:
        """Host writes are visible to other processes at once."""

    def pull(self, dst: np.ndarray, src: np.ndarray) -> None:
        np.copyto(dst, src)

    def close(self) -> None:
        for shm in self._opened.values():
            shm.close()
        for _, _, shm in self._blocks:
            shm.close()
            shm.unlink()
        self._opened, self._blocks = {}, []


# ====================================================================== GPU side (thin)
class CudaIpc:
    """CuPy device memory through CUDA IPC (see module docstring); hooks make it testable.

    Parameters
    ----------
    cp : module, optional
        ``cupy`` (default).
    get_handle, open_handle, address_range, memcpy, synchronize : callables, optional
        ``cudaIpcGetMemHandle(base) -> bytes``, ``cudaIpcOpenMemHandle(bytes) -> pointer``,
        ``cuMemGetAddressRange(ptr) -> (base, size)``, ``memcpy(dst_ptr, src_ptr, nbytes)``
        (any direction, on the current stream) and a stream synchronisation.
    device_bus_id, peer_ok : callables, optional
        PCI bus id of the current device; ``peer_ok(bus_id)``: whether this process can map
        memory of the device with that bus id (visible here, and the same device or peer
        access between the two).
    """

    def __init__(self, cp=None, *, get_handle=None, open_handle=None, address_range=None, memcpy=None,
                 synchronize=None, device_bus_id=None, peer_ok=None) -> None:
        if cp is None:
            try:
                import cupy as cp
            except ImportError:
                raise DeviceUnavailable("ipc: CuPy arrays need cupy (pip install 'topocoll[cuda12]')") from None
        self.cp = cp
        rt = getattr(getattr(cp, "cuda", None), "runtime", None)
        self._get = get_handle or (lambda base: bytes(rt.ipcGetMemHandle(base)))
        self._open = open_handle or (lambda h: rt.ipcOpenMemHandle(h))
        self._range = address_range or _cu_address_range
        self._memcpy = memcpy or (lambda d, s, nb: rt.memcpyAsync(d, s, nb, 4, cp.cuda.get_current_stream().ptr))
        self._sync = synchronize or (lambda: cp.cuda.get_current_stream().synchronize())
        self._bus = device_bus_id or (lambda: cp.cuda.Device().pci_bus_id)
        self._peer_ok = peer_ok or self._cupy_peer_ok
        self._opened: dict[bytes, int] = {}

    def identity(self) -> dict:
        return {"pci_bus_id": self._bus()}

    def can_map(self, peers: list) -> bool:
        return all(self._peer_ok(p["pci_bus_id"]) for p in peers)

    def _cupy_peer_ok(self, bus_id: str) -> bool:
        rt = self.cp.cuda.runtime
        try:
            other = rt.deviceGetByPCIBusId(bus_id)
        except Exception:  # noqa: BLE001 - the peer's GPU is not visible in this process
            return False
        mine = self.cp.cuda.Device().id
        return other == mine or bool(rt.deviceCanAccessPeer(mine, other))

    def alloc(self, nbytes: int):
        return self.cp.empty(nbytes, self.cp.uint8)

    def export(self, arr, what: str) -> dict:
        ptr = int(arr.data.ptr)
        base, size = self._range(ptr)
        if not base <= ptr <= ptr + arr.nbytes <= base + size:
            raise BufferLayoutError(f"ipc: {what} lies outside its allocation")
        try:
            handle = self._get(base)
        except Exception as exc:  # noqa: BLE001 - CUDARuntimeError: not cudaMalloc memory (e.g. an async pool)
            raise BufferLayoutError(f"ipc: {what} cannot be shared through CUDA IPC ({exc}); allocate it from "
                                    f"CuPy's default pool or pass ipc='never'") from None
        return {"handle": handle.hex(), "offset": ptr - base, "nbytes": int(arr.nbytes)}

    def open(self, desc: dict, dtype):
        handle = bytes.fromhex(desc["handle"])
        base = self._opened.get(handle)
        if base is None:
            base = self._opened[handle] = int(self._open(handle))
        cp = self.cp
        mem = cp.cuda.UnownedMemory(base + desc["offset"], desc["nbytes"], self)
        dt = np.dtype(dtype)
        return cp.ndarray(desc["nbytes"] // dt.itemsize, dt, cp.cuda.MemoryPointer(mem, 0))

    def ready(self) -> None:
        self._sync()

    def pull(self, dst, src) -> None:
        self._memcpy(int(dst.data.ptr), int(src.data.ptr), int(src.nbytes))
        self._sync()


def _cu_address_range(ptr: int) -> tuple[int, int]:
    """``(base, size)`` of the device allocation holding ``ptr`` (driver ``cuMemGetAddressRange``)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        raise DeviceUnavailable("ipc: libcuda.so.1 not found (no NVIDIA driver)") from None
    base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    err = lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    if err != 0:
        raise DeviceUnavailable(f"ipc: cuMemGetAddressRange failed with CUDA error {err} for pointer {ptr:#x}")
    return int(base.value), int(size.value)


__all__ = ["IpcWire", "SharedMemoryIpc", "CudaIpc", "DESCRIPTOR_LIMIT"]


def wire_for(arr, cache: dict, *, ipc: bool) -> HostWire:
    """The buffer layer for ``arr``, one per kind kept in ``cache``: :class:`HostWire` for NumPy;
    for CuPy an :class:`IpcWire` when ``ipc`` (every rank on one node), else a
    :class:`DeviceWire`."""
    kind = "cupy" if _is_cupy(arr) else "host"
    wire = cache.get(kind)
    if wire is None:
        if kind == "cupy" and ipc:
            wire = IpcWire(CudaIpc(), DeviceWire())
        else:
            wire = DeviceWire() if kind == "cupy" else HostWire()
        cache[kind] = wire
    return wire

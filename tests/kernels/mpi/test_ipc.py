"""kernels.mpi.ipc without mpirun: the shared-memory twin and the CUDA IPC hooks.

The token-and-pull protocol itself runs across processes in tests/kernels/mpi/test_mpi_communicator.py (family
``ipc``: every collective over the shared-memory twin, checked against NumPy on every rank).
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from kernels.mpi.ipc import CudaIpc, IpcWire, SharedMemoryIpc
from topo_probe.errors import BufferLayoutError


def test_shared_memory_export_open_round_trip_sees_the_same_bytes():
    mem = SharedMemoryIpc()
    try:
        a = mem.empty(100, np.int32)
        a[...] = np.arange(100)
        desc = mem.export(a[10:30], "rank 0: output buffer")
        assert desc["offset"] == 40 and desc["nbytes"] == 80
        peer = SharedMemoryIpc()                  # another process would attach the same way
        view = peer.open(desc, np.int32)
        assert view.tolist() == list(range(10, 30))
        a[12] = -7                                 # writes are shared, not copied
        assert view[2] == -7
        dst = np.zeros(20, np.int32)
        peer.pull(dst, view)
        assert dst[2] == -7 and dst[0] == 10
        peer.close()
    finally:
        mem.close()


def test_shared_memory_is_visible_from_another_process():
    mem = SharedMemoryIpc()
    try:
        a = mem.empty(8, np.float64)
        desc = mem.export(a, "x")
        code = ("import numpy as np, sys; sys.path.insert(0, '.');"
                "from kernels.mpi.ipc import SharedMemoryIpc;"
                f"m = SharedMemoryIpc(); v = m.open({desc!r}, np.float64); v[...] = np.arange(8) * 1.5; m.close()")
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
        assert a.tolist() == [k * 1.5 for k in range(8)]
    finally:
        mem.close()


def test_exporting_private_memory_is_a_clear_error():
    mem = SharedMemoryIpc()
    with pytest.raises(BufferLayoutError, match="rank 2: input buffer is not in shared memory"):
        mem.export(np.zeros(4), "rank 2: input buffer")


def test_wire_temporaries_are_exportable():
    mem = SharedMemoryIpc()
    try:
        wire = IpcWire(mem)
        wire.begin()
        t = wire.empty(33, np.float32)
        assert mem.export(t, "scratch")["nbytes"] == 132
    finally:
        mem.close()


class _FakeCupy:
    """Just enough of cupy for CudaIpc: memory records pointers, arrays carry .data.ptr."""

    def __init__(self):
        self.uint8 = np.uint8
        self.cuda = SimpleNamespace(UnownedMemory=lambda ptr, size, owner: SimpleNamespace(ptr=ptr, size=size),
                                    MemoryPointer=lambda mem, off: SimpleNamespace(ptr=mem.ptr + off))

    def ndarray(self, n, dtype, memptr):
        return SimpleNamespace(size=n, dtype=np.dtype(dtype), nbytes=n * np.dtype(dtype).itemsize, data=memptr)


def test_cuda_ipc_exports_base_handle_and_offset_and_opens_each_handle_once():
    calls = {"get": [], "open": [], "copy": [], "sync": 0}
    allocs = {0x7000: 0x10000}                                # one 64 KiB allocation at 0x7000

    def address_range(ptr):
        base = max(b for b in allocs if b <= ptr)
        return base, allocs[base]

    def sync():
        calls["sync"] += 1

    ipc = CudaIpc(_FakeCupy(), get_handle=lambda b: calls["get"].append(b) or b.to_bytes(64, "little"),
                  open_handle=lambda h: calls["open"].append(h) or 0x9000_0000,
                  address_range=address_range, memcpy=lambda d, s, nb: calls["copy"].append((d, s, nb)),
                  synchronize=sync)
    arr = SimpleNamespace(data=SimpleNamespace(ptr=0x7000 + 256), nbytes=4000)
    desc = ipc.export(arr, "rank 1: output buffer")
    assert desc == {"handle": (0x7000).to_bytes(64, "little").hex(), "offset": 256, "nbytes": 4000}
    assert calls["get"] == [0x7000]                           # the allocation's base, not the pointer
    v1 = ipc.open(desc, np.float32)
    v2 = ipc.open({**desc, "offset": 1024, "nbytes": 400}, np.float32)
    assert len(calls["open"]) == 1                            # opened once per handle
    assert (v1.data.ptr, v1.size, v2.data.ptr, v2.size) == (0x9000_0000 + 256, 1000, 0x9000_0000 + 1024, 100)
    dst = SimpleNamespace(data=SimpleNamespace(ptr=0x5000))
    ipc.pull(dst, v2)
    assert calls["copy"] == [(0x5000, 0x9000_0000 + 1024, 400)] and calls["sync"] == 1
    ipc.ready()
    assert calls["sync"] == 2
    with pytest.raises(BufferLayoutError, match="outside its allocation"):
        ipc.export(SimpleNamespace(data=SimpleNamespace(ptr=0x7000 + 0xFF00), nbytes=4096), "rank 1: input")


def test_plain_messages_use_the_base_wire():
    """send/recv between two ranks bypass the token protocol: staging stays the base's job."""
    from kernels.mpi.wires import DeviceWire
    base = DeviceWire(np, cuda_aware=False, pinned_empty=np.empty, to_host=lambda h, d: np.copyto(h, d),
                      to_device=lambda d, h: np.copyto(d, h), synchronize=lambda: None)
    mem = SharedMemoryIpc()
    try:
        wire = IpcWire(mem, base)
        wire.begin()
        x = np.arange(5, dtype=np.float32)
        sent = wire.send_buffer(x, pooled=False)
        assert base.staged["to_host"] == 1 and np.array_equal(sent.view(np.float32), x)
        out = np.zeros(5, np.float32)
        buf, fin = wire.recv_buffer(5, np.float32, into=out)
        buf.view(np.float32)[...] = 7
        assert fin() is out and out.tolist() == [7.0] * 5 and base.staged["to_device"] == 1
        wire.finish()          # nothing pending: returns at once
    finally:
        mem.close()


def test_cuda_ipc_maps_only_visible_peer_accessible_devices():
    visible = {"0000:07:00.0": True, "0000:0f:00.0": True, "0000:47:00.0": False}
    ipc = CudaIpc(_FakeCupy(), device_bus_id=lambda: "0000:07:00.0", peer_ok=lambda b: visible.get(b, False))
    assert ipc.identity() == {"pci_bus_id": "0000:07:00.0"}
    assert ipc.can_map([{"pci_bus_id": "0000:0f:00.0"}, {"pci_bus_id": "0000:07:00.0"}])
    assert not ipc.can_map([{"pci_bus_id": "0000:0f:00.0"}, {"pci_bus_id": "0000:47:00.0"}])
    assert not ipc.can_map([{"pci_bus_id": "0000:99:00.0"}])          # not visible in this process


def test_memory_cuda_ipc_cannot_share_is_a_clear_error():
    def refuse(base):
        raise RuntimeError("cudaErrorInvalidValue: invalid argument")
    ipc = CudaIpc(_FakeCupy(), get_handle=refuse, address_range=lambda p: (p, 1 << 20))
    arr = SimpleNamespace(data=SimpleNamespace(ptr=0x1000), nbytes=64)
    with pytest.raises(BufferLayoutError, match=r"rank 0: input buffer cannot be shared through CUDA IPC .*ipc='never'"):
        ipc.export(arr, "rank 0: input buffer")

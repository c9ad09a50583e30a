"""CUDA peer-access probe: pure decision on records, gathering through a fake CuPy."""

from __future__ import annotations

import types

from topo_probe.probes.cuda import cuda_bus_ids, gather_cuda_records, p2p_from_cuda_records, probe_cuda


def fake_cupy(n: int, can, *, available: bool = True, fail: Exception | None = None):
    def count():
        if fail:
            raise fail
        return n

    props = lambda i: {"name": f"GPU {i}".encode(), "pciBusID": 0x18 + i, "pciDeviceID": 0,  # noqa: E731
                       "pciDomainID": 0, "major": 9, "minor": 0}
    rt = types.SimpleNamespace(getDeviceCount=count, getDeviceProperties=props,
                               deviceCanAccessPeer=lambda i, j: can[i][j])
    return types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: available, runtime=rt))


def test_p2p_from_records():
    rec = {"devices": [{"index": i} for i in range(3)],
           "can_access_peer": [[None, 1, 0], [1, None, 0], [0, 0, None]]}
    p = p2p_from_cuda_records(rec)
    assert p[(0, 1)].supported and not p[(0, 1)].atomics and "not reported" in p[(0, 1)].reason
    assert not p[(0, 2)].supported and p[(2, 1)].reason == "cudaDeviceCanAccessPeer = 0"
    rec["p2p_attrs"] = {"access": [[None, 1, 1], [1, None, 0], [1, 0, None]],
                        "atomics": [[None, 1, 0], [1, None, 0], [0, 0, None]]}
    p = p2p_from_cuda_records(rec)
    assert p[(0, 1)] == p[(1, 0)] and p[(0, 1)].atomics and p[(0, 1)].reason == ""
    assert p[(0, 2)].supported and p[(0, 2)].reason == "native atomics not supported"
    assert p[(1, 2)].reason == "cudaDevP2PAttrAccessSupported = 0"


def test_gather_and_probe_with_fake_cupy():
    can = [[0, 1], [1, 0]]
    rec = gather_cuda_records(fake_cupy(2, can))
    assert [d["name"] for d in rec["devices"]] == ["GPU 0", "GPU 1"]
    assert cuda_bus_ids(rec) == ["0000:18:00.0", "0000:19:00.0"]
    assert rec["can_access_peer"] == [[None, 1], [1, None]]
    rec, why = probe_cuda(fake_cupy(2, can, available=False))
    assert rec is None and why == ["CUDA: RuntimeError: no CUDA device available"]

    class CUDARuntimeError(RuntimeError):
        pass
    rec, why = probe_cuda(fake_cupy(2, can, fail=CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device")))
    assert rec is None and why == ["CUDA: CUDARuntimeError: cudaErrorNoDevice: no CUDA-capable device"]


def test_probe_cuda_on_this_machine_is_soft():
    rec, why = probe_cuda()
    assert rec is None and len(why) == 1 and why[0].startswith("CUDA: ")

"""Peer access as CUDA sees it, through CuPy (and cuda-bindings when present), imported lazily.

:func:`gather_cuda_records` asks CUDA; :func:`probe_cuda` turns failures (CuPy missing, no
device, CUDARuntimeError) into reasons; :func:`p2p_from_cuda_records` is the pure decision:

Records::

    {"devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "0000:18:00.0",
                  "compute_capability": [9, 0]}],
     "can_access_peer": [[null, 1, ...], ...],              # cudaDeviceCanAccessPeer
     "p2p_attrs": {"access": [[...]], "atomics": [[...]], "perf_rank": [[...]]}}   # optional

Indices are CUDA's device order (which ``CUDA_DEVICE_ORDER`` / ``CUDA_VISIBLE_DEVICES`` may
change): map to topology ranks by ``pci_bus_id``.

>>> r = {"devices": [{"index": 0}, {"index": 1}], "can_access_peer": [[None, 1], [0, None]]}
>>> p = p2p_from_cuda_records(r)
>>> p[(0, 1)].supported, p[(1, 0)].reason
(True, 'cudaDeviceCanAccessPeer = 0')
"""

from __future__ import annotations

import importlib

from topo_probe.parsers.hardware import normalize_bus_id
from topo_probe.topology.model import P2PCapability

__all__ = ["gather_cuda_records", "probe_cuda", "p2p_from_cuda_records"]


def _p2p_attrs(n: int) -> dict | None:
    """cudaDeviceGetP2PAttribute matrices via cuda-bindings, or None if unavailable."""
    try:
        from cuda.bindings import runtime as rt
    except ImportError:
        try:
            from cuda import cudart as rt  # cuda-python < 12.6
        except ImportError:
            return None
    attr = rt.cudaDeviceP2PAttr
    names = {"perf_rank": "cudaDevP2PAttrPerformanceRank", "access": "cudaDevP2PAttrAccessSupported",
             "atomics": "cudaDevP2PAttrNativeAtomicSupported"}
    out = {}
    for key, name in names.items():
        m = [[None] * n for _ in range(n)]
        for i in range(n):
            for j in range(n):
                if i != j:
                    res = rt.cudaDeviceGetP2PAttribute(getattr(attr, name), i, j)
                    err, val = res if isinstance(res, tuple) else (0, res)
                    if int(err) == 0:
                        m[i][j] = int(val)
        out[key] = m
    return out


def gather_cuda_records(cupy_module=None) -> dict:
    """Ask CUDA (through CuPy) for devices and peer access (record format above).

    Raises ImportError without CuPy and CuPy's CUDARuntimeError / RuntimeError on CUDA errors.
    """
    cp = cupy_module if cupy_module is not None else importlib.import_module("cupy")
    if not cp.cuda.is_available():
        raise RuntimeError("no CUDA device available")
    rt = cp.cuda.runtime
    n = rt.getDeviceCount()
    devices = []
    for i in range(n):
        p = rt.getDeviceProperties(i)
        name = p.get("name", b"")
        devices.append({"index": i, "name": name.decode() if isinstance(name, bytes) else str(name),
                        "pci_bus_id": f"{p.get('pciDomainID', 0):04x}:{p.get('pciBusID', 0):02x}:"
                                      f"{p.get('pciDeviceID', 0):02x}.0",
                        "compute_capability": [p.get("major"), p.get("minor")]})
    can = [[None if i == j else int(rt.deviceCanAccessPeer(i, j)) for j in range(n)] for i in range(n)]
    rec = {"devices": devices, "can_access_peer": can}
    attrs = _p2p_attrs(n)
    if attrs is not None:
        rec["p2p_attrs"] = attrs
    return rec


def probe_cuda(cupy_module=None) -> tuple[dict | None, list[str]]:
    """(records or None, reasons): :func:`gather_cuda_records` with every failure soft."""
    try:
        cp = cupy_module if cupy_module is not None else importlib.import_module("cupy")
    except ImportError:
        return None, ["CUDA: cupy not installed"]
    except Exception as exc:  # noqa: BLE001 - a broken CuPy install must not stop the probe
        return None, [f"CUDA: importing cupy failed: {type(exc).__name__}: {exc}"]
    try:
        return gather_cuda_records(cp), []
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError, driver/runtime mismatch...
        return None, [f"CUDA: {type(exc).__name__}: {exc}"]


def p2p_from_cuda_records(records: dict) -> dict[tuple[int, int], P2PCapability]:
    """``{(i, j): P2PCapability}`` in CUDA device order: read = write = can-access-peer (or the
    access attribute), atomics = the native-atomic attribute (False, "not reported" without
    cuda-bindings)."""
    can = records.get("can_access_peer") or []
    attrs = records.get("p2p_attrs") or {}
    n = len(records.get("devices", []))
    out = {}
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            access = attrs.get("access", [[None] * n] * n)[i][j]
            ok = bool(can[i][j]) if access is None else bool(access)
            atom = attrs.get("atomics", [[None] * n] * n)[i][j]
            if not ok:
                out[(i, j)] = P2PCapability(False, False, False, f"cudaDeviceCanAccessPeer = {can[i][j]}"
                                            if access is None else "cudaDevP2PAttrAccessSupported = 0")
            else:
                out[(i, j)] = P2PCapability(True, True, bool(atom), "" if atom else
                                            "native atomics not supported" if atom == 0 else
                                            "atomics not reported (no cuda-bindings)")
    return out


def cuda_bus_ids(records: dict) -> list[str]:
    """Normalized PCI bus ids of the CUDA devices, in CUDA order."""
    return [normalize_bus_id(d.get("pci_bus_id", "")) for d in records.get("devices", [])]

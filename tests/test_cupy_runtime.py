"""kernels.cupy_runtime: the reduce and avg-division calls of CupyRuntime, run on the CPU with
a NumPy stand-in for CuPy (no GPU needed): right device entered, right stream used, results
equal to hand-computed values.  (Start-up without a GPU is covered by test_cupy_backend_fake.)"""

from __future__ import annotations

import contextlib
import types

import numpy as np
import pytest

from kernels.cupy_runtime import CupyRuntime


class _DevArray(np.ndarray):
    """A NumPy array that says it lives on GPU 1, as a CuPy array would."""

    device = types.SimpleNamespace(id=1)


def _runtime():
    entered = []

    @contextlib.contextmanager
    def device(i):
        entered.append(("device", i))
        yield

    cp = types.SimpleNamespace(**{n: getattr(np, n) for n in ("add", "multiply", "maximum", "minimum",
                                                                "floor_divide", "divide")})
    cp.cuda = types.SimpleNamespace(Device=device)
    rt = CupyRuntime.__new__(CupyRuntime)      # skip the CuPy import of __init__
    rt.cp, rt.count = cp, 2
    return rt, entered


def _stream(log):
    @contextlib.contextmanager
    def stream():
        log.append("stream")
        yield
    return stream()


@pytest.mark.parametrize("op,want", [("sum", [5, -1, 12]), ("prod", [6, -2, 35]), ("max", [3, 1, 7]),
                                     ("min", [2, -2, 5])])
def test_reduce_on_the_destination_device(op, want):
    rt, entered = _runtime()
    dst = np.zeros(3, np.int64).view(_DevArray)
    rt.reduce(dst, np.array([2, -2, 5]), np.array([3, 1, 7]), op, _stream(entered))
    assert dst.tolist() == want and entered == [("device", 1), "stream"]


def test_postdiv_truncates_integers_and_divides_floats_on_the_device():
    rt, entered = _runtime()
    x = np.array([7, -7, 6], np.int32).view(_DevArray)
    rt.postdiv(x, 2, _stream(entered))
    f = np.array([1.0, 3.0], np.float32).view(_DevArray)
    rt.postdiv(f, 4, _stream(entered))
    assert x.tolist() == [3, -3, 3] and f.tolist() == [0.25, 0.75]
    assert entered == [("device", 1), "stream"] * 2

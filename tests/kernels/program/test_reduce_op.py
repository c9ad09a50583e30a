"""kernels.program.reduce_op: one list of reduction ops, one refusal.  Every surface that takes an op
refuses a bad one in the same line, ``"<call>: op must be one of sum, prod, max, min, avg; got 'mean'"``
(the call named where the surface knows it), and every executor's op table holds exactly the ops of
``REDUCE_OPS``.  The reference is the hand-written line and NCCL's ``ncclRedOp_t`` (nccl.h.in of
v2.19: ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg; ``ncclPreMulSum`` is made by a call, not named)."""

from __future__ import annotations

import ml_dtypes  # noqa: F401 - registers float8 with NumPy
import numpy as np
import pytest
from _schedules import ring

from topo_probe.errors import InvalidArgument

N = 4
BAD = "mean"
LIST = "sum, prod, max, min, avg"


def _line(what: str) -> str:
    return f"{what + ': ' if what else ''}op must be one of {LIST}; got {BAD!r}"


def _bufs(n=N, count=3):
    return [np.ones(count, np.float32) for _ in range(n)], [np.zeros(count, np.float32) for _ in range(n)]


def _communicator(method):
    from kernels import Communicator
    comm = Communicator(N, plan=False)
    s, d = _bufs()
    return lambda: getattr(comm, method)(s, d, op=BAD)


def _run_schedule(backend):
    from kernels.backends.executor import run_schedule
    s, d = _bufs()
    return lambda: run_schedule(ring("allreduce", N), s, d, op=BAD, backend=backend)


def _lower():
    from kernels.program.lowering import lower
    return lambda: lower(ring("allreduce", N), 3, np.float32, op=BAD)


def _reference():
    from kernels.backends.reference import run_reference
    s, d = _bufs()
    return lambda: run_reference(ring("allreduce", N), s, d, op=BAD)


def _native():
    from kernels.native.source import compile_options
    return lambda: compile_options(np.float32, BAD, scope_sys=False)


def _host_nway():
    from kernels.backends.host_reduce import reduce_nway
    return lambda: reduce_nway(np.zeros(4, np.float32), [np.ones(4, np.float32)] * 2, op=BAD)


def _twin(dtype):
    from kernels.backends.kernel_twins import reduce_copy_with
    a = np.ones(4, dtype)
    return lambda: reduce_copy_with(np, np.zeros(4, dtype), a, a, BAD)


def _sweep():
    from kernels.sweep.table import reduce_arrays
    return lambda: reduce_arrays([np.ones(2, np.float32)] * 2, BAD, "float32", 2)


def _sweep_driver():
    from synth.sweep.driver import SweepConfig, run_sweep
    return lambda: run_sweep(SweepConfig("allreduce", 1, 8, 8, ops=(BAD,), check=0), None, None)


def _mpi_single():
    pytest.importorskip("mpi4py")
    from kernels.mpi.communicator import MPICommunicator
    comm = MPICommunicator(plan=False, abort_on_error=False, timeout_s=20)
    return lambda: comm.all_reduce(np.ones(3, np.float32), np.zeros(3, np.float32), op=BAD)


def _torch_combine():
    torch = pytest.importorskip("torch")
    from kernels.pytorch.schedule_share import combine
    a = torch.ones(3)
    return lambda: combine(torch.zeros(3), a, a, BAD)


CASES = [
    ("Communicator.all_reduce", lambda: _communicator("all_reduce"), "all_reduce"),
    ("Communicator.reduce_scatter", lambda: _communicator("reduce_scatter"), "reduce_scatter"),
    ("Communicator.reduce", lambda: _communicator("reduce"), "reduce"),
    ("run_schedule/host", lambda: _run_schedule("host"), "allreduce"),
    ("run_schedule/reference", lambda: _run_schedule("reference"), "allreduce"),
    ("lower", _lower, "allreduce"),
    ("run_reference", _reference, "allreduce"),
    ("native compile_options", _native, "native executor"),
    ("host reduce_nway", _host_nway, "host n-way reduce"),
    ("reduce_copy_with/float32", lambda: _twin(np.float32), ""),
    ("reduce_copy_with/float8", lambda: _twin(ml_dtypes.float8_e4m3fn), ""),
    ("sweep reduce_arrays", _sweep, ""),
    ("sweep run_sweep", _sweep_driver, "sweep"),
    ("MPICommunicator.all_reduce (one process)", _mpi_single, "all_reduce: rank 0"),
    ("torch combine", _torch_combine, ""),
]


@pytest.mark.parametrize("make,what", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_surface_refuses_a_bad_op_in_the_one_line(make, what):
    call = make()
    with pytest.raises(InvalidArgument) as info:
        call()
    assert str(info.value) == _line(what)


@pytest.mark.parametrize("op", [["sum"], {"sum": 1}, None, 1, "SUM", "premul_sum", "sum  ", "s  u  m"])
def test_the_check_refuses_what_is_not_one_of_the_op_names(op):
    from kernels.program.reduce_op import check_reduce_op
    with pytest.raises(InvalidArgument) as info:
        check_reduce_op(op, "reduce")
    assert str(info.value) == f"reduce: op must be one of {LIST}; got {op!r}"


def test_every_op_table_holds_exactly_the_reduce_ops():
    """REDUCE_OPS is NCCL's five named ops; the native kernel's and the host reduce's op codes, the
    NumPy twins' ufuncs and nccl-tests' -o names hold exactly those; torch's adds only premul_sum."""
    from kernels.backends.host_reduce import OPCODES
    from kernels.backends.kernel_twins import UFUNC_NAMES
    from kernels.native.source import OP_CODES as NATIVE
    from kernels.program.reduce_op import REDUCE_OPS
    from synth.formats.nccl_tests.conventions import OP_NAMES
    nccl = {"sum", "prod", "max", "min", "avg"}
    assert set(REDUCE_OPS) == nccl and len(REDUCE_OPS) == len(nccl)
    for name, table in (("native OP_CODES", NATIVE), ("host OPCODES", OPCODES), ("UFUNC_NAMES", UFUNC_NAMES),
                        ("nccl-tests OP_NAMES", OP_NAMES)):
        assert set(table) == nccl, name
    pytest.importorskip("torch")
    from kernels.pytorch.dtypes import OP_CODES as TORCH
    assert set(TORCH) == nccl | {"premul_sum"}


def test_the_op_rule_is_one_function_and_one_list_in_synth_that_kernels_reuse():
    """The sweep (synth, which cannot import kernels) and every kernels surface share one check and one
    list: the very objects, not copies.  Old: kernels.program.reduce_op wrote the check, the sweep its
    own (``op 'mean' is not one of ...``) over nccl-tests' own OP_NAMES tuple."""
    import kernels.program.reduce_op as kernels_side
    import synth.ir.collectives as synth_side
    from synth.formats.nccl_tests.conventions import OP_NAMES
    assert kernels_side.check_reduce_op is synth_side.check_reduce_op
    assert kernels_side.REDUCE_OPS is synth_side.REDUCE_OPS is OP_NAMES

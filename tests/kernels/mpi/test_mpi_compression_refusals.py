"""MPICommunicator.compressed_all_reduce (and fused_all_reduce, which forwards compression=) refuses a bad op or
compression with the rule of :mod:`kernels.comm.compression`: one line naming the owner, the value through
topo_probe.errors.show, the same line on every rank but for the rank's number (``mpirun -n 2``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from _mpi import run_mpi

OWNER = "MPICommunicator.compressed_all_reduce: rank {r}"
CASES = {
    "op": f"{OWNER}: compressed all_reduce op must be one of sum, avg; got 'max'",
    "op-liar": f"{OWNER}: compressed all_reduce op must be one of sum, avg; got 'max'",
    "op-huge": f"{OWNER}: compressed all_reduce op must be one of sum, avg; got '" + "x" * 56 + "...",
    "compression": f"{OWNER}: compression must be one of fp16, bf16, fp8; got 'fp4'",
    "compression-huge": f"{OWNER}: compression must be one of fp16, bf16, fp8; got '" + "x" * 56 + "...",
}
FUSED = "MPICommunicator.fused_all_reduce: rank {r}"
FUSED_CASES = {     # fused_all_reduce forwards compression= (and op) to compressed_all_reduce: its refusals name it
    "fused-op": f"{FUSED}: compressed all_reduce op must be one of sum, avg; got 'max'",
    "fused-compression": f"{FUSED}: compression must be one of fp16, bf16, fp8; got 'fp4'",
    "fused-compression-liar": f"{FUSED}: compression must be one of fp16, bf16, fp8; got 'fp4'",
    "fused-compression-huge": f"{FUSED}: compression must be one of fp16, bf16, fp8; got '" + "x" * 56 + "...",
    "fused-empty": f"{FUSED}: compression must be one of fp16, bf16, fp8; got 'fp4'",
}


def _worker() -> None:
    import numpy as np
    from mpi4py import MPI

    from kernels.mpi.communicator import MPICommunicator
    from topo_probe.machines.generators import fully_connected

    class Liar(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    comm = MPICommunicator(MPI.COMM_WORLD, topology=fully_connected(MPI.COMM_WORLD.size), abort_on_error=False)
    kws = {"op": {"op": "max"}, "op-liar": {"op": Liar("max")}, "op-huge": {"op": "x" * 6000},
           "compression": {"compression": "fp4"}, "compression-huge": {"compression": "x" * 6000}}
    for name, kw in kws.items():
        x = np.ones(8, np.float32)
        try:
            comm.compressed_all_reduce(x, np.empty(8, np.float32), **kw)
            print(f"rank {comm.rank} {name} ran")
        except Exception as e:  # noqa: BLE001 - the test reads what each rank met
            print(f"rank {comm.rank} {name} {type(e).__name__}: {e}")
    fused = {"fused-op": ([np.ones(8, np.float32)], {"op": "max", "compression": "fp16"}),
             "fused-compression": ([np.ones(8, np.float32), np.ones(3, np.float32)], {"compression": "fp4"}),
             "fused-compression-liar": ([np.ones(8, np.float32)], {"compression": Liar("fp4")}),
             "fused-compression-huge": ([np.ones(8, np.float32)], {"compression": "x" * 6000}),
             "fused-empty": ([], {"compression": "fp4"})}
    for name, (ts, kw) in fused.items():
        try:
            comm.fused_all_reduce(ts, **kw)
            print(f"rank {comm.rank} {name} ran")
        except Exception as e:  # noqa: BLE001 - the test reads what each rank met
            print(f"rank {comm.rank} {name} {type(e).__name__}: {e}")
    x = np.ones(8, np.float32)
    y = np.empty(8, np.float32)
    comm.compressed_all_reduce(x, y, op="avg", compression="fp16")   # still in step after the refusals
    print(f"rank {comm.rank} after {y.tolist()}")


def test_every_rank_gives_the_owner_and_a_short_value():
    """Reference: the lines written by hand from the rule.  Before: 'compressed all_reduce supports op 'sum' and
    'avg', got ...' / 'compression ... is not one of ...' with no owner and the raw 6,000-character repr; the lying
    str subclass passed the op check."""
    got = run_mpi(2, [str(Path(__file__).resolve()), "worker"], timeout=120)
    lines = got.stdout.splitlines()
    for r in (0, 1):
        for name, line in CASES.items():
            want = f"rank {r} {name} InvalidArgument: {line.format(r=r)}"
            assert want in lines, (want, got.stdout[-1500:], got.stderr[-600:])
        assert f"rank {r} after {[1.0] * 8}" in lines, (got.stdout[-600:], got.stderr[-600:])


def test_fused_all_reduce_refusals_name_fused_all_reduce():
    """fused_all_reduce(compression=...) checks the op and name first, by the same rules, and its refusal names the
    method the user called and the rank.  Reference: the lines written by hand from the rule.  Old: the refusal
    named MPICommunicator.compressed_all_reduce (called per bucket), and with no tensors a bad name ran (returned
    [])."""
    got = run_mpi(2, [str(Path(__file__).resolve()), "worker"], timeout=120)
    lines = got.stdout.splitlines()
    for r in (0, 1):
        for name, line in FUSED_CASES.items():
            want = f"rank {r} {name} InvalidArgument: {line.format(r=r)}"
            assert want in lines, (want, got.stdout[-1500:], got.stderr[-600:])
        assert f"rank {r} after {[1.0] * 8}" in lines, (got.stdout[-600:], got.stderr[-600:])


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "worker":
    _worker()

"""nccl-tests-style bandwidth sweeps of topocoll schedules (console script ``sweep``).

Modules: :mod:`~kernels.sweep.table` (one entry per collective: counts, busbw factor, data,
NumPy reference), :mod:`~kernels.sweep.driver` (sizes, schedule choice, rows),
:mod:`~kernels.sweep.backends` (host / cupy / sim), :mod:`~kernels.sweep.mpi_backend` (``--backend
mpi``, one process per rank), :mod:`~synth.formats.nccl_tests.writer` (nccl-tests text and JSON),
:mod:`~kernels.sweep.compare` (CSV and PNG), :mod:`~kernels.sweep.importer` (real nccl-tests
logs) and :mod:`~kernels.sweep.cli`.
"""

from kernels.sweep.driver import Result, Row, SweepConfig, SweepSummary, make_selector, run_sweep

__all__ = ["Result", "Row", "SweepConfig", "SweepSummary", "make_selector", "run_sweep"]

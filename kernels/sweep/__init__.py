"""nccl-tests-style bandwidth sweeps of topocoll schedules that run (console script ``sweep``).

The model side (the driver, the per-collective table of counts and busbw factors, the ``sim``
backend, the ``simulate`` command) lives in :mod:`synth.sweep` and :mod:`synth.cli.simulate`;
here: :mod:`~kernels.sweep.table` (each collective's seeded data and NumPy reference),
:mod:`~kernels.sweep.backends` (host / cupy, and ``sim`` by name), :mod:`~kernels.sweep.mpi_backend`
(``--backend mpi``, one process per rank), :mod:`~kernels.sweep.memory` (memory admission),
:mod:`~kernels.sweep.runs_header` (the ``# runs`` lines), :mod:`~kernels.sweep.compare` (CSV and PNG),
:mod:`~kernels.sweep.output_paths` (which files a sweep may write), :mod:`~kernels.sweep.importer` (real
nccl-tests logs) and :mod:`~kernels.sweep.cli`.
"""

__all__: list[str] = []

"""``sweep --backend mpi``: one nccl-tests table from the processes of ``mpirun -n N``.

:func:`run_sweep_mpi` is what ``sweep ... --backend mpi`` runs on every rank; every rank times
and validates its share through :class:`MPISweepBackend` (the :mod:`kernels.sweep.backends`
interface over an :class:`~kernels.mpi.communicator.MPICommunicator`) and rank 0 prints the table.
Both names are also importable from :mod:`kernels.mpi.communicator`.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from kernels.comm.communicator import resolve_topology
from kernels.mpi.communicator import MPICommunicator
from kernels.mpi.waiter import mpi
from kernels.sweep.backends import Checker
from topo_probe.errors import TopocollError


class MPISweepBackend:
    """The sweep backend (:mod:`kernels.sweep.backends` interface) of one MPI rank.

    Every rank builds its own buffers from ``(seed, rank, index)`` (nccl-tests' data), runs the
    case's schedule with :meth:`MPICommunicator.run_schedule` and times ``iters`` back-to-back
    runs after a barrier (nccl-tests with ``MPI=1``); rank times are combined by ``-a`` (0 rank
    0, 1 mean, 2 min, 3 max).  Validation runs on every rank against NumPy and ``#wrong`` is
    the sum over ranks; every rank returns the same numbers.
    """

    name = "mpi"
    checks = True

    def __init__(self, comm: MPICommunicator) -> None:
        self.comm = comm
        self._checker = Checker()       # the host sweep's validation loop and failing count

    def devices(self, n: int, topology) -> list:
        import os
        import socket

        from synth.sweep.driver import Device
        mine = {"pid": os.getpid(), "host": socket.gethostname().split(".")[0],
                "info": f"MPI process ({self.comm.waiter.MPI.Get_library_version().splitlines()[0][:40]})"}
        return [Device(r, d["pid"], d["host"], r, "cpu", d["info"])
                for r, d in enumerate(self.comm.allgather_object(mine))]

    def _buffers(self, case, seed: int):
        from kernels.sweep.table import init_data
        e, n, c, me = case.entry, case.nranks, case.counts.count, self.comm.rank
        kin, kout = e.blocks(n)
        mine = init_data(seed, me, kin * c, case.dtype, case.op, n)
        if not case.inplace:
            return mine, np.zeros(kout * c, mine.dtype)
        if kin == kout:
            return mine, mine
        if kout > kin:
            d = np.zeros(kout * c, mine.dtype)
            d[me * c:(me + 1) * c] = mine
            return d[me * c:(me + 1) * c], d
        return mine, mine[me * c:(me + 1) * c]

    def _run(self, case, send, recv) -> None:
        if case.schedule is None:            # one rank: the call's cost, as the host backend times it
            from kernels.sweep.backends import _one_rank
            _one_rank(case, [send], [recv])
            return
        self.comm.run_schedule(case.schedule, send, recv, op=case.op)

    def measure(self, case) -> tuple[float, int | None, int]:
        """(time µs, wrong elements over every rank or None unchecked, ranks whose own check failed: each counts in
        nccl-tests' "Out of bounds values", :attr:`synth.sweep.driver.Result.failed`)."""
        from kernels.sweep.table import count_wrong, expected, inputs
        send, recv = self._buffers(case, 0)
        with np.errstate(all="ignore"):
            self.comm.barrier()
            for _ in range(case.warmup):
                self._run(case, send, recv)
            self.comm.barrier()
            t0 = time.perf_counter()
            for _ in range(case.iters):
                self._run(case, send, recv)
            mine = (time.perf_counter() - t0) / case.iters * 1e6
        times = [float(t) for t in self.comm.allgather_object(mine)]
        t = {0: times[0], 2: min(times), 3: max(times)}.get(case.average, sum(times) / len(times))

        def once(seed: int) -> list[int]:      # wrong elements per rank (each process one rank, gpus_per_thread 1)
            s, d = self._buffers(case, seed)
            self._run(case, s, d)
            sends = inputs(case.entry, seed, case.counts.count, case.dtype, case.op, case.nranks)
            want = expected(case.entry, sends, case.counts.count, case.dtype, case.op, case.nranks,
                            case.root)[self.comm.rank]
            mine = 0 if want is None else count_wrong(d, want, case.dtype, case.op, case.nranks)
            return [int(w) for w in self.comm.allgather_object(mine)]
        return t, *self._checker.validate(case, once)


def check_launched(ngpus: int | None, topology) -> None:
    """Refuse ``--backend mpi`` outside ``mpirun`` when the command line asks for more than one
    rank (``-g N`` or a multi-GPU ``--topology``): one process would silently run alone.  Under ``mpirun -n P``
    refuse ``-g G`` other than 1 (nccl-tests' GPUs per process: ``nranks = nProcs*nGpus*nThreads``, NVIDIA/nccl-tests
    v2.19.6 src/common.cu line 901, so ``P x G`` ranks, ``-g P`` too: ``P x P``): each process is one rank here, and
    the run would silently have ``P``.

    Raises
    ------
    UsageError
        One process, but more ranks asked for; ``-g`` GPUs per process; the message says how to start it.
    """
    from topo_probe.errors import UsageError
    want = 1 if ngpus is None else ngpus          # already checked (kernels.sweep.cli.gpu_count): >= 1
    procs = mpi().COMM_WORLD.Get_size()
    if procs > 1:
        if want != 1:
            raise UsageError(f"--backend mpi runs one rank per process: -g {ngpus} would be {procs} x {want} = "
                             f"{procs * want} ranks in nccl-tests (GPUs per process); start them with mpirun -n "
                             f"{procs * want} sweep ... --backend mpi (without -g)")
        return
    if topology is not None and ngpus is None:      # -g 1 beside it is one rank, as on the host path
        from topo_probe.load import load_topology
        want = load_topology(str(topology)).num_gpus
    if want > 1:
        raise UsageError(f"--backend mpi runs one rank per process, but this is 1 process and {want} ranks were "
                         f"asked for: start it with mpirun -n {want} sweep ... --backend mpi (-g and --topology "
                         f"do not start processes)")


def run_sweep_mpi(cfg_for, topology=None, algo: str = "plan", *, argv=(), json_path=None, out=None,
                  comm: MPICommunicator | None = None, notes=()) -> int:
    """``sweep ... --backend mpi`` on every rank of ``mpirun -n N``: rank 0 prints one
    nccl-tests table (and writes the ``-J`` JSON), ``#wrong`` is checked on every rank.

    Parameters
    ----------
    cfg_for : callable
        ``cfg_for(n) -> SweepConfig`` for ``n`` = the number of processes (the CLI's
        ``lambda n: make_config(args, n)``).
    topology : Topology, preset name, file or None
        None: ``fully_connected(n)``; a machine with more GPUs than processes is cut to the
        first ``n``.
    algo, argv, json_path
        ``--algo``, the command line with the program name first (the JSON's ``args``, as nccl-tests' ``argv``)
        and ``-J``.
    out : file, optional
        Where rank 0 prints (default stdout).
    notes : sequence of str
        Lines rank 0 adds to the ``#`` notes (the nccl-tests flags taken but not applied).

    Returns
    -------
    int
        0, or 1 when any result was wrong or the average bus bandwidth is below 0.9 x ``NCCL_TESTS_MIN_BW``
        (the same on every rank).  A rank that fails
        aborts the job through :meth:`MPICommunicator.abort` (one line naming the rank).
    """
    from synth.formats.nccl_tests import writer as output
    from synth.sweep.driver import make_selector, run_sweep
    MPI = mpi()
    world = comm._world if comm is not None else MPI.COMM_WORLD
    n = world.Get_size()
    cfg = cfg_for(n)
    cfg.nprocs = n                             # one rank per process: nccl-tests' nGpus 1 under mpirun
    topo = _sweep_topology(topology, n)
    comm = comm or MPICommunicator.from_mpi(world, topology=topo, plan="auto" if algo == "plan" else False)
    out = out or sys.stdout
    min_bw = output.min_bw_gbps()              # NCCL_TESTS_MIN_BW, the same on every rank
    try:
        source = make_selector(cfg.collective, topo if n > 1 else None, algo)
        backend = MPISweepBackend(comm)
        devices = backend.devices(n, topo)
        start = output.now()
        root0 = comm.rank == 0
        json_file = output.free_json_path(json_path) if json_path and root0 else None
        if json_file is not None:        # rank 0 only, before the preamble (v2.19.6 src/util.cu lines 324-330, 349)
            print(output.json_output_line(json_file), file=out, flush=True)
        if root0:
            said = [f"backend: mpi ({n} processes)"] + (source.notes if source else []) + list(notes)
            print("\n".join(output.preamble_lines(cfg, devices, said)
                            + output.header_lines()), file=out, flush=True)
        summary = run_sweep(cfg, backend, source,
                            on_row=(lambda row: print(output.row_line(row), file=out, flush=True)) if root0 else None)
        if root0:
            print("\n".join(output.footer_lines(summary, min_bw=min_bw, program=output.program_name(cfg.collective))),
                  file=out, flush=True)
            if json_file is not None:
                doc = output.json_document(cfg, devices, summary, argv=list(argv), start_time=start,
                                           extra={"backend": "mpi", "topology": topo.name}, min_bw=min_bw)
                output.write_json(json_file, doc)
        comm.barrier()
    except (TopocollError, ValueError, OSError) as exc:
        comm.abort(exc)
    return 1 if summary.errors or output.below_min_bw(summary.avg_busbw, min_bw) else 0


def _sweep_topology(topology, n: int):
    from topo_probe.topology.model import Topology
    if topology is None or isinstance(topology, Topology):
        return resolve_topology(topology, n)
    from topo_probe.load import load_topology
    topo = load_topology(str(topology))
    if topo.num_gpus > n:
        topo = load_topology(str(topology), gpus=list(range(n)))
    return topo

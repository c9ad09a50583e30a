"""Memory admission for sweeps: what the largest size of a sweep needs, against what this
machine has, checked before the table's header is printed, so a sweep that cannot fit ends in
one line (exit 2) instead of the kernel's OOM killer.

The estimate for one size (host backend; the CuPy backend counts the same buffers against
the GPUs' free memory):

* send and receive buffers of every rank (``blocks x count x itemsize``; in-place runs need
  less, out-of-place is counted);
* the scratch the schedule's lowered program asks for (a relay chain's intermediate copies
  can be many times the buffers);
* during validation (the timed buffers are freed first, fresh ones made) the expected result
  of every rank with an output, plus one float64 temporary of an output's size;
* :data:`MARGIN` on top for temporaries of the executor and NumPy.

>>> from synth.sweep.entries import entry
>>> need = sweep_need_bytes(entry("allreduce"), 4, 1 << 20, "float", None)
>>> need // (1 << 20)     # 1.25 x (4 x (send, recv, expected) 1 MiB each + a 2 MiB float64 temporary)
17
"""

from __future__ import annotations

from kernels.backends.memory import address_space_room, available_gpu_bytes, available_host_bytes
from synth.formats.nccl_tests.conventions import DTYPE_BYTES, nccl_dtype
from synth.formats.nccl_tests.sizes import size_label
from topo_probe.errors import InvalidArgument

#: headroom for executor and NumPy temporaries (a fraction of the estimate)
MARGIN = 1.25


def scratch_bytes(schedule, count: int, dtype_name: str) -> int:
    """Scratch of ``schedule``'s lowered program for blocks of ``count`` elements (all ranks)."""
    if schedule is None or count == 0:
        return 0
    import numpy as np

    from kernels.backends.executor import program_for
    from synth.formats.nccl_tests.conventions import numpy_dtype
    dt = np.dtype(numpy_dtype(dtype_name))
    prog = program_for(schedule, count, dt)
    return sum(s.get("scratch", 0) for s in prog.sizes) * dt.itemsize


def sweep_need_bytes(entry, nranks: int, size: int, dtype_name: str, schedule, *, untouched: bool = False) -> int:
    """Bytes a sweep row of ``size`` (nccl-tests bytes) needs at its peak (module docstring);
    ``untouched``: also the buffers no rank writes or reads, which an address-space limit
    (``ulimit -v``) counts though the machine never commits them."""
    item = DTYPE_BYTES[nccl_dtype(dtype_name)]
    counts = entry.counts(size, item, nranks)
    kin, kout = entry.blocks(nranks)
    c = counts.count
    # gather and reduce write only the root's output (the others' are never touched, so never
    # committed by the OS); broadcast and scatter read only the root's input
    outs = 1 if entry.name in ("gather", "reduce") else nranks
    ins = 1 if entry.name in ("broadcast", "scatter") else nranks
    buffers = ((nranks if untouched else ins) * kin + (nranks if untouched else outs) * kout) * c * item
    check = outs * kout * c * item + kout * c * 8
    return int(MARGIN * (buffers + check + scratch_bytes(schedule, c, dtype_name)))


def admit_sweep(cfg, selector, schedule_at, *, available: int | None = None, where: str = "host memory") -> None:
    """Raise InvalidArgument (one line: need and available) when the sweep's largest size
    does not fit in ``available`` bytes (default: :func:`available_host_bytes`, and on the host
    also every rank's buffers, touched or not, in the room under ``ulimit -v``)."""
    avail = available_host_bytes() if available is None else available
    mapped_room = address_space_room() if available is None else None      # ulimit -v counts every mapping
    if (avail is None and mapped_room is None) or not cfg.sizes():
        return
    size = max(cfg.sizes())
    worst, mapped, what = 0, 0, ""
    for dtype_name in cfg.dtypes:
        sched = schedule_at(selector, cfg.collective, cfg.roots()[0], size)[0] if selector is not None else None
        need = sweep_need_bytes(cfg.entry, cfg.nranks, size, dtype_name, sched)
        if need > worst:
            worst, what = need, dtype_name
        mapped = max(mapped, sweep_need_bytes(cfg.entry, cfg.nranks, size, dtype_name, sched, untouched=True))
    head = f"{cfg.entry.nccl_name} of {size_label(size)} ({what}) on {cfg.nranks} ranks needs about"
    if avail is not None and worst > avail:
        raise InvalidArgument(f"{head} {size_label(worst)} of {where} (buffers, the schedule's scratch and the check's "
                              f"copies); {size_label(avail)} available: lower -e or -g")
    if mapped_room is not None and mapped > mapped_room:
        raise InvalidArgument(f"{head} {size_label(mapped)} of address space (ulimit -v); {size_label(mapped_room)} "
                              "left (every rank's buffers are mapped, written or not): lower -e or -g, or raise "
                              "ulimit -v")


#: the sim backend's address space: bytes a schedule transfer costs, and the baselines' O(n^2) term
SIM_TRANSFER_BYTES, SIM_N2_BYTES, SIM_BASE_BYTES = 256, 3 << 10, 160 << 20


def sim_need_bytes(nranks: int, algos: int = 1) -> int:
    """Address space (bytes) ``sweep --backend sim`` on ``nranks`` ranks grows by while it builds
    the schedules of ``algos`` algorithms (``--compare`` keeps each), before anything is built:
    ``algos x (SIM_BASE_BYTES + SIM_N2_BYTES n^2 + SIM_TRANSFER_BYTES n^3)``, the n^3 term only
    while ``n^3 <= MAX_TRANSFERS`` (a baseline of more transfers is refused before it is built;
    ``--algo plan`` builds all six baselines and keeps them).  It bounds the peaks measured with
    ``VmPeak`` (``/proc/self/status``) over ~160 MiB of imports, all_reduce -b 8 -e 8 (MiB, peak -
    160 vs estimate): n=64 144 vs 236, 128 542 vs 720, 256 169 vs 352, 512 676 vs 928,
    1024 2851 vs 3232; at 512 broadcast 350, all_gather 502, reduce_scatter 515, alltoall 754 vs 928;
    alltoall at 1024 2259 vs 3232 (n=128 is the O(n^3) baseline just under the transfer cap; 256 is
    past it).  Conservative: under ``ulimit -v 1048576`` it refuses 512 ranks (928 MiB over ~860 MiB
    of room) whose all_reduce peaks at 836 MiB in all.

    >>> [sim_need_bytes(n) >> 20 for n in (64, 128, 256, 512, 1024)]
    [236, 720, 352, 928, 3232]
    """
    from synth.baselines._common import MAX_TRANSFERS
    cube = nranks ** 3 if nranks ** 3 <= MAX_TRANSFERS else 0
    return algos * (SIM_BASE_BYTES + SIM_N2_BYTES * nranks ** 2 + SIM_TRANSFER_BYTES * cube)


def admit_sim(nranks: int, algos: int = 1) -> None:
    """Raise InvalidArgument (one line) when :func:`sim_need_bytes` exceeds what this process may
    still map (``ulimit -v``) or the host has (free memory, cgroup): before any schedule is built."""
    need = sim_need_bytes(nranks, algos)
    for room, what in ((address_space_room(), "address space (ulimit -v)"), (available_host_bytes(), "host memory")):
        if room is not None and need > room:
            raise InvalidArgument(f"the sim backend on {nranks} ranks needs about {size_label(need)} of {what} for "
                                  f"its schedules ({algos} algorithm(s)); {size_label(room)} left: lower -g")


__all__ = ["MARGIN", "SIM_BASE_BYTES", "SIM_N2_BYTES", "SIM_TRANSFER_BYTES", "address_space_room", "admit_sim",
           "admit_sweep", "available_gpu_bytes", "available_host_bytes", "scratch_bytes", "sim_need_bytes",
           "sweep_need_bytes"]

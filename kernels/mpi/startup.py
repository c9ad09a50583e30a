"""Start-up agreement of :class:`kernels.mpi.communicator.MPICommunicator`: what every rank must share.

Every rank sends a *descriptor* (:func:`descriptor_of`: rank count, topology name and
fingerprint, GPU count, plan digest, algorithm) and its host name to every other rank
(:func:`kernels.mpi.waiter.exchange_json`, deadline-bounded).  Every rank then compares the
same list of descriptors (:func:`compare_descriptors`), so a disagreement raises
:class:`~topo_probe.errors.ProcessGroupMismatch` with the same message on every rank.

The ``timeout_s`` (or ``$TOPOCOLL_MPI_TIMEOUT``), ``ipc`` and ``native`` arguments, the topology and the plan are
checked at start-up, the latter
two as the one-process Communicator checks them when built (:func:`checked_start`: the arguments
checked, the topology resolved, the plan found and every entry's schedule and fallback file loaded
and verified, :func:`kernels.comm.route.check_plan_files`); a rank whose check fails (with any
error) sends its refusal (one line, at most :data:`REFUSAL_JSON_BYTES` of JSON) instead of its
descriptor, so every rank raises the same error (class and line), and none waits for a rank that
stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from kernels.comm.machine import resolve_topology, typed_topology
from kernels.comm.route import check_plan_files
from kernels.mpi.native_call import check_native_mode, plain_value
from kernels.mpi.waiter import DEFAULT_TIMEOUT_S, Waiter, checked_timeout, default_timeout, exchange_json
from synth.plan.selector import ScheduleSelector
from topo_probe import errors
from topo_probe.errors import InvalidArgument, ProcessGroupMismatch, TopocollError, show

#: bytes of JSON a refusal's line may take when sent to the other ranks (the exchange holds 64 KiB in all,
#: :func:`kernels.mpi.waiter.exchange_json`; JSON escapes a character outside ASCII as 6 or 12 bytes)
REFUSAL_JSON_BYTES = 16 << 10


def fit_json(line: str, limit: int = REFUSAL_JSON_BYTES) -> str:
    """``line``, cut (ending in ``...``) so that its JSON text (``json.dumps``, ASCII) takes at most
    ``limit`` bytes.

    >>> fit_json("\u00e9" * 4, 20), len(json.dumps(fit_json("\u00e9" * 4, 20)))
    ('\u00e9\u00e9...', 17)
    """
    if len(json.dumps(line)) <= limit:
        return line
    room, cut = limit - len('"..."'), 0
    for ch in line:
        room -= len(json.dumps(ch)) - 2
        if room < 0:
            break
        cut += 1
    return line[:cut] + "..."


def plan_digest(plan) -> str:
    """16 hex digits over the plan document and the bytes of every schedule file it names, each
    entry's ``schedule`` and ``fallback`` (``"none"`` without a plan), so ranks with different
    schedule or fallback files disagree."""
    if plan is None:
        return "none"
    h = hashlib.sha256(json.dumps(plan.to_dict(), sort_keys=True).encode())
    for name in (f for e in plan.entries for f in (e.schedule, e.fallback) if f):
        try:
            h.update(f"{len(name)}:{name}:".encode() + (Path(plan.base_dir) / name).read_bytes())
        except OSError:
            h.update(f"missing:{name}".encode())
    return h.hexdigest()[:16]


def descriptor_of(size: int, topology, plan, algo: str | None) -> dict:
    """What every rank must agree on: ``size`` processes, the Topology, the Plan (or None)
    and the forced baseline ``algo`` (None: the plan)."""
    return {"ranks": size, "topology": topology.name,
            "fingerprint": topology.fingerprint(), "gpus": topology.num_gpus,
            "plan": plan_digest(plan), "algo": _algo_text(algo)}


def _algo_text(algo) -> str:
    """``algo`` as the start-up record's text: a path as its string (a schedule file given as a Path)."""
    if not algo:
        return "plan"
    return os.fspath(algo) if isinstance(algo, os.PathLike) else str(algo)


def compare_descriptors(descs: list[dict]) -> None:
    """Raise ProcessGroupMismatch naming each disagreeing field and which ranks hold which value.

    >>> compare_descriptors([{"fingerprint": "a"}, {"fingerprint": "a"}])
    >>> compare_descriptors([{"fingerprint": "a"}, {"fingerprint": "b"}, {"fingerprint": "a"}])
    Traceback (most recent call last):
    ...
    topo_probe.errors.ProcessGroupMismatch: ranks disagree at start-up: fingerprint: ranks [0, 2] 'a', \
ranks [1] 'b'; every rank must use the same topology, plan and rank count
    """
    parts = []
    for key in sorted({k for d in descs for k in d}):
        groups: dict[str, list[int]] = {}
        for r, d in enumerate(descs):
            groups.setdefault(json.dumps(d.get(key)), []).append(r)
        if len(groups) > 1:
            txt = ", ".join(f"ranks {rs} {json.loads(v)!r}" for v, rs in sorted(groups.items(), key=lambda x: x[1]))
            parts.append(f"{key}: {txt}")
    if parts:
        raise ProcessGroupMismatch("ranks disagree at start-up: " + "; ".join(parts)
                                   + "; every rank must use the same topology, plan and rank count")


def check_ipc_mode(ipc) -> str:
    """``ipc`` as a plain str (:func:`kernels.mpi.native_call.plain_value`) when that is ``"auto"`` or
    ``"never"``, else InvalidArgument in one line (the value through :func:`topo_probe.errors.show`)."""
    ipc = plain_value(ipc)
    if not (isinstance(ipc, str) and ipc in ("auto", "never")):
        raise InvalidArgument(f"MPICommunicator: ipc must be 'auto' or 'never', got {show(ipc)}")
    return ipc


def start_timeout(timeout_s) -> float:
    """This rank's deadline in seconds (``timeout_s``, None: ``$TOPOCOLL_MPI_TIMEOUT`` or :data:`DEFAULT_TIMEOUT_S`),
    :data:`DEFAULT_TIMEOUT_S` where that is refused: the start-up must run on to the exchange, where
    :func:`checked_start`'s refusal of the value reaches every rank (a rank that raised here alone would leave the
    others waiting out their deadlines).  Ranks may differ here: the deadline is each rank's own.

    >>> start_timeout(2), start_timeout(float("nan")) == DEFAULT_TIMEOUT_S
    (2.0, True)
    """
    try:
        return checked_mpi_timeout(timeout_s)
    except InvalidArgument:
        return DEFAULT_TIMEOUT_S


def checked_mpi_timeout(timeout_s) -> float:
    """The MPICommunicator's ``timeout_s`` in seconds (None: :func:`kernels.mpi.waiter.default_timeout`), refused by
    :func:`kernels.mpi.waiter.checked_timeout` in one line naming ``MPICommunicator: timeout_s`` (or the variable)."""
    return default_timeout() if timeout_s is None else checked_timeout(timeout_s, "MPICommunicator: timeout_s")


def checked_start(topology, size: int, plan, algo: str | None, rank: int, *, ipc="auto", native="never",
                  timeout_s=None) -> tuple:
    """``(topology, selector, None)``: the ``timeout_s`` (:func:`checked_mpi_timeout`), ``ipc`` and ``native``
    arguments checked
    (:func:`kernels.mpi.native_call.check_native_mode`), this rank's Topology (``topology`` resolved for ``size``
    ranks, :func:`kernels.comm.machine.resolve_topology`) and
    :class:`~synth.plan.selector.ScheduleSelector` (``plan`` found and loaded; none where ``algo``
    forces a baseline) with every entry's files loaded and verified now
    (:func:`kernels.comm.route.check_plan_files`); or ``(None, None, refusal)``: the error's class
    name and its line (line breaks made spaces, cut to :data:`REFUSAL_JSON_BYTES` of JSON), which
    :func:`agree` raises on every rank.  Any error is a refusal (a rank that
    raised alone before the exchange would leave the others waiting out their deadline)."""
    try:
        checked_mpi_timeout(timeout_s)
        check_ipc_mode(ipc)
        check_native_mode(native)
        topo = resolve_topology(topology, size)
        selector = ScheduleSelector(topo, plan=plan, algo=algo, warn_fallback=rank == 0, owner="MPICommunicator",
                                    typed=typed_topology(topology))
        check_plan_files(selector)
    except Exception as err:      # noqa: BLE001 - every rank must hear of it (raise_refusals)
        line = str(err) if isinstance(err, TopocollError) else f"MPICommunicator: {type(err).__name__}: {err}"
        return None, None, {"error": type(err).__name__[:100], "message": fit_json(" ".join(line.splitlines()))}
    return topo, selector, None


def raise_refusals(refusals: list) -> None:
    """Raise, the same on every rank, the first refusal of ``refusals`` (one entry per rank: None,
    or :func:`checked_start`'s refusal), naming every rank that refused; nothing if none did
    (a class that is not a topocoll error is raised as TopocollError).

    >>> raise_refusals([None, {"error": "ScheduleFormatError", "message": "p.json: entries[0].schedule: missing"}])
    Traceback (most recent call last):
    ...
    topo_probe.errors.ScheduleFormatError: p.json: entries[0].schedule: missing (the start-up check of \
arguments, topology and plan failed on ranks [1] of 2)
    """
    failed = [r for r, got in enumerate(refusals) if got]
    if not failed:
        return
    first = refusals[failed[0]]
    cls = getattr(errors, str(first.get("error")), None)
    cls = cls if isinstance(cls, type) and issubclass(cls, TopocollError) else TopocollError
    raise cls(f"{first.get('message')} (the start-up check of arguments, topology and plan failed on ranks "
              f"{failed} of {len(refusals)})")


def agree(ctrl, waiter: Waiter, size: int, descriptor: dict, topology,
          refusal: dict | None = None) -> tuple[list[dict], list[str], int]:
    """Exchange descriptors, host names and plan refusals with every rank and check them.

    Parameters
    ----------
    ctrl : MPI communicator
        Control communicator (every rank calls this on it).
    waiter : Waiter
        Deadline and failure notices; ``waiter.rank`` is this rank.
    size : int
        Number of ranks.
    descriptor : dict or None
        This rank's :func:`descriptor_of`; None where it refused (the refusal travels once).
    topology : Topology
        Must have ``size`` GPUs.
    refusal : dict, optional
        This rank's refusal of its arguments, topology or plan (:func:`checked_start`, at most
        :data:`REFUSAL_JSON_BYTES` of JSON), None where its check passed.

    Returns
    -------
    (descriptors, hosts, local_rank)
        Every rank's descriptor and host name in rank order, and this rank's index among the
        ranks on its host.

    Raises
    ------
    TopocollError
        The topology or plan check failed on some rank: the first refusal's class and line on every rank
        (:func:`raise_refusals`), before the descriptors are compared.
    ProcessGroupMismatch
        Ranks disagree (same message on every rank), or the topology's GPU count is not ``size``.
    """
    import socket
    rank = waiter.rank
    hello = exchange_json(ctrl, waiter, {"agree": descriptor, "host": socket.gethostname(), "refused": refusal},
                          size, "start-up check")
    raise_refusals([h.get("refused") for h in hello])
    descriptors = [h["agree"] for h in hello]
    hosts = [h["host"] for h in hello]
    try:
        compare_descriptors(descriptors)
    except ProcessGroupMismatch as e:
        raise ProcessGroupMismatch(f"rank {rank}: {e}") from None
    if topology.num_gpus != size:
        raise ProcessGroupMismatch(f"rank {rank}: topology {topology.name!r} has "
                                   f"{topology.num_gpus} GPUs but {size} processes were started "
                                   f"(for part of a machine pass load_topology(spec, gpus=[...]))")
    return descriptors, hosts, hosts[:rank].count(hosts[rank])


def install_abort_hook(comm) -> None:
    """A ``sys.excepthook`` that ends the job through ``comm.abort`` on any uncaught exception
    (a topocoll error in one line; others with their traceback first), so no rank hangs.  It
    holds ``comm`` weakly: a communicator the program drops is still collected, and so leaves
    (:mod:`kernels.mpi.leaving`); once it is gone the hook passes the exception on."""
    import sys
    import weakref

    from topo_probe.errors import PeerFailed, TopocollError
    previous, ref = sys.excepthook, weakref.ref(comm)

    def hook(tp, val, tb):
        live = ref()
        if live is None:
            return previous(tp, val, tb)
        if not isinstance(val, TopocollError):
            previous(tp, val, tb)
        live.abort(val, 1, notify=not isinstance(val, PeerFailed) or val.rank is None)
    sys.excepthook = hook

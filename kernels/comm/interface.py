"""The one communicator interface: :class:`CommunicatorBase`, implemented by the single-process
:class:`~kernels.comm.communicator.Communicator` (every rank's buffer in one process) and the
:class:`~kernels.mpi.communicator.MPICommunicator` (one rank per process).

It owns what both do alike: the eight collectives and send / recv by name and arguments (a
buffer argument is a list with one array per rank in the Communicator, named ``*_arrays``,
and this process's array in the MPICommunicator, named ``*_array``; ``rank=`` of send / recv
names the calling rank, which the Communicator must be told), and the schedule choice
(:meth:`CommunicatorBase.schedule_for` through the communicator's
:class:`~synth.plan.selector.ScheduleSelector`).  ``tests/kernels/comm/test_interface.py``
checks that both signatures match these.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from synth.ir.schedule import Schedule


class CommunicatorBase(ABC):
    """Collectives over ``size`` ranks of ``topology``, schedules chosen by ``selector``
    (module docstring); ``last_route`` says what the last collective call ran."""

    size: int

    def schedule_for(self, collective: str, nbytes: int, root: int | None = None) -> Schedule:
        """The verified schedule run for ``collective`` of ``nbytes`` (nccl-tests size) and root
        (:class:`synth.plan.selector.ScheduleSelector`; the MPI communicator's warnings come
        from rank 0 only)."""
        return self.selector.schedule_for(collective, nbytes, root)

    @abstractmethod
    def all_reduce(self, in_arrays, out_arrays, op: str = "sum", stream=None):
        """``out = op over ranks of in`` (count = in size)."""

    @abstractmethod
    def all_gather(self, in_arrays, out_arrays, count: int | None = None, stream=None):
        """Block r of every output is rank r's input."""

    @abstractmethod
    def reduce_scatter(self, in_arrays, out_arrays, count: int | None = None, op: str = "sum", stream=None):
        """Rank r's output = reduction of block r of every input."""

    @abstractmethod
    def broadcast(self, in_out_arrays, root: int = 0, stream=None):
        """Rank ``root``'s buffer into every rank's (in place)."""

    @abstractmethod
    def reduce(self, in_arrays, out_arrays, root: int = 0, op: str = "sum", stream=None):
        """The root's output = reduction of all inputs."""

    @abstractmethod
    def gather(self, in_arrays, out_arrays, root: int = 0, stream=None):
        """Block r of the root's output is rank r's input."""

    @abstractmethod
    def scatter(self, in_arrays, out_arrays, root: int = 0, stream=None):
        """Rank r's output = block r of the root's input."""

    @abstractmethod
    def all_to_all(self, in_arrays, out_arrays, stream=None):
        """Block d of rank s's input lands in block s of rank d's output."""

    @abstractmethod
    def send(self, array, peer: int, *, rank: int | None = None, stream=None) -> None:
        """Post a send of ``array`` from ``rank`` to ``peer``."""

    @abstractmethod
    def recv(self, array, peer: int, *, rank: int | None = None, stream=None) -> None:
        """Post a receive into ``array`` at ``rank`` from ``peer``."""

    @abstractmethod
    def close(self) -> None:
        """Release the communicator (idempotent); a later collective or send / recv raises InvalidArgument."""


#: the methods both communicators implement with matching signatures
INTERFACE = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter",
             "all_to_all", "send", "recv", "schedule_for", "close")

__all__ = ["CommunicatorBase", "INTERFACE"]

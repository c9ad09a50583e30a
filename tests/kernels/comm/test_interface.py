"""kernels.comm.interface: both communicators implement CommunicatorBase, and their public
signatures of the shared methods match the interface's (parameter names, kinds and defaults;
the MPI communicator names one array ``*_array`` where the Communicator takes a list per rank,
``*_arrays``; ``rank=`` of send / recv has no default where one process holds every rank)."""

import inspect

import pytest

from kernels.comm.communicator import Communicator
from kernels.comm.interface import INTERFACE, CommunicatorBase
from kernels.mpi.communicator import MPICommunicator


def _params(cls, name: str, plural: bool) -> list[tuple]:
    sig = inspect.signature(getattr(cls, name))
    out = []
    for p in sig.parameters.values():
        pname = p.name
        if not plural and pname.endswith("_array"):
            pname += "s"                       # one array per process: the list's name, singular
        default = p.default
        if name in ("send", "recv") and pname == "rank":
            default = "(the calling rank)"     # required where one process holds every rank
        out.append((pname, p.kind, default))
    return out


def test_both_communicators_implement_the_interface():
    assert issubclass(Communicator, CommunicatorBase) and issubclass(MPICommunicator, CommunicatorBase)
    abstract = set(CommunicatorBase.__abstractmethods__)
    assert abstract <= set(INTERFACE)
    for cls in (Communicator, MPICommunicator):
        assert not getattr(cls, "__abstractmethods__", set()), f"{cls.__name__} leaves methods abstract"


@pytest.mark.parametrize("name", INTERFACE)
def test_public_signatures_match(name):
    base = _params(CommunicatorBase, name, plural=True)
    assert _params(Communicator, name, plural=True) == base, f"Communicator.{name}"
    assert _params(MPICommunicator, name, plural=False) == base, f"MPICommunicator.{name}"


def test_the_collectives_each_communicator_has_are_the_interface_and_their_extras():
    """Every public collective-like method of one communicator is in the interface or named as
    an extra of that communicator: a new collective must go to the interface."""
    extras = {Communicator: {"route", "fabric", "pending", "send_recv"},
              MPICommunicator: {"abort", "allgather_object", "barrier", "compressed_all_reduce", "descriptor",
                                "from_mpi", "fused_all_reduce", "run_schedule", "wait_sends"}}
    for cls, extra in extras.items():
        public = {n for n, v in vars(cls).items() if not n.startswith("_") and (callable(v) or isinstance(
            v, (property, classmethod, staticmethod)))}
        inherited = {n for n in INTERFACE if n not in vars(cls)}
        assert public | inherited == set(INTERFACE) | extra, cls.__name__

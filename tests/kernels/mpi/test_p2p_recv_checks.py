"""MPICommunicator.recv refuses a buffer it cannot write before it matches a message (in-process, no mpirun).

Before, a read-only receive buffer passed the checks, the peer's message was matched by ``Improbe`` and
mpi4py's ``Irecv`` then failed with a bare BufferError: a traceback, and the matched message lost to every later
receive; the one-process Communicator refuses the same buffer in one line (kernels/comm/p2p.py)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from kernels.mpi import p2p
from topo_probe.errors import BufferLayoutError


def _comm(rank: int = 0, size: int = 2):
    return types.SimpleNamespace(rank=rank, size=size, agreement=types.SimpleNamespace(refuse_if_closed=lambda: None))


def _never_probe(comm, peer):
    raise AssertionError("a message was matched before the buffer was checked")


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_a_read_only_receive_buffer_is_refused_before_any_message_is_matched(monkeypatch, dtype):
    monkeypatch.setattr(p2p, "_probe", _never_probe)
    a = np.zeros(7, dtype)
    a.flags.writeable = False
    with pytest.raises(BufferLayoutError, match=r"^recv: rank 0's array is read-only$"):
        p2p.recv(_comm(), a, 1)


def test_a_strided_receive_buffer_is_refused_before_any_message_is_matched(monkeypatch):
    monkeypatch.setattr(p2p, "_probe", _never_probe)
    with pytest.raises(BufferLayoutError, match="not C-contiguous"):
        p2p.recv(_comm(), np.zeros(8, np.float32)[::2], 1)

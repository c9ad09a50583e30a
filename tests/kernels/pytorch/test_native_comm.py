"""kernels/pytorch/native_comm.py: the MPI-like communicator over a group's transport, on 2
spawned ranks (``_native_jobs.shm_job``, which also drives the native runner through it): an
exchange of objects and an all-gather of words give every rank's values in rank order, host
names are exchanged, and a peer that leaves ends the others' next exchange with PeerGone naming
the exchange, within seconds."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")


@pytest.mark.parametrize("check", ["adapter:exchange", "adapter:allgather", "adapter:hosts", "adapter:peer_gone"])
def test_the_adapter_over_the_socket_mesh(shm_results, check):
    from _torch_dist import merged
    counted = sum(1 for res in shm_results if check in res)
    assert counted == (1 if check == "adapter:peer_gone" else 2)     # the leaving rank does not check it
    assert not merged(shm_results, check)

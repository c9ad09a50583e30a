"""Two ranks' :class:`kernels.pytorch.sockets.SocketMesh` in one process (threads, torch's
HashStore): what the socket tests of test_sockets.py and test_fused.py talk over."""

from __future__ import annotations

import threading


def socket_pair():
    """``[mesh of rank 0, mesh of rank 1]``, connected to each other."""
    import torch.distributed as dist

    from kernels.pytorch.sockets import SocketMesh
    store, meshes = dist.HashStore(), [None, None]

    def make(rank):
        meshes[rank] = SocketMesh(store, rank, 2, timeout_s=20)
    threads = [threading.Thread(target=make, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return meshes

"""Two ranks' :class:`kernels.pytorch.sockets.SocketMesh` in one process (threads, torch's
HashStore): what the socket tests of test_sockets.py and test_fused.py talk over."""

from __future__ import annotations

import threading


def socket_pair(n: int = 2, timeout_s: float = 20):
    """``[mesh of rank 0, mesh of rank 1, ...]`` of ``n`` ranks, connected to each other."""
    import torch.distributed as dist

    from kernels.pytorch.sockets import SocketMesh
    store, meshes = dist.HashStore(), [None] * n

    def make(rank):
        meshes[rank] = SocketMesh(store, rank, n, timeout_s=timeout_s)
    threads = [threading.Thread(target=make, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return meshes

"""The model side of nccl-tests-style sweeps: the driver, the per-collective table, the ``sim`` backend."""

"""File formats of the runtimes around us: MSCCL XML algorithms and nccl-tests output."""

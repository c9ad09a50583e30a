"""Measured NCCL / RCCL bus bandwidth of machines we have a real nccl-tests log of, so reports
can put the measured number beside the modelled one (the logs are in the project's test
fixtures, ``tests/fixtures/real_logs``; each value is read off the log's out-of-place column).

Keyed by (preset, collective): ``(size in bytes, busbw GB/s, what ran)``.
"""

from __future__ import annotations

MEASURED = {
    ("dgx-h100", "allreduce"): (1 << 30, 360.94, "8 x H100 SXM5, NCCL 2.26.2, NCCL_ALGO=RING, NVLS off "
                                                  "(together-nccl-tests, all_reduce_ring.out)"),
    ("dgx-h100", "allgather"): (1 << 30, 344.58, "8 x H100 SXM5, NCCL 2.26.2, NCCL_ALGO=RING, NVLS off "
                                                  "(together-nccl-tests, all_gather_ring.out)"),
    ("dgx-a100", "allreduce"): (1 << 30, 227.83, "8 x A100-SXM4-80GB, one process (-g 8)"),
    ("dgx1-v100", "allreduce"): (128 << 20, 129.14, "8 x V100-SXM2 hybrid cube mesh, 128 MiB (largest size logged)"),
    ("mi300x", "allreduce"): (1 << 30, 313.66, "8 x MI300X, RCCL (rccl-tests develop:a7809b3)"),
}


def measured(preset: str, collective: str):
    """``(size, busbw GB/s, note)`` of a real log of this machine and collective, else None."""
    return MEASURED.get((preset, collective))


__all__ = ["MEASURED", "measured"]

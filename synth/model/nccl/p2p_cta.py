"""What one point-to-point channel's CTA moves over NVLink, by the SM clock.

A p2p channel is one CTA: NCCL's p2p kernel runs one block a channel (NCCL_MAX_NTHREADS 640 threads,
src/include/device.h; src/enqueue.cc ``scheduleP2pTasksToPlan``), whose warps split between the send and
the receive of that channel's work (src/device/sendrecv.h ``RunWorkBatch<ncclFuncSendRecv>::run``: one
more sending warp than receiving ones, v2.22.3-1 lines 98-105), each side driving its ``Primitives`` one
chunk step at a time (src/device/prims_simple.h ``genericOp``).  So a channel moves what one SM's
load/store units push through NVLink, not what its share of the links would carry, and, as a ring
channel's local copy does (:mod:`.ring_steps`), that follows the SM clock.  ``p2p_cta_gbs`` (fitted, one
constant) is the rate at H100 SXM5's boost clock; a GPU of another architecture takes it times its boost
clock over H100's (:func:`.constants.sm_clock_ghz`: the part's where its name says, else the architecture's).
The real logs' per-channel rates, over their
clocks: A100 ~13 GB/s a channel (read mode, 9/10 of a written one) / 1.41 GHz, H100 ~20.5 / 1.98, B200
~21 / 1.98 GHz: 10.3, 10.4, 10.6 GB/s per GHz.  Units: GB/s per channel.
"""

from __future__ import annotations

from synth.model.nccl.constants import at_sm_clock


def p2p_cta_gbs(arch: str, params, gpu_name: str = "") -> float:
    """GB/s one p2p channel's CTA moves on ``arch`` (the part ``gpu_name``): ``params.p2p_cta_gbs`` times the boost
    clock over H100's (:func:`.constants.sm_clock_ghz`).

    >>> from synth.model.nccl.params import ModelParams
    >>> [round(p2p_cta_gbs(a, ModelParams(p2p_cta_gbs=20.0)), 2) for a in ("sm90", "sm100", "sm80")]
    [20.0, 20.0, 14.24]
    """
    return at_sm_clock(params.p2p_cta_gbs, arch, gpu_name)


__all__ = ["p2p_cta_gbs"]

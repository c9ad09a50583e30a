"""The steps a ring channel runs per chunk, and the share of them that send nothing.

One CTA runs each channel of a ring and works through a chunk's steps one after another
(NVIDIA/nccl v2.29.3-1 ``src/device/all_gather.h`` lines 41-72, ``reduce_scatter.h`` lines 37-53,
``all_reduce.h`` lines 42-81: one ``Primitives`` object, one loop over the chunks, a call per step).
Every step but one forwards the chunk to the next GPU; the last, ``directRecv`` (all_gather,
all_reduce) or ``recvReduceCopy`` (reduce_scatter), only copies the chunk out of the receive FIFO
into the user's buffer, and while its CTA copies, the channel sends nothing.  An out-of-place
all_gather also writes its own chunk into its output in step 0 (``directCopySend`` instead of
``directSend``, all_gather.h lines 52-56), the same local copy on top of the send; nccl-tests'
out-of-place column, the one the model predicts, pays it.  A channel's ``sends`` steps then take
``sends + share x copies`` step times, ``share`` being a local copy's time relative to a send's: a
channel's send rate (the ring's GPU-link bandwidth over the communicator's channels) over the rate
its CTA copies inside the GPU (:func:`cta_copy_gbs`).  A ring's link bandwidth is reached at
``sends / (sends + share x copies)``.

Broadcast and reduce are chains: every GPU but the ends receives and forwards each chunk in one step, so
nothing idles the chain's slowest GPU.

A CTA copies with one SM's load/store units: 32 a SM on every NVIDIA generation since Volta (the SM diagrams of
the V100, A100 and H100 white papers: 8 LD/ST units in each of 4 processing blocks), driven by NCCL's
``reduceCopy`` loop (16-byte loads and stores), so the model takes it to move the same bytes a clock on every GPU
and its rate to follow the SM clock: ``ring_copy_gbs`` (fitted, one constant) is the rate at H100 SXM5's boost
clock, and a GPU of another architecture takes it times its own boost clock over H100's
(:func:`.constants.at_sm_clock`).
Not modelled: the bytes a CTA keeps in flight (``ncclCollUnroll()``, NVIDIA/nccl src/include/device.h: 4 on sm70,
8 from sm80), which would matter were the copy latency-bound (V100's ring, one copy in 15 steps at 11 GB/s a
channel, cannot tell).  The in-sample logs pin the constant loosely: 8 x H100's rings want it high, 8 x A100's
all_reduce low, not for its copies but because the model puts its Simple rows at 32-512 MiB 6-14 % fast and
those at 1-4 GiB 4-5 % slow, so any Simple-only slowdown helps it.  By the clock, A100 copies at 71 % of H100's
rate, so that pull sets H100's value less (fitted without the one-host H100 class: 34 GB/s, 28 with one rate for
every GPU).

The loss shrinks with the ring: 2 GPUs' all_gather sends in 1 step of 3 (with the out-of-place
copy), 8 GPUs' in 7 of 9.  Units: steps; ``share`` a fraction of a step.
"""

from __future__ import annotations

from synth.model.nccl.constants import at_sm_clock


def ring_copy_steps(coll: str, ranks: int) -> tuple[int, int]:
    """``(sends, copies)``: steps of a ring channel per chunk that forward it to the next GPU, and local copies
    that send nothing (the final receive; an out-of-place all_gather's own chunk), per the device code
    cited in the module docstring.  Broadcast, reduce and one rank: ``(1, 0)``.

    >>> [ring_copy_steps(c, 8) for c in ("allgather", "reducescatter", "allreduce", "broadcast")]
    [(7, 2), (7, 1), (14, 1), (1, 0)]
    """
    if ranks < 2:
        return 1, 0
    if coll == "allgather":
        return ranks - 1, 2
    if coll == "reducescatter":
        return ranks - 1, 1
    if coll == "allreduce":
        return 2 * (ranks - 1), 1
    return 1, 0




def cta_copy_gbs(arch: str, params) -> float:
    """GB/s one CTA copies inside a GPU of ``arch``: ``params.ring_copy_gbs`` (the rate at H100 SXM5's clock)
    times the GPU's boost clock over H100's (:data:`.constants.SM_CLOCK_GHZ`).

    >>> from synth.model.nccl.params import ModelParams
    >>> [round(cta_copy_gbs(a, ModelParams(ring_copy_gbs=99.0)), 1) for a in ("sm90", "sm100", "sm80", "sm70")]
    [99.0, 99.0, 70.5, 76.5]
    """
    return at_sm_clock(params.ring_copy_gbs, arch)


def ring_send_share(coll: str, ranks: int, share: float) -> float:
    """Fraction of a ring channel's time spent sending: ``sends / (sends + share x copies)``
    (:func:`ring_copy_steps`); the ring's link bandwidth times it is what the channels move.

    >>> ring_send_share("allgather", 2, 0.25), ring_send_share("allreduce", 2, 0.25)
    (0.6666666666666666, 0.8888888888888888)
    """
    sends, copies = ring_copy_steps(coll, ranks)
    return sends / (sends + max(0.0, share) * copies)


__all__ = ["cta_copy_gbs", "ring_copy_steps", "ring_send_share"]

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
its CTA copies inside the GPU (``ring_copy_gbs``, one fitted constant for every GPU; the in-sample
logs pin it only loosely, through 8 x H100's all_gather ring).  A ring's link bandwidth is reached at
``sends / (sends + share x copies)``.  Broadcast and reduce are chains: every GPU but the ends
receives and forwards each chunk in one step, so nothing idles the chain's slowest GPU.

The loss shrinks with the ring: 2 GPUs' all_gather sends in 1 step of 3 (with the out-of-place
copy), 8 GPUs' in 7 of 9.  Units: steps; ``share`` a fraction of a step.
"""

from __future__ import annotations


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


def ring_send_share(coll: str, ranks: int, share: float) -> float:
    """Fraction of a ring channel's time spent sending: ``sends / (sends + share x copies)``
    (:func:`ring_copy_steps`); the ring's link bandwidth times it is what the channels move.

    >>> ring_send_share("allgather", 2, 0.25), ring_send_share("allreduce", 2, 0.25)
    (0.6666666666666666, 0.8888888888888888)
    """
    sends, copies = ring_copy_steps(coll, ranks)
    return sends / (sends + max(0.0, share) * copies)


__all__ = ["ring_copy_steps", "ring_send_share"]

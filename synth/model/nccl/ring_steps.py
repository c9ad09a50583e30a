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


#: bytes of one Simple step: NCCL's default Simple buffer over its steps (NVIDIA/nccl v2.8.4-1 src/init.cc line 409
#: ``DEFAULT_BUFFSIZE (1 << 22)``, src/include/devcomm.h line 31 ``NCCL_STEPS 8``; the same through v2.30.7-1)
SIMPLE_STEP_BYTES = (1 << 22) // 8
#: data bytes of one LL128 step and the LL128 chunk's granule per thread block: the LL128 buffer (init.cc line 408:
#: 120 elements x 640 threads x 8 steps x 8 bytes) over its 8 steps, 15 of every 16 words data (devcomm.h lines
#: 66-70); the granule ``NCCL_LL128_SHMEM_ELEMS_PER_THREAD`` 8 x 640 threads x 8 bytes x 15/16 (line 76)
LL128_STEP_DATA_BYTES = 120 * 640 * 8 * 15 // 16
LL128_MIN_CHUNK_BYTES = 8 * 640 * 8 * 15 // 16
#: the rooted rings: one step per chunk (src/include/collectives.h v2.8.4-1 lines 71-74: BROADCAST_/REDUCE_
#: CHUNKSTEPS and SLICESTEPS 1), so one chunk is one slice and one network message
ROOTED_COLLS = ("broadcast", "reduce")


def rooted_chunk_bytes(proto: str, nbytes: int, channels: int) -> int:
    """Bytes of the chunk a rooted ring's channel forwards per step: one step's data, or the channel's share when
    it holds less.  Simple: v2.8.4-1 src/collectives/device/broadcast.h lines 22-37 (``chunkSize = stepSize *
    BROADCAST_CHUNKSTEPS``, ``realChunkSize = min(chunkSize, DIVUP(size - gridOffset, nChannels))``; v2.27.3-1
    src/device/broadcast.h lines 37-40 ``nelem = min(chunkCount, channelCount - elemOffset)``); LL128: lines
    118-133 (``chunkSize = min(DIVUP(size - gridOffset, nChannels * minChunkSize) * minChunkSize, chunkSize)``).

    >>> rooted_chunk_bytes("Simple", 1 << 20, 8), rooted_chunk_bytes("Simple", 32 << 20, 8)
    (131072, 524288)
    >>> rooted_chunk_bytes("LL128", 1 << 20, 8), rooted_chunk_bytes("LL128", 32 << 20, 8)
    (153600, 576000)
    """
    share = -(-nbytes // max(1, channels))
    if proto == "LL128":
        return min(LL128_STEP_DATA_BYTES, -(-share // LL128_MIN_CHUNK_BYTES) * LL128_MIN_CHUNK_BYTES)
    return min(SIMPLE_STEP_BYTES, share)


def pays_rooted_fill(coll: str, algo: str, proto: str) -> bool:
    """Whether ``coll`` run as ``algo``/``proto`` is a rooted ring whose network hops store and forward its chunks
    (:func:`rooted_net_fill_us`); the execution model charges that fill in place of the fitted network-hop extra."""
    return algo == "ring" and proto in ("Simple", "LL128") and coll in ROOTED_COLLS


def rooted_net_fill_us(coll: str, proto: str, nbytes: int, channels: int, nodes: int, channel_net_gbs: float) -> float:
    """µs a rooted ring's (broadcast, reduce) first chunk spends crossing the ``nodes - 1`` network hops of its chain
    (Simple and LL128).

    The network proxy posts a step to the network only once the GPU has written all of it (with GPU Direct RDMA
    an LL128 step too), and the receiving proxy hands it to the next GPU only once all of it has arrived (v2.8.4-1
    src/transport/net.cc lines 286-327, ``sendProxy``: ``ncclNetIsend`` of the whole ``sizesFifo`` slot after the
    GPU's tail passed it; lines 401-428 ``recvProxy``: tail posted after ``ncclNetTest`` completes and the GDR
    flush), so each network hop of the chain stores and forwards the whole chunk (:func:`rooted_chunk_bytes`) at
    one channel's share of the node's NICs (``channel_net_gbs``, GB/s).  The later chunks follow in its wake at
    the bandwidth the transfer term charges.

    >>> rooted_net_fill_us("broadcast", "Simple", 4 << 20, 8, 16, 4.0)       # 15 hops x 512 KiB at 4 GB/s
    1966.08
    >>> rooted_net_fill_us("allreduce", "Simple", 4 << 20, 8, 16, 4.0), rooted_net_fill_us("broadcast", "LL", 1, 8, 16, 4.0)
    (0.0, 0.0)
    """
    if coll not in ROOTED_COLLS or nodes < 2 or proto not in ("Simple", "LL128"):
        return 0.0
    return (nodes - 1) * rooted_chunk_bytes(proto, nbytes, channels) / (1000.0 * channel_net_gbs)


__all__ = ["LL128_MIN_CHUNK_BYTES", "LL128_STEP_DATA_BYTES", "ROOTED_COLLS", "SIMPLE_STEP_BYTES", "cta_copy_gbs",
           "pays_rooted_fill", "ring_copy_steps", "ring_send_share", "rooted_chunk_bytes", "rooted_net_fill_us"]

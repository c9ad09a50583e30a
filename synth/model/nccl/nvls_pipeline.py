"""How NCCL's NVLS kernels cut a message: the NVLS-tree chunk rule and the one-host NVLS
all_reduce's three-stage loop, and the (non-NVLS) tree's Simple chunk (pure functions of bytes, channels and heads; the execution model,
:mod:`.runtime`, feeds them its chunk and bus time).

Units: µs, bytes.
"""

from __future__ import annotations


def tree_simple_chunk_bytes(step: int, depth: int, per_channel: float) -> int:
    """Bytes of one tree/Simple chunk: the Simple step (``step``: NCCL_BUFFSIZE / NCCL_STEPS, 512 KiB by default;
    a tree's chunkSteps is 1), halved while a channel's bytes (``per_channel``) hold fewer than 8x / 4x / 1x
    ``depth`` chunks, floors 128 / 64 / 32 KiB (NVIDIA/nccl v2.19.3-1 src/enqueue.cc lines 1328-1340).  That
    halving ends with 2.19 (v2.21.5-1 lines 1722-1726 keep the whole step, as does v2.30.7-1): known and not
    modelled, docs/nccl-model.md (branches ``tree-chunk``, ``nearmiss-tree-step-tried``).

    >>> [tree_simple_chunk_bytes(524288, 8, n << 20) for n in (1, 16, 64)]
    [65536, 262144, 524288]
    >>> tree_simple_chunk_bytes(1048576, 8, 128 << 20), tree_simple_chunk_bytes(1048576, 8, 16 << 20)
    (1048576, 262144)
    """
    chunk = step
    for mult, floor in ((8, 131072), (4, 65536), (1, 32768)):
        while per_channel / chunk < depth * mult and chunk > floor:
            chunk //= 2
    return chunk


def nvls_tree_chunk_bytes(max_chunk: int | None, nodes: int, nbytes: int, concurrent_ops: int) -> int:
    """Bytes of one NVLS-tree chunk (NVIDIA/nccl v2.22.3-1 .. v2.28.3-1 src/enqueue.cc, the
    ``NCCL_ALGO_NVLS_TREE`` branch of the chunk computation): the NVLS chunk (128 KiB,
    ``NCCL_NVLS_CHUNKSIZE``), at most ``NCCL_NVLSTREE_MAX_CHUNKSIZE`` (``max_chunk``; unset: 64 KiB on
    >= 4 nodes, else no cap), cut to 256/128/64/32 KiB while ``nbytes`` is under 32x/16x/4x/1x
    ``concurrent_ops`` (channels x NVLS heads) chunks.  A ``max_chunk`` above 128 KiB is taken as the
    chunk itself: the one platform that sets it (AWS p5) sets ``NCCL_NVLS_CHUNKSIZE`` alike.

    >>> [nvls_tree_chunk_bytes(None, 2, n << 20, 128) for n in (4, 16, 64, 1024)]
    [32768, 65536, 131072, 131072]
    >>> [nvls_tree_chunk_bytes(None, 8, n << 20, 128) for n in (4, 16, 1024)]
    [32768, 65536, 65536]
    """
    chunk = max_chunk if max_chunk else (65536 if nodes >= 4 else 131072)
    for mult, size in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if nbytes < mult * concurrent_ops * chunk and chunk > size:
            chunk = size
    return chunk


def nvls_loop_fill_us(nbytes: int, channels: int, heads: int, chunk: int, stream_us: float) -> float:
    """µs a one-host NVLS all_reduce spends filling and draining its three-stage loop.

    NVIDIA/nccl v2.26.2-1 .. v2.29.3-1 src/device/all_reduce.h, ``RunWorkColl<ncclFuncAllReduce,
    .., NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE>``, ``work->oneNode`` branch: each channel's warps are split
    into scatter, reduce and gather groups (8, 5 and 7 of 20 warps on 8 GPUs), and each walks the
    channel's share of the message (``nbytes / channels``) in loops of ``heads x chunk`` bytes: scatter
    copies a loop into the NVLS buffer, the heads' reduce warps multimem-reduce it once every GPU has
    scattered it, gather copies it out once every head has reduced it.  The three stages overlap across
    loops (the buffer has NCCL_STEPS = 8 slots of ``NCCL_NVLS_CHUNKSIZE``), so a channel of ``L`` loops
    takes ``L + 2`` loop times: the first loop's scatter comes before any reduce, the last loop's
    gather after every reduce.  One loop time is the channel's streaming time ``stream_us`` (the bytes
    over the bus rate) times the loop's share of the channel's bytes (a channel of less than one loop is
    one partial loop: the three stages run one after another).  The chunk is enqueue.cc's
    (``runtime.simple_chunk_bytes``); this takes the stages as balanced, at the channel's bus rate.

    8 x B200 (32 channels, 8 heads), 64 MiB in 32 KiB chunks: 2 MiB per channel, loops of 256 KiB,
    8 loops: 2/8 of the streaming time; 8 MiB in 16 KiB chunks: 256 KiB per channel, 2 loops of
    128 KiB: 2/2.

    >>> nvls_loop_fill_us(64 << 20, 32, 8, 32768, 160.0), nvls_loop_fill_us(8 << 20, 32, 8, 16384, 20.0)
    (40.0, 20.0)
    >>> nvls_loop_fill_us(1 << 20, 32, 8, 16384, 4.0)    # 32 KiB per channel: one partial loop
    8.0
    """
    per_channel = nbytes / max(1, channels)
    if per_channel <= 0:
        return 0.0
    loop = min(float(max(1, heads) * chunk), per_channel)
    return 2.0 * stream_us * loop / per_channel


__all__ = ["nvls_tree_chunk_bytes", "nvls_loop_fill_us", "tree_simple_chunk_bytes"]

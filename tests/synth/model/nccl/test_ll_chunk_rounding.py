"""The LL last-chunk rounding (``ring_steps.ll_chunk_factor``) against NCCL's own loops, per collective.

NCCL 2.4-2.19 sizes an LL collective's last chunk on the host from the total bytes and the pattern's chunks per
loop: ``nBytes`` is ``count x nRanks`` for all_gather / reduce_scatter (NVIDIA/nccl v2.4.8-1 src/misc/argcheck.cc
line 52, "count is per rank"), ``nchunksPerLoop`` is ``nRanks`` for the ring patterns (src/enqueue.cc lines
256-259), and ``lastChunkSize = DIVUP(rest, nChannels x nchunksPerLoop)`` rounded up to ``nThreads x 8`` bytes
(lines 333-338).  The device loops differ by collective: all_reduce walks the whole buffer ``nChannels x nranks x
chunkSize`` at a time, channel ``bid`` taking ``nranks`` chunks from ``bid x nranks x chunkSize``
(src/collectives/device/all_reduce.h lines 152-170), all_gather and reduce_scatter walk one rank's block
``nChannels x chunkSize`` at a time, channel ``bid`` taking one chunk from ``bid x chunkSize`` (all_gather.h lines
87-101, reduce_scatter.h lines 82-96); every chunk is ``min(chunkSize, size - offset)``.  The same structure runs
through v2.19.3-1 (enqueue.cc lines 1301-1303 and 1379-1383, info.h line 71, src/device/*.h ``runRing``).

The reference below replays those loops chunk by chunk; the model's closed form takes ``nranks`` chunks per loop of
the total bytes for all three, which is the same as one chunk per loop of one rank's block.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from synth.model.nccl.ring_steps import ll_chunk_factor

COLLS = ("allreduce", "allgather", "reducescatter")


def _nccl_busiest_factor(coll: str, nbytes: int, ranks: int, channels: int, threads: int, version: tuple) -> float:
    """Most bytes one channel moves per ring step over the even share, replaying NCCL's host sizing and device
    loops (module docstring; 1-byte elements, as all_gather's int8 view)."""
    slice_bytes = 8 * 8 * (256 if version < (2, 5) else 512)         # NCCL_LL_SLICE_LINES x 8 B
    loop_host = channels * ranks * slice_bytes                           # nChannels x nchunksPerLoop x sliceSize
    rest = nbytes - (nbytes // loop_host) * loop_host
    last = -(-rest // (channels * ranks))
    last = -(-last // (threads * 8)) * (threads * 8)                     # ALIGN_SIZE(.., nThreads*sizeof(uint64_t))
    moved = [0] * channels
    if coll == "allreduce":
        size, chunks_per_channel = nbytes, ranks
    else:
        size, chunks_per_channel = nbytes // ranks, 1                    # args->N: one rank's block
    loop = channels * chunks_per_channel * slice_bytes
    for grid in range(0, size, loop):
        chunk = last if size - grid < loop else slice_bytes
        for bid in range(channels):
            base = grid + bid * chunks_per_channel * chunk
            for j in range(chunks_per_channel):
                moved[bid] += max(0, min(chunk, size - (base + j * chunk)))
    return max(moved) * channels / size


def _table(ranks: int, threads: int, version: tuple):
    """The three things ``ll_chunk_factor`` reads of a tuning table."""
    return SimpleNamespace(machine=SimpleNamespace(ranks=ranks), version=version,
                           channels=lambda algo, proto, nbytes, coll: (99, threads))


@pytest.mark.parametrize("coll", COLLS)
def test_hand_computed_12_channels_8_ranks(coll):
    """1 MiB on 8 ranks, 12 channels of 256 threads (NCCL 2.4, 16 KiB slices): one loop is 1.5 MiB, so the whole
    MiB is the last loop; 1 MiB / 96 = 10,923 B rounds up to 12,288 (2,048-byte steps), and channel 0 moves 12,288 B
    a step (all_reduce: 8 of them of its 98,304 B; all_gather / reduce_scatter: one of a rank's 131,072 B) against
    an even 10,922.7: 1.125 for all three.  One chunk per loop of the total bytes would give 1.0078."""
    t = _table(8, 256, (2, 4, 8))
    assert ll_chunk_factor(t, coll, "ring", "LL", 12, 1 << 20) == pytest.approx(1.125)


@pytest.mark.parametrize("coll", COLLS)
def test_hand_computed_rounding_leaves_a_channel_idle(coll):
    """12 KiB on 4 ranks, 4 channels of 64 threads (NCCL 2.8): a rank's 3,072 B / 4 = 768 B round up to 1,024, so
    channels 0-2 move 1,024 B and channel 3 none: 4 x 1,024 / 3,072 = 4/3.  One chunk per loop of the total bytes
    (12,288 / 4 = 3,072 B, already a multiple of 512) would give 1.0."""
    t = _table(4, 64, (2, 8, 4))
    assert ll_chunk_factor(t, coll, "ring", "LL", 4, 12 << 10) == pytest.approx(4 / 3)


@pytest.mark.parametrize("coll", COLLS)
@pytest.mark.parametrize("version", [(2, 4, 8), (2, 8, 4), (2, 19, 3)])
def test_closed_form_equals_nccl_loops(coll, version):
    """Every (ranks, channels, threads, size) of a grid: the model's factor equals the replayed loops'."""
    for ranks in (2, 3, 8):
        for channels in (1, 3, 12):
            for threads in (64, 256, 512):
                for nbytes in (ranks * k for k in (1, 100, 4096, 10_923, 65_536, 200_000, 1 << 20)):
                    t = _table(ranks, threads, version)
                    want = _nccl_busiest_factor(coll, nbytes, ranks, channels, threads, version)
                    got = ll_chunk_factor(t, coll, "ring", "LL", channels, nbytes)
                    assert got == pytest.approx(max(1.0, want)), (coll, ranks, channels, threads, nbytes)


def test_no_rounding_outside_its_versions_or_protocol():
    """2.20 sizes LL chunks without ``lastChunkSize`` (v2.20.3-1 enqueue.cc has no ALIGN_SIZE of it); Simple is
    never scaled."""
    assert ll_chunk_factor(_table(4, 64, (2, 20, 3)), "allgather", "ring", "LL", 4, 12 << 10) == 1.0
    assert ll_chunk_factor(_table(4, 64, (2, 8, 4)), "allgather", "ring", "Simple", 4, 12 << 10) == 1.0

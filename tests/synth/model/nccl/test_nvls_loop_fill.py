"""A one-host NVLS all_reduce walks each channel's share of the message in loops of (NVLS heads x
chunk) bytes through three warp groups, scatter -> reduce -> gather (NVIDIA/nccl v2.26.2-1 ..
v2.29.3-1 src/device/all_reduce.h, the ``oneNode`` branch): L loops take L + 2 loop times.  The
chunk is enqueue.cc's, cut on the channel's own bytes (the one-host NVLS work is chunked with
``nChannels=1`` and the channel's count).  Checked by hand and against that rule re-derived here."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.nvls_pipeline import nvls_loop_fill_us
from synth.model.nccl.runtime import _intra_bus_gbs, _transfer_us, nvls_chunk_overhead_us, simple_chunk_bytes
from topo_probe import get_preset

MIB = 1 << 20


def _chunk_by_source(channel_bytes: int, heads: int, chunk: int = 131072) -> int:
    """enqueue.cc calcCollChunking, NCCL_ALGO_NVLS, as the one-host path calls it (nChannels = 1,
    nBytes = the channel's bytes): concurrentOps = 1 x nHeads; 64 KiB under 64x, 32 KiB under 8x,
    16 KiB under 2x (concurrentOps x chunk)."""
    for mult, cut in ((64, 65536), (8, 32768), (2, 16384)):     # the three ifs, in order
        if channel_bytes < mult * heads * chunk and chunk > cut:
            chunk = cut
    return chunk


def test_fill_by_hand():
    """2 stage times of one loop: 64 MiB on 32 channels is 2 MiB per channel; 8 heads x 32 KiB = 256 KiB
    loops, 8 of them: 2/8 of the streaming time.  Less than one loop: the three stages in a row (2x)."""
    assert nvls_loop_fill_us(64 * MIB, 32, 8, 32768, 160.0) == pytest.approx(40.0)
    assert nvls_loop_fill_us(2048 * MIB, 32, 8, 131072, 2400.0) == pytest.approx(2400.0 * 2 / 64)
    assert nvls_loop_fill_us(1 * MIB, 32, 8, 16384, 4.0) == pytest.approx(8.0)
    assert nvls_loop_fill_us(0, 32, 8, 16384, 4.0) == 0.0


@pytest.mark.parametrize("preset,version,channels", [("dgx-h100", (2, 26), 16), ("hgx-b200", (2, 26), 32),
                                                     ("hgx-b200", (2, 29), 24)])
def test_chunk_follows_the_per_channel_rule(preset, version, channels):
    """The model's NVLS chunk (channels x heads over the whole message) is NCCL's one-host rule on one
    channel's share, at every power-of-two size from 1 MiB to 16 GiB."""
    t = NcclModel(NcclMachine.from_topology(get_preset(preset)), version=version).table
    assert t.graphs.nvls_channels == channels
    heads = t.graphs.nvls.n_channels
    for k in range(20, 35):
        n = 1 << k
        assert simple_chunk_bytes(t, "nvls", n, channels) == _chunk_by_source(n // channels, heads), n


def test_the_fill_is_in_the_one_host_nvls_all_reduce_only():
    """8 x B200 (NCCL 2.26, 32 channels, 8 heads) at 64 MiB: chunk 32 KiB, 8 loops per channel, so the
    NVLS all_reduce's bandwidth part grows by 2/8 (the fill) on top of the per-chunk cost; the NVLS
    all_gather (another kernel) gets none."""
    one = NcclModel(NcclMachine.from_topology(get_preset("hgx-b200")), version=(2, 26))
    t, p = one.table, one.params
    assert simple_chunk_bytes(t, "nvls", 64 * MIB, 32) == 32768
    for coll, wire, fill in (("allreduce", 64 * MIB * 2 * 7 / 8, 2 / 8), ("allgather", 64 * MIB * 7 / 8, 0.0)):
        stream = wire / (1000.0 * _intra_bus_gbs(t, coll, "nvls", "Simple", 32, p))
        want = stream * (1 + fill) + nvls_chunk_overhead_us(t, "nvls", 64 * MIB, 32, p)
        assert _transfer_us(t, coll, "nvls", "Simple", 32, 64 * MIB, p) == pytest.approx(want), coll

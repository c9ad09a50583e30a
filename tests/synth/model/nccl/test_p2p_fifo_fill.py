"""A Simple p2p send over NVLink is a two-stage pipeline (synth/model/nccl/ring_steps.py ``p2p_fifo_fill_factor``):
the sender writes each chunk into the receiver's FIFO, the receiver copies it out (NVIDIA/nccl v2.28.7-1
src/device/sendrecv.h lines 16-47), so a part of k chunks takes k + 1 chunk times.  Checked by hand on the GB300 NVL72
64-rank alltoall the OCI README reports (NCCL 2.28.7)."""

from dataclasses import replace

import pytest

from synth.model.nccl import NcclMachine
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.p2p import P2P_NVL_CHUNK_BYTES, p2p_channels, p2p_time_us
from synth.model.nccl.params import DEFAULT_PARAMS
from synth.model.nccl.ring_steps import p2p_fifo_fill_factor
from topo_probe import get_preset


def test_fill_is_one_chunk_per_part_by_hand():
    chunk = 512 << 10                                  # NCCL_P2P_NVL_CHUNKSIZE's default (src/init.cc)
    assert P2P_NVL_CHUNK_BYTES == chunk
    assert p2p_fifo_fill_factor(chunk, chunk) == 2.0                   # one chunk: write, then copy
    assert p2p_fifo_fill_factor(3 * chunk, chunk) == pytest.approx(4 / 3)
    assert p2p_fifo_fill_factor(3 * chunk + 1, chunk) == pytest.approx(5 / 4)
    assert p2p_fifo_fill_factor(chunk, chunk, direct=True) == 1.0      # a direct pointer writes into the output


def test_64_rank_nvl72_alltoall_of_64_mib_takes_three_chunk_times_for_two():
    """64 ranks in one NVLink domain, NCCL 2.28: 32 p2p channels, so ``nChannelsMin`` halves from 32 to 1 (64 x 1 <=
    32 fails until 1; src/enqueue.cc v2.28.7-1 line 1056) and each peer's 1 MiB (64 MiB / 64) is one part of 2
    chunks of 512 KiB above the LL threshold (32 x 16 KiB): 3 chunk times instead of 2, so the NVLink part of the
    time is 1.5 x its streaming time; with no latency and a free host the whole time is."""
    m = NcclMachine.from_topology(get_preset("gb200-nvl72")).with_(ranks=64)
    g = comm_graphs(m, version=(2, 28))
    per_peer = (64 << 20) // 64
    assert p2p_channels(m, g, per_peer, (2, 28)) == 1
    p = replace(DEFAULT_PARAMS, p2p_latency_us=0.0, host_us=0.0, host_us_per_channel=0.0)
    t, _ = p2p_time_us(m, g, "alltoall", 64 << 20, p, version=(2, 28))
    t_big, _ = p2p_time_us(m, g, "alltoall", 64 << 30, p, version=(2, 28))
    # 64 GiB: 1 GiB a peer on 32 channels of 32 MiB = 64 chunks each (factor 65/64): the streaming rate by hand
    stream_us_per_byte = t_big / (64 << 30) / (65 / 64)
    assert t == pytest.approx(1.5 * stream_us_per_byte * (64 << 20), rel=0.02)


def test_64_rank_alltoall_runs_on_the_32_p2p_channels_not_63():
    """A part's channel is ``(base + part) & (p2pnChannels - 1)`` (v2.28.7-1 src/include/device.h lines 270-272), so 63
    peers of one part each share NCCL's 32 p2p channels: 8 MiB a rank is 128 KiB a peer, LL (<= 32 x 16 KiB) on
    one channel each, and the rank's sends move at 32 CTAs x min(bwIntra x NVLink efficiency, the CTA's rate) x
    half data a line x LL's efficiency, by hand (the links' cap is far above)."""
    m = NcclMachine.from_topology(get_preset("gb200-nvl72")).with_(ranks=64)
    g = comm_graphs(m, version=(2, 28))
    p = replace(DEFAULT_PARAMS, p2p_latency_us=0.0, host_us=0.0, host_us_per_channel=0.0)
    per_cta = min(g.ring.bw_intra * p.link_efficiency(m.arch, "nvlink"), p.p2p_cta_gbs)
    gbs = 32 * per_cta * 0.5 * p.proto_efficiency(m.arch, "LL")
    t, _ = p2p_time_us(m, g, "alltoall", 8 << 20, p, version=(2, 28))
    assert t == pytest.approx(63 * (128 << 10) / (1000.0 * gbs), rel=1e-6)

"""A Simple p2p send over NVLink is a two-stage pipeline (synth/model/nccl/ring_steps.py ``p2p_fifo_fill_factor``):
the sender writes each chunk into the receiver's FIFO over NVLink, the receiver copies it out locally (NVIDIA/nccl
v2.28.7-1 src/device/sendrecv.h lines 16-47), so a part of k chunks takes k writes and one local copy: k a + b, b / a
the channel's send rate over a CTA's copy rate.  Each case by hand from NCCL's figures (32 p2p channels, 512 KiB
chunks: src/init.cc lines 703-721) and the preset's links."""

from dataclasses import replace

import pytest

from synth.model.nccl import NcclMachine
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.p2p import p2p_channels, p2p_time_us
from synth.model.nccl.p2p_chunk import P2P_NVL_CHUNK_BYTES
from synth.model.nccl.params import DEFAULT_PARAMS
from synth.model.nccl.ring_steps import p2p_fifo_fill_factor
from topo_probe import get_preset

K, M = 1 << 10, 1 << 20
#: no latency, a free host; a CTA writes at most 20 GB/s and copies 80 (GB200 / H100 at the same 1.98 GHz clock)
P = replace(DEFAULT_PARAMS, p2p_latency_us=0.0, host_us=0.0, host_us_per_channel=0.0, p2p_link_share=1.0,
            p2p_cta_gbs=20.0, ring_copy_gbs=80.0,
            link_eff={**DEFAULT_PARAMS.link_eff, ("sm90", "nvlink"): 0.8, ("sm100", "nvlink"): 0.8})


def test_fill_is_one_local_copy_per_part_by_hand():
    chunk = 512 << 10                                  # NCCL_P2P_NVL_CHUNKSIZE's default (src/init.cc)
    assert P2P_NVL_CHUNK_BYTES == chunk
    assert p2p_fifo_fill_factor(chunk, chunk, 0.25) == 1.25              # one chunk: write, then copy
    assert p2p_fifo_fill_factor(3 * chunk, chunk, 0.25) == pytest.approx(1 + 0.25 / 3)
    assert p2p_fifo_fill_factor(3 * chunk + 1, chunk, 0.25) == pytest.approx(1 + 0.25 / 4)
    assert p2p_fifo_fill_factor(chunk, chunk, 3.0) == 2.0                 # at most one write's time
    assert p2p_fifo_fill_factor(chunk, chunk, 0.25, direct=True) == 1.0   # a direct pointer writes into the output


def _nvl72_64() -> tuple:
    m = NcclMachine.from_topology(get_preset("gb200-nvl72")).with_(ranks=64)
    return m, comm_graphs(m, version=(2, 28))


def test_64_rank_nvl72_alltoall_of_64_mib_by_hand():
    """64 ranks in one NVLink domain, NCCL 2.28: 32 p2p channels, so ``nChannelsMin`` halves from 32 to 1 (64 x 1 <=
    32 fails until 1; src/enqueue.cc v2.28.7-1 line 1056) and each peer's 1 MiB (64 MiB / 64) is one part of 2
    chunks of 512 KiB, above the LL threshold (32 x 16 KiB).  63 peers on the 32 p2p channels (device.h lines
    270-272): 32 CTAs x min(45 GB/s bwIntra x 0.8, 20) = 640 GB/s, under the links' 18 x 50 x 0.8 = 720.  Each CTA
    writes 20 GB/s and copies 80: a part takes 2 writes + 1/4 of one, x (1 + 0.25 / 2)."""
    m, g = _nvl72_64()
    assert p2p_channels(m, g, 1 * M, (2, 28)) == 1 and g.ring.bw_intra == 45.0 and m.link_gbs == 50.0
    t, _ = p2p_time_us(m, g, "alltoall", 64 * M, P, version=(2, 28))
    assert t == pytest.approx(63 * M / (1000.0 * 640.0) * (1 + 0.25 / 2))


def test_64_rank_alltoall_runs_on_the_32_p2p_channels_not_63():
    """A part's channel is ``(base + part) & (p2pnChannels - 1)`` (v2.28.7-1 src/include/device.h lines 270-272), so 63
    peers of one part each share NCCL's 32 p2p channels: 8 MiB a rank is 128 KiB a peer, LL (<= 32 x 16 KiB) on
    one channel each, and the rank's sends move at 32 CTAs x 20 GB/s x half data a line x LL's efficiency, at most a
    Blackwell LL CTA's 141 / 24 GB/s (test_ll_cta_cap.py) (no fill: LL's buffer is the receiver's, read in place)."""
    m, g = _nvl72_64()
    gbs = 32 * min(20.0 * 0.5 * P.proto_efficiency(m.arch, "LL"), 141.0 / 24)
    t, _ = p2p_time_us(m, g, "alltoall", 8 * M, P, version=(2, 28))
    assert t == pytest.approx(63 * (128 * K) / (1000.0 * gbs), rel=1e-6)


@pytest.mark.parametrize("version, per_process, fill", [((2, 22), 8, 1.0), ((2, 22), 1, 1 + 0.25 / 32),
                                                        ((2, 23), 8, 1 + 0.25 / 32)])
def test_h100_sendrecv_fill_but_for_one_process_before_2_23(version, per_process, fill):
    """8 x H100, 64 MiB: 4 channels (16 MiB parts, 32 chunks of 512 KiB), each min(30 GB/s bwIntra x 0.8, 20) = 20:
    80 GB/s, under the links' 18 x 25 x 0.8 = 360.  Before 2.23 with all 8 ranks in one process a write-mode
    connection is a direct pointer (src/transport/p2p.cc v2.22.3-1 lines 361-363) and the sender writes into the
    output: no copy.  In 8 processes, or from 2.23 (``Direct && ipcReg``, prims_simple.h), one chunk's copy at 80."""
    m = NcclMachine.from_topology(get_preset("dgx-h100"), gpus_per_process=per_process)
    g = comm_graphs(m, version=version)
    t, ch = p2p_time_us(m, g, "sendrecv", 64 * M, P, version=version)
    assert ch == 4
    assert t == pytest.approx(64 * M / (1000.0 * 80.0) * fill)


def test_buffsize_caps_the_chunk():
    """NCCL_BUFFSIZE=1 MiB: p2pChunkSize = 1 MiB / NCCL_STEPS = 128 KiB (src/init.cc v2.28.7-1 lines 720-721), so the
    same 16 MiB parts are 128 chunks and the copy of one is 1/128 of them."""
    m = NcclMachine.from_topology(get_preset("dgx-h100"))
    g = comm_graphs(m, version=(2, 28))
    t, _ = p2p_time_us(m, g, "sendrecv", 64 * M, P, version=(2, 28), step_bytes=(1 * M) // 8)
    assert t == pytest.approx(64 * M / (1000.0 * 80.0) * (1 + 0.25 / 128))

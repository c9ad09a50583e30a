"""Ampere's NVLink sends read (src/graph/paths.cc ``ncclTopoCheckP2p``, NVIDIA/nccl v2.28.9-1 lines 368-372): the
receiver's warps pull each Simple chunk, and from 2.22 a send/recv work has one receiving warp fewer than sending
ones (src/device/sendrecv.h ``nRecvWarpPerWork``, first in v2.22.3-1), so an A100 send moves 9/10 of what a written
one would; from v2.12.7-1 to v2.21.5-1 the host split a work's warps (src/enqueue.cc ``finishWorkP2p``, in 2.12
``enqueueSegOp``), 8 receiving of 9 sending: 8/9 under the model's recv / send reading (not a figure the source
gives).  Each case is computed by hand from those source lines."""

from __future__ import annotations

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.p2p import p2p_time_us, p2p_warps, read_mode_share
from topo_probe.machines.presets import get_preset

M = 1 << 20


@pytest.mark.parametrize("warps, want", [(20, (10, 9)), (16, (8, 7)), (5, (3, 2)), (4, (2, 2)), (2, (1, 1))])
def test_warp_split_follows_sendrecv_h(warps, want):
    """nRecv = n/2 up to 4 warps, else (n-1)/2; nSend = nRecv, else nRecv + 1 (640 threads: 20 warps -> 10 + 9)."""
    assert p2p_warps(warps) == want


@pytest.mark.parametrize("preset, version, want", [("dgx-a100", (2, 28), 0.9), ("dgx-a100", (2, 22), 0.9),
                                                   ("dgx-a100", (2, 21), 8 / 9), ("dgx-a100", (2, 19), 8 / 9),
                                                   ("dgx-h100", (2, 28), 1.0), ("dgx1-v100", (2, 28), 1.0), ("hgx-b200", (2, 28), 1.0)])
def test_only_ampere_nvlink_reads(preset, version, want):
    assert read_mode_share(NcclMachine.from_topology(get_preset(preset)), version) == pytest.approx(want)


def test_a100_sendrecv_moves_nine_tenths_of_its_links_and_channels():
    """8 x A100 in one process under 2.28, p2p_link_share 1, NVLink efficiency 0.75: 1 GiB runs on 32 channels and is
    link-bound at 12 x 25 GB/s x 0.75 x 9/10 = 202.5 GB/s; 128 MiB runs on 8 channels of one ring-graph channel
    each (20 GB/s x 0.75 x 9/10 = 13.5 GB/s): 108 GB/s.  Parts of 64 and 32 chunks of 512 KiB pay one chunk's local
    copy at a CTA's copy rate, 80 x 1.41 / 1.98 GB/s (``ring_steps.p2p_simple_fill``): x (1 + 202.5 / 32 / 56.97 / 64)
    and x (1 + 13.5 / 56.97 / 32).  Plus NCCL's p2p latency.  (The CTA's own rate, :mod:`.p2p_cta`, set out of the
    way.)"""
    from dataclasses import replace
    m = NcclMachine.from_topology(get_preset("dgx-a100"), gpus_per_process=8)
    g = comm_graphs(m, version=(2, 28))
    p = replace(DEFAULT_PARAMS, p2p_link_share=1.0, p2p_cta_gbs=1000.0, ring_copy_gbs=80.0,
                link_eff={**DEFAULT_PARAMS.link_eff, ("sm80", "nvlink"): 0.75})
    copy = 80.0 * 1.41 / 1.98
    for size, channels, gbs, fill in ((1024 * M, 32, 202.5, 1 + 202.5 / 32 / copy / 64),
                                      (128 * M, 8, 108.0, 1 + 13.5 / copy / 32)):
        t, ch = p2p_time_us(m, g, "sendrecv", size, p, version=(2, 28))
        assert ch == channels
        assert t == pytest.approx(p.p2p_latency_us + size / (1000.0 * gbs) * fill)
    # 2.12-2.21: the host's split, 8 receiving warps of 9 sending (finishWorkP2p): 225 x 8/9 = 200 GB/s
    t21, _ = p2p_time_us(m, g, "sendrecv", 1024 * M, p, version=(2, 21))
    assert t21 == pytest.approx(p.p2p_latency_us + 1024 * M / (1000.0 * 200.0) * (1 + 200.0 / 32 / copy / 64))


@pytest.mark.parametrize("elems, want", [(2, (9, 8)), (3, (5, 4)), (4, (5, 4)), (8, (3, 2)), (16, (1, 1))])
def test_host_warp_split_follows_finish_work_p2p(elems, want):
    """NCCL 2.12-2.21 (src/enqueue.cc ``finishWorkP2p``, v2.20.5-1 lines 117-133): nGroup = elements rounded up to a
    power of two; nWarp doubles from 1 while nWarp x nGroup <= 640 / 32 / 2 = 10; odd elements (sends) get one more
    when nWarp >= 2.  2 -> nGroup 2, nWarp 8: send 9, recv 8; 8 -> nWarp 2: 3 / 2; 16 -> nWarp 1 (16 > 10), no
    extra warp: 1 / 1."""
    from synth.model.nccl.p2p_cta import p2p_host_warps
    assert p2p_host_warps(elems) == want


@pytest.mark.parametrize("version, want", [((2, 20, 5), 8 / 9), ((2, 14), 8 / 9), ((2, 21), 8 / 9), ((2, 13), 8 / 9),
                                           ((2, 12), 8 / 9), ((2, 11), 1.0), ((2, 22), 0.9)])
def test_a100_reads_with_eight_of_nine_warps_from_2_12_to_2_21(version, want):
    """A sendrecv work holds one receive (element 0) and one send (element 1: ``appendWorkElemP2p`` v2.20.5-1 lines
    168-169, v2.13.4-1 ``p2pTailElem`` lines 256-257, v2.12.12-1 ``getSegment`` line 903); the receive's 8 warps
    pull what the send's 9 would push written: 8/9 (v2.13.4-1 ``finishWorkP2p`` lines 206-220, v2.12.12-1
    ``enqueueSegOp`` 946-956 the same loop).  2.11 and earlier split threads in sendrecv.h (``nThreadsSplit``,
    v2.11.4-1 line 25: 304 receiving of 640, 336 sending): not modelled, the whole taken."""
    assert read_mode_share(NcclMachine.from_topology(get_preset("dgx-a100")), version) == pytest.approx(want)


def test_two_a100_sendrecv_under_2_20_moves_eight_ninths_of_its_links():
    """2 x A100 of an NVSwitch board in one process under 2.20.5, p2p_link_share 1, NVLink efficiency 0.75, the
    CTA's own rate out of the way: 512 MiB runs on 32 channels (calcP2pChunkSize, v2.20.5-1 src/enqueue.cc lines
    842-850: nChannelsMin 32 / 2 = 16, a part of 32 MiB > 32 x 512 KiB doubles to 32) and 128 MiB on 16 (8 MiB
    parts); both are link-bound at 12 x 25 GB/s x 0.75 x 8/9 = 200 GB/s (16 channels of 20 x 0.75 x 8/9 = 13.3 GB/s
    would carry 213).  Parts of 32 and 16 chunks of 512 KiB pay one chunk's copy at 80 x 1.41 / 1.98 GB/s."""
    from dataclasses import replace
    m = NcclMachine.from_topology(get_preset("dgx-a100"), gpus_per_process=2).with_(ranks=2)
    v = (2, 20, 5)
    g = comm_graphs(m, version=v)
    p = replace(DEFAULT_PARAMS, p2p_link_share=1.0, p2p_cta_gbs=1000.0, ring_copy_gbs=80.0,
                link_eff={**DEFAULT_PARAMS.link_eff, ("sm80", "nvlink"): 0.75})
    copy = 80.0 * 1.41 / 1.98
    for size, channels, chunks in ((512 * M, 32, 32), (128 * M, 16, 16)):
        t, ch = p2p_time_us(m, g, "sendrecv", size, p, version=v)
        assert ch == channels
        assert t == pytest.approx(p.p2p_latency_us + size / (1000.0 * 200.0) * (1 + 200.0 / channels / copy / chunks))

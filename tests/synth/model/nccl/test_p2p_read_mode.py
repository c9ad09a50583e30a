"""Ampere's NVLink sends read (src/graph/paths.cc ``ncclTopoCheckP2p``, NVIDIA/nccl v2.28.9-1 lines 368-372): the
receiver's warps pull each Simple chunk, and from 2.22 a send/recv work has one receiving warp fewer than sending
ones (src/device/sendrecv.h ``nRecvWarpPerWork``, first in v2.22.3-1; absent from v2.19.3-1 to v2.21.5-1), so an A100 send moves 9/10 of what a written one would; each case is
computed by hand from those source lines."""

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
                                                   ("dgx-a100", (2, 21), 1.0), ("dgx-a100", (2, 19), 1.0), ("dgx-h100", (2, 28), 1.0),
                                                   ("dgx1-v100", (2, 28), 1.0), ("hgx-b200", (2, 28), 1.0)])
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
    # before 2.22 the split is not modelled: the written rate
    t21, _ = p2p_time_us(m, g, "sendrecv", 1024 * M, p, version=(2, 21))
    assert t21 == pytest.approx(p.p2p_latency_us + 1024 * M / (1000.0 * 225.0) * (1 + 225.0 / 32 / copy / 64))

"""A p2p channel is one CTA (src/device/sendrecv.h: one block a channel, its warps split between the send and the
receive), so it moves at most ``p2p_cta_gbs`` times the GPU's boost clock over H100's (:mod:`.p2p_cta`); each case is
computed by hand from the clocks in :data:`.constants.SM_CLOCK_GHZ` (A100 1.41, H100 / B200 1.98 GHz)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.p2p import p2p_time_us
from synth.model.nccl.p2p_cta import p2p_cta_gbs
from topo_probe.machines.presets import get_preset

M = 1 << 20
V = (2, 28)


def _params(cta: float, **kw):
    return replace(DEFAULT_PARAMS, p2p_cta_gbs=cta, p2p_latency_us=10.0, ring_copy_gbs=80.0, **kw)


def test_rate_follows_the_clock():
    """20 GB/s at H100's 1.98 GHz: B200 (1.98) 20, A100 (1.41) 20 x 1.41 / 1.98 = 14.2424."""
    p = _params(20.0)
    assert p2p_cta_gbs("sm90", p) == pytest.approx(20.0)
    assert p2p_cta_gbs("sm100", p) == pytest.approx(20.0)
    assert p2p_cta_gbs("sm80", p) == pytest.approx(20.0 * 1.41 / 1.98)


def test_b200_sendrecv_is_cta_bound():
    """8 x B200, 64 MiB: 4 channels (a 16 MiB part each, under 32 x 512 KiB); a ring channel would carry 45 GB/s x 0.8 =
    36, the CTA 20: 80 GB/s, 67108864 B / 80 GB/s = 838.8608 µs + 10.  With the CTA out of the way: 4 x 36 = 144 GB/s.
    Each 16 MiB part is 32 chunks of 512 KiB and pays the receiver's local copy of the last one, at a CTA's copy rate
    (80 GB/s, B200 at H100's clock): x (1 + 20 / 80 / 32), with the CTA out of the way x (1 + 36 / 80 / 32)."""
    m = NcclMachine.from_topology(get_preset("hgx-b200"))
    g = comm_graphs(m, version=V)
    eff = {**DEFAULT_PARAMS.link_eff, ("sm100", "nvlink"): 0.8}
    t, ch = p2p_time_us(m, g, "sendrecv", 64 * M, _params(20.0, link_eff=eff), version=V)
    assert ch == 4
    assert t == pytest.approx(10.0 + 64 * M / (1000.0 * 80.0) * (1 + 0.25 / 32))
    t_free, _ = p2p_time_us(m, g, "sendrecv", 64 * M, _params(1000.0, link_eff=eff), version=V)
    assert t_free == pytest.approx(10.0 + 64 * M / (1000.0 * 144.0) * (1 + 0.45 / 32))


def test_a100_sendrecv_cta_then_read_mode():
    """8 x A100 in one process, 128 MiB: 8 channels; a ring channel 20 GB/s x 0.75 = 15, the CTA 20 x 1.41 / 1.98 =
    14.2424 (the lesser), times read mode's 9/10 (2.28): 8 x 14.2424 x 0.9 = 102.545 GB/s; parts of 32 chunks pay one
    chunk's local copy at 80 x 1.41 / 1.98 GB/s: x (1 + 12.818 / 56.970 / 32), the clocks cancelling: 0.9 x 20 / 80."""
    m = NcclMachine.from_topology(get_preset("dgx-a100"), gpus_per_process=8)
    g = comm_graphs(m, version=V)
    eff = {**DEFAULT_PARAMS.link_eff, ("sm80", "nvlink"): 0.75}
    t, ch = p2p_time_us(m, g, "sendrecv", 128 * M, _params(20.0, p2p_link_share=1.0, link_eff=eff), version=V)
    assert ch == 8
    assert t == pytest.approx(10.0 + 128 * M / (1000.0 * 8 * 20.0 * 1.41 / 1.98 * 0.9) * (1 + 0.225 / 32))


def test_amd_xgmi_does_not_take_the_nvlink_cap():
    """MI355X's sends ride xGMI, whose channels the model does not cap per channel: the CTA rate leaves them alone."""
    m = NcclMachine.from_topology(get_preset("mi355x"), gpus_per_process=8)
    g = comm_graphs(m, version=V)
    slow, _ = p2p_time_us(m, g, "alltoall", 256 * M, _params(1.0), version=V)
    fast, _ = p2p_time_us(m, g, "alltoall", 256 * M, _params(1000.0), version=V)
    assert slow == pytest.approx(fast)

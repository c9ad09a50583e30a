"""A Blackwell NVLink ring's LL channels move at their CTA's rate, not at NCCL's doubled Hopper figure
(``ll_cta_cap_gbs``): NCCL's llMaxBws Blackwell row is ``2*141.0`` (NVIDIA/nccl v2.29.3-1 src/graph/tuning.cc
line 173), an LL channel is one CTA storing 8-byte data+flag halves of 16-byte lines and polling them
(src/device/prims_ll.h ``storeLL`` / ``readLL``), so the execution model keeps Hopper's 141 GB/s over the
24 channels NCCL runs on an NVLink 4 H100 host (the model's search; the Snellius log's "24 coll channels"), per
channel, at the SM clock.  NCCL's own choice keeps its table.  Checked by hand and against real logs that no fit
sees (tests/fixtures/real_logs, SOURCE headers inside)."""

from __future__ import annotations

import math

from _paths import ROOT
from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.channel_caps import HOPPER_LL_CHANNELS, ll_cta_cap_gbs, ring_channel_cap_gbs
from topo_probe import get_preset

LOGS = ROOT / "tests" / "fixtures" / "real_logs"


def _b200(ranks: int, gpp: int = 1) -> NcclModel:
    m = NcclMachine.from_topology(get_preset("hgx-b200"), gpus_per_process=gpp).with_(ranks=ranks)
    return NcclModel(m, env=NcclEnv(), version=(2, 29))


def test_b200_ll_cap_by_hand():
    """8 x B200: 32 ring channels; 141 GB/s / 24 Hopper channels = 5.875 GB/s a channel, B200's SM clock
    (1.98 GHz) H100's: 32 x 5.875 = 188 GB/s with every channel, 16 channels 94 GB/s, against NCCL's 282."""
    model = _b200(8)
    g = model.table.graphs
    assert g.n_channels == 32 and HOPPER_LL_CHANNELS == 24
    assert math.isclose(ll_cta_cap_gbs(model.machine, g), 188.0)
    assert math.isclose(ring_channel_cap_gbs(model.machine, "LL", 32, g, "allgather", (2, 29)), 188.0)
    assert math.isclose(ring_channel_cap_gbs(model.machine, "LL", 16, g, "allgather", (2, 29)), 94.0)


def test_hopper_channels_are_the_models_own_search():
    """The 24 channels the Hopper row is spread over are what the model's search builds on 8 x H100."""
    h100 = NcclModel(NcclMachine.from_topology(get_preset("dgx-h100")), env=NcclEnv())
    assert h100.table.graphs.n_channels == HOPPER_LL_CHANNELS


def test_nccl_choice_keeps_its_own_table():
    """NCCL's tuner still compares LL at its 282 GB/s (2 x B200 all_reduce: min(282, 16 x 45 x 0.5 = 360))."""
    assert math.isclose(_b200(2).table.bandwidth[("allreduce", "ring", "LL")], 282.0)


def test_other_gpus_unchanged():
    """H100 (its table row is the reference), A100 and a PCIe Blackwell ring keep NCCL's figure."""
    for name in ("dgx-h100", "dgx-a100"):
        m = NcclModel(NcclMachine.from_topology(get_preset(name)), env=NcclEnv())
        assert ll_cta_cap_gbs(m.machine, m.table.graphs) == math.inf
    h100 = NcclModel(NcclMachine.from_topology(get_preset("dgx-h100")), env=NcclEnv())
    g = h100.table.graphs
    assert math.isclose(ring_channel_cap_gbs(h100.machine, "LL", g.n_channels, g), 141.0)


def test_two_b200_all_gather_4mib_against_log():
    """2 x B200 all_gather at 4 MiB (AICR sweep, NCCL 2.29.3, LL by NCCL's table: 14.6 vs Simple 14.7 us) ran
    25.9 us; its bus bytes (2 MiB) at 282 GB/s gave 14.6 us, at 188 GB/s the model must be slower and still
    not slower than the log (a bound of the new term, not a fit: the log's row is 81 GB/s busbw)."""
    from synth.formats.nccl_tests.runs import load_runs
    run = load_runs(LOGS / "b200_2gpu_1node_all_gather_aicr_sweep_b0012.txt")[0]
    real = next(r.out_of_place.time_us for r in run.rows if r.size == 4 << 20)
    c = _b200(2, gpp=2).choose("allgather", 4 << 20)
    assert c.protocol == "LL"
    bus_bytes = (4 << 20) / 2
    assert c.time_us >= bus_bytes / (1000 * 188.0)
    assert bus_bytes / (1000 * 282.0) < c.time_us <= real


def test_p2p_ll_sends_at_the_cta_rate_by_hand():
    """An alltoall's LL sends on 8 x B200 (16 KiB to each of 7 peers, under NCCL_P2P_LL_THRESHOLD x channels)
    run each CTA at 141 / 24 = 5.875 GB/s, not at half a ring channel's NVLink rate (~10 GB/s)."""
    from synth.model.nccl import p2p
    model = _b200(8)
    m, g, params, version = model.machine, model.table.graphs, model.params, (2, 29)
    per_peer = 16 << 10
    ch = p2p.p2p_channels(m, g, per_peer, version)
    assert p2p.p2p_uses_ll(per_peer, ch, p2p.local_channel_bounds(m, g)[1], version)
    ctas = p2p.group_ctas(g, ch, 7)
    got = p2p._local_gbs(m, g, params, per_peer, 7, version)
    assert math.isclose(got, ctas * 141.0 / 24)
    assert p2p._channel_cap_gbs(m, g, params, ctas) * 0.5 > got          # the link's half would be faster

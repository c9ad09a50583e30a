"""RCCL's Simple p2p parts on one xGMI host pay the same FIFO fill as NCCL's over NVLink (synth/model/nccl/ring_steps.py
``xgmi_p2p``, ``p2p_fifo_fill_factor``): RCCL 2.26.6's sendrecv kernel (Ahalperin/amd-dev 0d4f8c1
rccl/src/device/sendrecv.h lines 19-135) writes each ``p2pChunkSize`` chunk into the receiver's FIFO and the
receiving warps copy it out, never the direct path (``Direct`` = 0, lines 45 and 104), so a part of k chunks takes k
writes and one local copy.  The chunk is 512 KiB on one xGMI host (rccl/src/init.cc lines 1004-1008).  Each case
by hand from RCCL's channel rule (4 ranks: 32 p2p channels, 8 a peer) and the figures set below."""

from dataclasses import replace

import pytest

from synth.model.nccl import NcclMachine
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.p2p import p2p_inter_gbs, p2p_net_hop_us, p2p_time_us
from synth.model.nccl.params import DEFAULT_PARAMS
from synth.model.nccl.ring_steps import xgmi_p2p
from topo_probe import cluster, get_preset

M = 1 << 20
#: no latency, a free host, and the model's own constants set to round figures (none is a source figure): an RCCL
#: channel at 6 GB/s (``rccl_channel_gbs``, hand-set), a CTA's copy at 99 GB/s at H100's 1.98 GHz (``ring_copy_gbs``,
#: fitted at 100 on NVIDIA rings), which ``cta_copy_gbs`` scales by clock to 99 x 2.40 / 1.98 = 120 GB/s on gfx950;
#: the links (3 x 76.8 x 0.8 = 184 GB/s) do not bind
P = replace(DEFAULT_PARAMS, p2p_latency_us=0.0, host_us=0.0, host_us_per_channel=0.0, p2p_link_share=1.0,
            rccl_channel_gbs=6.0, ring_copy_gbs=99.0, link_eff={**DEFAULT_PARAMS.link_eff, ("gfx950", "xgmi"): 0.8})


def _mi355x_4() -> tuple:
    m = NcclMachine.from_topology(get_preset("mi355x")).with_(ranks=4)
    return m, comm_graphs(m, version=(2, 26))


def test_4_mi355x_alltoall_of_16_mib_pays_one_chunk_copy_by_hand():
    """16 MiB a rank: 4 MiB a peer on its 8 channels, 512 KiB a part, one chunk.  3 peers x 8 = 24 channels x 6 GB/s
    = 144 GB/s; one chunk written at 6 GB/s and copied at 120: x (1 + 6 / 120)."""
    m, g = _mi355x_4()
    assert xgmi_p2p(m) and m.arch == "gfx950" and m.link_gbs == 76.8
    t, ch = p2p_time_us(m, g, "alltoall", 16 * M, P, version=(2, 26))
    assert ch == 24
    assert t == pytest.approx(3 * 4 * M / (1000.0 * 144.0) * (1 + 6.0 / 120.0))


def test_4_mi355x_alltoall_of_1_gib_pays_one_copy_of_64_chunks():
    """1 GiB a rank: 256 MiB a peer, 32 MiB a part (8 channels), 64 chunks of 512 KiB: x (1 + 0.05 / 64)."""
    m, g = _mi355x_4()
    t, _ = p2p_time_us(m, g, "alltoall", 1024 * M, P, version=(2, 26))
    assert t == pytest.approx(3 * 256 * M / (1000.0 * 144.0) * (1 + 0.05 / 64))


def test_4_mi355x_alltoall_ll_parts_pay_no_fill_by_hand():
    """RCCL sends a part with LL up to nChannelsMax x 16 KiB (Ahalperin/amd-dev 0d4f8c1 rccl/src/enqueue.cc lines
    910, 923-924; 8 channels a peer: 128 KiB), and an LL part has no FIFO to copy out of: no fill.  512 KiB a rank:
    128 KiB a peer, LL, on 2 channels (a part at least 512 / 8 = 64 KiB), 3 x 2 = 6 channels x 6 = 36 GB/s.  1 MiB:
    256 KiB a peer, Simple, 4 channels of one 64 KiB chunk each, 12 x 6 = 72 GB/s and x (1 + 6 / 120)."""
    m, g = _mi355x_4()
    t, ch = p2p_time_us(m, g, "alltoall", 512 << 10, P, version=(2, 26))
    assert ch == 6
    assert t == pytest.approx(3 * (128 << 10) / (1000.0 * 36.0))
    t, ch = p2p_time_us(m, g, "alltoall", 1 * M, P, version=(2, 26))
    assert ch == 12
    assert t == pytest.approx(3 * (256 << 10) / (1000.0 * 72.0) * (1 + 6.0 / 120.0))


def test_2_x_4_mi355x_alltoall_pays_no_xgmi_fill_across_hosts_by_hand():
    """Across hosts RCCL's p2p chunk is its net one (Ahalperin/amd-dev 0d4f8c1 rccl/src/init.cc lines 1000-1003,
    rccl/src/rccl_wrap.cc lines 150-154 ``rcclSetP2pNetChunkSize``: 128 KiB below 16 gfx950 ranks), which the
    model does not follow, so no fill there.  4 MiB a rank on 2 x 4: 512 KiB to each of 3 host peers over xGMI,
    here slowed to 3 x 76.8 x 0.05 = 11.52 GB/s (no RCCL channel cap across hosts), 1536 KiB in 136.5 us, plus
    the one network hop every send across hosts pays; the 4 remote parts' 2 MiB through the NIC take less."""
    m = NcclMachine.from_topology(cluster("mi355x", nodes=2)).with_(ranks=8)
    g = comm_graphs(m, version=(2, 26))
    slow = replace(P, link_eff={**P.link_eff, ("gfx950", "xgmi"): 0.05})
    assert xgmi_p2p(m) and m.nodes == 2 and m.gpus_per_node == 4
    assert 4 * (512 << 10) / (1000.0 * p2p_inter_gbs(m, g, slow, 4, 2)) < 3 * (512 << 10) / (1000.0 * 11.52)
    t, _ = p2p_time_us(m, g, "alltoall", 4 * M, slow, version=(2, 26))
    assert t == pytest.approx(p2p_net_hop_us(m, slow) + 3 * (512 << 10) / (1000.0 * 11.52))


def test_no_xgmi_fill_without_p2p_or_on_nvidia():
    m, _ = _mi355x_4()
    assert not xgmi_p2p(m, p2p_disable=True)
    assert not xgmi_p2p(NcclMachine.from_topology(get_preset("dgx-h100")))

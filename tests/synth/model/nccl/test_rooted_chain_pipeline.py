"""A one-channel rooted ring (broadcast, reduce) pays one hop of its chain per nccl-tests call, not all of them.

A rank's kernel returns once its own sends are posted, a send waits only for a free slot of the successor's
``NCCL_STEPS`` = 8 (NVIDIA/nccl v2.8.4-1 src/collectives/device/primitives.h ``waitSend`` lines 99-112; one step per
chunk, src/include/collectives.h lines 71-74) and nccl-tests times the root's back-to-back calls (NVIDIA/nccl-tests
0b30de5 src/common.cu ``BenchTime`` lines 399-421).  With several channels whose rings order the ranks differently
(ABCI's 4-NIC ring graph: ``sameChannels`` 0) each rank's kernel couples them, and the chain stays paid.

The reference numbers are ABCI's own rows (aistabci/abci2.0benchmark, the fixtures named below, NCCL 2.8.4): the
one-channel rows sit far below the whole chain of 2-16 hosts, and the rows on 2-8 channels far above one hop."""

from __future__ import annotations

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.net_fill import net_chunk_fill_us, rooted_chain_hops, rooted_chain_pipelined, rooted_chunk_bytes
from synth.model.nccl.latency import hop_latencies_us, latency_us
from topo_probe import cluster

LOGS = ROOT / "tests" / "fixtures" / "real_logs"
V28 = (2, 8)


def abci(hosts: int) -> NcclMachine:
    """``hosts`` x 8 A100 on NVSwitch, 4 x 25 GB/s HCAs each moving GPU memory at 9.75 GB/s (the abci_hdr cases)."""
    m = NcclMachine.from_topology(cluster("dgx-a100", nodes=hosts))
    return m.with_(nics_per_node=4, nic_gbps=25.0, nic_dma_gbs=9.75, cpu_vendor="intel")


def log_times(hosts: int) -> dict[int, float]:
    run = next(iter(load_runs(LOGS / f"a100_{8 * hosts}gpu_{hosts}node_broadcast_abci_hdr.txt")))
    return {row.size: row.out_of_place.time_us for row in run.rows}


def test_which_rings_pipeline():
    assert rooted_chain_pipelined("broadcast", "ring", 1) and rooted_chain_pipelined("reduce", "ring", 1)
    assert not rooted_chain_pipelined("broadcast", "ring", 2)
    assert not rooted_chain_pipelined("allgather", "ring", 1)
    mi300x = NcclMachine.from_topology(cluster("mi300x", nodes=2))
    assert not rooted_chain_pipelined("broadcast", "ring", 1, mi300x)


def test_one_channel_pays_one_network_hop_of_sixteen_hosts():
    """128 ranks: NCCL's broadcast nsteps = nRanks = 128, 15 of them across hosts, 113 inside; one channel pays the
    base and one network hop, so the chain's latency minus it is 113 intra hops and 14 network hops, by hand."""
    m = abci(16)
    assert rooted_chain_hops("broadcast", "ring", 1, m, 113, 15) == (0, 1)
    assert rooted_chain_hops("broadcast", "ring", 8, m, 113, 15) == (113, 15)
    t = NcclModel(m, version=V28).table
    p = NcclModel(m, version=V28).params
    base, hop, net = hop_latencies_us(m, "ring", "LL", p, version=V28)
    net -= p.net_lat_own_us(m.net_kind, "LL", m.arch)            # the chunk fill stands in for the fitted extra
    assert latency_us(t, "broadcast", "ring", "LL", p, 1) == pytest.approx(base + net)
    assert latency_us(t, "broadcast", "ring", "LL", p, 2) == pytest.approx(base + 113 * hop + 15 * net)


def test_an_ll_step_crosses_each_network_hop_whole():
    """NCCL 2.8's proxy sends an LL step only once every line's flags are set (v2.8.4-1 src/transport/net.cc lines
    309-316); a step is 8 lines x 512 threads x 16 B = 64 KiB of lines, 32 KiB of data (init.cc line 407).  4 hosts,
    256 KiB on 2 channels (128 KiB a channel): 3 hops x 65,536 B at a channel's share of 4 HCAs of 9.75 GB/s at
    12/12.5 (max(2 channels, 4 NICs) shares: 9.36 GB/s) = 21.0 µs; 1 channel, 64 KiB: one hop, 7.0 µs."""
    rate = 4 * 9.75 * 12.0 / 12.5 / 4
    assert rooted_chunk_bytes("LL", 256 << 10, 2) == 65536 and rooted_chunk_bytes("LL", 16 << 10, 1) == 32768
    assert net_chunk_fill_us("broadcast", "ring", "LL", 256 << 10, 2, abci(4), 4 * 9.75 * 12 / 12.5, 0.0) == (
        pytest.approx(3 * 65536 / (1000 * rate)))
    assert net_chunk_fill_us("broadcast", "ring", "LL", 64 << 10, 1, abci(4), 4 * 9.75 * 12 / 12.5, 0.0) == (
        pytest.approx(65536 / (1000 * rate)))
    # the log's 256 KiB row on 2 channels (108.6 µs): 100.6 µs with the fill (the chain alone: 87.3 µs, 20 % fast)
    assert NcclModel(abci(4), version=V28).time_us("broadcast", 256 << 10) == pytest.approx(log_times(4)[256 << 10],
                                                                                            rel=0.15)


def test_one_host_pays_one_intra_hop():
    m = NcclMachine.from_topology(cluster("dgx-a100", nodes=1))
    assert rooted_chain_hops("broadcast", "ring", 1, m, 8, 0) == (1, 0)


@pytest.mark.parametrize("hosts,sizes", [(4, (1 << 16, 1 << 17)), (8, (1 << 16, 1 << 17, 1 << 18)),
                                         (16, (1 << 16, 1 << 17, 1 << 18, 1 << 19))])
def test_abci_one_channel_rows_are_nearer_one_hop_than_the_chain(hosts, sizes):
    """On one channel (LL, up to 512 KiB on 16 hosts: 8 B x 128 ranks x 512 threads) the one-hop time is nearer the
    log than the chain's, which the model charged before (e.g. 16 hosts, 256 KiB: 104 µs real, 248 chain)."""
    model, t = NcclModel(abci(hosts), version=V28), log_times(hosts)
    tab, p = model.table, model.params
    for size in sizes:
        choice = model.choose("broadcast", size)
        assert (choice.algorithm, choice.protocol, choice.channels) == ("ring", "LL", 1)
        chain = choice.time_us + latency_us(tab, "broadcast", "ring", "LL", p, 2) - latency_us(
            tab, "broadcast", "ring", "LL", p, 1)
        assert abs(choice.time_us - t[size]) < abs(chain - t[size])


def test_abci_rows_on_several_channels_pay_more_than_the_chain():
    """The logs' jump from one channel to two (same bytes a channel) is 2.3-3.9x on 2-16 hosts: the chain is paid
    there, so the model keeps it (16 hosts: 512 KiB on 1 channel 153 µs, 1 MiB on 2 channels 599 µs).  The model's
    jump is smaller (2 hosts 1.26x, 16 hosts 1.63x): the multi-channel LL rows stay fast (docs/nccl-model.md)."""
    for hosts, one in ((2, 1 << 16), (4, 1 << 17), (8, 1 << 18), (16, 1 << 19)):
        t = log_times(hosts)
        assert t[2 * one] > 2.2 * t[one]
        model = NcclModel(abci(hosts), version=V28)
        assert model.choose("broadcast", 2 * one).channels == 2
        assert model.time_us("broadcast", 2 * one) > 1.2 * model.time_us("broadcast", one)

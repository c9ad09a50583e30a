"""The plugin transports' network terms: the verbs transport's per-hop and per-message constants plus
one shared fraction of the latency the plugin publishes (aws-ofi-nccl platform-aws.cpp: p4d/p4de/p5
75 µs, p3dn 150 µs; GPUDirect-TCPXO's plugin publishes none), hand-computed."""

from __future__ import annotations

import pytest

from synth.model.nccl.net_transport import plugin_chunk_us, plugin_hop_us, plugin_latency_us
from synth.model.nccl.params import ModelParams

P = ModelParams(net_lat={("*", "LL"): 0.0, ("*", "Simple"): 0.0, ("ib", "LL"): 3.0, ("ib", "Simple"): 25.0},
                net_chunk={"*": 0.0, "ib": 1.5}, plugin_hop_share=0.4)


def test_published_plugin_latencies():
    assert plugin_latency_us("efa", "sm80") == 75.0            # p4d / p4de
    assert plugin_latency_us("efa", "sm70") == 150.0           # p3dn: EFA on V100
    assert plugin_latency_us("efa2", "sm90") == 75.0           # p5 / p5e
    assert plugin_latency_us("tcpxo", "sm90") == 0.0 and plugin_latency_us("ib", "sm90") == 0.0


def test_hop_and_message_costs_by_hand():
    # p4d Simple hop: InfiniBand's 25 µs + 0.4 x 75 µs = 55 µs; p3dn: 25 + 0.4 x 150 = 85 µs
    assert P.net_latency_us("efa", "Simple", "sm80") == pytest.approx(55.0)
    assert P.net_latency_us("efa", "Simple", "sm70") == pytest.approx(85.0)
    # p5 LL128 hop (LL's row): 3 µs + 0.4 x 75 µs = 33 µs
    assert P.net_latency_us("efa2", "LL128", "sm90") == pytest.approx(33.0)
    # a SENDRECV message: p3dn 1.5 µs + 0.4 x 150 µs = 61.5 µs; p4d: 1.5 + 30 = 31.5 µs
    assert P.net_chunk_us("efa", "sm70") == pytest.approx(61.5)
    assert P.net_chunk_us("efa", "sm80") == pytest.approx(31.5)
    assert plugin_hop_us("efa", "sm80", 1.0) == 75.0 and plugin_chunk_us("efa", "sm80", 1.0) == 75.0
    # p5 runs the RDMA-write protocol: no per-message handshake, the verbs transport's 1.5 µs only
    assert P.net_chunk_us("efa2", "sm90") == pytest.approx(1.5)


def test_tcpxo_keeps_its_own_constants_and_infiniband_adds_nothing():
    # no public TCPXO plugin figure: its own net_lat / net_chunk, else the transport-blind "*" ones
    assert (P.net_latency_us("tcpxo", "Simple", "sm90"), P.net_chunk_us("tcpxo", "sm90")) == (0.0, 0.0)
    assert (P.net_latency_us("ib", "Simple", "sm90"), P.net_chunk_us("ib")) == (25.0, 1.5)


def test_own_constants_still_win_and_line_rates_stay_per_transport():
    own = ModelParams(net_lat={("ib", "Simple"): 25.0, ("efa", "Simple"): 40.0}, plugin_hop_share=0.0)
    assert own.net_latency_us("efa", "Simple", "sm80") == 40.0
    assert P.ring_net_efficiency("efa") == P.net_efficiency("efa")      # not InfiniBand's NET_BW ratio

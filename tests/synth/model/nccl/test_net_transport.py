"""EFA's network terms: one shared fraction of the latency aws-ofi-nccl publishes (platform-aws.cpp:
p4d/p4de/p5 75 µs, p3dn 150 µs) per inter-node hop and, on its SENDRECV platforms, per Simple message;
never InfiniBand's fitted constants; GPUDirect-TCPXO's plugin publishes none; hand-computed."""

from __future__ import annotations

import argparse

import pytest

from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.net_transport import pays_per_message, plugin_latency_us
from synth.model.nccl.params import ModelParams
from synth.model.nccl.runtime import _chunk_rate_gbs, simple_chunk_bytes
from topo_probe.cli.options import apply_machine_arguments
from topo_probe.machines.presets import get_preset

P = ModelParams(net_lat={("*", "LL"): 0.0, ("*", "Simple"): 0.0, ("ib", "LL"): 3.0, ("ib", "Simple"): 25.0},
                net_chunk={"*": 0.0, "ib": 1.5}, plugin_hop_share=0.4)


def test_published_plugin_latencies():
    assert plugin_latency_us("efa", "sm80") == 75.0            # p4d / p4de
    assert plugin_latency_us("efa", "sm70") == 150.0           # p3dn: EFA on V100
    assert plugin_latency_us("efa2", "sm90") == 75.0           # p5 / p5e
    assert plugin_latency_us("tcpxo", "sm90") == 0.0 and plugin_latency_us("ib", "sm90") == 0.0


def test_hop_and_message_costs_by_hand():
    # p4d LL hop: 0.4 x 75 µs = 30 µs (InfiniBand's 3 µs not taken); p3dn: 0.4 x 150 = 60 µs
    assert P.net_latency_us("efa", "LL", "sm80") == pytest.approx(30.0)
    assert P.net_latency_us("efa", "LL", "sm70") == pytest.approx(60.0)
    # a Simple hop pays the plugin per message (below), not per hop: the "*" row only
    assert P.net_latency_us("efa", "Simple", "sm80") == 0.0
    # p5 LL128 hop (LL's row): 0.4 x 75 µs = 30 µs
    assert P.net_latency_us("efa2", "LL128", "sm90") == pytest.approx(30.0)
    # a SENDRECV message: p3dn 0.4 x 150 µs = 60 µs; p4d: 30 µs
    assert P.net_chunk_us("efa", "sm70") == pytest.approx(60.0)
    assert P.net_chunk_us("efa", "sm80") == pytest.approx(30.0)
    assert pays_per_message("efa") and not pays_per_message("efa2") and not pays_per_message("tcpxo")
    # p5 runs the RDMA-write protocol: no per-message handshake
    assert P.net_chunk_us("efa2", "sm90") == 0.0


def test_tcpxo_keeps_its_own_constants_and_infiniband_adds_nothing():
    # no public TCPXO plugin figure: its own net_lat / net_chunk, else the transport-blind "*" ones
    assert (P.net_latency_us("tcpxo", "Simple", "sm90"), P.net_chunk_us("tcpxo", "sm90")) == (0.0, 0.0)
    assert (P.net_latency_us("ib", "Simple", "sm90"), P.net_chunk_us("ib")) == (25.0, 1.5)


def test_an_older_fits_efa_keys_are_inert_and_line_rates_stay_per_transport():
    old = ModelParams(net_lat={("*", "Simple"): 0.0, ("efa", "Simple"): 40.0}, net_chunk={"*": 0.0, "efa": 37.7},
                      plugin_hop_share=0.0)
    assert (old.net_latency_us("efa", "Simple", "sm80"), old.net_chunk_us("efa", "sm80")) == (0.0, 0.0)
    assert P.ring_net_efficiency("efa") == P.net_efficiency("efa")      # not InfiniBand's NET_BW ratio


def test_p4de_mid_size_tree_is_capped_by_one_plugin_latency_per_message():
    """2 x p4de (8 A100, 4 EFA NICs each), tree/Simple all_reduce of 4 MiB on 8 channels under NCCL 2.19 (the
    last to halve a tree's chunk): the chunk falls to 64 KiB (512 KiB per channel < 8 x depth 8 chunks), so each
    channel sends 64 KiB per
    0.4 x 75 = 30 µs: 8 x 65536 B / 30 µs x 1.875 (all_reduce bus factor, 16 ranks) = 32.77 GB/s."""
    ns = argparse.Namespace(nodes=2, nic_gbps=12.5, nics_per_node=4, rail_optimized=False)
    m = NcclMachine.from_topology(apply_machine_arguments(get_preset("dgx-a100"), ns), net_kind="efa")
    t = NcclModel(m, P, version=(2, 19)).table
    assert simple_chunk_bytes(t, "tree", 4 << 20, 8) == 65536
    assert _chunk_rate_gbs(t, "allreduce", "tree", "Simple", 8, 4 << 20, P) == pytest.approx(
        8 * 65536 / (1000.0 * 30.0) * 1.875)


def test_the_tuner_adds_p3dns_own_plugin_latency():
    """NCCL's tuner adds the latency the plugin reports per inter-node hop, twice for Simple: a ring
    all_reduce over 2 hosts crosses the network 2 x (2 - 1) = 2 times, so EFA on V100 (p3dn, 150 µs)
    costs 2 x 2 x 150 = 600 µs of Simple latency more than the same machine over InfiniBand, and LL
    2 x 150 = 300 µs; on A100 (p4d, 75 µs) half of each."""
    from synth.model.nccl.tuning import TuneTable
    ns = argparse.Namespace(nodes=2, nic_gbps=12.5, nics_per_node=4, rail_optimized=False)
    for preset, per_hop in (("dgx1-v100", 150.0), ("dgx-a100", 75.0)):
        topo = apply_machine_arguments(get_preset(preset), ns)
        lat = {k: TuneTable.build(NcclMachine.from_topology(topo, net_kind=k), version=(2, 27)).latency
               for k in ("efa", "ib")}
        for proto, times in (("Simple", 2), ("LL", 1)):
            key = ("allreduce", "ring", proto)
            assert lat["efa"][key] - lat["ib"][key] == pytest.approx(2 * times * per_hop)


def _two_hosts(preset: str, nics: int, kind: str):
    ns = argparse.Namespace(nodes=2, nic_gbps=12.5, nics_per_node=nics, rail_optimized=False)
    topo = apply_machine_arguments(get_preset(preset), ns)
    for n, d in topo.graph.nodes(data=True):
        if d["kind"] == "nic":
            d["transport"] = kind
    return topo, NcclMachine.from_topology(topo, net_kind=kind)


def test_the_execution_model_reads_the_gpus_platform_p3dn_pays_150_us_per_message():
    """The run-time paths pass the GPU architecture: a p3dn (V100) Simple message costs 0.4 x 150 = 60 µs,
    so 8 channels of 64 KiB tree chunks carry 8 x 65536 B / 60 µs x 1.875 = 16.38 GB/s of bus bandwidth."""
    _, m = _two_hosts("dgx1-v100", 1, "efa")
    t = NcclModel(m, P, version=(2, 19)).table
    assert simple_chunk_bytes(t, "tree", 4 << 20, 8) == 65536
    assert _chunk_rate_gbs(t, "allreduce", "tree", "Simple", 8, 4 << 20, P) == pytest.approx(
        8 * 65536 / (1000.0 * 60.0) * 1.875)


@pytest.mark.parametrize("preset,nics,kind,latency", [("dgx-h100", 32, "efa2", 75.0), ("dgx-a100", 4, "efa", 75.0),
                                                      ("dgx1-v100", 1, "efa", 150.0)])
def test_a_send_and_a_step_of_our_schedules_pay_the_plugin_once_per_network_hop(preset, nics, kind, latency):
    """One message across hosts (a point-to-point send; one step of our schedules) pays the plugin's share
    once on either protocol (SENDRECV: per message; RDMA: per hop), on top of NCCL's 14 µs network hop."""
    from synth.model.nccl.p2p import p2p_net_hop_us
    from synth.model.physics import step_costs_us
    topo, m = _two_hosts(preset, nics, kind)
    assert p2p_net_hop_us(m, P) == pytest.approx(14.0 + 0.4 * latency)
    ib_topo, ib = _two_hosts(preset, nics, "ib")
    assert p2p_net_hop_us(m, P) - p2p_net_hop_us(ib, P) == pytest.approx(0.4 * latency - 25.0)
    assert step_costs_us(topo, P)[2] - step_costs_us(ib_topo, P)[2] == pytest.approx(0.4 * latency - 25.0)


def test_tcpxo_runs_under_googles_env_profile_and_the_user_wins():
    # container-engine-accelerators gpudirect-tcpxo/README.md, every release May 2024 - Feb 2025 (NCCL 2.21.5 -
    # 2.23.4): nccl-env-profile.sh sets NCCL_PROTO=Simple, NCCL_ALGO=Ring,Tree, NCCL_MIN_NCHANNELS=4,
    # NCCL_NVLS_ENABLE=0 (only across hosts); the Aug 2025 (2.26.5) and Jan 2026 (2.28.7) releases:
    # NCCL_PROTO=Simple,LL128, NCCL_MIN_NCHANNELS=4, NCCL_NVLSTREE_MAX_CHUNKSIZE=131072, no NCCL_ALGO, NVLS on;
    # every release NCCL_BUFFSIZE=8388608
    _, a3 = _two_hosts("dgx-h100", 8, "tcpxo")
    assert a3.platform_env((2, 21)) == a3.platform_env((2, 23)) == {
        "NCCL_PROTO": "Simple", "NCCL_ALGO": "Ring,Tree", "NCCL_MIN_NCHANNELS": "4", "NCCL_NVLS_ENABLE": "0",
        "NCCL_BUFFSIZE": "8388608"}
    assert a3.platform_env((2, 26)) == a3.platform_env() == {
        "NCCL_PROTO": "Simple,LL128", "NCCL_MIN_NCHANNELS": "4", "NCCL_NVLSTREE_MAX_CHUNKSIZE": "131072",
        "NCCL_BUFFSIZE": "8388608"}
    assert a3.with_(nodes=1, ranks=8).platform_env((2, 23)) == {}
    m = NcclModel(a3, version=(2, 23))
    picks = {(m.choose(c, s).algorithm, m.choose(c, s).protocol) for c in ("allreduce", "allgather")
             for s in (8, 64 << 10, 1 << 20, 16 << 20, 1 << 30)}
    assert {p for _, p in picks} == {"Simple"} and {a for a, _ in picks} <= {"ring", "tree"}
    new = NcclModel(a3)
    new_picks = {(new.choose(c, s).algorithm, new.choose(c, s).protocol) for c in ("allreduce", "allgather")
                 for s in (8, 64 << 10, 1 << 20, 16 << 20, 1 << 30)}
    assert {p for _, p in new_picks} <= {"Simple", "LL128"} and "LL" not in {p for _, p in new_picks}
    assert any(a.startswith("nvls") for a, _ in new_picks)  # NVLS is on again
    assert NcclModel(a3, env=NcclEnv.from_environ({"NCCL_PROTO": "LL"})).choose("allgather", 8).protocol == "LL"

"""Ring channels stream through the NICs at NCCL's own NET_BW ratio of the line rate: checked
against real nccl-tests logs of H100 InfiniBand rings (tests/fixtures/real_logs, each with its
SOURCE header) and against the hand-computed NIC limit."""

from __future__ import annotations

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.env import NcclEnv
from topo_probe import cluster

LOGS = ROOT / "tests" / "fixtures" / "real_logs"
BIG = 8 << 30


def measured_busbw(file: str, size: int = BIG) -> float:
    """Out-of-place busbw (GB/s) the log measured at ``size`` bytes."""
    run = next(r for r in load_runs(LOGS / file) if any(row.size == size for row in r.rows))
    return next(row.out_of_place.busbw_gbps for row in run.rows if row.size == size)


def ring_machine(hosts: int, gpus_per_host: int) -> NcclMachine:
    """``hosts`` H100 hosts, ``gpus_per_host`` GPUs each with its own 400 Gb/s InfiniBand NIC."""
    m = NcclMachine.from_topology(cluster("dgx-h100", nodes=hosts))
    return m.with_(ranks=hosts * gpus_per_host, nics_per_node=gpus_per_host)


def test_ring_reaches_the_hand_computed_nic_limit():
    """2 hosts x 8 H100, NCCL_ALGO=Ring NCCL_MIN_CTAS=24 (the real log's settings), 8 GiB: 8 NICs x 50 GB/s x
    12/12.5 = 384 GB/s of bus bandwidth (NVLink and 24 channels' CTAs carry more: test_ring_net_cta.py), less only
    the latency of 2 x 15 + 0.x steps."""
    m = ring_machine(2, 8)
    c = NcclModel(m, env=NcclEnv.from_environ({"NCCL_ALGO": "Ring", "NCCL_MIN_CTAS": "24"})).choose("allreduce", BIG)
    assert c.algorithm == "ring"
    assert DEFAULT_PARAMS.ring_net_efficiency("ib") == pytest.approx(12.0 / 12.5)
    assert c.busbw_gbps(m.ranks) == pytest.approx(8 * 50.0 * 12.0 / 12.5, rel=0.02)


@pytest.mark.parametrize("hosts, gpus, file, env", [
    (2, 8, "h100_16gpu_2node_all_reduce_ib_8nodecluster_ring.txt", {"NCCL_ALGO": "Ring", "NCCL_MIN_CTAS": "24"}),
    (10, 2, "h100_20gpu_10node_all_reduce_5tests_2gpn.txt", {}),
    (10, 4, "h100_40gpu_10node_all_reduce_5tests_4gpn.txt", {}),
    (10, 1, "h100_10gpu_10node_all_reduce_5tests_1gpn.txt", {}),
])
def test_ring_busbw_matches_real_infiniband_rings(hosts, gpus, file, env):
    """Each real ring streams at 48.8-49.1 GB/s per 400 Gb/s NIC at 8 GiB; the model within 5 %."""
    m = ring_machine(hosts, gpus)
    c = NcclModel(m, env=NcclEnv.from_environ(env)).choose("allreduce", BIG)
    assert c.algorithm == "ring", c.label
    assert c.busbw_gbps(m.ranks) == pytest.approx(measured_busbw(file), rel=0.05)


def test_a_ring_across_hosts_relieves_the_gpu_links():
    """Real: 8 x H100 on one host ring at 368.0 GB/s (NVLink-bound), 2 such hosts at 392.7: more
    than NVLink allows on one host, because one hop per host crosses a NIC instead.  The model's
    GPU-link limit of the 2-host ring is 8/7 of the 1-host one (hand-computed: 7 of 8 sends on NVLink)."""
    from synth.model.nccl.runtime import _intra_bus_gbs, ring_intra_relief
    from synth.model.nccl.tuning import TuneTable
    from topo_probe import get_preset

    assert measured_busbw("h100_16gpu_2node_all_reduce_ib_8nodecluster_ring.txt") > \
        measured_busbw("h100_8gpu_1node_all_reduce_ring.txt")
    env = NcclEnv.from_environ({"NCCL_ALGO": "Ring"})
    one = TuneTable.build(NcclMachine.from_topology(get_preset("dgx-h100")), env)
    two = TuneTable.build(ring_machine(2, 8), env)
    assert ring_intra_relief(two.machine) == pytest.approx(8 / 7)
    from synth.model.nccl.runtime import ring_capacity_gbs
    from synth.model.nccl.ring_steps import ring_send_share

    def copy_free(t):      # the limit without the ring's copy-only step (ring_steps.py), which counts every rank
        share = ring_capacity_gbs(t.machine, t.graphs, DEFAULT_PARAMS) / t.graphs.n_channels / DEFAULT_PARAMS.ring_copy_gbs
        bus = _intra_bus_gbs(t, "allreduce", "ring", "Simple", t.graphs.n_channels, DEFAULT_PARAMS)
        return bus / ring_send_share("allreduce", t.machine.ranks, share)
    assert copy_free(two) == pytest.approx(copy_free(one) * 8 / 7)


def test_a_gen5_gpu_reaches_its_400g_nic_and_a_gen4_gpu_does_not():
    """The path from a GPU to its NIC is a PCIe x16 link at its data-sheet rate (Gen5 63 GB/s, Gen4
    31.5 GB/s): a 400 Gb/s (50 GB/s) NIC is the limit behind Gen5, the PCIe link behind Gen4
    (hand-computed: 8 x 50 and 8 x 31.5 GB/s of line rate per host)."""
    from synth.model.nccl.runtime import _net_bw

    gen5 = ring_machine(2, 8)
    gen4 = gen5.with_(pcie_gen=4)
    eff = DEFAULT_PARAMS.ring_net_efficiency("ib")
    assert _net_bw(gen5, DEFAULT_PARAMS, ring=True) == pytest.approx(8 * 50.0 * eff)
    assert _net_bw(gen4, DEFAULT_PARAMS, ring=True) == pytest.approx(8 * 31.5 * eff)

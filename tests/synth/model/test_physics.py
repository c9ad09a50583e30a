"""One physics: the cost model of our schedules, the NCCL model and the lower bounds share the
link constants and the hop latencies, so the bound bounds both sides on every machine and our
ring costs what NCCL's ring/Simple costs."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from synth.baselines import baseline
from synth.ir.fabric import build_fabric
from synth.model.cost import CostModel
from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.constants import PCIE_X16_GBS
from synth.model.physics import cost_params_for, model_version, step_costs_us
from topo_probe.cli.options import apply_machine_arguments
from topo_probe.machines.presets import get_preset

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import bound_check  # noqa: E402  (benchmarks/bound_check.py: the same check over more sizes)

SIZES = [8 << k for k in range(0, 31, 3)]                     # 8 B ... 8 GiB


def machine(preset: str, nodes: int | None = None, net: str | None = None, rail: bool = False):
    ns = argparse.Namespace(nodes=nodes, nic_gbps=None, nics_per_node=None, rail_optimized=rail, net=net,
                            spine_oversubscription=None, hosts_per_leaf=None)
    return apply_machine_arguments(get_preset(preset), ns)


def test_each_link_kind_takes_the_shared_constant():
    p = cost_params_for(build_fabric(get_preset("dgx-h100")))
    assert p.nvlink_efficiency == DEFAULT_PARAMS.link_efficiency("sm90", "nvlink")
    assert p.pcie_efficiency == DEFAULT_PARAMS.link_efficiency("sm90", "pcie")
    assert p.cpu_efficiency == DEFAULT_PARAMS.link_efficiency("sm90", "shm")
    v100 = cost_params_for(get_preset("dgx1-v100"))
    assert v100.nvlink_efficiency == DEFAULT_PARAMS.link_efficiency("sm70", "nvlink") != p.nvlink_efficiency
    amd = cost_params_for(get_preset("mi300x"))
    assert amd.infinity_fabric_efficiency == DEFAULT_PARAMS.link_efficiency("gfx942", "xgmi")
    efa2 = cost_params_for(machine("dgx-h100", 2, "efa2"))
    streams = max(DEFAULT_PARAMS.net_efficiency("efa2"), DEFAULT_PARAMS.ring_net_efficiency("efa2"))
    assert efa2.network_efficiency == streams
    # a step crossing the network costs NCCL's ring/Simple network hop: the table's 14 µs plus the
    # transport's fitted extra (tuning.cc hwLatencies[NET][Ring][Simple])
    for fab, net in ((build_fabric(machine("dgx-h100", 2, "efa2")), "efa2"), (build_fabric(machine("dgx-h100", 2)), "ib")):
        p = cost_params_for(fab)
        wire = fab.channel_latency_us(0, fab.hosts.index(1))
        assert p.step_overhead_us + wire + p.network_latency_us == pytest.approx(
            14.0 + DEFAULT_PARAMS.net_latency_us(net, "Simple"), rel=1e-12)


def test_model_version_names_the_shared_constants():
    other = replace(DEFAULT_PARAMS, link_eff={**DEFAULT_PARAMS.link_eff, ("sm90", "nvlink"): 0.5})
    assert model_version() == model_version(DEFAULT_PARAMS) != model_version(other)


def test_net_kind_applies_to_our_schedules_too():
    """A ring all-gather on 2 hosts: with one slice --net efa2 adds exactly NCCL's extra EFA-v2
    per-hop latency to each network hop of the longest chain of hops (every chunk's path around
    the ring is as long; the one crossing the hosts most often sets the time), the NICs' achieved
    fraction held equal (IB streams at the ring's rate, EFA at its fitted one)."""
    ib, efa2 = build_fabric(machine("dgx-h100", 2)), build_fabric(machine("dgx-h100", 2, "efa2"))
    s = baseline("ring", ib, "allgather")
    one = (1,)
    t_ib = CostModel(ib, replace(cost_params_for(ib), pipeline_slices=one)).schedule_time_us(s, 1 << 20)
    ib_rate = cost_params_for(ib).network_efficiency
    same_rate = replace(cost_params_for(efa2), pipeline_slices=one, network_efficiency=ib_rate)
    t_efa = CostModel(efa2, same_rate).schedule_time_us(s, 1 << 20)
    hops = {}
    for st in s.steps:
        for t in st.transfers:
            hops.setdefault(t.chunk, []).append(ib.hosts[t.src] != ib.hosts[t.dst])
    assert len({len(h) for h in hops.values()}) == 1           # every chunk's path: the same hop count
    crossing = max(sum(h) for h in hops.values())
    assert crossing >= 1
    extra = DEFAULT_PARAMS.net_latency_us("efa2", "Simple") - DEFAULT_PARAMS.net_latency_us("ib", "Simple")
    assert t_efa - t_ib == pytest.approx(crossing * extra, rel=1e-9)


def test_nccl_alltoall_on_a_mesh_before_2_8_sends_to_unlinked_peers_over_pcie():
    """DGX-1: GPU 0 has NVLinks to 4 peers; before NCCL 2.8 (no PATH_NVB) its P2P reaches the other 3 through
    PCIe.  At 1 GiB the PCIe part sets the time: 3 x (1 GiB / 8) at the Gen3 x16 data-sheet rate times the shared
    PCIe efficiency, plus NCCL's fixed p2p latency (hand-computed); the receiver's copy of its last FIFO chunk
    (``ring_steps.p2p_simple_fill``, tested in test_p2p_fifo_fill.py) adds under 1 % to a 128 MiB part.  From 2.8
    those 3 go through one intermediate GPU over NVLink: tests/synth/model/nccl/test_p2p_mesh.py."""
    m = NcclMachine.from_topology(get_preset("dgx1-v100"))
    linked = sum(1 for k in m.link_matrix[0] if k)
    assert linked == 4
    size = 1 << 30
    pcie = PCIE_X16_GBS[m.pcie_gen] * DEFAULT_PARAMS.link_efficiency("sm70", "pcie") * 1e3
    by_hand = DEFAULT_PARAMS.p2p_latency_us + 3 * (size / 8) / pcie
    assert by_hand < NcclModel(m, version=(2, 7)).choose("alltoall", size).time_us < by_hand * 1.01


MACHINES = {
    "dgx1-v100": lambda: get_preset("dgx1-v100"), "dgx2": lambda: get_preset("dgx2"),
    "dgx-a100": lambda: get_preset("dgx-a100"), "dgx-h100": lambda: get_preset("dgx-h100"),
    "mi300x": lambda: get_preset("mi300x"), "pcie-8gpu-2socket": lambda: get_preset("pcie-8gpu-2socket"),
    "2 x dgx-h100": lambda: machine("dgx-h100", 2), "2 x dgx-a100 efa": lambda: machine("dgx-a100", 2, "efa"),
    "4 x dgx-h100 rail efa2": lambda: machine("dgx-h100", 4, "efa2", rail=True),
    "2 x mi300x": lambda: machine("mi300x", 2),
}


@pytest.mark.parametrize("name", list(MACHINES))
def test_nothing_either_side_does_is_below_the_bound(name):
    """For every collective at 8 B - 8 GiB: NCCL's modelled choice and every baseline schedule
    (as the cost model times it) take at least the bound computed from the same constants."""
    _, below, _ = bound_check.check(MACHINES[name](), sizes=SIZES, max_schedule_ranks=16)
    assert not below, below[:5]


@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-a100", "dgx1-v100"])
def test_our_ring_and_nccl_ring_simple_are_timed_alike(preset):
    """One model for both sides: our ring all-reduce schedule and NCCL's ring under the Simple
    protocol (NCCL_ALGO=Ring NCCL_PROTO=Simple, all its channels busy from 1 MiB) cost the same on
    the same GPUs: NCCL's base latency and one hop per step of the same scaled table, the same
    links at the same achieved rates.  At 8 B both are latency alone (14 hops)."""
    from synth.model.nccl.env import NcclEnv
    topo = get_preset(preset)
    fabric = build_fabric(topo)
    ours = CostModel(fabric)
    ring = baseline("ring", fabric, "allreduce")
    nccl = NcclModel(NcclMachine.from_topology(topo), env=NcclEnv.from_environ({"NCCL_ALGO": "Ring",
                                                                                "NCCL_PROTO": "Simple"}))
    launch, hop, _ = step_costs_us(topo)
    assert ours.schedule_time_us(ring, 8) == pytest.approx(launch + 14 * hop, rel=1e-4)      # + 8 bytes
    for size in (8, 1 << 20, 16 << 20, 256 << 20, 8 << 30):
        theirs = nccl.choose("allreduce", size)
        assert (theirs.algorithm, theirs.protocol) == ("ring", "Simple")
        assert ours.schedule_time_us(ring, size) == pytest.approx(theirs.time_us, rel=0.02), size

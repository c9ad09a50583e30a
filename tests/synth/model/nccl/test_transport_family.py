"""RoCE runs on NCCL's InfiniBand verbs transport, so with no constant of its own it takes
InfiniBand's per-hop latency, per-message cost and efficiencies (never the transport-blind
zeros), and a RoCE machine's mid-size all_reduce is predicted as a real one ran."""

from __future__ import annotations

import argparse

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.params import ModelParams
from topo_probe.cli.options import apply_machine_arguments
from topo_probe.machines.presets import get_preset

LOGS = ROOT / "tests" / "fixtures" / "real_logs"


def test_roce_takes_infiniband_constants_unless_it_has_its_own():
    p = ModelParams(net_lat={("*", "LL"): 0.0, ("*", "Simple"): 0.0, ("ib", "LL"): 3.0, ("ib", "Simple"): 25.0},
                    net_chunk={"*": 0.0, "ib": 1.5}, net_eff={"*": 0.85, "ib": 0.9})
    assert (p.net_latency_us("roce", "LL"), p.net_latency_us("roce", "LL128"), p.net_latency_us("roce", "Simple")) \
        == (3.0, 3.0, 25.0)
    assert (p.net_chunk_us("roce"), p.net_efficiency("roce")) == (1.5, 0.9)
    assert p.net_latency_us("socket", "Simple") == 0.0 and p.net_chunk_us("socket") == 0.0
    own = ModelParams(net_lat={("ib", "Simple"): 25.0, ("roce", "Simple"): 40.0})
    assert own.net_latency_us("roce", "Simple") == 40.0


def test_mi355x_over_roce_mid_sizes_follow_the_real_log():
    """2 x 8 MI355X over 8 x 400 Gb/s Pollara (RoCE), RCCL 2.26.6: a machine class no fit sees.
    Median |pred/real - 1| of busbw over the 64 KiB - 8 GiB rows within 15 %."""
    ns = argparse.Namespace(nodes=2, nic_gbps=50.0, nics_per_node=8, rail_optimized=False)
    topo = apply_machine_arguments(get_preset("mi355x"), ns)
    m = NcclMachine.from_topology(topo, net_kind="roce")
    model = NcclModel(m, DEFAULT_PARAMS, version=(2, 26))
    run = load_runs(LOGS / "mi355x_16gpu_2node_all_reduce_pollara.txt")[0]
    errors = sorted(abs(r.out_of_place.time_us / model.choose("allreduce", r.size).time_us - 1)
                    for r in run.rows if r.size >= 64 << 10 and r.out_of_place and r.out_of_place.time_us)
    assert len(errors) >= 10
    assert errors[len(errors) // 2] <= 0.15, errors

"""RCCL's rings and channels on one xGMI host (synth/model/nccl/rccl_channels.py) against references worked out
independently: the directed Hamiltonian cycles of the complete digraph on 4 GPUs enumerated by brute force, and the
channel counts RCCL 2.26.6 printed on MI355X hosts (Ahalperin/amd-dev 58a032f7 results/scale_4gpu_all_reduce and
scale_8gpu_all_reduce nccl_debug.log: ``Pattern 4, nChannels 6, bw 24`` / ``24 coll channels`` and ``nChannels 28,
bw 12`` / ``112 coll channels``) and ROCm/rccl 0cbce2a7 src/init.cc:1496-1501 for gfx94x (2 ranks: 32 channels, 4
ranks: 24)."""

from __future__ import annotations

import itertools
import math

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.params import DEFAULT_PARAMS
from synth.model.nccl.rccl_channels import rccl_channel_cap_gbs, rccl_mesh_rings
from synth.model.nccl.runtime import collective_time_us
from topo_probe import cluster, get_preset

MI355X = NcclMachine.from_topology(get_preset("mi355x"))
MI300X = NcclMachine.from_topology(get_preset("mi300x"))


def _directed_hamiltonian_cycles(n: int) -> list[tuple]:
    """Every directed Hamiltonian cycle of the complete digraph on ``n`` vertices, starting at vertex 0."""
    return [(0,) + p for p in itertools.permutations(range(1, n))]


def test_k4_cycles_load_every_arc_twice():
    """4 GPUs: 6 directed Hamiltonian cycles; each of the 12 arcs lies on exactly 2 of them, so each ring at
    48 / 2 = 24 GB/s fills every link (RCCL's logged ``bw 24``) and the model's ring count is that 6."""
    cycles = _directed_hamiltonian_cycles(4)
    load = {}
    for c in cycles:
        for a, b in zip(c, c[1:] + c[:1]):
            load[(a, b)] = load.get((a, b), 0) + 1
    assert len(cycles) == 6 and len(load) == 12 and set(load.values()) == {2}
    assert rccl_mesh_rings(4) == len(cycles)


@pytest.mark.parametrize("machine, ranks, ring, coll", [
    (MI355X, 8, 28, 112), (MI355X, 4, 6, 24), (MI300X, 8, 28, 56), (MI300X, 4, 6, 24), (MI300X, 2, 2, 32)])
def test_channel_counts_as_rccl_printed(machine, ranks, ring, coll):
    g = comm_graphs(machine.with_(ranks=ranks))
    assert (g.ring.n_channels, g.n_channels) == (ring, coll)


def test_channel_counts_across_hosts():
    """Across hosts gfx950 copies its ring graph four times too, at most 64 channels: RCCL 2.26.6 printed ``64 coll
    channels`` on 2 x 8 MI355X, ``32`` on 2 x 4 (8 graph channels) and ``8`` on 2 x 2 and 2 x 1 (2 graph channels;
    Ahalperin/amd-dev 58a032f7 results/scale_2x{8,4,2,1}gpu_all_reduce/nccl_debug.log); gfx942 keeps twice its 28
    rings (56)."""
    assert comm_graphs(NcclMachine.from_topology(cluster("mi355x", nodes=2))).n_channels == 64
    assert comm_graphs(NcclMachine.from_topology(cluster("mi300x", nodes=2))).n_channels == 56
    two = NcclMachine.from_topology(cluster("mi355x", nodes=2, nics_per_node=1))
    assert [comm_graphs(two.with_(ranks=r)).n_channels for r in (2, 4)] == [8, 8]


def test_cap_only_for_one_host_simple():
    """One host, and gfx950 across hosts (its channel counts there are RCCL's); not gfx942 across hosts."""
    two = NcclMachine.from_topology(cluster("mi300x", nodes=2))
    assert rccl_channel_cap_gbs(NcclMachine.from_topology(cluster("mi355x", nodes=2)), "Simple", 24, 6.0) == 144.0
    assert rccl_channel_cap_gbs(MI355X, "Simple", 24, 5.5) == pytest.approx(132.0)
    assert math.isinf(rccl_channel_cap_gbs(MI355X, "LL", 24, 5.5))
    assert math.isinf(rccl_channel_cap_gbs(two, "Simple", 24, 5.5))
    assert math.isinf(rccl_channel_cap_gbs(NcclMachine.from_topology(get_preset("dgx-h100")), "Simple", 24, 5.5))


def test_four_mi355x_ring_is_channel_bound():
    """A 8 GiB allreduce on 4 x MI355X: 24 channels x 5.5 GB/s = 132 GB/s of bus bandwidth (the links alone would
    allow 3 x 76.8 x 0.7 = 161 GB/s); on 8 GPUs the 112 channels leave the links the bound."""
    params = DEFAULT_PARAMS.with_vector([("rccl_channel_gbs",), ("link_eff", "*", "xgmi")], [5.5, 0.7])
    nbytes = 8 << 30
    for ranks, bus in ((4, 132.0), (8, 7 * MI355X.link_gbs * 0.7)):
        t = NcclModel(MI355X.with_(ranks=ranks), params=params).table
        us = collective_time_us(t, "allreduce", "ring", "Simple", t.graphs.n_channels, nbytes, params)
        assert nbytes * 2 * (ranks - 1) / ranks / (1000.0 * us) == pytest.approx(bus, rel=0.01)


@pytest.mark.parametrize("nbytes", [2 << 20, 4 << 20, 8 << 20])
def test_gfx950_runs_no_ll128_across_hosts(nbytes):
    """RCCL leaves LL128 off on gfx950 (init.cc ``topo->ll128Enabled = false``): RCCL 2.26.6 across 2 MI355X hosts
    logged ``2097152 / 4194304 / 8388608 Bytes -> Algo TREE proto SIMPLE`` (results/scale_2x1gpu_all_reduce/
    nccl_debug.log), where gfx942's ranges (LL128 from 1 MiB to 9 MiB) still give MI300X LL128."""
    two = NcclModel(NcclMachine.from_topology(cluster("mi355x", nodes=2))).choose("allreduce", nbytes)
    mi300 = NcclModel(NcclMachine.from_topology(cluster("mi300x", nodes=2))).choose("allreduce", nbytes)
    assert (two.protocol, mi300.protocol) == ("Simple", "LL128")


@pytest.mark.parametrize("ranks, nodes, lo, hi, want", [
    (8, 1, 112, None, 112),   # one gfx94x host: MAXCHANNELS 128 (connect.cc 629-631), AMD's usual MI300X tuning
    (4, 1, 112, None, 24),    # fewer than 8 ranks: a minimum above 64 is ignored (connect.cc 682-685)
    (8, 1, 200, None, 56),    # above the maximum: ignored (connect.cc 686-689)
    (16, 2, 112, None, 64),   # across hosts the minimum is capped at 64 (connect.cc 679-681)
    (8, 1, None, 16, 16),     # NCCL_MAX_NCHANNELS still caps
])
def test_rccl_channel_variables(ranks, nodes, lo, hi, want):
    """NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS on an MI300X host as RCCL (ROCm/rccl 0cbce2a7) applies them."""
    from synth.model.nccl.env import NcclEnv
    m = MI300X.with_(ranks=ranks, nodes=nodes) if nodes > 1 else MI300X.with_(ranks=ranks)
    assert comm_graphs(m, NcclEnv(min_channels=lo, max_channels=hi)).n_channels == want


@pytest.mark.parametrize("env, want", [({"NCCL_MAX_CTAS": "8"}, 8), ({"NCCL_MIN_CTAS": "64"}, 64),
                                       ({"NCCL_MIN_NCHANNELS": "112"}, 112), ({"NCCL_MAX_NCHANNELS": "128"}, 56)])
def test_rccl_channel_variables_from_the_environment(env, want):
    """The variables as a user sets them, parsed: RCCL takes min(maxNchannels, nChannels, maxCTAs), copied up to
    max(minNchannels, minCTAs) (connect.cc 703-707), up to its MAXCHANNELS of 128 on one host (56 channels unset)."""
    from synth.model.nccl.env import NcclEnv
    assert comm_graphs(MI300X, NcclEnv.from_environ(env)).n_channels == want


def test_three_gpu_graph_doubles_like_two():
    """3 GPUs of a mesh: two directed cycles at the link's 48 GB/s, doubled by ncclTopoDupChannels (>= 25 GB/s) to
    4 channels at 24; 4 GPUs: six at 24, not doubled (ROCm/rccl 0cbce2a7 src/graph/search.cc 885-897)."""
    assert [rccl_mesh_rings(k) for k in (2, 3, 4)] == [2, 4, 6]

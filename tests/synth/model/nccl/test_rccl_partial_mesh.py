"""RCCL's ring graph on 5-7 GPUs of one xGMI host (synth/model/nccl/rccl_channels.py ``PARTIAL_MESH_RINGS``) against
references worked out by hand from RCCL's source: such a host matches no 8-GPU rome model, yet RCCL marks it "Rome
4P2H" (``ngpus > 4 && romeTopo.nLinks``: ROCm/rccl 0cbce2a7 src/graph/rome_models.cc:1949-1950, RCCL 2.26.6
Ahalperin/amd-dev 0d4f8c1 rccl/src/graph/rome_models.cc:2052-2053) and ``ncclTopoCompute`` caps a one-host ring search
at ``maxChannels = 2`` (0cbce2a7 src/graph/search.cc:989-992, 0d4f8c1 rccl/src/graph/search.cc:1073-1076).  Two rings
at 48 GB/s (AMD speedArrayIntra[0], search.cc:965; ccMin 60, topo.cc:408) cannot share a 48 GB/s link (48 + 48 > 48),
so each GPU sends on 2 of its links; gfx950 copies the graph 4 times
(0d4f8c1 rccl/src/init.cc:1402-1404), gfx942 twice."""

from __future__ import annotations

import itertools

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.params import DEFAULT_PARAMS
from synth.model.nccl.rccl_channels import rccl_mesh_rings
from synth.model.nccl.runtime import collective_time_us, ring_capacity_gbs
from topo_probe import cluster, get_preset

MI355X = NcclMachine.from_topology(get_preset("mi355x"))
MI300X = NcclMachine.from_topology(get_preset("mi300x"))


def _two_arc_disjoint_cycles(n: int) -> bool:
    """Whether the complete digraph on ``n`` vertices holds two directed Hamiltonian cycles sharing no arc (brute
    force over cycles starting at vertex 0)."""
    arcs = [frozenset(zip(c, c[1:] + c[:1])) for c in ((0,) + p for p in itertools.permutations(range(1, n)))]
    return any(not (a & b) for a, b in itertools.combinations(arcs, 2))


@pytest.mark.parametrize("gpus", [5, 6, 7])
def test_two_rings_on_five_to_seven_gpus(gpus):
    """RCCL's search at 48 GB/s (AMD speedArrayIntra[0], search.cc:965; ccMin 60, topo.cc:408) finds 1 ring with
    sameChannels, then on the retry without it fills maxChannels = 2 with two arc-disjoint rings, which exist on 5-7
    GPUs; 8 GPUs keep the rome model's 28 rings, 4 GPUs the 6 of the unlimited search."""
    assert _two_arc_disjoint_cycles(gpus)
    assert rccl_mesh_rings(gpus) == 2
    assert (rccl_mesh_rings(4), rccl_mesh_rings(8)) == (6, 28)


def test_two_hosts_of_six_gpus_not_capped():
    """The cap needs ``ngpus == system->nRanks`` (0d4f8c1 rccl/src/graph/search.cc:1073): 2 hosts x 6 MI300X (6 GPUs,
    12 ranks) keep the multi-host ring graph, the 8-GPU stand-in's 28 rings (rome model 79's ``ringBase``, 0d4f8c1
    rome_models.cc:551-562, 28 rings), copied twice across hosts: 56 channels, not 2 and 4."""
    g = comm_graphs(NcclMachine.from_topology(cluster("mi300x", nodes=2)).with_(ranks=12))
    assert (g.ring.n_channels, g.n_channels) == (28, 56)


@pytest.mark.parametrize("machine, ring, coll", [(MI355X, 2, 8), (MI300X, 2, 4)])
def test_six_gpu_channel_counts(machine, ring, coll):
    """6 ranks: 2 ring-graph channels, x 4 on gfx950 (8) and x 2 on gfx942 (4, RCCL's default ``nc``)."""
    g = comm_graphs(machine.with_(ranks=6))
    assert (g.ring.n_channels, g.n_channels) == (ring, coll)


def test_two_rings_use_two_links():
    """A GPU of the 6-GPU ring graph sends on 2 of its 5 xGMI links: 2 x 76.8 GB/s x the xGMI efficiency, where 8
    GPUs keep all 7 links and 4 GPUs all 3."""
    eff = DEFAULT_PARAMS.link_efficiency("gfx950", "xgmi")
    for ranks, links in ((6, 2), (8, 7), (4, 3)):
        m = MI355X.with_(ranks=ranks)
        assert ring_capacity_gbs(m, comm_graphs(m), DEFAULT_PARAMS) == pytest.approx(links * 76.8 * eff)


def test_six_gpu_ring_bound_by_channels_then_links():
    """An 8 GiB allreduce on 6 x MI355X: 8 channels x 5.5 GB/s = 44 GB/s of bus bandwidth (2 links would allow
    2 x 76.8 x 0.7 = 107.5); with NCCL_MIN_NCHANNELS=64 the 64 channels (352 GB/s) leave the 2 links the bound,
    not the 5 links' 268.8 GB/s."""
    params = DEFAULT_PARAMS.with_vector([("rccl_channel_gbs",), ("link_eff", "*", "xgmi")], [5.5, 0.7])
    nbytes, m = 8 << 30, MI355X.with_(ranks=6)
    for env, bus in ((NcclEnv(), 44.0), (NcclEnv(min_channels=64), 2 * 76.8 * 0.7)):
        t = NcclModel(m, params=params, env=env).table
        us = collective_time_us(t, "allreduce", "ring", "Simple", t.graphs.n_channels, nbytes, params)
        assert nbytes * 2 * 5 / 6 / (1000.0 * us) == pytest.approx(bus, rel=0.01)

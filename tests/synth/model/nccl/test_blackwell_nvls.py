"""NVLS on Blackwell and in an NVL72 rack, as NCCL's source sets it up (NVIDIA/nccl 5067397c:
src/transport/nvls.cc ncclNvlsTuning / ncclNvlsTreeSm100Tuning, src/include/device.h
NCCL_MAX_NVLS_ARITY, src/graph/search.cc ncclTopoSearchTryNvls), checked against hand counts from
that source and against published nccl-tests figures no fit has seen."""

from __future__ import annotations

import sys

import pytest
from _paths import ROOT

from synth.model.nccl import DEFAULT_PARAMS, NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.confidence import ClassRecord, confidence_line, machine_class
from synth.model.nccl.constants import busbw_factor
from synth.model.nccl.graphs import comm_graphs, nvls_ctas, nvls_node_graph
from topo_probe import cluster, get_preset

sys.path.insert(0, str(ROOT / "benchmarks"))
import published_nccl_anchors as anchors  # noqa: E402


def _m(preset: str, nodes: int = 1) -> NcclMachine:
    return NcclMachine.from_topology(cluster(preset, nodes=nodes) if nodes > 1 else get_preset(preset))


@pytest.mark.parametrize("preset, nodes, version, env, want", [
    ("dgx-h100", 1, (2, 28), {}, 16),            # NVLS_NCHANNELS_SM90
    ("hgx-b200", 1, (2, 26), {}, 32),            # before 2.27: NVLS_NCHANNELS_SM100 everywhere
    ("hgx-b200", 1, (2, 28), {}, 24),            # 2.27+: NVLS_NCHANNELS_SM100_NVL in one NVLink domain
    ("gb200-nvl72", 1, (2, 28), {}, 24),
    ("hgx-b200", 2, (2, 28), {}, 32),            # several nodes: NVLS_NCHANNELS_SM100
    ("hgx-b200", 2, (2, 30), {}, 32),            # Sm100 tuning, 2 nodes, NIC >= 48 GB/s: 32
    ("hgx-b200", 4, (2, 30), {}, 24),            # Sm100 tuning, > 2 nodes, 48 <= NIC < 96 GB/s: 24
    ("hgx-b200", 4, (2, 28), {}, 32),            # ... which 2.28 does not have
    ("hgx-b200", 1, (2, 28), {"NCCL_MAX_CTAS": "8"}, 8),
])
def test_nvls_ctas_follow_nvls_cc(preset, nodes, version, env, want):
    assert nvls_ctas(_m(preset, nodes), NcclEnv.from_environ(env), version) == want


def test_nvl72_nvls_graph_has_32_heads_at_the_fastest_speed_the_head_load_allows():
    """ncclTopoCompute caps NVLS heads at NCCL_MAX_NVLS_ARITY = 32; ncclTopoSearchTryNvls loads every
    GPU once per head and the head twice: 33 x speed must fit a GPU's 18 NVLink 5 links (NCCL rates
    each at 40.1 GB/s on sm100, topo.h SM100_NVLINK_BW)."""
    g = comm_graphs(_m("gb200-nvl72")).nvls
    cap = 18 * 40.1
    speeds = (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)   # sm100SpeedArrayIntra
    assert g.n_channels == 32
    assert g.bw_intra == max(s for s in speeds if 33 * s <= cap)


def test_multi_node_nvls_runs_at_the_nodes_nvlink_rate_not_the_nic_search_speed():
    two = _m("hgx-b200", 2)
    assert comm_graphs(two).nvls.bw_intra == 48.0           # NCCL's search: a NIC's speed
    assert nvls_node_graph(two) == comm_graphs(_m("hgx-b200")).nvls
    # with the NVLink side no longer capped at a NIC's speed, 2 x 8 B200 all_reduce at 8 GiB is bound by
    # the 8 x 400 Gb/s NICs: busbw = busbw factor x 8 x 50 GB/s x the ring's NET_BW ratio (two nodes:
    # each NIC streams one steady flow per direction, see the next test)
    model = NcclModel(two, DEFAULT_PARAMS, NcclEnv())
    c = model.choose("allreduce", 8 << 30)
    bus = (8 << 30) / c.time_us / 1e3 * busbw_factor("allreduce", 16)
    bound = busbw_factor("allreduce", 16) * 8 * 50.0 * DEFAULT_PARAMS.ring_net_efficiency("ib")
    assert c.algorithm == "nvls_tree" and bus == pytest.approx(bound, rel=0.01)


@pytest.mark.parametrize("nodes, want_gbs", [
    (2, 1.875 * 8 * 50.0 * 12.0 / 12.5),     # 720.0: chain of two, ring's NET_BW ratio, one pass
    (4, 1.9375 * 8 * 50.0 * 0.85 / 2),       # 329.4: inner vertices, net_eff (hand-set 0.85), two passes
])
def test_nvls_tree_network_limit_on_two_nodes_is_the_rings(nodes, want_gbs):
    """NVIDIA/nccl v2.29.3-1 src/graph/tuning.cc ncclTopoTuneModel: ``interBw = bwInter * (nNodes <= 2 &&
    NVLS_TREE ? 2 : 1)``: on two nodes NCCL itself rates NVLS-tree's network side at the full NIC rate
    (each node roots one tree and is the other's leaf: one steady flow per NIC and direction, as a ring
    channel).  Hand count, 8 NICs x 50 GB/s: 2 nodes 1.875 x 400 x 0.96 = 720 GB/s of bus bandwidth;
    4 nodes 1.9375 x 400 x 0.85 / 2 = 329.4 GB/s."""
    from synth.model.nccl.params import ModelParams
    from synth.model.nccl.runtime import _net_bus_gbs
    t = NcclModel(_m("hgx-b200", nodes), ModelParams(), NcclEnv()).table
    assert _net_bus_gbs(t, "allreduce", "nvls_tree", "Simple", ModelParams()) == pytest.approx(want_gbs, rel=1e-3)


@pytest.mark.parametrize("a", [a for a in anchors.ANCHORS if a.preset == "hgx-b200"], ids=lambda a: a.config)
def test_8x_b200_one_host_within_15_percent_of_the_published_peaks(a):
    """togethercomputer/together-nccl-tests benchmarks/README.md: 8 x B200, NCCL 2.26.5, peak busbw."""
    pred, _, cls = anchors.predict(a)
    assert cls == "b200-nvswitch-1host"
    assert abs(pred / a.real_busbw - 1) <= 0.15


def test_nvl72_all_reduce_within_15_percent_of_the_published_rack_run_from_2_gib():
    """coreweave/nccl-tests PR #43: 72 x GB200, one NVL72 domain, 758-839 GB/s busbw at 2-8 GiB (the
    model had NVLS on 72 heads: 1,263-1,272 GB/s).  512 MiB and 1 GiB stay too fast: see the report."""
    big = [a for a in anchors.ANCHORS if a.preset == "gb200-nvl72" and a.sizes[0] >= 2 << 30]
    assert len(big) == 3
    for a in big:
        assert abs(anchors.predict(a)[0] / a.real_busbw - 1) <= 0.15, a.sizes


def test_confidence_line_says_plainly_what_no_log_covers():
    recs = {"b200-ib-multihost": ClassRecord("b200-ib-multihost", 5, 0.09, ("sendrecv",))}
    two = _m("hgx-b200", 2)
    line = confidence_line(two, recs, "allreduce", anchors={})
    assert "of sendrecv only: NO real log validates allreduce" in line
    assert "NO real log" not in confidence_line(two, recs, "sendrecv", anchors={})
    one = confidence_line(_m("hgx-b200"), recs, "allreduce", anchors={"b200-nvswitch-1host": (9, 9, 0.05)})
    assert one.startswith("NCCL model: machine class b200-nvswitch-1host: NO real log validates it; "
                          "checked on 9 published busbw figures, 9 within 15 %, median error 5%")
    assert machine_class(_m("gb200-nvl72")) == "b200-nvl72"


@pytest.mark.parametrize("version, nvls_allowed", [((2, 25), True), ((2, 28), False)])
def test_nvl72_gathers_and_scatters_leave_nvls_from_2_27(version, nvls_allowed):
    """enqueue.cc (v2.27.3 on): NVLS/NVLS-tree are skipped for any collective but all_reduce when a
    node has more than NCCL_MAX_NVLS_ARITY (32) local ranks; all_reduce keeps them."""
    model = NcclModel(_m("gb200-nvl72"), DEFAULT_PARAMS, NcclEnv(), version=version)
    for coll in ("allgather", "reducescatter"):
        assert any(a == "nvls" for a, _ in model.candidates(coll)) is nvls_allowed
    assert ("nvls", "Simple") in model.candidates("allreduce")
    assert ("nvls", "Simple") in NcclModel(_m("hgx-b200"), DEFAULT_PARAMS, NcclEnv()).candidates("allgather")

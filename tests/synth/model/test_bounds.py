"""Lower bounds: published figures (DGX-1 7/6, ring 7/2), hand-worked switch topology, and an
independent brute force (every subset, networkx min cut) on partial allocations and random graphs."""

from __future__ import annotations

import itertools
import math
import time
from fractions import Fraction

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synth.baselines import available_baselines, baseline
from synth.ir.fabric import build_fabric
from synth.model.bounds import lower_bounds
from synth.model.cost import CostModel, CostParams
from topo_probe.machines.clusters import cluster
from topo_probe.machines.generators import fully_connected
from topo_probe.machines.presets import get_preset
from topo_probe.topology.model import Topology

DGX1 = [[0, 2, 1, 1, 2, 0, 0, 0], [2, 0, 1, 2, 0, 1, 0, 0], [1, 1, 0, 2, 0, 0, 2, 0], [1, 2, 2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2, 1, 1], [0, 1, 0, 0, 2, 0, 1, 2], [0, 0, 2, 0, 1, 1, 0, 2], [0, 0, 0, 1, 1, 2, 2, 0]]


def links_topo(matrix, name="links", gbps=25.0, lat=0.7) -> Topology:
    t = Topology(name)
    n = len(matrix)
    for i in range(n):
        t.add_gpu(i)
    for i in range(n):
        for j in range(i + 1, n):
            if matrix[i][j]:
                t.add_link(f"gpu{i}", f"gpu{j}", kind="nvlink", links=matrix[i][j],
                           bandwidth_gbps=gbps * matrix[i][j], latency_us=lat)
    return t


def ring_matrix(n: int) -> list[list[int]]:
    return [[1 if (j - i) % n in (1, n - 1) else 0 for j in range(n)] for i in range(n)]


def two_switch_topo() -> Topology:
    """GPUs 0,1 on NVSwitch A and 2,3 on NVSwitch B (2 links each); A and B joined by 1 link."""
    t = Topology("two-switch")
    for i in range(4):
        t.add_gpu(i)
    t.add_node("nvswitchA", "nvswitch")
    t.add_node("nvswitchB", "nvswitch")
    for i, sw in ((0, "nvswitchA"), (1, "nvswitchA"), (2, "nvswitchB"), (3, "nvswitchB")):
        t.add_link(f"gpu{i}", sw, kind="nvlink", links=2, bandwidth_gbps=50.0, latency_us=0.35)
    t.add_link("nvswitchA", "nvswitchB", kind="nvlink", links=1, bandwidth_gbps=25.0, latency_us=0.35)
    return t


# ---------------------------------------------------------------- independent brute force
def brute_force(fabric, collective: str, root: int = 0) -> Fraction:
    """Every GPU subset, networkx min cut on the fabric's resource graph (float capacities)."""
    g = nx.DiGraph()
    for (u, v), info in fabric.resources.items():
        g.add_edge(u, v, capacity=info.bandwidth_gbps / fabric.unit_gbps)
    node = {}
    for (i, j), route in fabric.channels.items():
        heads = {b for (_, b), _ in route}
        node.setdefault(i, next(a for (a, _), _ in route if a not in heads))
    n = fabric.num_ranks

    def cut(sources, sinks):
        h = g.copy()
        for i in sources:
            h.add_edge("SRC", node[i], capacity=1e12)
        for i in sinks:
            h.add_edge(node[i], "SNK", capacity=1e12)
        return nx.minimum_cut_value(h, "SRC", "SNK")

    best = {"ag": 0.0, "rs": 0.0, "aa": 0.0, "gather": 0.0, "scatter": 0.0, "ar": 0.0}
    for k in range(1, n):
        for S in itertools.combinations(range(n), k):
            out = [i for i in range(n) if i not in S]
            cin, cout = cut(out, S), cut(S, out)
            best["ag"] = max(best["ag"], (n - k) / cin)
            best["rs"] = max(best["rs"], (n - k) / cout)
            best["aa"] = max(best["aa"], k * (n - k) / cin)
            best["ar"] = max(best["ar"], 1 / min(cin, cout))  # a whole block crosses each way
            if root in S:
                best["gather"] = max(best["gather"], (n - k) / cin)
                best["scatter"] = max(best["scatter"], (n - k) / cout)
    best["phased"] = (best["ag"] + best["rs"]) / n
    if collective == "broadcast":
        return 1 / min(cut([root], [p]) for p in range(n) if p != root)
    return best[{"allgather": "ag", "reducescatter": "rs", "alltoall": "aa", "allreduce": "ar",
                 "gather": "gather", "scatter": "scatter"}[collective]]


# ---------------------------------------------------------------- published figures
def test_dgx1_allgather_is_seven_sixths():
    for topo in (links_topo(DGX1, "dgx1-hand"), get_preset("dgx1-v100")):
        b = lower_bounds(build_fabric(topo), "allgather")
        assert b.bandwidth_rounds_per_block == Fraction(7, 6) and b.exact
        assert b.latency_steps == 2 and b.latency_us == pytest.approx(1.4)
        M = 8 << 20                         # allgather size: 8 blocks
        assert b.time_us(M) - b.latency_us == pytest.approx(7 / 8 * M / 150e3)   # 7/8 M / 150 GB/s


def test_bidirectional_ring8_allgather_is_seven_halves():
    b = lower_bounds(build_fabric(links_topo(ring_matrix(8), "ring8")), "allgather")
    assert b.bandwidth_rounds_per_block == Fraction(7, 2)
    assert b.latency_steps == 4
    ar = lower_bounds(build_fabric(links_topo(ring_matrix(8), "ring8")), "allreduce")
    # a whole block must cross every cut each way (2 links into any arc of the ring): 1/2;
    # schedules with separate RS and AG phases: (7/2 + 7/2) / 8 = 7/8
    assert ar.bandwidth_rounds_per_block == Fraction(1, 2)
    assert ar.phased_rounds_per_block == Fraction(7, 8)


def test_hand_worked_two_switch_topology():
    f = build_fabric(two_switch_topo())
    assert f.unit_gbps == 25.0
    # AG: S = {2,3} must receive 2 blocks through the single A->B link: 2 rounds per block
    ag = lower_bounds(f, "allgather")
    assert ag.bandwidth_rounds_per_block == 2 and set(ag.witness) in ({0, 1}, {2, 3})
    assert lower_bounds(f, "reducescatter").bandwidth_rounds_per_block == 2
    ar = lower_bounds(f, "allreduce")
    assert ar.bandwidth_rounds_per_block == 1          # one block each way through the A<->B link
    assert ar.phased_rounds_per_block == 1             # (2 + 2) / 4
    assert lower_bounds(f, "alltoall").bandwidth_rounds_per_block == 4           # 2 x 2 blocks / 1
    assert lower_bounds(f, "broadcast", root=0).bandwidth_rounds_per_block == 1  # maxflow 0 -> 2 is 1
    assert lower_bounds(f, "gather", root=0).bandwidth_rounds_per_block == 2
    b = lower_bounds(f, "allgather")
    assert b.latency_steps == 1 and b.latency_us == pytest.approx(1.05)        # 0 -> A -> B -> 2


def test_fully_connected_allgather_is_one():
    for n in (3, 4, 5):
        full = [[int(i != j) for j in range(n)] for i in range(n)]
        b = lower_bounds(build_fabric(links_topo(full, f"full{n}")), "allgather")
        assert b.bandwidth_rounds_per_block == 1 and b.latency_steps == 1


def test_broadcast_on_a_line():
    line = [[1 if abs(i - j) == 1 else 0 for j in range(4)] for i in range(4)]
    f = build_fabric(links_topo(line, "line4"))
    for root, steps in ((0, 3), (1, 2)):
        b = lower_bounds(f, "broadcast", root=root)
        assert b.bandwidth_rounds_per_block == 1 and b.latency_steps == steps
    r = lower_bounds(f, "reduce", root=3)
    assert r.bandwidth_rounds_per_block == 1 and r.latency_steps == 3


# ---------------------------------------------------------------- against brute force
@pytest.mark.parametrize("collective", ["allgather", "reducescatter", "allreduce", "alltoall", "gather", "scatter",
                                        "broadcast"])
def test_partial_dgx1_matches_brute_force(collective):
    f = build_fabric(get_preset("dgx1-v100").subset(range(6)))
    b = lower_bounds(f, collective, root=0 if collective in ("gather", "scatter", "broadcast") else None)
    assert float(b.bandwidth_rounds_per_block) == pytest.approx(brute_force(f, collective))
    if collective == "allreduce":
        assert float(b.phased_rounds_per_block) == pytest.approx(
            (brute_force(f, "allgather") + brute_force(f, "reducescatter")) / f.num_ranks)


def test_dgx2_subset_with_switch_links_matches_brute_force():
    f = build_fabric(get_preset("dgx2").subset([0, 1, 2, 8, 9]))   # two baseboards, NVSwitch-NVSwitch links
    for c in ("allgather", "reducescatter", "alltoall", "scatter"):
        b = lower_bounds(f, c, root=0 if c == "scatter" else None)
        assert float(b.bandwidth_rounds_per_block) == pytest.approx(brute_force(f, c))


@settings(derandomize=True, max_examples=25, deadline=None)
@given(st.integers(3, 5).flatmap(lambda n: st.lists(st.integers(0, 3), min_size=n * (n - 1) // 2,
                                                    max_size=n * (n - 1) // 2).map(lambda w: (n, w))))
def test_random_link_graphs_match_brute_force(nw):
    n, w = nw
    m = [[0] * n for _ in range(n)]
    for (i, j), k in zip(itertools.combinations(range(n), 2), w):
        m[i][j] = m[j][i] = k
    for i in range(n - 1):                  # keep it connected
        m[i][i + 1] = m[i + 1][i] = max(1, m[i][i + 1])
    f = build_fabric(links_topo(m, "random"))
    for c in ("allgather", "alltoall", "gather"):
        b = lower_bounds(f, c, root=0 if c == "gather" else None)
        assert float(b.bandwidth_rounds_per_block) == pytest.approx(brute_force(f, c))


@pytest.mark.parametrize("topo", [links_topo(ring_matrix(6), "ring6"), two_switch_topo(),
                                  get_preset("dgx1-v100").subset(range(5))], ids=["ring6", "two-switch", "dgx1-5"])
def test_maxflow_method_agrees_with_enumeration(topo):
    f = build_fabric(topo)
    for c in ("allgather", "reducescatter", "allreduce", "gather", "scatter"):
        root = 1 if c in ("gather", "scatter") else None
        a = lower_bounds(f, c, root=root, method="enumeration")
        b = lower_bounds(f, c, root=root, method="maxflow")
        assert a.bandwidth_rounds_per_block == b.bandwidth_rounds_per_block and b.exact


def test_sixteen_gpus_take_seconds_and_beyond_uses_maxflow():
    t0 = time.process_time()
    b = lower_bounds(build_fabric(cluster("dgx1-v100", 2)), "allgather")
    assert time.process_time() - t0 < 10
    assert b.method == "enumeration" and b.exact
    assert b.bandwidth_rounds_per_block == Fraction(63, 25)   # 8 blocks over 4 x 12.5 GB/s NICs, unit 15.75
    big = build_fabric(links_topo(ring_matrix(18), "ring18"))
    ag = lower_bounds(big, "allgather")
    assert ag.method == "maxflow" and ag.exact and ag.bandwidth_rounds_per_block == Fraction(17, 2)
    assert not lower_bounds(big, "alltoall").exact


# ---------------------------------------------------------------- bound <= cost model
@pytest.mark.parametrize("topo", [get_preset("dgx1-v100"), get_preset("dgx-a100"), two_switch_topo(),
                                  links_topo(ring_matrix(6), "ring6")], ids=["dgx1", "dgx-a100", "two-switch", "ring6"])
def test_bound_never_exceeds_modelled_baselines(topo):
    f = build_fabric(topo)
    params = CostParams()
    model = CostModel(f, params)
    for c in ("allgather", "reducescatter", "allreduce", "broadcast", "alltoall"):
        b = lower_bounds(f, c)
        for name in available_baselines(f, c):
            s = baseline(name, f, c)
            for size in (1024, 1 << 20, 1 << 28):
                assert b.time_us(size, params) <= model.schedule_time_us(s, size) + 1e-6, (name, c, size)
                assert b.time_us(size) <= b.time_us(size, params)


def test_physical_bound_is_the_one_step_schedule_less_its_runtime_overheads():
    """fully_connected(4) allgather by direct: 1 step, every link carries one block.  The bound is
    the links' physics alone (latency + T at the achieved rate); the model's time of the schedule
    adds exactly the runtime's overheads: launch + step overhead + 2 sqrt(slice_overhead * T)
    (hand-derived from CostModel._pipelined at one slice)."""
    f = build_fabric(fully_connected(4))
    params = CostParams()
    s = baseline("direct", f, "allgather")
    b = lower_bounds(f, "allgather")
    size = 1 << 30
    t_bw = (size / 4) / (f.unit_gbps * params.nvlink_efficiency * 1e3)   # one block per link
    lat = max(f.channel_latency_us(i, j) for i, j in f.channels)
    assert b.time_us(size, params) == pytest.approx(lat + t_bw, rel=1e-12)
    by_hand = params.launch_us + params.step_overhead_us + lat + t_bw + 2 * math.sqrt(params.slice_overhead_us * t_bw)
    assert CostModel(f, params).schedule_time_us(s, size) == pytest.approx(by_hand, rel=1e-12)

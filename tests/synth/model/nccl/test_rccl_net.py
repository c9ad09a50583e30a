"""RCCL across hosts on part of a host (synth/model/nccl/rccl_net.py) against references worked out independently:
the tuning table RCCL 2.26.6 printed on 2 x 1 MI355X and the algorithm it logged per size (Ahalperin/amd-dev 58a032f7
results/scale_2x1gpu_all_reduce/nccl_debug.log: allreduce tree LL 35.6 µs / 1.9 GB/s, tree Simple 58.6 / 43.7, ring
LL 35.6 / 1.6, ring Simple 58.6 / 40.0, and "AllReduce: N Bytes -> Algo TREE|RING proto LL|SIMPLE"), recomputed here
by hand from rcclTuningModel[0] (ROCm/rccl src/graph/tuning.cc) with that log's graphs (``nChannels 2``, ring 20
GB/s, tree 48/20), so that the test checks the model's formulas, not the model's own graph search."""

from __future__ import annotations

import math

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.rccl_net import (RCCL_TUNING_MODEL_0, rccl_net_choose, rccl_net_estimate_us,
                                       rccl_net_graph, rccl_partial_host)
from topo_probe import cluster

TWO_HOSTS = NcclMachine.from_topology(cluster("mi355x", nodes=2, nics_per_node=1))
ONE_PER_HOST = TWO_HOSTS.with_(ranks=2)


def _by_hand(algo: str, proto: str, nbytes: int, ring_bw: float = 20.0) -> float:
    """RCCL's estimate on 2 x 1 from the log's graphs: 2 channels; tree bwIntra 48, ring 20; tuning_model_0's
    2-node ratios (tree 0.04 / 0.91, ring 0.04 / 1.00), NET latencies (ppn 1: the tree's row, 11.8 / 20.8 µs) and
    per-size corrections, base latency 12 (LL) / 17 (Simple)."""
    p = ("LL", "LL128", "Simple").index(proto)
    bw = {("tree", "LL"): 2 * 48 * 0.04 * 0.5, ("tree", "Simple"): 2 * 48 * 0.91 * 0.5,
          ("ring", "LL"): 2 * ring_bw * 0.04 * 1.0, ("ring", "Simple"): 2 * ring_bw * 1.00 * 1.0}[(algo, proto)]
    lat = {"LL": 12 + 2 * 11.8, "Simple": 17 + 2 * 20.8}[proto]
    idx = min(26, int(math.log2(nbytes // 64)))
    corr = RCCL_TUNING_MODEL_0["tree_corr" if algo == "tree" else "ring_corr"][p][idx]
    return lat + nbytes / (1000 * bw * corr)


def test_tables_as_typed_from_tuning_cc():
    """A few of tuning_model_0's entries, typed again from tuning.cc: treeCorrectionFactor Simple at 64 KiB-16 MiB,
    ringCorrectionFactor Simple at 8 KiB-16 MiB, the NET row."""
    assert RCCL_TUNING_MODEL_0["tree_corr"][2][10:19] == (0.4, 0.3, 0.6, 0.8, 1.0, 1.0, 1.0, 1.0, 0.9)
    assert RCCL_TUNING_MODEL_0["ring_corr"][2][7:19] == (0.1, 0.1, 0.2, 0.2, 0.1, 0.5, 1.0, 0.8, 0.8, 1.0, 0.9, 1.0)
    assert RCCL_TUNING_MODEL_0["hw_lat"]["net"] == {"tree": (11.8, 18.2, 20.8), "ring": (9.5, 19.8, 15.1)}
    assert all(len(r) == 27 for k in ("tree_corr", "ring_corr") for r in RCCL_TUNING_MODEL_0[k])


def test_printed_table_of_2x1():
    """The hand-computed table is what RCCL printed (bandwidths and latencies at 0 bytes)."""
    assert round(2 * 48 * 0.04 * 0.5, 1) == 1.9 and round(2 * 48 * 0.91 * 0.5, 1) == 43.7
    assert round(2 * 20 * 0.04, 1) == 1.6 and round(2 * 20 * 1.0, 1) == 40.0
    assert round(12 + 2 * 11.8, 1) == 35.6 and round(17 + 2 * 20.8, 1) == 58.6
    for a in ("tree", "ring"):
        for p, lat in (("LL", 35.6), ("Simple", 58.6)):
            assert rccl_net_estimate_us(ONE_PER_HOST, "allreduce", a, p, 0) == pytest.approx(lat, abs=0.05)


#: "AllReduce: N Bytes -> Algo" of RCCL 2.26.6 on 2 x 1 MI355X, 4 KiB .. 64 MiB
LOGGED = {4096: ("tree", "LL"), 8192: ("tree", "Simple"), 16384: ("tree", "Simple"), 32768: ("tree", "Simple"),
          65536: ("tree", "Simple"), 131072: ("tree", "Simple"), 262144: ("tree", "Simple"),
          524288: ("ring", "Simple"), 1 << 20: ("tree", "Simple"), 2 << 20: ("tree", "Simple"),
          4 << 20: ("tree", "Simple"), 8 << 20: ("tree", "Simple"), 16 << 20: ("ring", "Simple"),
          64 << 20: ("ring", "Simple")}


@pytest.mark.parametrize("nbytes", sorted(LOGGED))
def test_hand_estimate_reproduces_the_logged_pick(nbytes):
    """With the log's own graphs the hand formula picks every logged (algorithm, protocol): the table is model 0."""
    pairs = [(a, p) for a in ("tree", "ring") for p in ("LL", "Simple")]
    assert min(pairs, key=lambda ap: _by_hand(ap[0], ap[1], nbytes)) == LOGGED[nbytes]


def test_model_pick_on_its_own_graph():
    """The model's search gives 2 ring channels at 24 (RCCL logged 20) and a tree at 48/24; its pick differs from
    the log at 8 KiB, 16 KiB and 4 MiB only (ring, where RCCL's 20 GB/s rings make it take the tree)."""
    assert rccl_net_graph(ONE_PER_HOST) == (2, 24.0, 48.0)
    wrong = [n for n, pick in LOGGED.items()
             if rccl_net_choose(ONE_PER_HOST, "allreduce", n, lambda a, p: True) != pick]
    assert wrong == [8192, 16384, 4 << 20]


def test_partial_hosts_only_and_channels():
    """A whole 8-GPU host matches a rome model (tuning 6 on gfx950) and stays on the earlier rules; RCCL's channel
    reduction gives the logged tree Simple channels {0..1}, {0..3}, {0..7} at 32, 64, 128 KiB on 8 channels."""
    whole = NcclMachine.from_topology(cluster("mi355x", nodes=2))
    assert rccl_partial_host(ONE_PER_HOST) and not rccl_partial_host(whole)
    model = NcclModel(ONE_PER_HOST, env=NcclEnv(), version=(2, 26))
    assert [model.table.channels("tree", "Simple", n)[0] for n in (32768, 65536, 131072)] == [2, 4, 8]
    assert model.channels == 8                              # RCCL 2.26.6: "8 coll channels" (2 graph channels x 4)
    assert model.choose("allreduce", 65536).label == "tree/Simple/4"
    forced = NcclModel(ONE_PER_HOST, env=NcclEnv.from_environ({"NCCL_ALGO": "Ring"}), version=(2, 26))
    assert forced.choose("allreduce", 65536).algorithm == "ring"


def test_a_forced_choice_rccl_has_no_figure_for_stays_a_real_algorithm():
    """NCCL_ALGO=Tree for allgather / broadcast (RCCL's tuner gives trees no figure there) and NCCL_PROTO=LL128 (none
    on gfx950) leave no finite estimate: the model falls back as on every other machine (ring Simple for the tree;
    ring with the forced protocol), not a tree allgather priced as a tree allreduce."""
    two_by_four = NcclMachine.from_topology(cluster("mi355x", nodes=2)).with_(ranks=8)
    for coll in ("allgather", "broadcast"):
        c = NcclModel(two_by_four, env=NcclEnv.from_environ({"NCCL_ALGO": "Tree"})).choose(coll, 1 << 24)
        assert (c.algorithm, c.protocol) == ("ring", "Simple"), coll
    c = NcclModel(two_by_four, env=NcclEnv.from_environ({"NCCL_PROTO": "LL128"})).choose("allgather", 1 << 24)
    assert (c.algorithm, c.protocol) == ("ring", "LL128")
    assert rccl_net_choose(ONE_PER_HOST, "allreduce", 1 << 20, lambda a, p: a == "tree") == ("tree", "Simple")


def test_the_tree_graph_of_a_partial_host_is_rccls_own():
    """RCCL's pass 2 raises the tree's bwIntra over RCCL's speeds only (search.cc), so the tree of 2 x 4 MI355X keeps
    rccl_net_graph's 24 GB/s (not NVIDIA's 30, which RCCL's list does not have) and that of 2 x 1 its 48."""
    from synth.model.nccl.graphs import comm_graphs
    four = NcclMachine.from_topology(cluster("mi355x", nodes=2, nics_per_node=4)).with_(ranks=8)
    assert comm_graphs(four, NcclEnv(), (2, 26)).tree.bw_intra == rccl_net_graph(four)[2] == 24.0
    assert comm_graphs(ONE_PER_HOST, NcclEnv(), (2, 26)).tree.bw_intra == rccl_net_graph(ONE_PER_HOST)[2] == 48.0

"""NCCL 2.4's ``NCCL_TREE_THRESHOLD`` (init.cc ``NCCL_PARAM(TreeThreshold, "TREE_THRESHOLD", -2)``:
the computed threshold is used only when the variable is unset; enqueue.cc ``getPatternInfo`` runs
all_reduce as a tree up to it)."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.tuning import TuneTable
from topo_probe import cluster
from topo_probe.errors import InvalidArgument

TWO_DGX1 = NcclMachine.from_topology(cluster("dgx1-v100", nodes=2))


@pytest.mark.parametrize("env, algo", [({}, "tree"), ({"NCCL_TREE_THRESHOLD": "0"}, "ring"),
                                       ({"NCCL_TREE_THRESHOLD": str(1 << 20)}, "tree")])
def test_two_nodes_run_trees_unless_the_variable_says_otherwise(env, algo):
    """2 nodes of NVLink GPUs: the computed tree bandwidth (3/4 of the ring's, doubled on 2 nodes)
    beats the ring's, so the threshold is infinite and 1 MiB runs as a tree; 0 turns trees off."""
    table = TuneTable.build(TWO_DGX1, NcclEnv.from_environ(env), version=(2, 4))
    assert table.choose("allreduce", 1 << 20)[0] == algo


def test_above_a_set_threshold_the_ring_runs():
    table = TuneTable.build(TWO_DGX1, NcclEnv.from_environ({"NCCL_TREE_THRESHOLD": str(1 << 20)}), version=(2, 4))
    assert table.choose("allreduce", 4 << 20)[0] == "ring"


def test_a_negative_threshold_is_refused_in_one_line():
    with pytest.raises(InvalidArgument, match="NCCL_TREE_THRESHOLD=-1"):
        NcclEnv.from_environ({"NCCL_TREE_THRESHOLD": "-1"})

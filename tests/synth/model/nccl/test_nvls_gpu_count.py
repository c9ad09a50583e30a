"""NVLS needs a third GPU up to NCCL 2.28.3: ``ncclNvlsInit`` (src/transport/nvls.cc) returns without NVLS
support while the communicator's topology holds ``gpuCount <= 2`` GPUs (NVIDIA/nccl v2.18.3-1 line 239 ..
v2.27.7-1 line 160, v2.28.3-1 line 160) and only for ``gpuCount < 2`` from v2.28.7-1 (line 161; the same in
v2.29.3-1 and v2.30.7-1); v2.17.1-1 (line 232) needs two local ranks.  Without support neither NVLS nor
NVLS-tree enters NCCL's tuning table.  Expectations are read off those lines, not the model
(but for the one consistency check of the model's own pick, labelled)."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.versions_patch import nvls_supported
from topo_probe import cluster, get_preset


def _host(ranks: int) -> NcclMachine:
    return NcclMachine.from_topology(get_preset("hgx-b200")).with_(ranks=ranks)


@pytest.mark.parametrize("gpus, version, on", [
    (2, (2, 17), True),       # v2.17.1-1: localRanks <= 1 is the only GPU-count test
    (2, (2, 18), False),      # v2.18.3-1 line 239: gpuCount <= 2
    (3, (2, 18), True),
    (2, (2, 26), False),      # v2.26.6-1 line 157
    (2, (2, 27), False),      # v2.27.7-1 line 160
    (2, (2, 28, 3), False),   # v2.28.3-1 line 160: gpuCount <= 2
    (3, (2, 28, 3), True),
    (2, (2, 28, 7), True),    # v2.28.7-1 line 161: gpuCount < 2
    (2, (2, 28), True),       # a bare 2.28 ASSUMED to be 2.28.7
    (2, (2, 29, 3), True),
    (2, (2, 29), True),       # v2.29.3-1 line 161
    (1, (2, 29), False),
])
def test_nvls_gpu_count_by_version(gpus, version, on):
    assert nvls_supported(gpus, version) is on


@pytest.mark.parametrize("version, on", [((2, 26), False), ((2, 29), True)])
def test_two_gpus_of_a_b200_host(version, on):
    """2 of an 8-GPU B200 host (nccl-tests -g 2): no NVLS graph and no NVLS column under 2.26; under 2.29 NVLS's
    graph has its 2 heads and NCCL rates it (in the model it still loses to the ring: 25 µs latency)."""
    m = _host(2)
    graphs = comm_graphs(m, NcclEnv(), version)
    assert (graphs.nvls is not None) is on
    assert (graphs.nvls.n_channels == 2) if on else graphs.nvls_node is None
    table = NcclModel(m, env=NcclEnv(), version=version).table
    assert (("nvls", "Simple") in table.enabled("allreduce")) is on
    # consistency check of the model's own pick (its output, not a number from NCCL's source): NVLS on 2 GPUs
    # does not take over the 1 GiB all_reduce
    assert table.choose("allreduce", 1 << 30)[0] == "ring"


@pytest.mark.parametrize("version, on", [((2, 26), False), ((2, 28, 3), False), ((2, 28, 7), True), ((2, 28), True)])
def test_two_gpus_a_host_across_hosts(version, on):
    """2 hosts x 2 H100: the topology of each node holds 2 GPUs, so 2.26 runs no NVLS-tree."""
    m = NcclMachine.from_topology(cluster("dgx-h100", nodes=2)).with_(ranks=4)
    assert (m.gpus_per_node, m.nodes) == (2, 2)
    table = NcclModel(m, env=NcclEnv(), version=version).table
    assert (("nvls_tree", "Simple") in table.enabled("allreduce")) is on


def test_three_or_more_gpus_unchanged():
    """4 of a B200 host under 2.26: NVLS as before (4 heads)."""
    assert comm_graphs(_host(4), NcclEnv(), (2, 26)).nvls.n_channels == 4

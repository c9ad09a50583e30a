"""Fewer GPUs of a host on a full xGMI mesh keep only the links among themselves.

The reference is independent of :meth:`NcclMachine.with_`: the machine NCCL's model builds from the
preset's topology cut down to the same GPUs (:meth:`Topology.subset`, what ``--gpus`` does), whose
link count comes from the preset's graph.
"""

import pytest

from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.params import DEFAULT_PARAMS
from synth.model.nccl.runtime import ring_capacity_gbs
from topo_probe.machines.presets import get_preset


@pytest.mark.parametrize("preset", ["mi300x", "mi355x"])
@pytest.mark.parametrize("gpus", [2, 3, 4, 6])
def test_fewer_ranks_of_an_xgmi_host_have_the_links_of_that_subset(preset, gpus):
    topo = get_preset(preset)
    full = NcclMachine.from_topology(topo)
    cut = NcclMachine.from_topology(topo.subset(range(gpus)))
    assert full.links_per_gpu == 7 and cut.links_per_gpu == gpus - 1
    assert full.with_(ranks=gpus).links_per_gpu == cut.links_per_gpu


def test_four_gpus_of_a_mi300x_ring_at_three_sevenths_of_eight():
    m = NcclMachine.from_topology(get_preset("mi300x"))
    four = m.with_(ranks=4)
    whole, part = (ring_capacity_gbs(x, comm_graphs(x), DEFAULT_PARAMS) for x in (m, four))
    assert part == pytest.approx(whole * 3 / 7)


def test_an_nvswitch_host_and_a_multi_host_split_keep_every_link():
    h100 = NcclMachine.from_topology(get_preset("dgx-h100"))
    assert h100.with_(ranks=4).links_per_gpu == h100.links_per_gpu == 18
    amd = NcclMachine("mi300x", "gfx942", 16, 2, "xgmi", 7)
    assert amd.with_(ranks=32, nodes=4).links_per_gpu == 7      # still 8 GPUs per host
    assert amd.with_(ranks=2).links_per_gpu == 7                # one GPU per host: no link in use, none removed
    assert amd.with_(ranks=8, links_per_gpu=5).links_per_gpu == 5

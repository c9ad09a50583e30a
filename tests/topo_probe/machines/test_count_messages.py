"""A count that is too small or not an integer names what is counted (GPUs, NICs, hosts), for every caller.

Reference: the message written out by hand for each generator and option; before, every caller said
"GPUs" ("NICs per node: need at least 1 GPUs, got 0"), and True passed as 1 (``int(True) == True``).
"""

from __future__ import annotations

import numpy as np
import pytest

from topo_probe.errors import TopologyError
from topo_probe.machines.clusters import cluster, with_nics
from topo_probe.machines.generators import fully_connected, hub_and_spoke, line, parity_mesh, ring, torus
from topo_probe.machines.presets import get_preset

CASES = [
    (lambda v: ring(v), 1, "ring: need at least 2 GPUs, got 1"),
    (lambda v: line(v), 0, "line: need at least 2 GPUs, got 0"),
    (lambda v: fully_connected(v), 1, "fully_connected: need at least 2 GPUs, got 1"),
    (lambda v: parity_mesh(v), 1, "parity_mesh: need at least 2 GPUs, got 1"),
    (lambda v: hub_and_spoke(v), 1, "hub_and_spoke: need at least 2 GPUs, got 1"),
    (lambda v: torus(v, 3), 0, "torus x: need at least 1 GPU, got 0"),
    (lambda v: torus(3, v), -2, "torus y: need at least 1 GPU, got -2"),
    (lambda v: with_nics(get_preset("dgx-a100"), v, 50.0), 0, "NICs per node: need at least 1 NIC, got 0"),
    (lambda v: cluster("dgx-h100", 2, nics_per_node=v), 0, "NICs per node: need at least 1 NIC, got 0"),
    (lambda v: cluster("dgx-h100", 4, spine_oversubscription=2, hosts_per_leaf=v), 0,
     "hosts per leaf: need at least 1 host, got 0"),
]


@pytest.mark.parametrize("make,value,message", CASES, ids=[c[2].split(":")[0] for c in CASES])
def test_a_small_count_names_what_is_counted(make, value, message):
    with pytest.raises(TopologyError) as exc:
        make(value)
    assert str(exc.value) == message


@pytest.mark.parametrize("make,value,message", CASES, ids=[c[2].split(":")[0] for c in CASES])
def test_a_count_that_is_not_an_integer_names_its_unit(make, value, message):
    """3.0 is a whole number but not an integer: refused (the one integer rule), so the message says "integer"."""
    what, unit = message.split(": need at least ")[0], message.split()[-3].rstrip(",s") + "s"
    for bad in (True, 2.5, "3", 3.0):
        with pytest.raises(TopologyError) as exc:
            make(bad)
        assert str(exc.value) == f"{what}: need an integer count of {unit}, got {bad!r}"


def test_a_nic_count_equal_to_the_hosts_own_is_held_to_the_same_rule():
    """``nics_per_node=8.0`` on a host of 8 NICs was taken (8.0 == 8 skipped the NIC count's check) while 7.0 was
    refused; an integer equal to the host's own count (also a NumPy one) keeps the host's NICs as they are."""
    base = get_preset("dgx-h100")
    own = len(base.nodes_of_kind("nic"))
    assert own == 8                                         # a DGX H100: 8 ConnectX-7 NICs for compute
    want = cluster(base, 2)
    assert cluster(base, 2, nics_per_node=own) == want
    assert cluster(base, 2, nics_per_node=np.int64(own)) == want
    for bad in (float(own), np.float64(own)):
        with pytest.raises(TopologyError) as exc:
            cluster(base, 2, nics_per_node=bad)
        assert str(exc.value) == f"NICs per node: need an integer count of NICs, got {bad!r}"

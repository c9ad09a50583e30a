"""A cluster we build is a topology our own loader reads back: every cluster() accepts (and so every shape the CLIs
accept) saves and loads equal, and what the loader would refuse (a 100 TB/s edge, 47,360 edges) cluster() refuses
first, in one line.

Before, a leaf-spine uplink of ``hosts_per_leaf x NICs / R`` ports (``dgx-h100``, 16 hosts a leaf, R = 1: 128) was
written and then refused ("links must be at most 64, got 128"): the bonded-link limit of 64 is NVLink's, not a
switch's.  The loader's limit for a ``network`` edge is now derived from what cluster() can build
(:data:`~topo_probe.limits.MAX_NETWORK_LINKS_PER_EDGE`); every other kind keeps 64.
"""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topo_probe.cli.main import main
from topo_probe.errors import TopologyError
from topo_probe.limits import (MAX_BANDWIDTH_GBPS, MAX_LINKS_PER_EDGE, MAX_NETWORK_LINKS_PER_EDGE,
                               MAX_OVERSUBSCRIPTION, MIN_BANDWIDTH_GBPS)
from topo_probe.load import load_topology
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.parsers.nccl_xml_export import to_nccl_xml
from topo_probe.topology.serialize import load_topology_json, save_topology, topology_from_dict, topology_to_dict


def round_trip(topo, tmp_path):
    path = tmp_path / "t.json"
    save_topology(topo, path)
    return load_topology_json(path)


def test_128_uplink_ports_of_a_leaf_round_trip(tmp_path):
    t = cluster("dgx-h100", 16, spine_oversubscription=1, hosts_per_leaf=16)
    up = t.graph.edges["leaf0", "spine"]
    assert (up["links"], up["bandwidth_gbps"]) == (16 * 8, 16 * 8 * 50.0)      # by hand: 16 hosts x 8 NICs of 50
    assert round_trip(t, tmp_path) == t


@pytest.mark.parametrize("ratio", [2, 32])
def test_4096_hosts_a_leaf_round_trip(tmp_path, ratio):
    """The leaf's uplink: 4096 x 8 / R ports of 4096 x 8 x 50 / R GB/s (R = 2: 819,200 GB/s, past the 100 TB/s of
    any other edge)."""
    t = cluster("dgx-h100", 2, spine_oversubscription=ratio, hosts_per_leaf=4096)
    up = t.graph.edges["leaf0", "spine"]
    assert (up["links"], up["bandwidth_gbps"]) == (4096 * 8 // ratio, 4096 * 8 * 50.0 / ratio)
    assert round_trip(t, tmp_path) == t


def test_the_least_uplink_round_trips(tmp_path):
    """One host of 1 NIC of the least speed (0.001 GB/s) under a leaf, R = 1024: a 0.001 / 1024 GB/s uplink."""
    t = cluster("dgx-h100", 2, 1e-3, nics_per_node=1, spine_oversubscription=1024, hosts_per_leaf=1)
    assert t.graph.edges["leaf0", "spine"]["bandwidth_gbps"] == 1e-3 / 1024
    assert round_trip(t, tmp_path) == t


def test_the_cli_writes_what_the_loader_reads(tmp_path):
    path = tmp_path / "c.json"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["--topology", "dgx-h100", "--nodes", "16", "--spine-oversubscription", "1",
                     "--hosts-per-leaf", "16", "--json", str(path), "--format", "json"]) == 0
    want = cluster("dgx-h100", 16, spine_oversubscription=1, hosts_per_leaf=16)
    assert load_topology(str(path)).fingerprint() == want.fingerprint()


def test_hostile_link_counts_are_still_refused():
    doc = topology_to_dict(cluster("dgx-h100", 2, spine_oversubscription=1, hosts_per_leaf=2))
    net = next(k for k, ln in enumerate(doc["links"]) if ln["kind"] == "network")
    nvl = next(k for k, ln in enumerate(doc["links"]) if ln["kind"] == "nvlink")
    for k, n, limit in ((net, MAX_NETWORK_LINKS_PER_EDGE + 1, MAX_NETWORK_LINKS_PER_EDGE),
                        (nvl, MAX_LINKS_PER_EDGE + 1, MAX_LINKS_PER_EDGE), (net, 2**62, MAX_NETWORK_LINKS_PER_EDGE)):
        links = [dict(ln, links=n) if j == k else ln for j, ln in enumerate(doc["links"])]
        with pytest.raises(TopologyError) as exc:
            topology_from_dict(dict(doc, links=links), "t.json")
        assert str(exc.value) == f"t.json: links[{k}].links must be at most {limit}, got {n}", str(exc.value)


def test_a_cluster_past_the_edge_limit_is_refused_before_it_is_built():
    with pytest.raises(TopologyError) as exc:       # 128 hosts of 64 NICs: 47,360 edges (counted by building it)
        cluster("dgx-h100", 128, nics_per_node=64)
    line = str(exc.value)
    assert "\n" not in line and line.startswith("cluster: 128 hosts") and "47360 edges" in line, line


def test_a_long_topology_name_is_cut_in_the_size_refusal():
    """A topology file's name may be any string up to the 32 MiB a loader reads; the one-line refusal cuts it
    (topo_probe.errors.show) as the loader's own unknown-name message does, instead of quoting 100,000 characters."""
    base = get_preset("dgx-h100")
    base.name = "n" * 100_000
    with pytest.raises(TopologyError) as exc:
        cluster(base, 128, nics_per_node=64)
    assert len(str(exc.value)) < 1000, len(str(exc.value))


def _xml_round_trips(tmp_path, t):
    save_topology(t, tmp_path / "c.json")
    assert load_topology(str(tmp_path / "c.json")).fingerprint() == t.fingerprint()
    (tmp_path / "c.xml").write_text(to_nccl_xml(t))
    assert load_topology(str(tmp_path / "c.xml")).fingerprint() == t.fingerprint()


def test_an_uplink_of_8192_ports_reads_back_from_nccl_xml(tmp_path):
    """1024 hosts a leaf x 8 NICs / R 1 = 8192 ports on each leaf's uplink: the NCCL XML's <topocoll> block took
    at most 4096 links an edge, where the JSON loader takes 524,288
    (topo_probe.topology.checks.edge_limits("network"))."""
    t = cluster("dgx-h100", 128, spine_oversubscription=1.0, hosts_per_leaf=1024)
    assert max(d["links"] for _, _, d in t.graph.edges(data=True)) == 8192
    _xml_round_trips(tmp_path, t)


def test_an_uplink_over_1e7_gbps_reads_back_from_nccl_xml(tmp_path):
    """128 hosts a leaf x 8 NICs x 12,000 GB/s = 1.23e7 GB/s per direction over 1024 ports: past the <topocoll>
    block's old cap of 1e7 GB/s, within the JSON loader's limits."""
    t = cluster("dgx-h100", 4, nic_gbps=12000.0, spine_oversubscription=1.0, hosts_per_leaf=128)
    assert max(d["bandwidth_gbps"] for _, _, d in t.graph.edges(data=True)) == 128 * 8 * 12000.0
    _xml_round_trips(tmp_path, t)


def test_topo_probe_reads_back_the_nccl_xml_it_wrote(tmp_path):
    out = tmp_path / "c.xml"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["--topology", "dgx-h100", "--nodes", "128", "--spine-oversubscription", "1",
                     "--hosts-per-leaf", "1024", "--nccl-xml", str(out)]) == 0
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["--topology", str(out)])
    assert rc == 0, err.getvalue()


@pytest.mark.parametrize("rail", [False, True])
@pytest.mark.parametrize("ratio, per_leaf, gbps", [(1.0, 4, 50.0), (1024.0, 1, 1e-3), (3.0, 7, 1e5)])
def test_cluster_network_edges_are_within_one_nic_per_port(rail, ratio, per_leaf, gbps):
    """What the loader checks of a network edge (bandwidth_gbps / links within [MIN_BANDWIDTH_GBPS /
    MAX_OVERSUBSCRIPTION, MAX_BANDWIDTH_GBPS]) holds for cluster()'s edges at the ends of its ranges: the uplink
    carries m*S/R GB/s over ceil(m*P/R) ports."""
    t = cluster("dgx-h100", 3, nic_gbps=gbps, spine_oversubscription=ratio, hosts_per_leaf=per_leaf,
                rail_optimized=rail)
    for _, _, d in t.graph.edges(data=True):
        if d["kind"] == "network":
            per_port = d["bandwidth_gbps"] / d["links"]
            assert MIN_BANDWIDTH_GBPS / MAX_OVERSUBSCRIPTION * (1 - 1e-12) <= per_port <= MAX_BANDWIDTH_GBPS


@settings(derandomize=True, max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(preset=st.sampled_from(sorted(PRESETS)),
       nodes=st.one_of(st.integers(1, 6), st.integers(1, 4096)),
       nic_gbps=st.one_of(st.none(), st.floats(1e-7, 2e6)),
       nics=st.one_of(st.none(), st.integers(1, 64), st.integers(-2, 100)),
       ratio=st.one_of(st.none(), st.floats(1, 1024)),
       per_leaf=st.one_of(st.none(), st.integers(1, 8), st.integers(1, 5000)),
       rail=st.booleans(),
       latency=st.one_of(st.just(2.0), st.floats(0, 3e6)))
def test_every_cluster_accepted_round_trips(tmp_path, preset, nodes, nic_gbps, nics, ratio, per_leaf, rail, latency):
    try:
        t = cluster(preset, nodes, nic_gbps, latency, rail_optimized=rail, nics_per_node=nics,
                    spine_oversubscription=ratio, hosts_per_leaf=per_leaf)
    except TopologyError as exc:
        assert "\n" not in str(exc)
        return
    assert round_trip(t, tmp_path) == t


def test_an_uplink_an_ulp_over_one_nic_a_port_round_trips(tmp_path):
    """23 hosts of one rail NIC of 100,000 GB/s, R = 2.3: 23 x 1e5 / 2.3 GB/s over ceil(23 / 2.3) = 10 ports is
    1e5 GB/s a port by hand, 100000.00000000001 in floats; the loader's per-port bound allows that rounding (and no
    more: 1e5 x (1 + 1e-9) a port is refused)."""
    t = cluster("dgx-h100", 23, nic_gbps=1e5, spine_oversubscription=2.3, hosts_per_leaf=23, rail_optimized=True)
    up = t.graph.edges["leaf0.rail0", "spine"]
    assert up["links"] == 10 and up["bandwidth_gbps"] / 10 > 1e5
    assert round_trip(t, tmp_path) == t
    doc = topology_to_dict(t)
    k = next(k for k, ln in enumerate(doc["links"]) if {ln["src"], ln["dst"]} == {"leaf0.rail0", "spine"})
    doc["links"][k]["bandwidth_gbps"] = 10 * 1e5 * (1 + 1e-9)
    with pytest.raises(TopologyError, match=rf"t.json: links\[{k}\].bandwidth_gbps must be at most 1e\+06 GB/s"):
        topology_from_dict(doc, "t.json")


@pytest.mark.parametrize("per_leaf", [1, 2, 4096])
def test_hosts_per_leaf_without_a_spine_is_refused_not_ignored(per_leaf):
    """A single-tier network has no leaves: ``hosts_per_leaf`` without ``spine_oversubscription`` built the same
    one-switch cluster as without it, the argument dropped without a word. The library now says what the CLIs say
    (``--hosts-per-leaf needs --spine-oversubscription R``), in one line; with a spine it is still taken."""
    with pytest.raises(TopologyError, match=r"^cluster: hosts_per_leaf needs spine_oversubscription R$"):
        cluster("dgx-h100", 4, hosts_per_leaf=per_leaf)
    two_leaves = cluster("dgx-h100", 4, spine_oversubscription=1, hosts_per_leaf=2)
    assert {n for n in two_leaves.graph.nodes if n.startswith("leaf")} == {"leaf0", "leaf1"}

"""The NCCL XML export numbers NICs once per export (``_Exporter._nic_dev``) where it sorted every NIC again for each
NIC (1,024 NICs: 1.07 M regex sort keys): the XML is byte-identical to the export with the old per-NIC sort, kept
here as the reference, for every preset, clusters of them and drawn small clusters, and the sort keys computed stay
within a few per node."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topo_probe.errors import TopologyError, show
from topo_probe.limits import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.number_checks import check_float
from topo_probe.parsers import nccl_xml_export
from topo_probe.parsers.nccl_xml_export import _Exporter, to_nccl_xml


def _ref_natural(node: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", node)]


class _ReferenceExporter(_Exporter):
    """The exporter with ``_net`` as it was: the NIC's ``dev`` is its place in all NICs sorted for each NIC."""

    def _net(self, n: str, depth: int) -> None:
        d = self.g.nodes[n]
        nics = sorted(self.t.nodes_of_kind("nic"), key=_ref_natural)
        attrs = {"name": d.get("name", n), "dev": d.get("nccl_dev", nics.index(n)), **self._id("topocoll_node", n)}
        if d.get("speed_gbps") is not None:
            gbps = check_float(d["speed_gbps"], f"to_nccl_xml: NIC {show(n)}: speed_gbps", TopologyError,
                               lo=MIN_BANDWIDTH_GBPS, hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
            attrs["speed"] = int(round(gbps * 8000))
        attrs["port"] = d.get("port", 1)
        attrs["latency"] = d.get("latency", "0.000000")
        attrs.update({k: d[k] for k in ("guid", "maxconn") if k in d})
        attrs["gdr"] = "0" if d.get("gdr") is False else "1"
        self.emit("<net " + " ".join(f'{a}="{nccl_xml_export._q(v)}"' for a, v in attrs.items()) + "/>", depth)


def _same_xml(topo) -> None:
    want = _ReferenceExporter(topo, None).run()
    got = _Exporter(topo, None).run()
    assert got == want
    full = to_nccl_xml(topo)
    assert full.startswith(want.rsplit("</system>", 1)[0])      # the <topocoll> block follows the same body
    assert full.count("<net ") == want.count("<net ") == len(topo.nodes_of_kind("nic"))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_exports_as_the_reference_does(name):
    _same_xml(get_preset(name))


@pytest.mark.parametrize("args", [("dgx-h100", 12, {}), ("dgx-a100", 11, {"rail_optimized": True}),
                                  ("gb200-nvl72", 2, {"nics_per_node": 72}),
                                  ("dgx-h100", 16, {"spine_oversubscription": 1, "hosts_per_leaf": 1024}),
                                  ("mi300x", 3, {"nics_per_node": 10})])
def test_clusters_export_as_the_reference_does(args):
    """Clusters of 10+ hosts: NIC names nic10 and up, where natural and string order differ."""
    preset, nodes, kw = args
    _same_xml(cluster(preset, nodes, **kw))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(preset=st.sampled_from(sorted(PRESETS)), nodes=st.integers(1, 4), nics=st.one_of(st.none(), st.integers(1, 12)),
       rail=st.booleans(), devs=st.lists(st.integers(0, 40), max_size=4))
def test_drawn_small_clusters_export_as_the_reference_does(preset, nodes, nics, rail, devs):
    """With some NICs carrying their own ``nccl_dev`` (what a parsed NCCL XML keeps), the rest numbered."""
    try:
        t = cluster(preset, nodes, rail_optimized=rail, nics_per_node=nics)
    except TopologyError:
        return
    for nic, dev in zip(t.nodes_of_kind("nic")[::3], devs):
        t.graph.nodes[nic]["nccl_dev"] = dev
    _same_xml(t)


def test_the_nic_numbering_is_not_quadratic(monkeypatch):
    """32 hosts of 8 NICs (256 NICs, 1,000+ nodes): the old export computed a sort key 256 x 256 times in ``_net``
    alone; now each sort computes one key per node it sorts, a few sorts per node."""
    calls = []
    real = nccl_xml_export._natural
    monkeypatch.setattr(nccl_xml_export, "_natural", lambda node: calls.append(node) or real(node))
    t = cluster("dgx-h100", 32)
    to_nccl_xml(t)
    assert 0 < len(calls) <= 6 * t.graph.number_of_nodes(), (len(calls), t.graph.number_of_nodes())

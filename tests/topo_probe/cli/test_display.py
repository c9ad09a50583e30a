"""topo_probe.cli.display: NICs in natural order (NIC2 is nic2, not nic10), and with many NICs
no line grows with their number (NIC columns in blocks of 12), the blocks as a block-by-block reference
writes them, each row's PCIe search done once."""

import contextlib
import io
import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.cli.display import NIC_COLUMNS, _label, _nic_blocks, _table, render, sorted_nics
from topo_probe.cli.main import main
from topo_probe.load import load_topology
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.topology import shortest_paths
from topo_probe.topology.serialize import topology_from_dict


def test_many_nics_sort_naturally_and_lines_stay_short():
    topo = cluster("dgx-h100", nodes=2, nics_per_node=32)
    text = render(topo)
    legend = dict(re.findall(r"^  (NIC\d+): host \d+ (\S+)$", text, re.M))
    assert legend["NIC2"] == "nic2" and legend["NIC10"] == "nic10" and len(legend) == 64
    hosts = re.findall(r"^  NIC\d+: host (\d+) ", text, re.M)
    assert hosts == sorted(hosts, key=int)                      # host 0's NICs first
    assert max(len(line) for line in text.splitlines()) <= 160
    blocks = re.findall(r"^NIC(\d+)-NIC(\d+):$", text, re.M)
    assert [(int(a), int(b)) for a, b in blocks] == [(k, min(k + NIC_COLUMNS, 64) - 1) for k in range(0, 64, NIC_COLUMNS)]


def test_few_nics_stay_in_the_matrix():
    from topo_probe import get_preset
    text = render(get_preset("dgx-h100"))                      # 8 NICs
    header = text.splitlines()[next(i for i, ln in enumerate(text.splitlines()) if ln.strip().startswith("GPU0"))]
    assert "NIC0" in header and not re.search(r"^NIC0-NIC", text, re.M)


def test_a_big_cluster_shows_its_first_128_gpus_only():
    """17 DGX A100 hosts (136 GPUs): the matrices stop at GPU127 (1,024 GPUs are a million pairs, each with its
    routes and PCIe class) and a header line says so; the NIC legend keeps the hosts of the shown GPUs."""
    text = render(cluster("dgx-a100", nodes=17))
    assert "  shown below: GPUs 0-127 of 136 and their hosts' NICs" in text
    rows = re.findall(r"^GPU(\d+) ", text, re.M)
    assert sorted({int(r) for r in rows}) == list(range(128))      # 128 = 16 hosts x 8 GPUs
    hosts = {int(h) for h in re.findall(r"^  NIC\d+: host (\d+) ", text, re.M)}
    assert hosts == set(range(16))
    assert "P2P read/write: " in text and re.search(r"of 16256 ordered GPU pairs", text)   # 128 * 127


def test_past_the_display_cap_json_still_has_every_gpu(tmp_path):
    """The 128-GPU cap is the matrices' only: ``--format json`` and ``--json OUT`` of 17 DGX A100 hosts keep all
    136 GPUs, the same topology (fingerprint) as cluster() builds."""
    want = cluster("dgx-a100", nodes=17)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--topology", "dgx-a100", "--nodes", "17", "--format", "json"]) == 0
    shown = topology_from_dict(json.loads(out.getvalue()), source="stdout")
    assert shown.num_gpus == 136 and shown.fingerprint() == want.fingerprint()
    path = tmp_path / "t.json"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["--topology", "dgx-a100", "--nodes", "17", "--json", str(path), "--format", "json"]) == 0
    assert load_topology(str(path)).fingerprint() == want.fingerprint()


def _reference_nic_blocks(topo, gpus, nics):
    """The NIC blocks written block by block, each cell asked for in its block (display.py before it found each
    row's cells once and cut them into blocks)."""
    blocks = []
    for lo in range(0, len(nics), NIC_COLUMNS):
        cols = nics[lo:lo + NIC_COLUMNS]
        rows = [[""] + [f"NIC{lo + k}" for k in range(len(cols))] + ["", ""]]
        for a in gpus:
            rows.append([f"GPU{topo.graph.nodes[a]['index']}"] + [_label(topo.pcie_class, a, n) for n in cols]
                        + ["", ""])
        for k, a in enumerate(nics):
            rows.append([f"NIC{k}"] + ["X" if a == b else _label(topo.pcie_class, a, b) for b in cols] + ["", ""])
        blocks.append(f"NIC{lo}-NIC{lo + len(cols) - 1}:\n" + _table(rows))
    return "\n\n".join(blocks)


def _same_blocks(topo, gpus=None):
    shown, nics = topo.gpus[:gpus], sorted_nics(topo, gpus)
    want = _reference_nic_blocks(topo, shown, nics)
    assert _nic_blocks(topo, shown, nics) == want, topo.name
    return want


def test_nic_blocks_of_every_preset_as_the_reference():
    """Every preset's NICs in blocks (also those with 12 or fewer, which the matrix shows as columns), and the
    first GPUs only: the text of the block-by-block reference, character for character."""
    for name in sorted(PRESETS):
        t = get_preset(name)
        assert _same_blocks(t).count("NIC0-NIC") == (1 if t.nodes_of_kind("nic") else 0), name
        _same_blocks(t, 3)


@settings(derandomize=True, max_examples=25, deadline=None)
@given(st.sampled_from(sorted(PRESETS)), st.integers(1, 3), st.one_of(st.none(), st.integers(1, 20)), st.booleans(),
       st.integers(1, 40))
def test_nic_blocks_of_drawn_clusters_as_the_reference(preset, nodes, nics, rail, gpus):
    """Small clusters of any preset (1-20 NICs a host, rail-optimised or not, the first 1-40 GPUs shown)."""
    t = cluster(preset, nodes, nics_per_node=nics, rail_optimized=rail)
    _same_blocks(t, gpus)


def test_each_row_is_searched_once_per_view(monkeypatch):
    """9 DGX H100 hosts: 72 GPU and 72 NIC rows, 6 NIC blocks.  PCIe searches: each GPU's in the GPU matrix and
    again in the NIC blocks (72 sources there and as many NICs: more than the 64 searches an index keeps), each
    NIC's in the NIC blocks: 216 (before: one per row and block, 1,008)."""
    t = cluster("dgx-h100", 9)
    searched = []
    orig = shortest_paths.PathIndex._search

    def search(index, src):
        if src not in index._searches and "pcie" in index._kinds and "network" not in index._kinds:
            searched.append(src)
        return orig(index, src)
    monkeypatch.setattr(shortest_paths.PathIndex, "_search", search)
    text = render(t)
    assert len(re.findall(r"^NIC\d+-NIC\d+:$", text, re.M)) == 6
    assert sorted(searched) == sorted(2 * t.gpus + t.nodes_of_kind("nic"))

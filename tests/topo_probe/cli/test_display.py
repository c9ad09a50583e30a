"""topo_probe.cli.display: NICs in natural order (NIC2 is nic2, not nic10), and with many NICs
no line grows with their number (NIC columns in blocks of 12)."""

import contextlib
import io
import json
import re

from topo_probe.cli.display import NIC_COLUMNS, render
from topo_probe.cli.main import main
from topo_probe.load import load_topology
from topo_probe.machines.clusters import cluster
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

"""The topo-probe CLI and its text views (display.py) vs the REFERENCE link matrix and
published link speeds."""

import json
import re
import subprocess
import sys
import types

import pytest

from _paths import ROOT
from topo_probe.cli.display import bandwidth_matrix, pair_bandwidth_gbps
from topo_probe.cli.main import main
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import get_preset
from topo_probe.topology.serialize import load_topology_json, topology_to_dict


def reference_links(fixtures_dir):
    text = (fixtures_dir / "REFERENCE.md").read_text()
    return json.loads(re.search(r"links\[i\]\[j\]:\s*```\s*(\[\[.*?\]\])", text, re.S).group(1))


def matrix_rows(out, n):
    """{row name: cells} of the topology matrix printed by topo-probe."""
    lines = out.splitlines()
    start = next(k for k, ln in enumerate(lines) if ln.split()[:1] == ["GPU0"] and "GPU1" in ln)
    header = lines[start].split()
    rows = {}
    for ln in lines[start + 1:]:
        if not ln.strip():
            break
        parts = ln.split()
        rows[parts[0]] = parts[1:1 + len([h for h in header if re.fullmatch(r"(GPU|NIC)\d+", h)])]
    return header, rows


def test_matrix_matches_reference(capsys, fixtures_dir):
    ref = reference_links(fixtures_dir)
    assert main(["--topology", "dgx1-v100"]) == 0
    out = capsys.readouterr().out
    header, rows = matrix_rows(out, 8)
    assert header[:12] == [f"GPU{i}" for i in range(8)] + [f"NIC{k}" for k in range(4)]
    for i in range(8):
        expect = ["X" if i == j else (f"NV{ref[i][j]}" if ref[i][j] else "SYS") for j in range(8)]
        assert rows[f"GPU{i}"][:8] == expect
    assert rows["GPU0"][1] == "NV2"
    # NIC columns: each NIC sits with a GPU pair under one PCIe switch
    assert rows["GPU0"][8:12] == ["PIX", "NODE", "SYS", "SYS"]
    assert "NIC0: mlx5_0" in out and "CPU Affinity" in out


def test_bandwidth_matrix_vs_link_speeds(fixtures_dir, capsys):
    ref = reference_links(fixtures_dir)
    t = get_preset("dgx1-v100")
    m = bandwidth_matrix(t)
    for i in range(8):
        for j in range(8):
            if i != j:  # NVLink2 25 GB/s per link, else PCIe Gen3 x16 15.75 GB/s
                assert m[i][j] == (25.0 * ref[i][j] if ref[i][j] else 15.75)
    assert main(["--topology", "dgx1-v100", "--nvlink-gbps", "20"]) == 0
    out = capsys.readouterr().out
    row0 = next(ln for ln in out.splitlines()[out.splitlines().index(
        "Pair bandwidth (GB/s per direction, each pair alone):"):] if ln.startswith("GPU0"))
    assert row0.split()[1:] == ["X", "40.0", "20.0", "20.0", "40.0", "15.75", "15.75", "15.75"]


def test_pair_bandwidth_published():
    assert pair_bandwidth_gbps(get_preset("dgx2"), 0, 8) == 6 * 25.0  # 6 planes, 200 GB/s trunks
    assert pair_bandwidth_gbps(get_preset("dgx-h100"), 0, 5) == 18 * 25.0
    assert pair_bandwidth_gbps(get_preset("mi300x"), 2, 6) == 64.0
    assert pair_bandwidth_gbps(cluster("dgx-h100", nodes=2), 0, 8) == 400 / 8  # one NDR NIC


def test_p2p_gdr_summary(capsys):
    assert main(["--topology", "pcie-8gpu-2socket"]) == 0
    out = capsys.readouterr().out
    assert "P2P read/write: 24 of 56 ordered GPU pairs" in out  # 2 sockets x 4 x 3
    assert "no P2P (crosses CPU sockets): 0-4 0-5" in out
    assert "GPU5: NIC1 (mlx5_1, PIX)" in out


def test_no_gpus_subprocess():
    r = subprocess.run([sys.executable, "-m", "topo_probe.cli.main"], capture_output=True, text=True,
                       cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 1 and r.stdout.startswith("no GPUs:")


def _fake_probe(monkeypatch, result):
    mod = types.ModuleType("topo_probe.probes")
    mod.probe_machine = lambda: result
    monkeypatch.setitem(sys.modules, "topo_probe.probes", mod)


def test_no_gpus_reasons_joined(monkeypatch, capsys):
    _fake_probe(monkeypatch, (None, ["libnvidia-ml.so.1 not found", "no /dev/nvidia*"]))
    assert main([]) == 0
    assert capsys.readouterr().out == "no GPUs: libnvidia-ml.so.1 not found; no /dev/nvidia*\n"


def test_probed_machine_with_gpus_flag(monkeypatch, capsys):
    _fake_probe(monkeypatch, (get_preset("dgx-h100"), []))
    assert main(["--gpus", "2,3"]) == 0
    _, rows = matrix_rows(capsys.readouterr().out, 2)
    assert rows["GPU0"][:2] == ["X", "NV18"]


@pytest.mark.parametrize("argv,needle", [
    (["--topology", "dgx1-v100", "--gpus", "0,x"], "'x' is not a GPU index"),
    (["--topology", "dgx1-v100", "--gpus", "8"], "GPU 8 does not exist"),
    (["--topology", "nope"], "'nope' is neither an existing file nor a preset"),
    (["--format", "xml"], "invalid choice"),
    (["--nvlink-gbps", "fast"], "invalid float value"),
])
def test_bad_input_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert len(cap.err.splitlines()) == 1 and needle in cap.err and cap.err.startswith("topo-probe: error:")


def test_bad_gpus_subprocess():
    r = subprocess.run([sys.executable, "-m", "topo_probe.cli.main", "--topology", "dgx-a100", "--gpus", "3-1"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["topo-probe: error: --gpus '3-1': range '3-1' runs backwards"]


def test_json_outputs(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["--topology", "dgx-a100", "--gpus", "0-3", "--json", str(out), "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    expect = get_preset("dgx-a100").subset([0, 1, 2, 3])
    assert load_topology_json(out) == expect
    assert printed == topology_to_dict(expect)


def test_nccl_xml_output_reads_back_to_the_same_gpus_and_links(tmp_path):
    from topo_probe.parsers.nccl_xml import parse_nccl_xml
    out = tmp_path / "topo.xml"
    assert main(["--topology", "dgx1-v100", "--nccl-xml", str(out)]) == 0
    back, orig = parse_nccl_xml(out.read_text()), get_preset("dgx1-v100")
    assert back.num_gpus == orig.num_gpus == 8
    assert all(back.nvlink_count(i, j) == orig.nvlink_count(i, j) for i in range(8) for j in range(8))


@pytest.mark.parametrize("fmt", ["json", "matrix"])
def test_a_reader_that_stops_early_gets_no_broken_pipe_error(fmt):
    """`topo-probe | head -1`: the reader closes the pipe after one line; no error, status 0."""
    proc = subprocess.Popen([sys.executable, "-m", "topo_probe.cli.main", "--topology", "dgx-h100",
                             "--nodes", "4", "--format", fmt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # what head does after its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and err == "", err


@pytest.mark.parametrize("flag", ["--json", "--nccl-xml"])
def test_a_users_file_is_not_replaced_but_our_own_export_is(tmp_path, capsys, flag):
    """Audit 65: ``--json`` / ``--nccl-xml`` replaced any existing file.  An existing file is replaced
    only when it is one topo-probe writes (a ``topocoll.topology`` JSON, an XML with our comment line);
    nothing is written when either is refused."""
    mine, other = tmp_path / "mine.txt", tmp_path / ("o.xml" if flag == "--json" else "o.json")
    mine.write_text('{"format": "link-matrix", "links": [[0, 1], [1, 0]]}\n')
    other_flag = "--nccl-xml" if flag == "--json" else "--json"
    assert main(["--topology", "ring:4", other_flag, str(other), flag, str(mine)]) == 2
    cap = capsys.readouterr()
    assert len(cap.err.splitlines()) == 1 and str(mine) in cap.err and "not one topo-probe wrote" in cap.err
    assert mine.read_text().startswith('{"format": "link-matrix"') and not other.exists()
    ours = tmp_path / "ours"
    assert main(["--topology", "ring:4", flag, str(ours)]) == 0
    assert main(["--topology", "ring:8", flag, str(ours)]) == 0                      # our own: replaced
    assert "ring8" in ours.read_text()


@pytest.mark.parametrize("flag", ["--json", "--nccl-xml"])
def test_an_empty_file_such_as_mktemp_makes_is_replaced(tmp_path, capsys, flag):
    """``topo-probe --json "$(mktemp)"``: the empty file is no user's data; it is written, exit 0."""
    out = tmp_path / "tmp.Ab12Cd"
    out.touch()
    assert main(["--topology", "ring:4", flag, str(out)]) == 0
    assert capsys.readouterr().err == "" and "ring4" in out.read_text()

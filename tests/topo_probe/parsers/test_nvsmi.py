"""nvidia-smi topo -m / -p2p parsing, checked cell by cell against the text itself."""

from __future__ import annotations

import re

import networkx as nx
import pytest
from _paths import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.errors import TopologyError
from topo_probe.parsers.nvsmi import apply_p2p, parse_nvsmi_p2p, parse_nvsmi_topo

# DGX-1 link matrix as published (REFERENCE.md), for an isomorphism check.
DGX1_REF = [[0, 2, 1, 1, 2, 0, 0, 0], [2, 0, 1, 2, 0, 1, 0, 0], [1, 1, 0, 2, 0, 0, 2, 0],
            [1, 2, 2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2, 1, 1], [0, 1, 0, 0, 2, 0, 1, 2],
            [0, 0, 2, 0, 1, 1, 0, 2], [0, 0, 0, 1, 1, 2, 2, 0]]


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def naive_cells(text: str) -> tuple[list[str], dict[tuple[str, str], str], dict[str, list[str]]]:
    """Independent reading of space-aligned output: header names, cells, trailing values."""
    lines = text.split("\n")
    header = re.findall(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+", lines[0])
    cols = [h for h in header if h not in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")]
    cells, rest = {}, {}
    for line in lines[1:1 + len(cols)]:
        toks = line.split()
        for c, v in zip(cols, toks[1:1 + len(cols)]):
            cells[(toks[0], c)] = v
        rest[toks[0]] = toks[1 + len(cols):]
    return cols, cells, rest


def nic_by_name(t, name):
    return next(n for n in t.nodes_of_kind("nic") if t.graph.nodes[n]["name"] == name)


def check_every_cell(t, text, nic_names=None):
    cols, cells, _ = naive_cells(text)
    gpus = [c for c in cols if c.startswith("GPU")]
    nics = [c for c in cols if not c.startswith("GPU")]
    nic_names = nic_names or {c: c for c in nics}
    checked = 0
    for a in cols:
        for b in cols:
            want = cells[(a, b)]
            if a in gpus and b in gpus:
                got = t.smi_label(int(a[3:]), int(b[3:]))
            elif a == b:
                continue
            else:
                na = t.gpu(int(a[3:])) if a in gpus else nic_by_name(t, nic_names[a])
                nb = t.gpu(int(b[3:])) if b in gpus else nic_by_name(t, nic_names[b])
                got = t.pcie_class(na, nb)
            assert got == want, f"cell {a}/{b}: got {got}, text says {want}"
            checked += 1
    return checked


# ----------------------------------------------------------------------------- real files
def test_dgx1_v100_every_cell():
    text = read("nvsmi_topo_dgx1_v100.txt")
    t = parse_nvsmi_topo(text, source="dgx1.txt")
    assert t.num_gpus == 8 and len(t.nodes_of_kind("nic")) == 1
    assert check_every_cell(t, text) == 64 + 16  # 8x8 GPU cells + 8 GPU-NIC each way
    _, cells, rest = naive_cells(text)
    for i in range(8):
        for j in range(8):
            cell = cells[(f"GPU{i}", f"GPU{j}")]
            assert t.nvlink_count(i, j) == (int(cell[2:]) if cell.startswith("NV") else 0)
        assert t.gpu_bandwidth_gbps(i) == 150.0  # 6 NVLink2 x 25 GB/s (published)
        assert t.graph.nodes[f"gpu{i}"]["cpu_affinity"] == rest[f"GPU{i}"][0]
    numa = {i: t.graph.nodes[t.gpu(i)]["numa_node"] for i in range(8)}
    assert {numa[i] for i in range(4)} != {numa[i] for i in range(4, 8)}
    assert len({numa[i] for i in range(4)}) == len({numa[i] for i in range(4, 8)}) == 1
    # same graph as the published DGX-1 matrix, up to GPU numbering
    mine = nx.Graph([(i, j, {"w": t.nvlink_count(i, j)}) for i in range(8) for j in range(8) if t.nvlink_count(i, j)])
    ref = nx.Graph([(i, j, {"w": DGX1_REF[i][j]}) for i in range(8) for j in range(8) if DGX1_REF[i][j]])
    assert nx.is_isomorphic(mine, ref, edge_match=lambda a, b: a["w"] == b["w"])
    assert any("NVLink2" in a for a in t.assumptions)


def test_dgx_a100_every_cell():
    text = read("nvsmi_topo_dgx_a100.txt")
    t = parse_nvsmi_topo(text)
    legend = dict(re.findall(r"(NIC\d+): (\S+)", text))
    assert t.num_gpus == 8 and len(t.nodes_of_kind("nic")) == 10
    assert sorted(t.graph.nodes[n]["name"] for n in t.nodes_of_kind("nic")) == sorted(legend.values())
    assert check_every_cell(t, text, legend) == 64 + 2 * 80 + 90
    assert len(t.nodes_of_kind("nvswitch")) == 6
    for i in range(8):
        assert t.gpu_bandwidth_gbps(i) == 300.0  # 12 NVLink3 x 25 (published 300 GB/s per GPU)
        for j in range(8):
            assert t.smi_label(i, j) == ("X" if i == j else "NV12")
    _, _, rest = naive_cells(text)
    numa = {i: t.graph.nodes[t.gpu(i)]["numa_node"] for i in range(8)}
    assert numa == {i: int(rest[f"GPU{i}"][1]) for i in range(8)} == {0: 3, 1: 3, 2: 1, 3: 1, 4: 7, 5: 7, 6: 5, 7: 5}
    assert all(t.graph.nodes[t.gpu(i)].get("gpu_numa_id") is None for i in range(8))
    assert any("6 NVSwitches" in a for a in t.assumptions)
    assert t.gdr(0, nic_by_name(t, "mlx5_0")) == (True, "")
    assert t.gdr(0, nic_by_name(t, "mlx5_2"))[0] is False


def test_two_gpu_raw_tabs_with_empty_cell():
    text = read("nvsmi_topo_2x_pcie_raw_tabs.txt")
    assert "\t\t" in text and "\t X \t" in text
    t = parse_nvsmi_topo(text)
    assert t.num_gpus == 2 and not t.nodes_of_kind("nic")
    assert [t.smi_label(0, 1), t.smi_label(1, 0), t.path_class(0, 1)] == ["PHB"] * 3
    for g in t.gpus:
        assert t.graph.nodes[g]["numa_node"] == 0 and t.graph.nodes[g]["cpu_affinity"] == "0-63"
        assert "gpu_numa_id" not in t.graph.nodes[g]
    assert t.p2p(0, 1).supported is False  # PHB: NCCL does not use P2P through the host bridge


def test_tabs_and_spaces_give_the_same_topology():
    text = read("nvsmi_topo_dgx1_v100.txt")
    tabbed = "\n".join("\t".join(ln.split("  ")).replace("\t\t", "\t") for ln in text.split("\n"))
    assert parse_nvsmi_topo(tabbed).fingerprint() == parse_nvsmi_topo(text).fingerprint()


def test_nvlink_gbps_option_and_guess():
    text = read("nvsmi_topo_dgx1_v100.txt")
    t = parse_nvsmi_topo(text, nvlink_gbps=20.0, pcie_gbps=12.0)
    assert t.gpu_bandwidth_gbps(0) == 120.0
    assert not any("NVLink speed" in a for a in t.assumptions)
    assert t.graph.edges["gpu0", next(iter(t.graph.successors("gpu0")))]["bandwidth_gbps"] > 0


def test_nvswitch_inference_nv18_and_plain_nv4():
    gpus = [f"GPU{i}" for i in range(8)]
    rows = ["\t" + "\t".join(gpus)] + [f"GPU{i}\t" + "\t".join(" X " if i == j else "NV18" for j in range(8))
                                       for i in range(8)]
    t = parse_nvsmi_topo("\n".join(rows))
    sw = t.nodes_of_kind("nvswitch")
    assert len(sw) == 4 and sorted(t.graph.edges["gpu0", s]["links"] for s in sw) == [4, 4, 5, 5]
    assert t.smi_label(3, 6) == "NV18" and t.gpu_bandwidth_gbps(0) == 450.0
    rows = ["\t" + "\t".join(gpus[:4])] + [f"GPU{i}\t" + "\t".join(" X " if i == j else "NV4" for j in range(4))
                                           for i in range(4)]
    t = parse_nvsmi_topo("\n".join(rows))
    assert not t.nodes_of_kind("nvswitch") and t.nvlink_count(0, 3) == 4  # 12 links: point to point


# ----------------------------------------------------------------------------- -p2p
def test_p2p_file_and_apply():
    table = parse_nvsmi_p2p(read("nvsmi_topo_p2p_2x_pcie_raw_tabs.txt"))
    assert set(table) == {(0, 1), (1, 0)}
    for cap in table.values():
        assert (cap.read, cap.write, cap.atomics) == (False, False, False)
        assert cap.reason.startswith("GPU not supported") and "GNS" in cap.reason
    t = apply_p2p(parse_nvsmi_topo(read("nvsmi_topo_2x_pcie_raw_tabs.txt")), table)
    assert t.p2p(1, 0) == table[(1, 0)]
    with pytest.raises(TopologyError, match="outside"):
        apply_p2p(t, {(0, 2): table[(0, 1)]})


@pytest.mark.parametrize("code,text", [("OK", None), ("CNS", "Chipset not supported"), ("TNS", "Topology not supported"),
                                       ("NS", "Not supported"), ("DR", "Disabled by regkey"), ("U", "Unknown")])
def test_p2p_every_legend_code(code, text):
    raw = read("nvsmi_topo_p2p_2x_pcie_raw_tabs.txt").replace("\tGNS\t", f"\t{code}\t")
    cap = parse_nvsmi_p2p(raw, mode="w")[(0, 1)]
    if text is None:
        assert cap.supported and not cap.atomics
    else:
        assert not cap.supported and cap.reason.startswith(text)
    assert parse_nvsmi_p2p(raw, mode="a")[(1, 0)].atomics == (code == "OK")


# ----------------------------------------------------------------------------- malformed
def error_at(text: str, source="f.txt") -> tuple[int, int, str]:
    with pytest.raises(TopologyError) as exc:
        parse_nvsmi_topo(text, source=source)
    msg = str(exc.value)
    assert "\n" not in msg
    m = re.match(rf"{re.escape(source)}:line (\d+) column (\d+): (.+)$", msg)
    assert m, msg
    return int(m.group(1)), int(m.group(2)), m.group(3)


def replace_cell(text: str, row: int, col: int, new: str) -> tuple[str, int, int]:
    """Replace the cell (row line index, col-th token after the label); returns the 1-based
    line and column of the edited cell."""
    lines = text.split("\n")
    toks = [(m.start(), m.group()) for m in re.finditer(r"\S+", lines[row])]
    start, old = toks[col + 1]
    lines[row] = lines[row][:start] + new + lines[row][start + len(old):]
    return "\n".join(lines), row + 1, start + 1


@pytest.mark.parametrize("token", ["NV?", "FOO", "NV0", "PXE"])
def test_unknown_token_named_by_line_and_column(token):
    text, line, col = replace_cell(read("nvsmi_topo_dgx1_v100.txt"), 3, 5, token)
    got_line, got_col, msg = error_at(text)
    assert (got_line, got_col) == (line, col) and repr(token) in msg and "GPU2" in msg and "GPU5" in msg


def test_truncated_matrix():
    lines = read("nvsmi_topo_dgx_a100.txt").split("\n")
    text = "\n".join(lines[:7])  # header + GPU0..GPU5
    line, col, msg = error_at(text)
    assert (line, col) == (8, 1) and "truncated" in msg and "GPU6" in msg and "NIC9" in msg
    cut = read("nvsmi_topo_dgx1_v100.txt")
    cut = cut[:cut.index("GPU5    SYS     NV2") + 30]  # cut inside the GPU5 row
    line, _, msg = error_at(cut)
    assert line == 7 and "ragged row GPU5" in msg


def test_duplicate_header_and_row():
    lines = read("nvsmi_topo_dgx1_v100.txt").split("\n")
    line, col, msg = error_at("\n".join(lines[:3] + [lines[0]] + lines[3:]))
    assert (line, col) == (4, 9) and "duplicate header" in msg
    line, col, msg = error_at("\n".join(lines[:3] + [lines[2]] + lines[3:]))
    assert (line, col) == (4, 1) and "appears twice" in msg


def test_ragged_row():
    lines = read("nvsmi_topo_dgx1_v100.txt").split("\n")
    lines[4] = lines[4].replace("NV2     NV1     NV2 ", "NV2     NV1 ", 1)  # GPU3 loses a cell
    line, _, msg = error_at("\n".join(lines))
    assert line == 5 and "ragged row GPU3" in msg
    tabs = read("nvsmi_topo_2x_pcie_raw_tabs.txt").replace("0-63\t0\t\tN/A\nGPU1", "0-63\t0\t\tN/A\textra\nGPU1")
    line, col, msg = error_at(tabs)
    assert line == 2 and "ragged row GPU0" in msg


def test_asymmetric_diagonal_and_contradiction_are_read_with_assumptions():
    text, _, _ = replace_cell(read("nvsmi_topo_dgx1_v100.txt"), 2, 2, "NV2")  # GPU1/GPU2: NV2, GPU2/GPU1 says NV2
    text, _, _ = replace_cell(text, 3, 1, "NV1")  # GPU2/GPU1 now NV1 -> asymmetric: the slower reading, NV1
    t = parse_nvsmi_topo(text, source="f.txt")
    assert t.nvlink_count(1, 2) == t.nvlink_count(2, 1) == 1
    assert any("GPU1/GPU2 is NV2" in a and "is NV1" in a and "read as NV1" in a for a in t.assumptions)
    text, line_x, col_x = replace_cell(read("nvsmi_topo_dgx1_v100.txt"), 1, 0, "NV1")  # diagonal GPU0/GPU0
    t = parse_nvsmi_topo(text, source="f.txt")
    assert f"line {line_x} column {col_x}): the diagonal, read as X" in " ".join(t.assumptions)
    assert t.smi_label(0, 1) == "NV1" and t.nvlink_count(0, 0) == 0
    # A PIX B, B PIX C, A SYS C: no PCIe tree gives that; read as the class the other cells imply (PIX)
    bad = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPIX\tSYS\nGPU1\tPIX\t X \tPIX\nGPU2\tSYS\tPIX\t X \n"
    t = parse_nvsmi_topo(bad, source="f.txt")
    assert [t.smi_label(0, 1), t.smi_label(1, 2), t.smi_label(0, 2)] == ["PIX", "PIX", "PIX"]
    assert any("gpu0/gpu2 SYS read as PIX (f.txt:line 2 column 14)" in a for a in t.assumptions)
    with pytest.raises(TopologyError, match="no `nvidia-smi topo -m` header"):
        parse_nvsmi_topo("hello\nworld\n")


# ----------------------------------------------------------------------------- hypothesis
@st.composite
def machines(draw):
    n_gpu = draw(st.integers(1, 6))
    n_nic = draw(st.integers(0, 4))
    pos = [tuple(draw(st.integers(0, 1)) for _ in range(4)) for _ in range(n_gpu + n_nic)]
    if draw(st.booleans()) and n_gpu >= 3:
        k = draw(st.sampled_from([12, 18]))
        nv = [[0 if i == j else k for j in range(n_gpu)] for i in range(n_gpu)]
    else:
        nv = [[0] * n_gpu for _ in range(n_gpu)]
        for i in range(n_gpu):
            for j in range(i + 1, n_gpu):
                nv[i][j] = nv[j][i] = draw(st.sampled_from([0, 0, 1, 2, 4]))
    style = draw(st.sampled_from(["tabs", "spaces"]))
    nic_style = draw(st.sampled_from(["legend", "named"]))
    numa_col = draw(st.booleans())
    return n_gpu, n_nic, pos, nv, style, nic_style, numa_col


def pcie_label(a, b) -> str:
    for level, name in enumerate(("SYS", "NODE", "PHB", "PXB")):
        if a[level] != b[level]:
            return name
    return "PIX"


def render(n_gpu, n_nic, pos, nv, style, nic_style, numa_col) -> tuple[str, dict]:
    nic_cols = [f"NIC{k}" if nic_style == "legend" else f"mlx5_{k}" for k in range(n_nic)]
    cols = [f"GPU{i}" for i in range(n_gpu)] + nic_cols
    attrs = ["CPU Affinity"] + (["NUMA Affinity", "GPU NUMA ID"] if numa_col else [])
    cells = {}
    for a, ca in enumerate(cols):
        for b, cb in enumerate(cols):
            if a == b:
                cells[(ca, cb)] = "X"
            elif a < n_gpu and b < n_gpu and nv[a][b]:
                cells[(ca, cb)] = f"NV{nv[a][b]}"
            else:
                cells[(ca, cb)] = pcie_label(pos[a], pos[b])
    rows = []
    for a, ca in enumerate(cols):
        vals = [(" X " if style == "tabs" else "X") if ca == cb else cells[(ca, cb)] for cb in cols]
        if a < n_gpu:
            cpu = pos[a][0]
            vals.append(f"{16 * cpu}-{16 * cpu + 15}")
            if numa_col:
                vals += [str(cpu), "", "N/A"] if style == "tabs" else [str(cpu), "N/A"]
        rows.append([ca] + vals)
    if style == "tabs":
        lines = ["\t" + "\t".join(cols + attrs)] + ["\t".join(r) for r in rows]
    else:
        lines = ["        " + "".join(f"{c:<8}" for c in cols) + "   ".join(attrs)]
        lines += ["".join(f"{v:<8}" for v in r) for r in rows]
    lines += ["", "Legend:", "", "  X    = Self"]
    if nic_style == "legend" and n_nic:
        lines += ["", "NIC Legend:", ""] + [f"  NIC{k}: mlx5_{k}" for k in range(n_nic)]
    return "\n".join(lines) + "\n", cells


@settings(derandomize=True, max_examples=200, deadline=None)
@given(machines())
def test_random_matrices_round_trip_cell_by_cell(m):
    n_gpu, n_nic, pos, nv, style, nic_style, numa_col = m
    text, cells = render(*m)
    t = parse_nvsmi_topo(text)
    assert t.num_gpus == n_gpu and len(t.nodes_of_kind("nic")) == n_nic
    names = {f"NIC{k}" if nic_style == "legend" else f"mlx5_{k}": f"mlx5_{k}" for k in range(n_nic)}
    node = {f"GPU{i}": t.gpu(i) for i in range(n_gpu)}
    node.update({c: nic_by_name(t, n) for c, n in names.items()})
    for (a, b), want in cells.items():
        if a.startswith("GPU") and b.startswith("GPU"):
            assert t.smi_label(int(a[3:]), int(b[3:])) == want
        elif a != b:
            assert t.pcie_class(node[a], node[b]) == want
    numa = [t.graph.nodes[t.gpu(i)]["numa_node"] for i in range(n_gpu)]
    for i in range(n_gpu):
        for j in range(n_gpu):
            assert (numa[i] == numa[j]) == (pos[i][0] == pos[j][0])
        if numa_col:
            assert numa[i] == pos[i][0]


# ----------------------------------------------------------------------------- older drivers
def test_old_driver_soc_cells_read_as_sys():
    """Drivers before NODE existed print SOC for SYS (legend 'SOC = ... the SMP link between CPU sockets'):
    every cell is read as the text says with SOC as SYS, the topology is the one the same text with SYS gives,
    and one assumption says so (hand-written fixture, tests/fixtures/family/README.md)."""
    text = read("family/nvsmi_p100x4_driver384_soc.txt")
    t = parse_nvsmi_topo(text, source="old.txt")
    as_sys = re.sub(r"\bSOC\b", "SYS", text.split("\n\nLegend")[0]) + "\n"
    assert check_every_cell(t, as_sys) == 4 * 4 + 2 * 4
    assert t.fingerprint() == parse_nvsmi_topo(as_sys).fingerprint()
    assert t.path_class(0, 2) == "SYS" and t.p2p(0, 2).read is False and t.p2p(0, 1).read is True
    assert [a for a in t.assumptions if "SOC" in a] == [
        "cells SOC (first: row GPU0, line 2 column 14): older drivers' SYS, read as SYS"]


@settings(derandomize=True, max_examples=40, deadline=None)
@given(machines())
def test_random_matrices_with_soc_for_sys(m):
    text, cells = render(*m)
    old = re.sub(r"\bSYS\b", "SOC", text)
    t = parse_nvsmi_topo(old)
    assert t.fingerprint() == parse_nvsmi_topo(text).fingerprint()
    assert any("SOC" in a for a in t.assumptions) == ("SYS" in cells.values())


def test_soc_cells_do_not_search_the_notes(monkeypatch):
    """The SOC note is made once, on a flag of the matrix: the parser no longer scans every note for each SOC cell
    (56 scans for 8 GPUs joined by SOC only).  The notes are a list that counts its scans; one note, as before."""
    from topo_probe.parsers import nvsmi_matrix

    class CountingList(list):
        scans = 0

        def __iter__(self):
            CountingList.scans += 1
            return super().__iter__()
    real = nvsmi_matrix.Matrix

    def matrix(*args, **kwargs):
        mat = real(*args, **kwargs)
        mat.notes = CountingList()
        return mat
    monkeypatch.setattr(nvsmi_matrix, "Matrix", matrix)
    n = 8
    rows = ["\t" + "\t".join(f"GPU{j}" for j in range(n)) + "\tCPU Affinity"]
    rows += [f"GPU{i}\t" + "\t".join("X" if i == j else "SOC" for j in range(n)) + f"\t{i // 4 * 8}-{i // 4 * 8 + 7}"
             for i in range(n)]
    t = parse_nvsmi_topo("\n".join(rows) + "\n")
    assert [a for a in t.assumptions if "SOC" in a] == [
        "cells SOC (first: row GPU0, line 2 column 8): older drivers' SYS, read as SYS"]
    assert CountingList.scans <= 4, CountingList.scans         # a few reads of the finished list, not one a cell


# ---------------------------------------------------------------- terminal colours
#: the ECMA-48 CSI sequences nvsmi_topo_dgx_a100_colour.txt adds (REFERENCE.md): underline, bold, bold green, reset
COLOURS = ("\x1b[4m", "\x1b[1m", "\x1b[1;32m", "\x1b[0m")


def _same_reading(a, b) -> bool:
    n = a.num_gpus
    return (a.fingerprint() == b.fingerprint() and n == b.num_gpus and a.assumptions == b.assumptions
            and all(a.smi_label(i, j) == b.smi_label(i, j) for i in range(n) for j in range(n))
            and dict(a.graph.nodes(data=True)) == dict(b.graph.nodes(data=True)))


def test_coloured_output_reads_as_the_plain_one():
    """``nvidia-smi topo -m`` as a colour terminal shows it (the DGX A100 fixture with an underlined header, bold
    row labels and green NV12 cells): the same topology as the plain text, by the parser and by load_topology; the
    fixture is the plain one plus exactly those sequences (before: no header found)."""
    from topo_probe.load import load_topology
    coloured, plain = read("nvsmi_topo_dgx_a100_colour.txt"), read("nvsmi_topo_dgx_a100.txt")
    stripped = coloured
    for seq in COLOURS:
        stripped = stripped.replace(seq, "")
    assert stripped == plain and coloured.count("\x1b") > 100
    want = parse_nvsmi_topo(plain, source="nvsmi_topo_dgx_a100.txt")
    assert _same_reading(parse_nvsmi_topo(coloured, source="nvsmi_topo_dgx_a100.txt"), want)
    assert load_topology(str(FIXTURES / "nvsmi_topo_dgx_a100_colour.txt")).fingerprint() == want.fingerprint()


@pytest.mark.parametrize("bad,shown", [("\x07", "U+0007"), ("\x1b", "U+001B"), ("\x1b]0;t\x07", "U+001B"),
                                       ("\x00", "U+0000"), ("\x7f", "U+007F"), ("\x9b", "U+009B")])
def test_other_control_characters_are_refused_where_they_are(bad, shown):
    """A bell, a lone ESC, an OSC title sequence (ESC ], not a CSI), NUL, DEL, the one-byte C1 CSI: refused in one
    line naming the file, the line of the file and the column of the character in the text as shown (the 4-character
    colour sequence before it takes no column), saying so."""
    lines = read("nvsmi_topo_dgx_a100.txt").split("\n")
    k = next(i for i, ln in enumerate(lines) if ln.startswith("GPU3"))
    lines[k] = "\x1b[1m" + lines[k][:10] + bad + lines[k][10:]                 # after a colour, which is fine
    with pytest.raises(TopologyError) as e:
        parse_nvsmi_topo("\n".join(lines), source="topo.txt")
    assert str(e.value) == (f"topo.txt: line {k + 1} column 11 (in the text as shown, colour codes not counted): "
                            f"control character {shown} is not text")


@settings(max_examples=40, deadline=None, derandomize=True)
@given(cuts=st.lists(st.tuples(st.floats(0, 1), st.from_regex(r"\x1b\[[0-?]{0,4}[ -/]{0,2}[@-~]", fullmatch=True)),
                     max_size=6),
       control=st.one_of(st.none(), st.tuples(st.floats(0, 1), st.sampled_from("\x00\x01\x08\x0b\x0c\x1b\x7f\x85"))))
def test_colour_sequences_anywhere_change_nothing_and_controls_are_refused(cuts, control):
    """Any CSI sequences put anywhere in the raw-tab PCIe fixture (inside tokens too: a terminal shows none of them)
    give its plain reading; one other control character anywhere is refused naming its line (TopologyError only)."""
    plain = read("nvsmi_topo_2x_pcie_raw_tabs.txt")
    text = plain
    for at, seq in sorted(cuts, reverse=True):
        k = int(at * len(plain))
        text = text[:k] + seq + text[k:]
    if control is None:
        assert _same_reading(parse_nvsmi_topo(text), parse_nvsmi_topo(plain))
        return
    k = int(control[0] * len(text))
    while text[k - 1:k] == "\x1b" or _inside_csi(text, k):
        k -= 1
    text = text[:k] + control[1] + text[k:]
    with pytest.raises(TopologyError, match=f"line {text.count(chr(10), 0, k) + 1} column "):
        parse_nvsmi_topo(text)


def _inside_csi(text: str, k: int) -> bool:
    return any(m.start() < k < m.end() for m in re.finditer(r"\x1b\[[0-?]*[ -/]*[@-~]", text))


def test_a_real_capture_with_the_underlined_header_nvidia_smi_writes_is_read():
    """Driver 590.48.01 on an H200 host writes the header row underlined, ``\\t ESC[4m GPU0 ... GPU NUMA ID ESC[0m``,
    into a file (the capture was redirected, not a terminal; REFERENCE.md): read by the parser and by load_topology
    as the row says by hand (one GPU, CPU affinity 0-23, NUMA node 0) and as the text without the two sequences
    (before: 'no header found')."""
    from topo_probe.load import load_topology
    name = "nvsmi_topo_h200_590_underlined.txt"
    text = read(name)
    head, row = text.split("\n")[:2]
    assert head == "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m" and text.count("\x1b") == 2
    assert row.split("\t") == ["GPU0", " X ", "0-23", "0", "", "N/A"]
    got = parse_nvsmi_topo(text, source=name)
    gpu = got.graph.nodes["gpu0"]
    assert got.num_gpus == 1 and (gpu["cpu_affinity"], gpu["numa_node"]) == ("0-23", 0)
    assert _same_reading(got, parse_nvsmi_topo(text.replace("\x1b[4m", "").replace("\x1b[0m", ""), source=name))
    assert load_topology(str(FIXTURES / name)).fingerprint() == got.fingerprint()

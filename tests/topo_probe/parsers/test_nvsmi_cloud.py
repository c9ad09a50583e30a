"""``nvidia-smi topo -m`` as clouds, containers and odd boxes print it: contradictory or ambiguous
cells are read with an assumption that ``topo.assumptions`` names, never refused (issue 22).

The captures in tests/fixtures/nvsmi_cloud/ are real (each starts with its ``# SOURCE:`` line);
every cell is re-read here by a naive whitespace split, independent of the parser."""

from __future__ import annotations

import re

import pytest
from _paths import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topo_probe.errors import TopologyError
from topo_probe.load import load_topology
from topo_probe.parsers.nvsmi import parse_nvsmi_topo

ATTRS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
CLOUD = sorted((FIXTURES / "nvsmi_cloud").glob("*.txt"))
REAL = CLOUD + [FIXTURES / n for n in ("nvsmi_topo_dgx1_v100.txt", "nvsmi_topo_dgx_a100.txt", "nvsmi_topo_8x_rtx4090_sys.txt",
                                       "nvsmi_topo_2x_pcie_raw_tabs.txt")]
#: the notes every parse of a PCIe-only matrix carries, whatever its cells
ROUTINE = ("PCIe links assumed", "NVLink speed", "NUMA node number assigned", "endpoint pairs have no PCIe",
           "no NUMA Affinity column", "endpoints without CPU/NUMA affinity", "NVSwitch")


def naive(text: str) -> tuple[list[str], dict[tuple[str, str], str], dict[str, list[str]]]:
    """(matrix columns, cells, the values after the cells) by splitting lines on whitespace."""
    lines = [ln for ln in text.split("\n") if not ln.startswith("#")]
    k = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["GPU0"] or "\tGPU0" in ln)
    cols = [h for h in re.findall(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+", lines[k]) if h not in ATTRS]
    cells, rest = {}, {}
    for line in lines[k + 1:k + 1 + len(cols)]:
        toks = line.split()
        cells.update({(toks[0], c): v for c, v in zip(cols, toks[1:1 + len(cols)])})
        rest[toks[0]] = toks[1 + len(cols):]
    return cols, cells, rest


def node_of(col: str, cols: list[str]) -> str:
    gpus = [c for c in cols if c.startswith("GPU")]
    return f"gpu{gpus.index(col)}" if col in gpus else f"nic{[c for c in cols if c not in gpus].index(col)}"


def label(t, a: str, b: str, cols: list[str]) -> str:
    na, nb = node_of(a, cols), node_of(b, cols)
    if na.startswith("gpu") and nb.startswith("gpu"):
        return t.smi_label(int(na[3:]), int(nb[3:]))
    return t.pcie_class(na, nb)


def unusual(t) -> list[str]:
    return [a for a in t.assumptions if not any(r in a for r in ROUTINE)]


@pytest.mark.parametrize("path", CLOUD, ids=lambda p: p.name)
def test_real_capture_loads_with_every_cell_and_its_source(path):
    text = path.read_text()
    assert text.startswith("# SOURCE: https://github.com/")
    t = load_topology(str(path))
    cols, cells, _ = naive(text)
    assert t.num_gpus == sum(c.startswith("GPU") for c in cols)
    assert len(t.nodes_of_kind("nic")) == sum(not c.startswith("GPU") for c in cols)
    for (a, b), want in cells.items():
        if a != b:
            assert label(t, a, b, cols) == want, (a, b)
    t.check_connected()


@pytest.mark.parametrize("name", ["nvsmi_topo_dgx1_v100.txt", "nvsmi_topo_dgx_a100.txt",
                                  "nvsmi_topo_2x_pcie_raw_tabs.txt"])
def test_consistent_fixtures_get_no_reading(name):
    """The earlier captures are consistent: no cell needs a reading (they load as before)."""
    t = parse_nvsmi_topo((FIXTURES / name).read_text(), source=name)
    assert unusual(t) == []


def test_all_sys_inside_numa_nodes_keeps_sys_and_names_the_affinity():
    """go-gpuallocator issue 17: SYS between every GPU pair, NUMA Affinity 0,0,0,0,1,1,1,1."""
    path = FIXTURES / "nvsmi_cloud" / "rtx4090x8_all_sys_numa_0011.txt"
    t = parse_nvsmi_topo(path.read_text(), source=str(path))
    _, _, rest = naive(path.read_text())
    numa = [int(rest[f"GPU{i}"][1]) for i in range(8)]
    assert numa == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [t.graph.nodes[t.gpu(i)]["numa_node"] for i in range(8)] == numa
    note = " ".join(unusual(t))
    assert "same NUMA" in note and "gpu0/gpu1 (numa 0)" in note and "gpu4/gpu7 (numa 1)" in note
    # SYS = different CPUs: one per GPU (GPU6 shares its with both NICs, through one host bridge: PHB)
    assert len(t.nodes_of_kind("cpu")) == 8 and t.pcie_class("nic0", "gpu6") == "PHB"
    assert not t.p2p(0, 1).supported and t.p2p(0, 1).reason == "crosses CPU sockets"


def test_blank_affinity_values_are_matched_by_column():
    """vLLM issue 19607: CPU Affinity and NUMA Affinity blank, GPU NUMA ID N/A (right-most column)."""
    path = FIXTURES / "nvsmi_cloud" / "a100x2_slice_blank_affinity.txt"
    t = parse_nvsmi_topo(path.read_text(), source=str(path))
    g0 = t.graph.nodes["gpu0"]
    assert g0["cpu_affinity"] is None and "gpu_numa_id" not in g0 and "numa_affinity" not in g0
    assert any("row GPU0 (line 3) has 1 of the 3 values" in a for a in t.assumptions)
    assert t.smi_label(0, 1) == "NV12" and t.pcie_class("gpu0", "nic6") == "PXB"


def test_consistent_capture_needs_no_reading():
    path = FIXTURES / "nvsmi_cloud" / "rtx4090x5_phb_node_mix.txt"
    t = parse_nvsmi_topo(path.read_text(), source=str(path))
    assert unusual(t) == []
    assert [t.graph.nodes[t.gpu(i)]["numa_node"] for i in range(5)] == [1, 0, 0, 0, 0]


def test_cloud_vm_example_of_the_issue():
    """Every GPU pair SYS, NUMA affinity 0,0,1,1 (what a VM that hides the PCIe tree prints)."""
    rows = [f"GPU{i}\t" + "\t".join(" X " if i == j else "SYS" for j in range(4)) + f"\t0-7\t{i // 2}\t\tN/A"
            for i in range(4)]
    text = "\t" + "\t".join(f"GPU{i}" for i in range(4)) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    t = parse_nvsmi_topo(text + "\n".join(rows) + "\n", source="vm.txt")
    assert all(t.smi_label(i, j) == "SYS" for i in range(4) for j in range(4) if i != j)
    note = " ".join(unusual(t))
    assert "gpu0/gpu1 (numa 0)" in note and "gpu2/gpu3 (numa 1)" in note


def test_node_between_numa_nodes_trusts_the_cell():
    text = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tNODE\t0-7\t0\t\tN/A\nGPU1\tNODE\t X \t8-15\t1\t\tN/A\n")
    t = parse_nvsmi_topo(text, source="n.txt")
    assert t.smi_label(0, 1) == "NODE" and len(t.nodes_of_kind("cpu")) == 1
    assert any("affinity differs" in a and "gpu0/gpu1 (0 vs 1, n.txt:line 2 column" in a for a in t.assumptions)


def test_gpu_nic_nvlink_and_off_diagonal_x_are_unknown():
    text = ("\tGPU0\tGPU1\tNIC0\tCPU Affinity\n"
            "GPU0\t X \t X \tNV2\t0-7\nGPU1\tPIX\t X \tPIX\t0-7\nNIC0\tNV2\tPIX\t X \n")
    t = parse_nvsmi_topo(text, source="x.txt")
    joined = " ".join(t.assumptions)
    assert "cell GPU0/GPU1 is X (line 2 column 11): X off the diagonal, read as unknown" in joined
    assert "cell GPU0/GPU1 is unknown (line 2 column 11) but GPU1/GPU0 is PIX (line 3 column 6): read as PIX" in joined
    assert "cell GPU0/NIC0 is NV2 (line 2 column 14): NVLink to a NIC is not possible" in joined
    # the unknown cells take what the known ones say: GPU1/GPU0 PIX, GPU1/NIC0 PIX
    assert t.smi_label(0, 1) == "PIX" and t.pcie_class("gpu0", "nic0") == "PIX"


def test_not_a_matrix_is_still_one_line_error():
    with pytest.raises(TopologyError, match=r"^x\.txt:line 1 column 1: no `nvidia-smi topo -m` header"):
        parse_nvsmi_topo("Sun May 3\n+---+\n| NVIDIA-SMI |\n", source="x.txt")
    with pytest.raises(TopologyError, match="unknown cell 'FOO'"):
        parse_nvsmi_topo("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n", source="x.txt")


# ----------------------------------------------------------------------------- mutations
TOKENS = ("PIX", "PXB", "PHB", "NODE", "SYS", "NV1", "NV2", "NV4", "NV12", "NV18", "X")


@st.composite
def mutations(draw):
    path = draw(st.sampled_from(REAL))
    text = path.read_text()
    lines = text.split("\n")
    cols, _, _ = naive(text)
    head = next(i for i, ln in enumerate(lines) if not ln.startswith("#") and "GPU0" in ln)
    edits = []
    for _ in range(draw(st.integers(1, 4))):
        r, c = draw(st.integers(0, len(cols) - 1)), draw(st.integers(0, len(cols) - 1))
        edits.append((r, c, draw(st.sampled_from(TOKENS)), draw(st.booleans())))  # bool: mirror too
    return path.name, lines, head, cols, edits, draw(st.booleans())


def apply(lines, head, cols, edits, drop_attrs) -> str:
    rows = {}
    for k in range(head + 1, head + 1 + len(cols)):
        rows[k] = re.split(r"(\s+)", lines[k])
    out = list(lines)
    for r, c, tok, mirror in edits:
        for rr, cc in ((r, c), (c, r)) if mirror else ((r, c),):
            parts = rows[head + 1 + rr]
            words = [i for i, p in enumerate(parts) if p and not p.isspace()]
            parts[words[1 + cc]] = tok
    for k, parts in rows.items():
        out[k] = "".join(parts)
    if drop_attrs:
        n = len(cols)
        out[head] = re.sub(r"\s*(CPU Affinity|NUMA Affinity|GPU NUMA ID)", "", out[head])
        for k in rows:
            out[k] = " ".join(out[k].split()[:1 + n])
    return "\n".join(out)


@settings(derandomize=True, max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_mutated_real_matrices_load_with_assumptions_or_one_line_error(m):
    name, lines, head, cols, edits, drop_attrs = m
    text = apply(lines, head, cols, edits, drop_attrs)
    try:
        t = parse_nvsmi_topo(text, source=name)
    except TopologyError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(f"{name}:line ")
        return
    _, cells, _ = naive(text)
    named = " ".join(t.assumptions).lower()
    for (a, b), want in cells.items():
        if a == b or want.startswith("NV") or want == "X":
            continue
        got = label(t, a, b, cols)
        if got != want:  # a cell the topology does not reproduce is always named, or counted among "more"
            pair = {f"{a}/{b}".lower(), f"{b}/{a}".lower(), f"{node_of(a, cols)}/{node_of(b, cols)}",
                    f"{node_of(b, cols)}/{node_of(a, cols)}"}
            assert any(p in named for p in pair) or "more" in named, (a, b, want, got, t.assumptions)


# ----------------------------------------------------------------------------- the commands
def test_commands_accept_the_cloud_captures(tmp_path, capsys):
    """topo-probe, simulate and synthesize take a contradictory capture like any other topology,
    and the simulated all_reduce over the all-SYS box is no faster than each GPU's one PCIe link
    allows: 2 x 7/8 x 4 MiB through 31.5 GB/s (Gen4 x16, the parser's stated assumption)."""
    from synth.cli.simulate import main as simulate_main
    from synth.cli.synthesize import main as synthesize_main
    from topo_probe.cli.main import main as topo_probe_main
    sys8 = str(FIXTURES / "nvsmi_cloud" / "rtx4090x8_all_sys_numa_0011.txt")
    assert topo_probe_main(["--topology", sys8]) == 0
    out = capsys.readouterr().out
    assert "SYS between endpoints that report the same NUMA" in out
    assert simulate_main(["--topology", sys8, "--collective", "allreduce", "-b", "4M", "-e", "4M"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("4194304"))
    time_us = float(row.split()[5])
    assert time_us >= 2 * 7 / 8 * (4 << 20) / (31.5 * 1e3)
    two = str(FIXTURES / "nvsmi_cloud" / "a100x2_slice_blank_affinity.txt")
    assert synthesize_main(["--topology", two, "--collectives", "allgather", "--time-limit", "5",
                            "--out", str(tmp_path / "syn"), "--no-progress"]) == 0
    assert (tmp_path / "syn" / "plan.json").exists()

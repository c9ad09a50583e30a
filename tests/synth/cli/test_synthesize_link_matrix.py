"""`synthesize --topology FILE` on link matrices whose GPUs are more than two NVLink hops apart
(issue 40): an 8-GPU ring and DGX-1 with the gpu0-gpu4 NVLinks removed synthesize all eight
collectives, every saved schedule verifies, and summary.json and report.md state the host assumed
for NCCL's side (the DGX-1 run is marked slow: its CP-SAT Pareto search on 8 ranks takes about 25 s of CPU;
all 24 single-NVLink removals are checked for their path classes in
tests/topo_probe/topology/test_host_assumption.py).  NCCL's side is checked against NCCL's own rules: on the ring its rings run over
the NVLinks (src/graph/search.cc finds the NVL ring; P2P over NVLink at any level, paths.cc)."""

from __future__ import annotations

import json

import pytest

from synth.cli.synthesize import main
from synth.ir.collectives import COLLECTIVES
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule
from synth.ir.verifier import check
from synth.model.nccl import NcclMachine
from synth.model.nccl.graphs import comm_graphs
from topo_probe.load import load_topology
from topo_probe.machines.presets import DGX1_LINKS
from topo_probe.parsers.link_matrix import parse_link_matrix

RING8 = [[1 if (j - i) % 8 in (1, 7) else 0 for j in range(8)] for i in range(8)]
DGX1_NO_0_4 = [[0 if {i, j} == {0, 4} else DGX1_LINKS[i][j] for j in range(8)] for i in range(8)]


def _doc(name: str, links, **kw) -> dict:
    return {"format": "link-matrix", "name": name, "links": links, "link_bandwidth_gbps": 25.0, **kw}


@pytest.mark.parametrize("name, links, far_pairs, budget_s", [
    ("ring8", RING8, 12, "2"), pytest.param("dgx1-no-0-4", DGX1_NO_0_4, 1, "0.5", marks=pytest.mark.slow)])
def test_all_eight_collectives_synthesize_verify_and_state_the_host(tmp_path, name, links, far_pairs, budget_s):
    src = tmp_path / f"{name}.json"
    src.write_text(json.dumps(_doc(name, links)))
    out = tmp_path / "out"
    assert main(["--topology", str(src), "--time-limit", budget_s, "--out", str(out), "--no-progress"]) == 0
    fabric = build_fabric(load_topology(str(out / "topology.json")))
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["collectives"]) == sorted(COLLECTIVES)
    saved = sorted((out / "schedules").glob("*.json"))
    assert {f.name.split("-")[0] for f in saved} == set(COLLECTIVES)
    for f in saved:
        check(Schedule.load(f), fabric)
    host = summary["host_assumption"]
    assert "are PHB" in host and f"applies to {far_pairs} of 28 GPU pairs" in host
    report = (out / "report.md").read_text()
    assert f"**Host assumption** {host}." in report.splitlines()


def test_the_flag_overrides_the_host_in_the_report(tmp_path):
    src = tmp_path / "ring8.json"
    src.write_text(json.dumps(_doc("ring8", RING8)))
    out = tmp_path / "out"
    assert main(["--topology", str(src), "--collectives", "allgather", "--time-limit", "2", "--out", str(out),
                 "--no-progress", "--host-path-class", "SYS"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "are SYS" in summary["host_assumption"] and "set by the user" in summary["host_assumption"]
    assert load_topology(str(out / "topology.json")).path_class(0, 4) == "SYS"


def test_nccls_rings_on_the_ring_matrix_run_over_nvlink():
    """A ring of single NVLinks: NCCL finds the NVL ring in both directions (2 channels at its sm80
    NVLink speed, 20 GB/s per link in topo.h) and uses P2P on it; the PHB pairs do not matter."""
    m = NcclMachine.from_topology(parse_link_matrix(_doc("ring8", RING8)))
    ring = comm_graphs(m).ring
    assert m.p2p and (ring.type_intra, ring.n_channels, ring.bw_intra) == ("NVL", 2, 20.0)
    line = [[1 if abs(i - j) == 1 else 0 for j in range(4)] for i in range(4)]
    assert NcclMachine.from_topology(parse_link_matrix(_doc("line4", line))).p2p   # 0-3 is PHB: no ring uses it


def test_without_a_joining_fabric_every_pair_still_decides_p2p():
    """Two NVLink pairs with nothing between them: NCCL's ring must cross the host (PHB, no P2P
    at its default level PXB), so the machine has no P2P, as before this change."""
    pairs = [[0, 2, 0, 0], [2, 0, 0, 0], [0, 0, 0, 2], [0, 0, 2, 0]]
    from topo_probe.topology.model import Topology
    t = Topology("two-pairs")
    for i in range(4):
        t.add_gpu(i, host=0)
    for i, j in ((0, 1), (2, 3)):
        t.add_link(f"gpu{i}", f"gpu{j}", kind="nvlink", links=pairs[i][j], bandwidth_gbps=50.0)
    assert t.path_class(0, 2) == "PHB"
    assert not NcclMachine.from_topology(t).p2p

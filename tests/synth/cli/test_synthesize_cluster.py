"""`synthesize` on a cluster: hierarchical and AllToAll candidates, .json.gz for big schedules,
MSCCL XML for the plan's schedules only at scale, every skipped stage named in the report."""

from __future__ import annotations

import gzip
import json

import pytest

from synth.baselines import _common, baseline
from synth.baselines.cluster_rings import cluster_rings
from synth.cli.synthesize import main
from synth.formats.msccl import from_msccl_xml
from synth.formats.schedule_file import load_schedule
from synth.plan.versus_nccl import NCCL
from synth.ir.fabric import build_fabric
from synth.ir.verifier import check
from synth.pipeline import msccl_export
from synth.pipeline import synthesize as synth_mod
from synth.plan.size_plan import Plan
from topo_probe.errors import UnsupportedCollective
from topo_probe.load import load_topology
from topo_probe.machines.clusters import cluster


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "out"
    mp = pytest.MonkeyPatch()
    mp.setattr(synth_mod, "GZIP_TRANSFERS", 1000)     # small run, same code paths as a big one
    mp.setattr(synth_mod, "LARGE_RANKS", 16)
    mp.setattr(msccl_export, "GZIP_XML_BYTES", 1)
    try:
        rc = main(["--topology", "dgx-h100", "--gpus", "0-3", "--nodes", "4", "--nics-per-node", "4",
                   "--rail-optimized", "--collectives", "allgather,alltoall", "--time-limit", "8",
                   "--out", str(out), "--no-progress"])
    finally:
        mp.undo()
    return rc, out


def test_cluster_outputs_verify_and_the_plan_reads_gzip(cluster_run):
    rc, out = cluster_run
    assert rc == 0
    fabric = build_fabric(load_topology(str(out / "topology.json")))
    assert fabric.shape is not None and fabric.num_ranks == 16
    gz = sorted((out / "schedules").glob("*.json.gz"))
    assert gz, "big schedules are compressed"
    for f in sorted((out / "schedules").iterdir()):
        check(load_schedule(f), fabric)
    plan = Plan.load(out / "plan.json")
    ours = [e for e in plan.entries if e.schedule != NCCL]      # "nccl": NCCL itself runs there
    for e in ours:
        check(plan.load_schedule(e), fabric)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["collectives"]["alltoall"]["bandwidth_optimal"]["method"] == "mcf-lp"
    assert summary["collectives"]["allgather"]["bandwidth_optimal"]["method"] in ("hierarchical", "lp-trees")
    # one XML per separate size range a schedule holds in the plan (adjacent ranges join):
    # <slug>.xml.gz, then <slug>-r1.xml.gz, ... (ranges counted here from the plan's entries)
    spans: dict[str, list[list]] = {}
    for e in sorted(ours, key=lambda e: (e.schedule, e.min_bytes)):
        runs = spans.setdefault(e.schedule.split("/")[1].split(".json")[0], [])
        if runs and runs[-1][1] == e.min_bytes:
            runs[-1][1] = e.max_bytes
        else:
            runs.append([e.min_bytes, e.max_bytes])
    want = [f"{u}{f'-r{k}' if k else ''}.xml.gz" for u, runs in spans.items() for k in range(len(runs))]
    xmls = sorted((out / "msccl" / "compressed").glob("*.xml.gz"))    # plan algorithms, kept out of msccl/
    longer = sorted((out / "msccl").glob("candidates/*.xml.gz"))   # more steps per threadblock than RCCL loads
    assert sorted(p.name for p in xmls + longer) == sorted(want)
    # both runtimes parse every regular file of MSCCL_ALGO_DIR as XML, whose first byte after blanks must be
    # '<' (RCCL 0cbce2a7 src/misc/msccl/msccl_lifecycle.cc 177-185, msccl_parser.cc 107-112): no gzip there
    assert {p.name for p in (out / "msccl").iterdir() if p.is_dir()} <= {"candidates", "compressed"}
    for p in (out / "msccl").iterdir():
        if p.is_file():
            assert p.read_bytes().lstrip(b" \r\n")[:1] == b"<", p.name
    notes = [n for c in summary["collectives"].values() for n in c.get("notes", [])]
    assert all(any(f"candidates/{p.name[:-3]}" in n and "MSCCL_MAX_NUM_STEPS" in n for n in notes) for p in longer)
    for p in xmls + longer:               # compressed MSCCL XML re-imports and verifies
        check(from_msccl_xml(gzip.decompress(p.read_bytes()).decode(), fabric=fabric), fabric)
    report = (out / "report.md").read_text()
    assert "## Skipped at this scale" in report and "the plan does not use it" in report
    assert "gunzip it into msccl/ for the MSCCL runtime" in report


def test_cluster_rings_stay_on_rails():
    f = build_fabric(cluster("dgx-h100", 3, rail_optimized=True))
    rings = cluster_rings(f)
    assert len(rings) == 8 and all(sorted(r) == list(range(24)) for r in rings)
    for r in rings:
        hops = [(r[k], r[(k + 1) % 24]) for k in range(24)]
        cross = [(u, v) for u, v in hops if u // 8 != v // 8]
        assert len(cross) == 3
        assert sum(u % 8 != v % 8 for u, v in cross) == 1       # only the closing hop (8 does not divide 3)
    boundary = [next(u % 8 for u, v in zip(r, r[1:]) if u // 8 == 0 and v // 8 == 1) for r in rings]
    assert sorted(boundary) == list(range(8))                    # every ring its own rail


def test_ring_baseline_beyond_the_search_uses_cluster_rings(monkeypatch):
    from synth.baselines import ringsearch
    monkeypatch.setattr(ringsearch, "SEARCH_MAX_RANKS", 8)
    f = build_fabric(cluster("dgx-h100", 2, rail_optimized=True))
    s = baseline("ring", f, "allgather")
    check(s, f)
    assert s.meta["rings_found"] == 8


def test_baselines_refuse_too_many_transfers(monkeypatch):
    monkeypatch.setattr(_common, "MAX_TRANSFERS", 100)
    f = build_fabric(cluster("dgx-h100", 2))
    with pytest.raises(UnsupportedCollective, match="more than 100 transfers"):
        baseline("ring", f, "allgather")
    with pytest.raises(_common.TooManyTransfers):
        baseline("direct", f, "allgather")


def test_msccl_export_needs_one_threadblock_per_peer():
    """MSCCL runs one threadblock per peer, 216 per GPU, and RCCL at most 32 per channel: a
    direct alltoall on 24 ranks (23 peers) and the hierarchical allgather on 3 hosts (2 rail
    peers + 7 host peers) can be loaded, not one on 1,024 ranks (1,023 peers; 127 + 7)."""
    f = build_fabric(cluster("dgx-h100", 3, rail_optimized=True))
    assert msccl_export._most_peers(baseline("direct", f, "alltoall")) == 23
    from synth.solve.cluster.compose import hierarchical
    assert msccl_export._most_peers(hierarchical(f, "allgather")) == 2 + 7
    assert msccl_export.MSCCL_MAX_PEERS == 216


def test_msccl_export_skips_what_the_writer_would_refuse(tmp_path):
    """40 ranks: the direct allgather sends to 39 peers, every one with a threadblock on channel 0,
    more than RCCL's 32 per channel.  The writer refuses it (the reference); the export leaves it
    out with a note before lowering it, and writes the 9-peer hierarchy."""
    from types import SimpleNamespace
    from synth.formats.msccl import to_msccl_xml
    from synth.formats.msccl.layout import RUNTIME_MAX_TBS_PER_CHANNEL
    from synth.solve.cluster.compose import hierarchical
    from topo_probe.errors import InvalidArgument
    f = build_fabric(cluster("dgx-h100", 5))
    direct, hier = baseline("direct", f, "allgather"), hierarchical(f, "allgather")
    with pytest.raises(InvalidArgument, match="per channel"):
        to_msccl_xml(direct)
    assert msccl_export._most_peers(direct) == 39 > RUNTIME_MAX_TBS_PER_CHANNEL
    res = SimpleNamespace(schedules={"allgather-direct": direct, "allgather-bwopt": hier},
                          files={"allgather-direct": "schedules/allgather-direct.json",
                                 "allgather-bwopt": "schedules/allgather-bwopt.json"}, summary={})
    msccl_export.export_msccl({"allgather": res}, Plan("t", "f"), tmp_path, print)
    assert not (tmp_path / "candidates" / "allgather-direct.xml").exists()
    assert any("allgather-direct.xml not written" in n and "32 threadblocks" in n for n in res.summary["notes"])
    assert from_msccl_xml((tmp_path / "candidates" / "allgather-bwopt.xml").read_text()).ranks == 40

"""``--nccl-version X.Y.Z`` and a log's printed release keep their patch all the way to the NCCL model.

Hand check (NVIDIA/nccl src/graph/tuning.cc ``perChMaxRingLL128Bws``, Blackwell row, two nodes; the same
rows as ``versions_patch.BLACKWELL_RING_LL128_BY_RELEASE``): 2 x 36.7 = 73.4 GB/s a channel at v2.28.3-1,
34.6 at v2.28.7-1 and v2.28.9-1.  On 2 x 8 B200 the model builds 8 ring channels of 48 GB/s, so all_reduce's
ring/LL128 estimate is min(8 x 48 x 0.92, 8 x row) x 16 / 30: 188.416 GB/s at 2.28.3, 147.627 at 2.28.9."""

import json

import pytest

from synth.cli import simulate, synthesize
from synth.model.nccl import NcclModel
from synth.model.nccl.versions import BLACKWELL, per_channel_tables

RING_LL128 = ("allreduce", "ring", "LL128")
#: 2 x 8 B200, all_reduce ring/LL128 (GB/s algbw), by hand from the rows above
HAND = {"2.28.3": (73.4, 188.416), "2.28.9": (34.6, 147.627), "2.28": (73.4, 188.416)}


@pytest.fixture
def built(monkeypatch):
    """Every NcclModel a command builds (its constructor wrapped, whoever imports it)."""
    models = []
    init = NcclModel.__init__

    def record(self, *a, **k):
        init(self, *a, **k)
        models.append(self)
    monkeypatch.setattr(NcclModel, "__init__", record)
    return models


@pytest.mark.parametrize("named,version", [("2.28.3", (2, 28, 3)), ("2.28.9", (2, 28, 9)), ("2.28", (2, 28))])
def test_simulate_on_two_b200_hosts_follows_the_named_patch(named, version, built, capsys):
    argv = ["--topology", "hgx-b200", "--nodes", "2", "--baseline", "nccl", "--collective", "allreduce",
            "-b", "1M", "-e", "1M", "--nccl-version", named]
    assert simulate.main(argv) == 0
    assert f"NCCL {named} rules: --nccl-version" in capsys.readouterr().out
    (model,) = built
    assert model.table.version == version
    graph = model.table.graphs.ring
    assert (graph.n_channels, graph.bw_intra) == (8, 48.0)
    per_channel, algbw = HAND[named]
    assert per_channel_tables(model.table.version)[0][BLACKWELL][1] == pytest.approx(per_channel)
    assert model.table.bandwidth[RING_LL128] == pytest.approx(algbw, abs=1e-3)


def test_synthesize_plans_against_the_named_patch_and_does_not_reuse_another(tmp_path, built, capsys):
    out = tmp_path / "res"
    quick = ["--topology", "hgx-b200", "--nodes", "2", "--out", str(out), "--collectives", "allreduce",
             "--time-limit", "5", "--no-progress"]
    seen = {}
    for named in ("2.28.3", "2.28.9"):
        built.clear()
        assert synthesize.main(quick + ["--nccl-version", named]) == 0
        said = capsys.readouterr().out
        assert f"planning against NCCL {named}'s rules (--nccl-version)" in said
        summary = json.loads((out / "summary.json").read_text())
        assert not summary.get("reused") and summary["options"]["nccl_version"] == [2, 28, int(named[-1])]
        assert f"NCCL {named}'s rules and defaults" in (out / "report.md").read_text()
        assert built and {m.table.version for m in built} == {(2, 28, int(named[-1]))}
        seen[named] = {round(m.table.bandwidth[RING_LL128], 3) for m in built if m.machine.nodes == 2}
    assert seen == {"2.28.3": {188.416}, "2.28.9": {147.627}}


def test_a_log_printing_a_patch_keeps_it(tmp_path, built, capsys):
    src = "tests/fixtures/real_logs/h100_aws_p5_16gpu_2node_all_reduce_nccl2.22.3.txt"
    text = open(src).read()
    assert text.count("NCCL version 2.22.3+") >= 1
    log = tmp_path / "h100_aws_p5_16gpu_2node_all_reduce_nccl2.28.9.txt"
    log.write_text(text.replace("NCCL version 2.22.3+", "NCCL version 2.28.9+"))
    argv = ["--topology", "dgx-h100", "--nodes", "2", "--nics-per-node", "32", "--nic-gbps", "12.5", "--net", "efa2",
            "--baseline", "nccl", "--import", str(log)]
    assert simulate.main(argv) == 0
    assert "NCCL 2.28.9 rules: the log" in capsys.readouterr().out
    assert {m.table.version for m in built} == {(2, 28, 9)}

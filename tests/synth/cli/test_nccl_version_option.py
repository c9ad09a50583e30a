"""``--nccl-version``: the plan and ``simulate`` follow the NCCL a user names (or the one a probed
machine has installed), say which, and refuse a tuner file that NCCL cannot apply."""

import json

import pytest

from synth.cli import simulate, synthesize
from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.env import NcclEnv
from topo_probe import get_preset

QUICK = ["--collectives", "allreduce", "--time-limit", "5", "--no-progress"]


def _summary(out):
    return json.loads((out / "summary.json").read_text())


def test_the_plan_compares_with_the_named_nccl(tmp_path, capsys):
    """The NCCL times summary.json records are NCCL 2.8's rules on the machine (the model's own API as
    reference), not the default's, and the report and the options say so."""
    out = tmp_path / "res"
    assert synthesize.main(["--topology", "dgx-a100", "--out", str(out), "--nccl-version", "2.8"] + QUICK) == 0
    assert "planning against NCCL 2.8's rules (--nccl-version)" in capsys.readouterr().out
    old = NcclModel(NcclMachine.from_topology(get_preset("dgx-a100"), net_kind="ib"), env=NcclEnv(), version=(2, 8))
    new = NcclModel(NcclMachine.from_topology(get_preset("dgx-a100"), net_kind="ib"), env=NcclEnv())
    rec = _summary(out)["collectives"]["allreduce"]["nccl_modelled"]["1MB"]
    assert rec["time_us"] == pytest.approx(old.time_us("allreduce", 1 << 20), abs=1e-3)
    assert abs(old.time_us("allreduce", 1 << 20) - new.time_us("allreduce", 1 << 20)) > 1.0   # the rules differ there
    assert _summary(out)["options"]["nccl_version"] == [2, 8]
    assert "NCCL 2.8's rules and defaults" in (out / "report.md").read_text()


def test_results_of_another_nccl_are_not_reused(tmp_path, capsys):
    out = tmp_path / "res"
    assert synthesize.main(["--topology", "ring:3", "--out", str(out)] + QUICK) == 0
    assert synthesize.main(["--topology", "ring:3", "--out", str(out), "--nccl-version", "2.18"] + QUICK) == 0
    assert not _summary(out).get("reused") and _summary(out)["options"]["nccl_version"] == [2, 18]


@pytest.mark.parametrize("version", ["2.23", "2.27.7"])
def test_a_tuner_file_an_older_nccl_cannot_apply_is_refused_before_any_work(version, tmp_path, capsys):
    """The one example plugin build that applies the file (NCCL 2.30.3's) exports interface v5/v6,
    which NCCL looks up from 2.28.3 on (src/plugin/tuner.cc): no file, no results, one line."""
    out, conf = tmp_path / "res", tmp_path / "nccl_tuner.conf"
    rc = synthesize.main(["--topology", "dgx-h100", "--out", str(out), "--nccl-version", version,
                          "--nccl-tuner-conf", str(conf)] + QUICK)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "cannot load the example tuner plugin" in err
    assert not out.exists() and not conf.exists()


def test_a_tuner_file_for_a_recent_nccl_follows_its_rules(tmp_path, capsys):
    out, conf = tmp_path / "res", tmp_path / "nccl_tuner.conf"
    assert synthesize.main(["--topology", "dgx-h100", "--out", str(out), "--nccl-version", "2.29",
                            "--nccl-tuner-conf", str(conf)] + QUICK) == 0
    assert conf.is_file()


@pytest.mark.parametrize("argv", [["--nccl-version", "2.x"], ["--nccl-version", "2.2"]])
def test_a_bad_version_is_one_line_and_exit_2(argv, tmp_path, capsys):
    assert synthesize.main(["--topology", "ring:3", "--out", str(tmp_path / "r")] + argv + QUICK) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--nccl-version" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()
    assert simulate.main(["--topology", "dgx-a100", "--baseline", "nccl", "--collective", "allreduce"] + argv) == 2
    assert "--nccl-version" in capsys.readouterr().err


def _probe(monkeypatch, found, installed):
    import topo_probe.probes as probes
    from synth.model.nccl import installed as inst
    monkeypatch.setattr(probes, "probe_machine", lambda: (get_preset("dgx-a100") if found else None, ["stub"]))
    monkeypatch.setattr(inst, "installed_nccl_version", lambda *a, **k: installed)


def test_probing_a_machine_plans_against_its_installed_nccl(tmp_path, capsys, monkeypatch):
    _probe(monkeypatch, True, (2, 18, 6))
    out = tmp_path / "res"
    assert synthesize.main(["--out", str(out)] + QUICK) == 0
    assert "planning against NCCL 2.18.6's rules (installed)" in capsys.readouterr().out
    assert _summary(out)["options"]["nccl_version"] == [2, 18, 6]


@pytest.mark.parametrize("found,installed", [(False, (2, 18, 6)), (True, None), (True, (2, 3, 7))])
def test_the_default_topology_or_no_usable_library_keeps_the_default(found, installed, tmp_path, capsys,
                                                                      monkeypatch):
    """With no GPU the embedded default describes another machine: a library found here is not its NCCL."""
    _probe(monkeypatch, found, installed)
    out = tmp_path / "res"
    assert synthesize.main(["--out", str(out)] + QUICK) == 0
    assert "planning against" not in capsys.readouterr().out
    assert _summary(out)["options"]["nccl_version"] is None


def test_simulate_follows_the_named_version_over_the_log(capsys):
    log = "tests/fixtures/real_logs/h100_aws_p5_16gpu_2node_all_reduce_nccl2.22.3.txt"
    base = ["--topology", "dgx-h100", "--nodes", "2", "--nics-per-node", "32", "--nic-gbps", "12.5", "--net", "efa2",
            "--baseline", "nccl", "--import", log]
    assert simulate.main(base) == 0
    said = capsys.readouterr().out
    assert "NCCL 2.22.3 rules: the log" in said
    assert simulate.main(base + ["--nccl-version", "2.12"]) == 0
    named = capsys.readouterr().out
    assert "NCCL 2.12 rules: --nccl-version" in named
    rows = [ln for ln in said.splitlines() if not ln.startswith("#")]
    old = [ln for ln in named.splitlines() if not ln.startswith("#")]
    assert any("nvls" in ln for ln in rows) and not any("nvls" in ln for ln in old)    # NVLS came with NCCL 2.17


def _header(capsys, argv) -> str:
    assert simulate.main(argv) == 0
    return next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("# NCCL model:"))


def test_an_nccl_before_the_primitives_rewrite_says_how_its_era_fares(capsys):
    """NCCL 2.10 rewrote prims_ll/prims_ll128; the constants come from later NCCL.  The count of a
    class's older tables is the validation cases' own (benchmarks/nccl_log_cases.py)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from nccl_log_cases import ALL_CASES
    old = [c for c in ALL_CASES if c.machine_class == "a100-nvswitch-1host" and not c.skip_reason
           and tuple(c.version) < (2, 10)]
    base = ["--topology", "dgx-a100", "--baseline", "nccl", "--collective", "allreduce"]
    line = _header(capsys, base + ["--nccl-version", "2.8"])
    assert f"NCCL 2.8: {len(old)} of its tables are of NCCL before 2.10" in line and len(old) >= 2
    assert "before 2.10" not in _header(capsys, base + ["--nccl-version", "2.21"])
    assert "before 2.10" not in _header(capsys, base)
    b200 = _header(capsys, ["--topology", "hgx-b200", "--baseline", "nccl", "--collective", "allreduce",
                            "--nccl-version", "2.9"])
    assert "NO table of NCCL before 2.10" in b200


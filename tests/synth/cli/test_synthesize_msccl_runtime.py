"""`synthesize --msccl-runtime`: the runtime the ``msccl/`` folder is built for, its default by GPU
vendor, the record in summary.json, and the full:33 all-to-all RCCL refused before (65
threadblocks per GPU) now within RCCL's 64."""

import json

import pytest

from synth.cli.synthesize import main
from synth.formats.msccl.runtimes import RCCL, check_xml
from synth.formats.msccl.writer import Export
from synth.ir.schedule import Schedule
from synth.pipeline.msccl_export import default_runtime
from topo_probe import get_preset
from topo_probe.machines.specs import parse_generator_spec


@pytest.mark.parametrize("name,runtime", [("mi300x", "rccl"), ("dgx-a100", "msccl-executor-nccl"),
                                          ("dgx1-v100", "msccl-executor-nccl")])
def test_default_runtime_follows_the_gpu_vendor(name, runtime):
    assert default_runtime(get_preset(name)) == runtime


def test_full33_alltoall_for_rccl_fits_64_threadblocks(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["--topology", "full:33", "--collectives", "alltoall", "--no-progress", "--out", str(out),
                 "--msccl-runtime", "rccl"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["msccl_runtime"] == "rccl" and summary["options"]["msccl_runtime"] == "rccl"
    # the plan runs it where the model has it faster than RCCL (msccl/); at 33 ranks no candidate XML is written,
    # so the saved schedule is lowered for RCCL here the way export_msccl lowers a plan's
    ready = sorted((out / "msccl").glob("*.xml"))
    assert [p.name for p in ready] in (["alltoall-direct.xml"], [])
    text = ready[0].read_text() if ready else Export(Schedule.load(out / "schedules" / "alltoall-direct.json"),
                                                        runtime=RCCL).xml(name="alltoall-direct")
    program, bad = check_xml(text, RCCL, every_size=True)
    assert bad == [] and max(len(g.tbs) for g in program.gpus) == 64      # 32 peers each way, paired, + local


def test_the_default_is_recorded_and_a_bad_runtime_is_refused(tmp_path, capsys):
    out = tmp_path / "res"
    assert default_runtime(parse_generator_spec("ring:3")) == "msccl-executor-nccl"
    quick = ["--topology", "ring:3", "--collectives", "allgather", "--time-limit", "5", "--no-progress"]
    assert main(quick + ["--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["msccl_runtime"] == "msccl-executor-nccl"
    capsys.readouterr()
    assert main(quick + ["--out", str(tmp_path / "other"), "--msccl-runtime", "nccl"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == ["synthesize: argument --msccl-runtime: invalid choice: 'nccl' (choose from 'rccl', "
                                "'msccl-executor-nccl')"]
    assert not (tmp_path / "other").exists()


def test_another_runtime_is_not_reused(tmp_path, capsys):
    out = tmp_path / "res"
    quick = ["--topology", "ring:3", "--collectives", "allreduce", "--time-limit", "5", "--no-progress",
             "--out", str(out)]
    assert main(quick + ["--msccl-runtime", "rccl"]) == 0
    assert main(quick + ["--msccl-runtime", "rccl"]) == 0
    assert "reusing" in capsys.readouterr().out
    assert main(quick + ["--msccl-runtime", "msccl-executor-nccl"]) == 0
    assert "reusing" not in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["msccl_runtime"] == "msccl-executor-nccl"


def test_the_python_call_takes_the_runtime(tmp_path):
    from synth import synthesize
    from topo_probe.errors import InvalidArgument
    topo = parse_generator_spec("ring:3")
    summary = synthesize(topo, tmp_path / "a", collectives=["allgather"], time_limit_s=3, log=lambda s: None,
                         msccl_runtime="rccl")
    assert summary["msccl_runtime"] == "rccl"
    with pytest.raises(InvalidArgument, match="msccl_runtime must be one of rccl, msccl-executor-nccl"):
        synthesize(topo, tmp_path / "b", collectives=["allgather"], msccl_runtime="nccl")
    assert not (tmp_path / "b").exists()

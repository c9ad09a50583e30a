"""`synthesize` when a file cannot be written: a ``--nccl-tuner-conf`` that is not a writable file
is refused before any work, and a full disk names the file and does not claim earlier results
that were never there."""

import errno
import json
import os

import pytest

from synth.cli.synthesize import main

QUICK = ["--topology", "ring:3", "--collectives", "allgather", "--time-limit", "5", "--no-progress"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("where,needle", [("folder", "is a folder"), ("missing", "does not exist"),
                                          ("result", "one of the results"), ("device", "not a regular file")])
def test_an_unwritable_tuner_conf_is_refused_before_any_work(where, needle, tmp_path, capsys):
    out = tmp_path / "res"
    os.mkfifo(tmp_path / "pipe")                          # stands for a device: never replaced by a file
    conf = {"folder": tmp_path, "missing": tmp_path / "no" / "t.conf", "result": out / "plan.json",
            "device": tmp_path / "pipe"}[where]
    assert main(QUICK + ["--out", str(out), "--nccl-tuner-conf", str(conf)]) == 2
    assert needle in _one_line(capsys)
    assert not out.exists()                               # no results written, no folder made
    assert not (tmp_path / "pipe").is_file()


def test_a_tuner_conf_beside_the_results_is_written(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(QUICK + ["--out", str(out), "--nccl-tuner-conf", str(out / "nccl_tuner.conf")]) == 0
    assert (out / "nccl_tuner.conf").is_file() and (out / "summary.json").is_file()


def test_a_tuner_conf_for_an_amd_machine_is_refused_before_any_work(tmp_path, capsys):
    """RCCL's loader looks up ncclTunerPlugin_v2 only (src/misc/tuner.cc), which NCCL's example
    plugin does not export: no file, one line saying why, no results folder."""
    out, conf = tmp_path / "res", tmp_path / "nccl_tuner.conf"
    assert main(["--topology", "mi300x", "--no-progress", "--out", str(out), "--nccl-tuner-conf", str(conf)]) == 2
    assert "RCCL cannot load" in _one_line(capsys)
    assert not out.exists() and not conf.exists()


def _full_disk(monkeypatch):
    """Every write through synth.ir.schedule's atomic writer fails as on a full disk: ``write``
    raises ENOSPC naming no file."""
    from synth.ir import schedule
    real = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(schedule.os, "fdopen", lambda fd, *a, **k: Full(real(fd, *a, **k)))


def test_a_full_disk_on_a_new_folder_names_the_file_and_claims_no_earlier_results(tmp_path, capsys, monkeypatch):
    out = tmp_path / "res"
    _full_disk(monkeypatch)
    assert main(QUICK + ["--out", str(out)]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"synthesize: {out}/schedules/allgather-") and ".json: No space left on device" in err, err
    assert err.endswith("; nothing written") and "previous" not in err, err
    assert not out.exists()


def test_a_full_disk_over_earlier_results_keeps_them_and_says_so(tmp_path, capsys, monkeypatch):
    out = tmp_path / "res"
    assert main(QUICK + ["--out", str(out)]) == 0
    before = json.loads((out / "summary.json").read_text())
    capsys.readouterr()
    _full_disk(monkeypatch)
    assert main(QUICK + ["--out", str(out), "--force"]) == 2
    err = _one_line(capsys)
    assert f"{out}/" in err and ": No space left on device; previous results kept" in err, err
    assert json.loads((out / "summary.json").read_text()) == before


def test_a_users_file_is_not_replaced_by_the_tuner_conf_but_ours_is(tmp_path, capsys):
    """Audit 65: ``--nccl-tuner-conf`` replaced any existing file.  A file that is not a tuner file
    synthesize wrote (:func:`synth.model.nccl.tuner_config.is_cover_file`) is refused before any work."""
    out, mine = tmp_path / "res", tmp_path / "userfile.txt"
    mine.write_text("my notes\n")
    assert main(QUICK + ["--out", str(out), "--nccl-tuner-conf", str(mine)]) == 2
    err = _one_line(capsys)
    assert str(mine) in err and "not a tuner file" in err
    assert mine.read_text() == "my notes\n" and not out.exists()
    ours = tmp_path / "nccl_tuner.conf"
    assert main(QUICK + ["--out", str(out), "--nccl-tuner-conf", str(ours)]) == 0
    ours.write_text(ours.read_text() + "# edited\n")
    assert main(QUICK + ["--out", str(out), "--nccl-tuner-conf", str(ours)]) == 0     # our own: replaced
    assert "# edited" not in ours.read_text()


def test_an_empty_tuner_conf_such_as_mktemp_makes_is_written(tmp_path, capsys):
    """``--nccl-tuner-conf "$(mktemp)"``: the empty file holds nothing of a user's; it is written."""
    out, conf = tmp_path / "res", tmp_path / "tmp.Xy9Z"
    conf.touch()
    assert main(QUICK + ["--out", str(out), "--nccl-tuner-conf", str(conf)]) == 0
    assert conf.stat().st_size > 0 and (out / "summary.json").is_file()

"""What a sweep may write (kernels.sweep.output_paths): no folder is created for -J, --plot or
--csv; a user's CSV is never replaced; checks run before any work; a write failure names the
user's file, not a temporary one; flags a bare --import would ignore are refused."""

from __future__ import annotations

import errno
import os
import tempfile

import pytest
from _paths import FIXTURES, ROOT

from kernels.sweep.cli import main
from synth.ir import schedule as schedule_mod

QUICK = ["all_reduce", "-b", "8", "-e", "64", "-f", "2", "-g", "2", "-n", "1", "-w", "0"]
LOG = FIXTURES / "nccl_tests_allreduce_a100x8_single_process.txt"


def _refused(capsys, argv, needle):
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 2, captured.err
    assert len(captured.err.strip().splitlines()) == 1 and needle in captured.err, captured.err
    assert "# Rank" not in captured.out and "#  Rank" not in captured.out    # refused before any row


def test_json_into_a_missing_folder_is_refused_and_nothing_created(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(capsys, QUICK + ["-J", "typo_dir/sub/x.json"], "folder typo_dir/sub does not exist")
    assert os.listdir(tmp_path) == []
    _refused(capsys, QUICK + ["-J", str(tmp_path / "no" / "x.json")], "does not exist")
    assert os.listdir(tmp_path) == []


def test_json_never_replaces_a_file(tmp_path, capsys):
    target = tmp_path / "x.json"
    target.write_text("mine")
    assert main(QUICK + ["-J", str(target)]) == 0
    assert target.read_text() == "mine" and (tmp_path / "x.json.0").is_file()   # nccl-tests' rule


def test_a_users_csv_is_not_replaced(tmp_path, capsys):
    mine = tmp_path / "mine.csv"
    mine.write_text("a,b\n1,2\n")
    _refused(capsys, QUICK + ["--csv", str(mine)], "which is not a sweep CSV")
    assert mine.read_text() == "a,b\n1,2\n"
    ours = tmp_path / "ours.csv"
    assert main(QUICK + ["--csv", str(ours)]) == 0
    first = ours.read_text()
    assert main(QUICK + ["--csv", str(ours)]) == 0 and ours.read_text().splitlines()[0] == first.splitlines()[0]


def test_a_failed_write_names_the_users_file(tmp_path, monkeypatch):
    real_replace = os.replace

    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", src)
    monkeypatch.setattr(schedule_mod.os, "replace", full_disk)
    with pytest.raises(OSError) as e:
        schedule_mod.atomic_write_text(tmp_path / "out.json", "{}")
    monkeypatch.setattr(schedule_mod.os, "replace", real_replace)
    assert e.value.filename == str(tmp_path / "out.json") and e.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []                 # the temporary file is gone too


@pytest.mark.parametrize("flags", [["-g", "4"], ["-b", "1M"], ["-o", "max"], ["--ngpus=4"], ["-d", "half"]])
def test_bare_import_refuses_flags_it_would_ignore(capsys, flags):
    _refused(capsys, ["--import", str(LOG)] + flags, "would be ignored")


def test_bare_import_alone_reprints(capfd):
    assert main(["--import", str(LOG)]) == 0
    assert "nGpus 8" in capfd.readouterr().out


@pytest.mark.parametrize("g", ["1025", "100000"])
def test_more_ranks_than_any_topology_refused(capsys, g):
    _refused(capsys, ["broadcast", "-b", "8", "-e", "8", "-g", g, "--backend", "sim"], "at most 1024 ranks")


def test_compare_checks_every_name_before_running(capsys):
    _refused(capsys, QUICK + ["--compare", "ring,nosuch"], "algorithm 'nosuch'")


def test_import_of_another_rank_count_refused(capsys, tmp_path):
    _refused(capsys, ["all_reduce", "--backend", "sim", "-g", "4", "-b", "8", "-e", "64", "--import", str(LOG),
                      "--plot", str(tmp_path / "x.png")], "a run of 8 ranks; this sweep has 4")
    assert not (tmp_path / "x.png").exists()


def test_the_plotted_bound_uses_the_tables_rates(tmp_path):
    """The plot's lower bound is the one simulate prints (achieved link rates), not data-sheet rates."""
    import csv

    from synth.cli.simulate import main as simulate_main
    out = tmp_path / "b.csv"
    assert main(["all_reduce", "--backend", "sim", "--topology", "dgx-a100", "-b", "4G", "-e", "4G",
                 "--csv", str(out)]) == 0
    rows = [r for r in csv.DictReader(out.open()) if r["kind"] == "bound"]
    assert len(rows) == 1
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert simulate_main(["--topology", "dgx-a100", "--collective", "allreduce", "-b", "4G", "-e", "4G"]) == 0
    line = [ln for ln in buf.getvalue().splitlines() if ln.strip() and not ln.startswith("#")][0]
    printed_bound_busbw = float(line.split()[-1])
    assert abs(float(rows[0]["busbw_gbps"]) - printed_bound_busbw) <= 0.01 * printed_bound_busbw


def test_sweep_and_simulate_name_the_same_baselines():
    from kernels.sweep.cli import build_parser
    from synth.baselines import BASELINES
    from synth.cli.simulate import BASELINE_CHOICES
    assert BASELINE_CHOICES == ("nccl", *BASELINES)
    algo_help = next(a.help for a in build_parser()._actions if "--algo" in a.option_strings)
    assert all(f" {name} " in f" {algo_help} " for name in ("plan", *BASELINE_CHOICES)), algo_help


def test_the_manual_and_the_docstring_list_the_algorithms_sweep_takes():
    """docs/sweep.md and the module docstring name what --help names: plan, nccl, every baseline, a file."""
    import re

    from kernels.sweep import cli
    from synth.cli.simulate import BASELINE_CHOICES
    want = ["plan", *BASELINE_CHOICES, "FILE"]
    for where, text in (("docs/sweep.md", (ROOT / "docs" / "sweep.md").read_text()), ("cli", cli.__doc__)):
        lists = re.findall(r"--algo ([a-z|A-Z]+)", text)
        assert lists and all(sorted(x.split("|")) == sorted(want) for x in lists), (where, lists)


def test_float8_is_modelled_by_sweep_sim_as_by_simulate(capsys):
    assert main(["all_reduce", "-d", "f8e4m3", "--backend", "sim", "--topology", "dgx-a100", "-b", "8", "-e", "64"]) == 0
    assert "f8e4m3" in capsys.readouterr().out
    _refused(capsys, QUICK + ["-d", "f8e5m2"], "modelled, not run: use --backend sim")
    assert main(QUICK + ["-d", "bf16"]) == 0                      # simulate's spellings too


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_json_into_a_folder_no_file_can_be_made_in_is_refused_before_the_sweep(capsys):
    """/proc takes no new file, even from root (whom os.access lets through): refused before any row,
    naming the user's path, not a temporary file's."""
    _refused(capsys, QUICK + ["-J", "/proc/x.json"], "-J /proc/x.json: cannot write in folder /proc")


def test_a_temporary_file_that_cannot_be_made_names_the_users_file(tmp_path, monkeypatch):
    def refused(prefix, dir, **_):
        raise OSError(errno.EACCES, "Permission denied", os.path.join(dir, prefix + "abc123"))
    monkeypatch.setattr(tempfile, "mkstemp", refused)          # the one module every atomic write uses
    with pytest.raises(OSError) as e:
        schedule_mod.atomic_write_text(tmp_path / "out.json", "{}")
    assert e.value.filename == str(tmp_path / "out.json") and e.value.errno == errno.EACCES


def test_a_file_that_is_not_a_png_is_not_replaced_by_the_plot(tmp_path, capsys):
    """Audit 65: ``--plot notes.png`` replaced a text file (only the name's ending was checked).  An
    existing file is replaced only when it is a PNG (its signature bytes), as the help says."""
    notes = tmp_path / "notes.png"
    notes.write_text("my notes\n")
    _refused(capsys, QUICK + ["--backend", "sim", "--plot", str(notes)], "which is not a PNG")
    assert notes.read_text() == "my notes\n" and not (tmp_path / "notes.csv").exists()
    pic = tmp_path / "pic.png"
    assert main(QUICK + ["--backend", "sim", "--plot", str(pic)]) == 0
    before = pic.stat().st_mtime_ns
    os.utime(pic, ns=(before - 10**9, before - 10**9))
    assert main(QUICK + ["--backend", "sim", "--plot", str(pic)]) == 0              # a PNG: replaced
    assert pic.stat().st_mtime_ns > before - 10**9 and pic.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_only_a_png_sweep_drew_is_replaced_by_the_plot(tmp_path, capsys):
    """Fix 66: any PNG was replaced (only the signature was checked), a user's photo too.  Now a PNG
    without topocoll's ``Software`` text, a damaged PNG, a folder or a link to a user's file is
    refused with one line and left byte for byte; the picture a sweep drew is replaced."""
    from matplotlib.figure import Figure
    theirs = tmp_path / "theirs.png"
    fig = Figure(figsize=(2, 1))
    fig.add_subplot().plot([1, 2])
    fig.savefig(theirs, dpi=40)                                        # matplotlib's own, no mark
    body = theirs.read_bytes()
    hostile = {"cut.png": body[:40], "garbage.png": b"\x89PNG\r\n\x1a\n" + b"\0garbage" * 64}
    for name, data in hostile.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "folder.png").mkdir()
    (tmp_path / "link.png").symlink_to(theirs)
    for name in ("theirs.png", *hostile, "link.png"):
        _refused(capsys, QUICK + ["--backend", "sim", "--plot", str(tmp_path / name)],
                 "which is not a PNG topocoll drew")
    _refused(capsys, QUICK + ["--backend", "sim", "--plot", str(tmp_path / "folder.png")], "")
    assert theirs.read_bytes() == body and (tmp_path / "link.png").is_symlink()
    assert all((tmp_path / name).read_bytes() == data for name, data in hostile.items())
    assert not any(p.suffix == ".csv" for p in tmp_path.iterdir())
    ours = tmp_path / "ours.png"
    assert main(QUICK + ["--backend", "sim", "--plot", str(ours)]) == 0
    ours.write_bytes(ours.read_bytes()[:4096] + b"redraw me")          # its mark is in the first chunks
    assert main(QUICK + ["--backend", "sim", "--plot", str(ours)]) == 0
    assert not ours.read_bytes().endswith(b"redraw me")

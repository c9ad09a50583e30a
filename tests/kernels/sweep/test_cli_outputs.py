"""sweep's output files and flags (kernels.sweep.cli): nothing written outside what the user
named, a CSV the user did not name replaced only when it is a sweep CSV, --csv alone writes the
CSV, folders and other picture formats refused before anything runs, -f below 1 and unknown
algorithms refused with one line."""

from pathlib import Path

import pytest

from kernels.sweep.cli import main

SMALL = ["all_reduce", "-b", "8", "-e", "64", "-f", "2", "-g", "2", "-n", "1", "-w", "0"]


def _run(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_plot_does_not_overwrite_a_users_csv(tmp_path, capsys):
    mine = tmp_path / "mydata.csv"
    mine.write_text("my notes\n")
    rc, out, err = _run(SMALL + ["--plot", str(tmp_path / "mydata.png")], capsys)
    assert rc == 2 and mine.read_text() == "my notes\n" and out == ""
    assert "would replace" in err and err.count("\n") == 1
    assert not (tmp_path / "mydata.png").exists()


def test_plot_replaces_its_own_csv_on_a_rerun(tmp_path, capsys):
    png = tmp_path / "p.png"
    assert _run(SMALL + ["--plot", str(png)], capsys)[0] == 0
    first = (tmp_path / "p.csv").read_text()
    assert _run(SMALL + ["--plot", str(png)], capsys)[0] == 0
    assert (tmp_path / "p.csv").read_text().splitlines()[0] == first.splitlines()[0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", ["notes.txt", "p.jpg"])
def test_plot_must_be_a_png(tmp_path, capsys, name):
    target = tmp_path / name
    target.write_text("keep me")
    rc, out, err = _run(SMALL + ["--plot", str(target)], capsys)
    assert rc == 2 and target.read_text() == "keep me" and "ending in .png" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_csv_alone_writes_the_csv(tmp_path, capsys):
    csv = tmp_path / "only.csv"
    rc, out, err = _run(SMALL + ["--csv", str(csv)], capsys)
    assert rc == 0 and csv.read_text().startswith("series,kind,size")
    rows = [line.split(",") for line in csv.read_text().splitlines()[1:]]
    assert sorted(int(r[2]) for r in rows if r[1] != "bound") == [8, 16, 32, 64]   # the run, every size
    assert f"# Wrote {csv}" in out


@pytest.mark.parametrize("flag", ["--plot", "--csv"])
def test_a_folder_as_output_is_refused_before_running(tmp_path, capsys, flag):
    folder = tmp_path / ("d.png" if flag == "--plot" else "d.csv")
    folder.mkdir()
    rc, out, err = _run(SMALL + [flag, str(folder)], capsys)
    assert rc == 2 and out == "" and "is a folder" in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name] and not any(folder.iterdir())


@pytest.mark.parametrize("f", ["0", "-2"])
def test_step_factor_below_one_is_refused(capsys, f):
    rc, out, err = _run(["all_reduce", "-b", "8", "-e", "64", "-f", f, "-g", "2"], capsys)
    assert rc == 2 and f"invalid stepfactor: {f} (must be >= 1)" in err


def test_unknown_algorithm_is_refused_with_one_rank(capsys):
    rc, out, err = _run(["all_reduce", "-b", "8", "-e", "64", "-g", "1", "--algo", "foo"], capsys)
    assert rc == 2 and "algorithm 'foo'" in err and out == ""


def test_missing_folder_is_named(tmp_path, capsys):
    rc, out, err = _run(SMALL + ["--csv", str(tmp_path / "nope" / "x.csv")], capsys)
    assert rc == 2 and "does not exist" in err and not Path(tmp_path / "nope").exists()


def test_progress_on_a_terminal_and_quiet_in_a_pipe(capsys, monkeypatch):
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    assert _run(SMALL, capsys)[2] == ""                  # a pipe: nothing on stderr
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(SMALL) == 0
    assert "preparing plan on full2 (2 ranks)" in term.getvalue()


def test_host_timings_get_no_gpu_fabric_bound(tmp_path, capsys):
    """Issue 38: a host-backend CSV/plot drew the GPU fabric's lower bound over CPU timings; the
    sim backend of the same sweep keeps it (the bound is for modelled GPU times)."""
    host, sim = tmp_path / "host.csv", tmp_path / "sim.csv"
    assert _run(SMALL + ["--csv", str(host)], capsys)[0] == 0
    assert _run(SMALL + ["--backend", "sim", "--csv", str(sim)], capsys)[0] == 0
    kinds = [{line.split(",")[1] for line in p.read_text().splitlines()[1:]} for p in (host, sim)]
    assert kinds == [{"sweep"}, {"sweep", "bound"}]


def test_empty_files_such_as_mktemp_makes_are_written(tmp_path, capsys):
    """``--plot`` / ``--csv`` naming empty files (made by ``mktemp``) write them: nothing to lose."""
    png, csv = tmp_path / "p.png", tmp_path / "c.csv"
    png.touch()
    csv.touch()
    rc, out, err = _run(SMALL + ["--plot", str(png), "--csv", str(csv)], capsys)
    assert rc == 0 and "would replace" not in err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and csv.read_text().startswith("series,")


@pytest.mark.parametrize("argv", [["-g", "1", "--algo", "foo"], ["-g", "4", "--algo", "foo"],
                                  ["-g", "4", "--compare", "ring,foo"],
                                  ["-g", "2", "--algo", "foo", "--backend", "sim"]])
def test_an_unknown_algorithm_is_the_selectors_one_line_naming_sweep_once(capsys, argv):
    """One algorithm rule, one wording (the selector's, as the MPICommunicator's start-up check says it), the
    owner named once: ``sweep: error:``, status 2, nothing on stdout, whichever path the sweep takes (one rank,
    a topology, --compare, the sim backend).  Reference: the line by hand, the baselines of synth.baselines.
    Old: the command line's own copy of the rule said "or a schedule file", the selector "or an existing
    schedule file"."""
    rc, out, err = _run(["all_reduce", "-b", "8", "-e", "64", *argv], capsys)
    assert (rc, out) == (2, "")
    assert err == ("sweep: error: algorithm 'foo': not 'plan', 'nccl', a baseline (ring, tree, direct, rhd, bruck, "
                   "oneshot) or an existing schedule file\n"), err


@pytest.mark.parametrize("ngpus", ["1", "4"])
def test_a_schedule_file_algorithm_is_checked_once_per_sweep(capsys, tmp_path, monkeypatch, ngpus):
    """The command line checks every name before the first runs; the selector it makes takes that name as
    checked (the rule's one look at the file: 1, counted).  Reference: the count by hand, and the sweep's own
    notes naming the file.  Old: the command line's rule, then the selector's again (2; with one rank, the
    one-rank check and the loop over the names: 2)."""
    import synth.plan.arguments as arguments
    from synth.baselines import baseline
    from synth.ir.fabric import build_fabric
    from topo_probe.machines.generators import fully_connected
    n = int(ngpus)
    sched = tmp_path / "ring.json"
    baseline("ring", build_fabric(fully_connected(max(n, 2))), "allgather").save(sched)    # 1 rank: only named
    looked = []

    class CountedPath(type(Path())):
        def is_file(self):
            looked.append(str(self))
            return super().is_file()
    monkeypatch.setattr(arguments, "Path", CountedPath)
    rc, out, err = _run(["all_gather", "-b", "1K", "-e", "1K", "-g", ngpus, "-n", "1", "-w", "0",
                         "--algo", str(sched)], capsys)
    assert rc == 0, err
    assert looked == [str(sched)], looked


def test_an_algorithm_name_too_long_for_a_path_is_one_short_line(capsys):
    """``--algo`` of 5000 characters: the algorithm rule's line, the name cut as every refusal cuts it, status 2.
    Reference: the line by hand.  Old: "sweep: error: [Errno 36] File name too long: '<5000 x>'" (5060 characters)."""
    rc, out, err = _run(["all_reduce", "-b", "8", "-e", "64", "-g", "1", "--algo", "x" * 5000], capsys)
    assert (rc, out) == (2, "")
    assert err == (f"sweep: error: algorithm '{'x' * 56}...: not 'plan', 'nccl', a baseline (ring, tree, direct, rhd, "
                   "bruck, oneshot) or an existing schedule file\n"), err[:200]

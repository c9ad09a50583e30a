"""benchmarks/regenerate_results.py: every committed results folder is regenerated or says why not; the
lead's model set in its order; fit first, presets before their readers; a failing step stops the run
with one line and exit 2."""

import subprocess
import sys
import tomllib

from _paths import ROOT
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(ROOT / "benchmarks"))
import regenerate_results as bench  # noqa: E402

# The lead's re-run set after a model change, in its order (hand-copied from the task that asked for the list).
LEAD = [
    "python benchmarks/fit_nccl_model.py --write",
    "python benchmarks/validate_cost_model.py --out results/model_validation",
    "python benchmarks/holdout_nccl_model.py --by-class --out results/model_validation --write",
    "synthesize --force --no-progress --nccl-tuner-conf results/dgx1-v100/nccl_tuner.conf",   # docs/results.md
    "synthesize --topology dgx-a100 --force --no-progress --nccl-tuner-conf results/dgx-a100/nccl_tuner.conf",
    "synthesize --topology dgx-h100 --force --no-progress --nccl-tuner-conf results/dgx-h100/nccl_tuner.conf",
    "synthesize --topology pcie-8gpu-2socket --force --no-progress"
    " --nccl-tuner-conf results/pcie-8gpu-2socket/nccl_tuner.conf",
    "synthesize --topology mi300x --force --no-progress",
    "python benchmarks/unseen_logs.py --out results/model_validation",
    "python benchmarks/published_nccl_anchors.py --out results/model_validation --write",
    "python benchmarks/ll_plan_cells.py --out results/ll_plan",
    "sweep all_reduce --backend sim --topology dgx-a100 -b 8 -e 4G -f 2 --compare plan,nccl,ring,tree"
    " --import tests/fixtures/nccl_tests_allreduce_a100x8_single_process.txt"
    " --plot results/sweep/dgx-a100_all_reduce_busbw.png > results/sweep/dgx-a100_all_reduce_sim.txt",
    "python benchmarks/printed_channels.py --out results/model_validation",
    "python benchmarks/residual_groups.py --out results/model_validation",
    "python benchmarks/bound_check.py --out results/model_validation",
    "python benchmarks/bench_tuner_coverage.py --out results/interop",
]


def _committed_md_folders():
    out = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {str(ROOT.joinpath(p).parent.relative_to(ROOT)) for p in out.split() if p.endswith(".md")}


def test_every_committed_results_folder_is_listed_or_says_why_not():
    folders = _committed_md_folders()
    assert "results/bwopt" in folders and "results/gpu/pass_2026-11-28" in folders   # the walk sees nested folders
    named = {s.out for s in bench.STEPS} | set(bench.NOT_REGENERATED)
    assert sorted(folders - named) == []


def test_every_script_and_skipped_path_exists():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for step in (*bench.STEPS, bench.LOO):
        argv, stdout = bench.argv_of(step)
        assert [a for a in argv if a.endswith(".py")] or step.command.split()[0] in scripts, step
        for arg in argv:
            if arg.startswith("benchmarks/"):
                assert (ROOT / arg).is_file(), arg
        assert stdout is None or (ROOT / stdout).parent.is_dir()
    for path in bench.NOT_REGENERATED:
        assert list(ROOT.glob(path)), path


def test_the_lead_set_leads_in_its_order_and_is_the_model_set():
    assert [s.command for s in bench.STEPS[:len(LEAD)]] == LEAD
    assert all(s.model for s in bench.STEPS[:len(LEAD)])
    names = [s.name for s in bench.select(model_only=True)]
    assert "unseen-logs" in names and "new-user" not in names and "holdout-loo" not in names


def test_writers_come_before_their_readers():
    order = [s.name for s in bench.STEPS]
    assert order[0] == "fit"
    last_preset = max(i for i, n in enumerate(order) if n.startswith("preset-"))
    for reader in ("ll-plan", "sweep-dgx-a100", "tuner-coverage", "plan-truth", "interop", "msccl-vs-rccl"):
        assert order.index(reader) > last_preset, reader
    assert order.index("residual-groups") > order.index("holdout-by-class")


def test_committed_reports_state_the_listed_command():
    """A step's command is the one its results file states (the .md files name their command)."""
    texts = {}
    for p in (ROOT / "results").rglob("*.md"):
        texts.setdefault(str(p.parent.relative_to(ROOT)), []).append(p.read_text(errors="replace"))
    for step in bench.STEPS:
        if step.command.startswith("python benchmarks/") and step.out in texts and step.name != "unseen-logs":
            assert any(step.command in t for t in texts[step.out]), step.name


def test_loo_only_on_request_right_after_the_class_holdout():
    assert bench.LOO not in bench.select()
    names = [s.name for s in bench.select(model_only=True, with_loo=True)]
    assert names[names.index("holdout-by-class") + 1] == "holdout-loo"
    assert [s.name for s in bench.select(only="bwopt,fit")] == ["fit", "bwopt"]


@given(st.text(max_size=40))
def test_only_takes_known_names_or_refuses(text):
    known = {s.name for s in (*bench.STEPS, bench.LOO)}
    try:
        got = bench.select(only=text)
    except ValueError as exc:
        assert "--only" in str(exc)
        return
    wanted = {n.strip() for n in text.split(",")}
    assert got and {s.name for s in got} == wanted & known and wanted <= known


def test_argv_uses_this_interpreter_and_its_console_scripts():
    argv, stdout = bench.argv_of(next(s for s in bench.STEPS if s.name == "sweep-dgx-a100"))
    assert argv[0].endswith("sweep") and ">" not in argv and stdout == "results/sweep/dgx-a100_all_reduce_sim.txt"
    argv, _ = bench.argv_of(bench.STEPS[0])
    assert argv == [sys.executable, "benchmarks/fit_nccl_model.py", "--write"]


def test_unknown_step_is_one_line_and_exit_2(capsys):
    assert bench.main(["--only", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nope'" in err


def test_first_failure_stops_with_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    marks = [tmp_path / f"{i}" for i in range(3)]
    steps = (
        bench.Step("one", f"python -c \"open('{marks[0]}', 'w')\"", "x", True),
        bench.Step("two", f"python -c \"import sys; open('{marks[1]}', 'w'); sys.exit(3)\"", "x", True),
        bench.Step("three", f"python -c \"open('{marks[2]}', 'w')\"", "x", True),
    )
    monkeypatch.setattr(bench, "STEPS", steps)
    assert bench.main([]) == 2
    assert [m.exists() for m in marks] == [True, True, False]
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("regenerate_results:")]
    assert len(lines) == 1 and "step two failed (exit 3" in lines[0]


def test_redirected_output_lands_only_on_success(tmp_path, monkeypatch):
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    bad.write_text("kept\n")
    monkeypatch.setattr(bench, "STEPS", (bench.Step("ok", f"python -c \"print(6 * 7)\" > {good}", "x", False),))
    assert bench.main([]) == 0 and good.read_text() == "42\n"
    monkeypatch.setattr(bench, "STEPS", (bench.Step("ko", f"python -c \"print(1); 1/0\" > {bad}", "x", False),))
    assert bench.main([]) == 2 and bad.read_text() == "kept\n"


def test_every_committed_command_of_a_listed_folder_is_a_step():
    """Each report under a listed folder names a command the list runs (a report another script writes into
    the same folder, e.g. results/pytorch/p2p.md, is not left out)."""
    import fnmatch
    import re
    listed = {s.command for s in (*bench.STEPS, bench.LOO)}
    folders = {s.out for s in bench.STEPS}
    for p in (ROOT / "results").glob("*/*.md"):
        folder = str(p.parent.relative_to(ROOT))
        m = re.search(r"Command: `(python benchmarks/[^`]*)`", p.read_text(errors="replace"))
        kept = any(fnmatch.fnmatch(str(p.relative_to(ROOT)), k) for k in bench.NOT_REGENERATED)
        if folder in folders and m and not kept and "unseen" not in m.group(1):
            assert any(m.group(1) in c or c in m.group(1) for c in listed), (str(p), m.group(1))


def _docs_preset_commands() -> dict[str, str]:
    """docs/results.md's table, read as written: the default preset's row gives its command; a row "the same with
    `--topology T` (`U`, ...)" gives each named preset that command with ``--topology`` and its own folder, without
    ``--nccl-tuner-conf`` where the row says "<PRESET> (without `--nccl-tuner-conf`"."""
    import re
    rows = [line for line in (ROOT / "docs" / "results.md").read_text().splitlines() if line.startswith("| `results/")]
    base = re.fullmatch(r"\| `results/([\w-]+)/` \| `(synthesize [^`]*)` \|.*", rows[0])
    assert base, rows[0]
    default, command = base.groups()
    want = {default: command}
    for row in rows[1:]:
        cells = row.split(" | ")
        m = re.match(r"the same with `--topology ([\w-]+)`(?: \(([^)]*)\))?$", cells[1])
        if not m:
            continue
        for t in [m.group(1)] + re.findall(r"`([\w-]+)`", m.group(2) or ""):
            assert f"`results/{t}/`" in cells[0], (t, cells[0])
            c = command.replace(f"results/{default}/", f"results/{t}/")
            c = c.replace("synthesize", f"synthesize --topology {t}")
            if f"{t.upper()} (without `--nccl-tuner-conf`" in row:
                c = re.sub(r" --nccl-tuner-conf \S+", "", c)
            want[t] = c
    return want


def test_preset_steps_run_the_commands_of_the_docs_table():
    """docs/results.md is the contract: each preset step is its table's command (plus --no-progress, which only
    silences the progress bar); dgx1-v100 writes its nccl_tuner.conf, mi300x none (RCCL cannot load NCCL's tuner)."""
    want = _docs_preset_commands()
    assert set(want) == {"dgx1-v100", "dgx-a100", "dgx-h100", "mi300x", "pcie-8gpu-2socket"}
    assert want["dgx1-v100"] == "synthesize --force --nccl-tuner-conf results/dgx1-v100/nccl_tuner.conf"
    assert want["mi300x"] == "synthesize --topology mi300x --force"
    got = {s.name.removeprefix("preset-"): s.command.replace(" --no-progress", "") for s in bench.STEPS
           if s.name.startswith("preset-")}
    assert got == want
    presets = [s for s in bench.STEPS if s.name.startswith("preset-")]
    assert all(s.out == f"results/{s.name.removeprefix('preset-')}" for s in presets)

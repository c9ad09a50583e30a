"""benchmarks/shown_paths.py: the paths a results file records, checked against hand-written expectations
for this checkout, the temporary folder, the Python environment and the home folder; the filter form
that the GPU scripts pipe their logs through; and the fuzz campaign's details, which name its case
folder ``<tmp>`` before they are cut short."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _paths import ROOT


def _load(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


shown = _load("shown_paths")
TMP = tempfile.gettempdir()


@pytest.mark.parametrize("path,expected", [
    (f"{ROOT}/results/gpu", "results/gpu"),
    (str(ROOT), "."),
    (f"{TMP}/gpu", "<tmp>/gpu"),
    (f"{TMP}/pass/pytorch", "<tmp>/pass/pytorch"),
    (f"{sys.prefix}/bin/python3", "<venv>/bin/python3"),
    ("results/robustness", "results/robustness"),
    (f"{TMP}gpu", f"{TMP}gpu"),                      # a sibling of the temporary folder is not inside it
])
def test_shown_path(path, expected):
    assert shown.shown_path(path) == expected


def test_shown_command_shows_each_absolute_argument_and_keeps_the_rest():
    argv = ["--out", f"{TMP}/gpu", f"--before={ROOT}/results/gpu/native.csv", "--ranks", "8,4,2", "-n", "2"]
    assert shown.shown_command("python benchmarks/bench_cupy_gpu.py", argv) == (
        "python benchmarks/bench_cupy_gpu.py --out <tmp>/gpu --before=results/gpu/native.csv --ranks 8,4,2 -n 2")
    assert shown.shown_command("python benchmarks/x.py", []) == "python benchmarks/x.py"


def test_script_command_names_the_script_by_its_path_in_the_repository():
    before = list(sys.path)
    script = ROOT / "benchmarks" / "bench_p2p.py"
    assert shown.script_command(script, ["--out", f"{TMP}/x", "--ranks", "2"]) == (
        "python benchmarks/bench_p2p.py --out <tmp>/x --ranks 2")
    assert shown.script_command(str(script), []) == "python benchmarks/bench_p2p.py"
    assert shown.script_command(script, ["--out", "results/mpi"], "mpirun -n 2 python") == (
        "mpirun -n 2 python benchmarks/bench_p2p.py --out results/mpi")
    assert shown.script_command(f"{TMP}/elsewhere/x.py", []) == "python <tmp>/elsewhere/x.py"
    assert sys.path == before                    # recording a command line leaves the import path alone


@pytest.mark.parametrize("ranks,cores,expected", [
    (2, 2, "mpirun -n 2 python"), (4, 2, "mpirun --oversubscribe -n 4 python"), (1, 16, "mpirun -n 1 python"),
    (3, 2, "mpirun --oversubscribe -n 3 python"),
])
def test_mpirun_python_oversubscribes_only_when_the_ranks_outnumber_the_cores(ranks, cores, expected):
    assert shown.mpirun_python(ranks, cores) == expected


def test_scrub_replaces_prefixes_but_not_longer_names_or_other_folders():
    text = (f'rootdir: {ROOT}\n  File "{ROOT}/tests/_torch_dist.py", line 40\n'
            f"{sys.prefix}/lib/site-packages/x.py:3: W\n{TMP}/fuzz-abc/case.xml and /tmpfs/x and /var/tmp/y\n")
    assert shown.scrub(text) == ('rootdir: <repo>\n  File "<repo>/tests/_torch_dist.py", line 40\n'
                                 "<venv>/lib/site-packages/x.py:3: W\n"
                                 "<tmp>/fuzz-abc/case.xml and /tmpfs/x and /var/tmp/y\n")


def test_the_filter_passes_every_line_and_stray_bytes_through():
    raw = f"a {ROOT}/kernels/x.py:1\n\xff not utf-8\nlast {TMP}/gpu/y.png".encode("latin-1")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "shown_paths.py")], input=raw,
                         capture_output=True, check=True).stdout
    assert out == "a <repo>/kernels/x.py:1\n\xff not utf-8\nlast <tmp>/gpu/y.png".encode("latin-1")


def test_fuzz_details_name_the_case_folder_before_they_are_cut(tmp_path):
    """A long folder name must not eat the message: the detail is the same 200 characters wherever the
    worker's folder is (``fuzz_loaders._run_one``, as its worker calls it)."""
    fuzz = _load("fuzz_loaders")
    details = []
    for folder in (tmp_path / "a", tmp_path / ("b" * 80)):
        folder.mkdir()
        case = folder / "case.json"
        case.write_bytes(b"")
        details.append(fuzz._run_one("topology-json", case))
    assert details[0] == details[1]
    outcome, detail = details[0]
    assert outcome == "refused" and detail.startswith("<tmp>/case.json: cannot tell the format"), detail
    assert str(tmp_path) not in detail and len(detail) <= 200


SCRIPTS = ("gpu_check.sh", "gpu_native_check.sh", "gpu_pytorch_check.sh", "gpu_session_check.sh", "native_sanitizer.sh")
LOG = "rootdir: /tmp/r\n....F.s\nlast line, no newline"


def _shim(tmp_path, filter_rc: int | None) -> dict:
    """PATH with a ``python3`` that runs everything as this interpreter, except ``benchmarks/shown_paths.py``
    when ``filter_rc`` is set: then it exits with that status at once, reading nothing (a missing or broken filter)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    broken = f'[ "$1" = benchmarks/shown_paths.py ] && exit {filter_rc}\n' if filter_rc is not None else ""
    (bin_dir / "python3").write_text(f"#!/bin/bash\n{broken}exec {sys.executable} \"$@\"\n")
    (bin_dir / "python3").chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "PY": "python3", "HOME": str(tmp_path)}


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("filter_rc", [None, 1, 127])
def test_a_broken_filter_loses_no_log_and_no_exit_status(tmp_path, script, filter_rc):
    """Each GPU script's ``scrub`` (its own definition, run by bash under pipefail as the scripts run it): the log
    reaches the file scrubbed, or whole as it came when the filter fails before it reads a byte (1; 127: no
    interpreter), and the producer's exit status is the pipeline's either way."""
    line = next(s for s in (ROOT / "benchmarks" / script).read_text().splitlines() if s.startswith("scrub()"))
    out = tmp_path / "log.txt"
    code = f'set -o pipefail; {line}\n{{ printf %s "$LOG"; exit 5; }} | scrub | tee "{out}" >/dev/null; echo "rc=$?"'
    got = subprocess.run(["bash", "-c", code], cwd=ROOT, env={**_shim(tmp_path, filter_rc), "LOG": LOG},
                         capture_output=True, text=True, timeout=60)
    assert got.stdout == "rc=5\n", (got.stdout, got.stderr)
    assert out.read_text() == (LOG.replace("/tmp/r", "<tmp>/r") if filter_rc is None else LOG)


def test_the_filter_without_a_home_folder(tmp_path, monkeypatch):
    """No HOME and no password entry (a container's bare user id): Path.home() raises; the other prefixes
    still apply."""
    def no_home():
        raise RuntimeError("Could not determine home directory.")
    monkeypatch.setattr(shown.Path, "home", staticmethod(no_home))
    assert shown.shown_path(f"{TMP}/gpu") == "<tmp>/gpu"
    assert shown.shown_command("python b.py", ["--out", f"{TMP}/gpu"]) == "python b.py --out <tmp>/gpu"
    assert shown.scrub(f"rootdir: {ROOT}\n") == "rootdir: <repo>\n"


def test_a_system_interpreter_names_only_its_library_folders(monkeypatch):
    """python3 from /usr (no virtual environment): /usr/local/cuda and /usr/bin/nvidia-smi are the same on every
    machine and stay as they are; only the interpreter's own library folders become ``<venv>``."""
    monkeypatch.setattr(sys, "prefix", "/usr")
    system = "/usr/local/cuda/bin/nvcc; /usr/bin/nvidia-smi; /usr/lib/x86_64-linux-gnu/libcuda.so.1; "
    text = system + "/usr/lib/python3/dist-packages/numpy/a.py:3; /usr/lib/python3.12/site-packages/b.py"
    assert shown.scrub(text) == system + (
        "<venv>/lib/python3/dist-packages/numpy/a.py:3; <venv>/lib/python3.12/site-packages/b.py")
    assert shown.shown_path("/usr/local/cuda/bin/nvcc") == "/usr/local/cuda/bin/nvcc"
    assert shown.shown_path("/usr/lib/python3.12/site-packages/b.py") == "<venv>/lib/python3.12/site-packages/b.py"
    monkeypatch.setattr(sys, "prefix", "/usr/local")
    assert shown.scrub("/usr/local/cuda/lib64 /usr/local/lib/python3.12/site-packages/c.py") == (
        "/usr/local/cuda/lib64 <venv>/lib/python3.12/site-packages/c.py")

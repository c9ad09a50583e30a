"""Committed results and documents name no machine's own paths: a reader of a clone has no /tmp/fuzz-x1y2z3w4,
/work/main or /opt/torch/.venv.  Every committed text file under results/ and docs/, and README.md,
ARCHITECTURE.md and CONTRIBUTING.md, is scanned; a hit fails naming file:line.  Writers show such paths as
``<tmp>``, ``<repo>``, ``<venv>`` or ``~`` (``benchmarks/shown_paths.py``): each benchmark that records its own
command line builds it with the one ``script_command(__file__, argv)`` there, checked here on an absolute ``--out``
and, for a run as its committed results file shows it, against the line that file holds."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tempfile

import pytest
from _paths import ROOT

SCANNED = ("results", "docs", "README.md", "ARCHITECTURE.md", "CONTRIBUTING.md")

#: An absolute path into a machine's temporary, home or work folders (not inside a URL or a longer path),
#: pytest's temporary folders, a Python environment's packages or interpreter, and tempfile's folder names.
MACHINE_PATH = re.compile(
    r"(?<![\w.~/<>-])/(?:tmp|work|home|root|Users|private/var|var/folders)/"
    r"|pytest-of-"
    r"|(?<![\w./<>-])/(?:[\w.+-]+/)*(?:site|dist)-packages/"
    r"|(?<![\w./<>-])/(?:[\w.+-]+/)*\.?venv/(?:bin|lib)/"
    r"|\b(?:fuzz-|tmp)[a-z0-9_]{8}/")


def committed_files() -> list[str]:
    """The committed files under SCANNED (git's index; without git, every file there)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *SCANNED], cwd=ROOT, capture_output=True, check=True)
        return sorted(p for p in out.stdout.decode().split("\0") if p)
    except (OSError, subprocess.CalledProcessError):
        found = [p for s in SCANNED for p in ([ROOT / s] if (ROOT / s).is_file() else (ROOT / s).rglob("*"))]
        return sorted(p.relative_to(ROOT).as_posix() for p in found if p.is_file())


def text_of(path: str) -> str | None:
    """The file as text, or None for a binary one (a NUL byte, or not UTF-8: pictures, archives)."""
    data = (ROOT / path).read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def machine_paths(text: str) -> list[tuple[int, str]]:
    """(line number, the line cut to 160 characters) of each line naming a machine path."""
    return [(k, line.strip()[:160]) for k, line in enumerate(text.splitlines(), 1) if MACHINE_PATH.search(line)]


@pytest.mark.parametrize("line", [
    "Command: `python benchmarks/bench_cupy_gpu.py --out /tmp/gpu`",
    "| nccl-xml | empty file | refused | 0.0 | /tmp/fuzz-o1qoz37u/case.xml: no element found |",
    "rootdir: /work/main",
    '  File "/work/main/tests/_torch_dist.py", line 40, in _entry',
    "platform linux -- Python 3.12.3, pytest-9.1.1 -- /opt/torch/.venv/bin/python3",
    "  /usr/lib/python3/dist-packages/numpy/core/x.py:3: DeprecationWarning",
    "see /home/alice/run/log.txt",
    "E   FileNotFoundError: /private/var/folders/x/T/pytest-of-alice/pytest-3/test_a0/plan.json",
    "saved in /root/.cache/x",
    "written to fuzz-bm52p1q6/case.xml",
])
def test_the_scan_finds_machine_paths(line):
    assert machine_paths(line), line


@pytest.mark.parametrize("line", [
    "Command: `python benchmarks/bench_cupy_gpu.py --out <tmp>/gpu`",
    "| nccl-xml | empty file | refused | 0.0 | <tmp>/case.xml: no element found |",
    'rootdir: <repo>;  File "<repo>/tests/_torch_dist.py", line 40; <venv>/lib/python3.12/site-packages/x.py',
    "https://github.com/NVIDIA/nccl/blob/v2.28.9/src/graph/tmp/x.cc and https://example.com/home/index.html",
    "`synthesize --topology P --out <tmp>/...`; results/gpu/notes.md; tests/fixtures/real_logs/a.txt",
    "the HPC-X plugin under /opt/hpcx (the published log's own machine); tmp_path; a tmpfs mount",
])
def test_the_scan_leaves_placeholders_urls_and_repository_paths(line):
    assert not machine_paths(line), line


def test_the_scan_sees_every_kind_of_committed_file():
    files = committed_files()
    texts = [f for f in files if text_of(f) is not None]
    assert any(f.startswith("results/") and f.endswith(".md") for f in texts)
    assert any(f.endswith(".csv") for f in texts) and any(f.endswith(".json") for f in texts)
    assert {"README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"} <= set(texts)
    assert any(f.endswith(".png") for f in files) and not any(f.endswith(".png") for f in texts)


def test_no_committed_result_or_document_names_a_machine_path():
    hits = [f"{path}:{k}: {line}" for path in committed_files() if (text := text_of(path)) is not None
            for k, line in machine_paths(text)]
    shown = "\n".join(hits[:40]) + (f"\n... and {len(hits) - 40} more" if len(hits) > 40 else "")
    assert not hits, (f"{len(hits)} line(s) name this machine's paths (write <tmp>, <repo>, <venv> or ~ instead; "
                      f"benchmarks/shown_paths.py):\n{shown}")


# --- the writers: every benchmark that records its own command line does so through shown_paths ---------------------

#: (benchmark, the arguments of a committed run ({tmp}: the temporary folder), (ranks, cores) for an mpirun line or
#: None, the committed file, how the command stands in it).  Each recorded line must come out byte for byte as it was.
WRITERS = [
    ("bench_executor_host", "--out results/gpu", None, "results/gpu/executor_host_cpu.md", "Command: `{}`."),
    ("bench_host_allreduce", "--out results/host_allreduce --max-mem-gib 17", None,
     "results/host_allreduce/report.md", "Command: `{}`\n"),
    ("bench_host_reduce", "--repeats 5 --out results/host_reduce", None, "results/host_reduce/host_reduce.md",
     "Command: `{}`\n"),
    ("bench_p2p", "", None, "results/pytorch/p2p.md", "Command: `{}`\n"),
    ("bench_synthesis", "", None, "results/synthesis/sccl_comparison.md", "Command: `{}`\n"),
    ("bench_scale", "--out results/scale", None, "results/scale/report.md", "Command: `{}` (from"),
    ("bound_check", "--out results/model_validation", None, "results/model_validation/bound_check.md",
     "Command: `{}`\n"),
    ("fit_nccl_model", "--write", None, "results/model_validation/fit.txt", "Command: `{}`\n"),
    ("holdout_nccl_model", "--out results/model_validation", None, "results/model_validation/holdout.md",
     "Command: `{}`\n"),
    ("holdout_nccl_model", "--by-class --out results/model_validation --write", None,
     "results/model_validation/class_validation.json", '"command": "{}"\n'),
    ("bench_call_path", "--label after --out results/call_path --iters 500 --rounds 5", None,
     "results/call_path/after.json", '"command": "{}",'),
    ("bench_interop", "", None, "results/interop/report.md", "\n    {}\n"),
    ("bench_topo_probe_clusters", "--nodes 4,8,16,32 --before d309b56 --before-nodes 4,8,16 "
     "--out results/scale/topo_probe_clusters.md", None, "results/scale/topo_probe_clusters.md", "Command: `{}`\n"),
    ("ctrl_c_startup", "--out results/robustness", None, "results/robustness/ctrl_c_startup.md", "\n    {}\n"),
    ("new_user_pass", "--out results/new_user", None, "results/new_user/report.md", "Made by `{}` on"),
    ("bench_oversubscribed", "--out results/scale/oversubscribed", None, "results/scale/oversubscribed.md",
     "Command: `{}`."),
    ("compare_cli_outputs", "4a5d9a0 HEAD --out results/layout", None, "results/layout/cli_outputs.md",
     "Command: `{}`\n"),
    ("bench_pytorch", "--out results/pytorch", None, "results/pytorch/report.md", "\n    {}\n"),
    ("bench_pytorch", "--gpu --quick --out {tmp}/pass/pytorch", None, "results/pytorch/gpu/gpu_report.md",
     "\n    {}\n"),
    ("bench_cupy_gpu", "--out {tmp}/gpu", None, "results/gpu/cupy_gpu_run2.md", "Command: `{}`\n"),
    ("bench_native_ll", "--out {tmp}/pass --ranks 8,4,2", None, "results/gpu/pass_2026-11-28/native_ll_host_bound.md",
     "Made by `{}` (float32"),
    ("fuzz_loaders", "--cases 10000 --workers 1 --out results/robustness", None, "results/robustness/report.md",
     "Command: `{}`"),
    ("bench_mpi_overhead", "--out results/mpi", (4, 2), "results/mpi/overhead_n4.csv", ",{}\r\n"),
    ("bench_mpi_allreduce", "--out results/mpi --rounds 12", (2, 2), "results/mpi/allreduce_n2.csv", ",{}\r\n"),
    ("bench_mpi_allreduce", "--out results/mpi --rounds 12 --algo rhd", (4, 2), "results/mpi/allreduce_n4_rhd.csv",
     ",{}\r\n"),
]

#: benchmarks that join an argument list of their own (not their command line) into a report
_OWN_ARGUMENT_LISTS = {"fault_campaign.py"}       # MEMORY_CASES: the tools' arguments, written in that file
_JOINED_ARGV = re.compile(r"\.join\([^\n]*\bargv\b")
_OWN_SCRIPT_PATH = re.compile(r"shown_command\(\s*f?[\"'](?:python )?benchmarks/")


def _writer(name: str):
    """benchmarks/NAME.py as a module, with benchmarks/ importable while it loads (as when it runs)."""
    folder = str(ROOT / "benchmarks")
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(f"_writer_{name}", ROOT / "benchmarks" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod                     # dataclasses look their module up while it loads
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(folder)


def _recorded(name: str, argv: list[str], mpi: tuple[int, int] | None) -> str:
    """The line benchmarks/NAME.py records for ``argv``: its own ``script_command(__file__, ...)`` (the names it
    imports), under ``mpirun_python(ranks, cores)`` for an mpirun line; sys.path as it was before."""
    writer = _writer(name)
    before = list(sys.path)
    cmd = writer.script_command(writer.__file__, argv, writer.mpirun_python(*mpi) if mpi else "python")
    assert sys.path == before, "recording a command line changed sys.path"
    return cmd


def _argv(args: str) -> list[str]:
    return args.format(tmp=tempfile.gettempdir()).split()


@pytest.mark.parametrize("name,args,mpi,committed,shape", WRITERS, ids=[f"{w[0]}:{w[3]}" for w in WRITERS])
def test_a_writer_records_an_absolute_out_folder_without_the_machines_path(name, args, mpi, committed, shape):
    tmp = tempfile.gettempdir()
    argv = _argv(args) or ["--quick"]
    argv = argv[:argv.index("--out")] + argv[argv.index("--out") + 2:] if "--out" in argv else argv
    argv += ["--out", f"{tmp}/writers-{name}", f"--before={ROOT}/results/gpu"]
    cmd = _recorded(name, argv, mpi)
    assert not machine_paths(cmd) and tmp not in cmd and str(ROOT) not in cmd, cmd
    script = f"python benchmarks/{name}.py "
    assert script in cmd and cmd.endswith(f"--out <tmp>/writers-{name} --before=results/gpu"), cmd


@pytest.mark.parametrize("name,args,mpi,committed,shape", WRITERS, ids=[f"{w[0]}:{w[3]}" for w in WRITERS])
def test_a_writer_records_a_committed_run_as_its_results_file_shows_it(name, args, mpi, committed, shape):
    cmd = _recorded(name, _argv(args), mpi)
    text = text_of(committed)
    assert text is not None and shape.format(cmd) in text, f"{committed} does not record {shape.format(cmd)!r}"


def test_every_writer_of_its_command_line_is_checked_and_none_joins_its_arguments_raw():
    """A benchmark that records its command line with ``script_command(__file__, ...)`` is in WRITERS; none names
    its own script to ``shown_command`` or joins ``argv`` into text itself."""
    files = sorted((ROOT / "benchmarks").glob("*.py"))
    writers = {p.stem for p in files if p.name != "shown_paths.py" and "script_command(__file__," in p.read_text()}
    assert writers == {w[0] for w in WRITERS}, writers ^ {w[0] for w in WRITERS}
    own = [f"benchmarks/{p.name}:{k}: {line.strip()}" for p in files
           for k, line in enumerate(p.read_text().splitlines(), 1) if _OWN_SCRIPT_PATH.search(line)]
    assert not own, "a script's own path written out (use script_command(__file__, argv)):\n" + "\n".join(own)
    raw = [f"benchmarks/{p.name}:{k}: {line.strip()}" for p in files
           if p.name not in _OWN_ARGUMENT_LISTS | {"shown_paths.py"}
           for k, line in enumerate(p.read_text().splitlines(), 1) if _JOINED_ARGV.search(line)]
    assert not raw, "command lines joined without benchmarks/shown_paths.py:\n" + "\n".join(raw)

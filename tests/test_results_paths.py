"""Committed results and documents name no machine's own paths: a reader of a clone has no /tmp/fuzz-x1y2z3w4,
/work/main or /opt/torch/.venv.  Every committed text file under results/ and docs/, and README.md,
ARCHITECTURE.md and CONTRIBUTING.md, is scanned; a hit fails naming file:line.  Writers show such paths as
``<tmp>``, ``<repo>``, ``<venv>`` or ``~`` (``benchmarks/shown_paths.py``)."""

from __future__ import annotations

import re
import subprocess

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

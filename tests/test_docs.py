"""The documents people read first stay true: every module path ARCHITECTURE.md and
CONTRIBUTING.md name exists, and README's Python examples run (each in a fresh interpreter) and
use only the packages' public names."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
from _paths import ROOT

PATH = re.compile(r"`((?:topo_probe|synth|kernels|tests|benchmarks)/[\w/.]*?)`|"
                  r"\b((?:topo_probe|synth|kernels)/[\w/]+(?:\.py|/))")
DOTTED = re.compile(r"`((?:topo_probe|synth|kernels)(?:\.\w+)+)`")


def _named_paths(text: str) -> set[str]:
    out = set()
    for m in PATH.finditer(text):
        p = m.group(1) or m.group(2)
        if "*" not in p and "<" not in p:
            out.add(p)
    return out


@pytest.mark.parametrize("doc", ["ARCHITECTURE.md", "CONTRIBUTING.md"])
def test_every_path_a_document_names_exists(doc):
    text = (ROOT / doc).read_text()
    paths = _named_paths(text)
    assert len(paths) > 10, paths                       # the regex finds them
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"{doc} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", ["ARCHITECTURE.md", "CONTRIBUTING.md", "README.md"])
def test_every_dotted_module_a_document_names_imports(doc):
    import importlib
    bad = []
    for name in sorted(set(DOTTED.findall((ROOT / doc).read_text()))):
        parts = name.split(".")
        for k in range(len(parts), 0, -1):       # a module, or an attribute of one
            try:
                obj = importlib.import_module(".".join(parts[:k]))
            except ImportError:
                continue
            try:
                for attr in parts[k:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                bad.append(name)
            break
        else:
            bad.append(name)
    assert not bad, f"{doc} names what does not exist: {bad}"


def _snippets() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_has_python_examples():
    assert len(_snippets()) >= 3


@pytest.mark.parametrize("k", range(len(_snippets())))
def test_readme_python_example_uses_public_names_and_runs(k, tmp_path):
    code = _snippets()[k]
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in (
                "topo_probe", "synth", "kernels"):
            assert node.module in ("topo_probe", "synth", "kernels"), f"deep import in README: {node.module}"
            pkg = __import__(node.module)
            assert all(a.name in pkg.__all__ for a in node.names), [a.name for a in node.names]
    cmd = [sys.executable, "-c", code]
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "TOPOCOLL_RESULTS": str(tmp_path / "results")}
    if "MPICommunicator" in code:                    # MPI examples run as two ranks
        from _mpi import mpi_env, mpirun_cmd
        launcher = mpirun_cmd(2)
        if launcher is None:
            pytest.skip("mpirun / mpi4py not installed")
        cmd, env = launcher + cmd, {**mpi_env(), **env}
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]

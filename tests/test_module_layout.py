"""Module layout, checked on the source (AST) of every module of the three packages:

* imports point one way (kernels -> synth -> topo_probe; kernels never imports ortools),
* the module import graph has no circles (imports inside functions count too),
* every package and subpackage ``__init__`` says in one docstring line what it holds,
* no module is over 400 lines,
* test files sit under tests/ as the code they test sits under the root, with unique names.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest
from _paths import ROOT

PACKAGES = ("topo_probe", "synth", "kernels")
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement of ``path`` (top level or inside functions);
    ``from a.b import c`` names both ``a.b`` and ``a.b.c`` (c may be a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def import_graph() -> nx.DiGraph:
    """Directed graph module -> project module it imports (explicit imports only: a package's
    ``__init__`` loading with its submodule is not an edge)."""
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for name, path in mods.items():
        g.add_edges_from((name, m) for m in _imports(path) if m in mods and m != name)
    return g


def test_the_import_graph_has_no_circles():
    cycles = list(nx.simple_cycles(import_graph()))
    assert not cycles, "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:5])


def test_the_graph_check_finds_a_planted_circle():
    g = import_graph()
    g.add_edge("topo_probe.errors", "topo_probe.load")          # load imports errors already
    assert list(nx.simple_cycles(g))


@pytest.mark.parametrize("package,forbidden", [("kernels", ("ortools",)), ("synth", ("kernels",)),
                                               ("topo_probe", ("synth", "kernels"))])
def test_imports_point_one_way(package, forbidden):
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in sorted((ROOT / package).rglob("*.py"))
           for m in sorted(_imports(p)) if m.split(".")[0] in forbidden]
    assert not bad, "; ".join(bad)


def test_every_package_init_says_what_it_holds_in_one_line():
    bad = []
    for init in sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        first = (doc or "").strip().splitlines()[0] if doc else ""
        if not first or first.upper().startswith("TODO") or len(first) > 120:
            bad.append(str(init.relative_to(ROOT)))
    assert not bad, "package docstrings missing or not one line: " + ", ".join(bad)


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_test_files_mirror_the_code_they_test_with_unique_names():
    """tests/kernels/backends/test_executor.py tests kernels/backends/executor.py: every test folder
    is a folder of the repository; pytest imports test files by name, so no name is used twice."""
    tests = ROOT / "tests"
    files = [p for p in sorted(tests.rglob("test_*.py")) if "fixtures" not in p.relative_to(tests).parts]
    assert len(files) > 80, files                       # the glob finds them
    twice = sorted(name for name, k in Counter(p.name for p in files).items() if k > 1)
    assert not twice, f"test file names used more than once: {twice}"
    astray = sorted(str(p.relative_to(ROOT)) for p in files
                    if p.parent != tests and not (ROOT / p.parent.relative_to(tests)).is_dir())
    assert not astray, f"test files in folders the repository does not have: {astray}"

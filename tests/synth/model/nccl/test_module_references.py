"""Every ``runtime.NAME`` / ``latency.NAME`` that the NCCL model's docstrings, its tests and its docs point a reader
to names something that module itself defines (not a name it only imports), so a name that moved between the two
(the size-free part of the time model now in ``latency.py``) leaves no reference to its old home behind.

The reference is each module's own top-level definitions, read from its syntax tree."""

from __future__ import annotations

import ast
import re

import pytest

from _paths import ROOT

MODULES = ("runtime", "latency")
#: where a reader follows such a reference: the model's sources, its tests, and the docs that describe it
SOURCES = (*sorted((ROOT / "synth" / "model").rglob("*.py")),
           *sorted((ROOT / "tests" / "synth" / "model").rglob("*.py")),
           ROOT / "docs" / "nccl-model.md", ROOT / "ARCHITECTURE.md", ROOT / "benchmarks" / "validate_cost_model.py")
#: a reference as the docs write one: after a backtick (and ``.`` or ``~.``) or as ``synth.model.nccl.<module>``
REFERENCE = re.compile(r"(?:`~?\.?|nccl\.)(" + "|".join(MODULES) + r")\.([A-Za-z_]\w*)")


def _defined(module: str) -> set[str]:
    """The names ``synth/model/nccl/<module>.py`` binds at top level by a def, a class or an assignment."""
    tree = ast.parse((ROOT / "synth" / "model" / "nccl" / f"{module}.py").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def test_the_definitions_are_read():
    """The reference itself: names each module is known to define, and an imported name it does not."""
    runtime, latency = _defined("runtime"), _defined("latency")
    assert {"collective_time_us", "SizeFreeTerms", "STEADY_NET_ALGOS"} <= runtime
    assert {"host_time_us", "latency_us", "hop_latencies_us", "COOP_LAUNCH_UNTIL"} <= latency
    assert "host_time_us" not in runtime and "tree_ll128_cap_gbs" not in runtime


@pytest.mark.parametrize("module", MODULES)
def test_references_name_what_the_module_defines(module):
    defined = _defined(module)
    stale = [f"{path.relative_to(ROOT)}:{n}: {mod}.{name}"
             for path in SOURCES if path.name != "test_module_references.py"
             for n, line in enumerate(path.read_text().splitlines(), 1)
             for mod, name in REFERENCE.findall(line) if mod == module and name not in defined and name != "py"]
    assert not stale, "references to a name the module does not define:\n" + "\n".join(stale)

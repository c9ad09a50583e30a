"""Module layout: names split out of big modules are still importable from their old homes
(the very same objects), importing kernels.mpi_comm does not load the sweep package, and the
import rules of docs/CONTRIBUTING_HELPERS.md hold (kernels -> synth -> topo_probe; kernels never
imports ortools), checked on the source of every module."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

MOVED = [  # (old module, new module, names)
    ("kernels.mpi_comm", "kernels.mpi_startup", ["plan_digest", "compare_descriptors"]),
    ("kernels.mpi_comm", "kernels.sweep.mpi_backend", ["MPISweepBackend", "run_sweep_mpi"]),
    ("kernels.mpi_transport", "kernels.mpi_waiter", ["Waiter", "notify_failure", "exchange_json", "mpi",
                                                     "default_timeout", "DEFAULT_TIMEOUT_S", "TAG_NOTICE"]),
    ("kernels.mpi_transport", "kernels.mpi_wires", ["HostWire", "DeviceWire", "Arena", "query_cuda_aware"]),
    ("kernels.cupy_backend", "kernels.cupy_runtime", ["CupyRuntime"]),
    ("kernels.lowering", "kernels.program", ["Region", "Op", "Program", "INPUT", "OUTPUT", "SCRATCH", "BUFFERS",
                                             "OP_KINDS", "has_input", "has_output", "bindings"]),
    ("kernels.numba_kernels", "kernels.kernel_twins", ["reduce_copy_host", "postdiv_host", "f32_to_f16_host",
                                                       "f32_to_bf16_host", "bf16_to_f32_host", "e4m3_scales_host",
                                                       "quantize_e4m3_host", "dequantize_e4m3_host", "E4M3_MAX"]),
    ("synth.sat_model", "synth.sat_common", ["hop_distances", "NEVER", "capacity_ratio", "add_capacity"]),
    ("synth.sat_model", "synth.sat_flow", ["FlowModel", "is_unicast"]),
    ("synth.bwopt", "synth.bandwidth_term", ["bandwidth_term", "lockstep_bandwidth_term"]),
]


@pytest.mark.parametrize("old,new,names", MOVED, ids=[f"{o}<-{n}" for o, n, _ in MOVED])
def test_moved_names_are_the_same_objects_in_their_old_module(old, new, names):
    o, n = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        assert getattr(o, name) is getattr(n, name), f"{old}.{name} is not {new}.{name}"


def test_importing_mpi_comm_does_not_load_the_sweep_package():
    code = ("import sys, kernels.mpi_comm as m; assert 'kernels.sweep' not in sys.modules; "
            "m.run_sweep_mpi; assert 'kernels.sweep.mpi_backend' in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement of ``path`` (top level or inside functions)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


@pytest.mark.parametrize("package,forbidden", [("kernels", ("ortools",)), ("synth", ("kernels",)),
                                               ("topo_probe", ("synth", "kernels"))])
def test_imports_point_one_way(package, forbidden):
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in sorted((ROOT / package).rglob("*.py"))
           for m in sorted(_imports(p)) if m.split(".")[0] in forbidden]
    assert not bad, "; ".join(bad)

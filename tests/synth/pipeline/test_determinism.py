"""The same topology gives the same schedules on every run: two processes with different hash
seeds (PYTHONHASHSEED) write byte-identical schedule files and plans, the uneven 8-GPU mesh (6 and 5
Infinity Fabric links per pair) gets the same schedule and ratio each time, and so does CP-SAT step
synthesis with more than one worker."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from _paths import ROOT

MESH = """
import json, sys
sys.path.insert(0, "tests")
from _topologies import amd_mesh
from synth.ir.fabric import build_fabric
from synth.pipeline.synthesize import run_independent
from synth.solve.bwopt.optimal import bandwidth_optimal
s = bandwidth_optimal(build_fabric(amd_mesh()), "allgather", time_limit_s=5)
print(json.dumps({"ratio": s.meta["achieved_exact"], "json": s.with_(meta=run_independent(s.meta)).to_json()}))
"""

STEPS = """
import json
from synth.ir.fabric import build_fabric
from synth.pipeline.synthesize import run_independent
from synth.solve.sat.instance import solve_instance
from synth.solve.sat.search import pareto
from topo_probe.machines.presets import get_preset
d1 = build_fabric(get_preset("dgx1-v100"))
got = [s for *_, s in pareto(d1, "allgather", workers=2, time_limit_per_instance_s=60)]
got.append(solve_instance(d1, "alltoall", 8, 8, 3, workers=2, time_limit_s=60))
print(json.dumps([s.with_(meta=run_independent(s.meta)).to_json() for s in got]))
"""


def _env(seed: int) -> dict:
    return dict(os.environ, PYTHONHASHSEED=str(seed), PYTHONPATH=str(ROOT))


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_two_processes_write_the_same_schedules(tmp_path):
    got = []
    for seed in (1, 4242):
        out = tmp_path / f"run{seed}"
        subprocess.run([sys.executable, "-m", "synth.cli.synthesize", "--topology", "ring:4", "--collectives",
                        "allgather,allreduce,broadcast", "--time-limit", "3", "--out", str(out), "--no-progress"],
                       env=_env(seed), cwd=ROOT, check=True, capture_output=True)
        got.append({**_files(out / "schedules"), "plan.json": _files(out)["plan.json"]})
    assert len(got[0]) > 3
    assert got[0] == got[1]


def test_the_uneven_mesh_gets_the_same_schedule_and_ratio():
    runs = [json.loads(subprocess.run([sys.executable, "-c", MESH], env=_env(seed), cwd=ROOT, check=True,
                                      capture_output=True, text=True).stdout) for seed in (3, 77)]
    assert runs[0]["json"] == runs[1]["json"]
    assert runs[0]["ratio"] == runs[1]["ratio"] == "7/38"        # the cut bound: 7 blocks over 38 links


def test_step_synthesis_answers_the_same_in_two_processes():
    """CP-SAT step synthesis with workers > 1 (the SCCL comparison's DGX-1 allgather frontier and
    alltoall S8 R8 C3, which feasibility jump solves): the same schedules under two hash seeds."""
    runs = [json.loads(subprocess.run([sys.executable, "-c", STEPS], env=_env(seed), cwd=ROOT, check=True,
                                      capture_output=True, text=True).stdout) for seed in (5, 901)]
    assert len(runs[0]) == 3                  # SCCL's frontier {(2,3,2), (3,7,6)} and the instance
    assert runs[0] == runs[1]

"""Launching ``mpirun`` for the MPI tests (not a test module): the command with Open MPI's
root/oversubscribe flags, an environment in which the worker scripts import the project and these
helpers, and a runner that skips with a reason when mpirun or mpi4py is missing."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _paths import ROOT, TESTS


def mpirun_cmd(n: int) -> list[str] | None:
    """``mpirun -n n`` with Open MPI's root/oversubscribe flags, or None without MPI."""
    if importlib.util.find_spec("mpi4py") is None:
        return None
    exe = shutil.which("mpirun", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if exe is None:
        return None
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    extra = ["--oversubscribe"] if "Open MPI" in version or "OpenRTE" in version else []
    return [exe, *extra, "-n", str(n)]


def mpi_env() -> dict:
    """The workers import the project (repository root) and these helpers (tests/) first."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONWARNINGS="ignore", OMPI_MCA_rmaps_base_oversubscribe="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
    return env


def require_cupy_gpu() -> None:
    """Skip the calling test, with the reason, unless CuPy sees a GPU here."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception as exc:  # noqa: BLE001 - any failure means no usable GPU here
        pytest.skip(f"no GPU with CuPy here ({type(exc).__name__})")


def run_mpi(n: int, args: list[str], timeout: float = 120):
    cmd = mpirun_cmd(n)
    if cmd is None:
        pytest.skip("mpirun / mpi4py not installed (pip install 'topocoll[mpi]')")
    return subprocess.run(cmd + [sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=mpi_env())


def worker_results(n: int, script: str, out) -> list:
    """Run ``script worker OUT`` under ``mpirun -n n`` (skips without MPI) and return the JSON that
    its rank 0 wrote to ``out``; an assertion with the end of stderr when the run failed."""
    import json
    proc = run_mpi(n, [str(script), "worker", str(out)], timeout=240)
    assert proc.returncode == 0 and out.exists(), f"mpirun failed (rc {proc.returncode}): {proc.stderr[-3000:]}"
    return json.loads(out.read_text())


def attempt(fn) -> dict:
    """Run ``fn`` in a worker: what it raised (class name, message, the exception's ``rank``) and how long it took."""
    t0 = time.monotonic()
    try:
        fn()
        got = {"raised": None}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        got = {"raised": type(exc).__name__, "message": str(exc), "rank": getattr(exc, "rank", None)}
    got["seconds"] = time.monotonic() - t0
    return got

"""The selector's warnings point at the user's line, whichever public entry reached them.

Before: fixed ``stacklevel`` s (4, 5, and 6 passed by each communicator) were right for one call chain each: a
``Communicator`` call's "no plan" warning pointed at kernels/comm/communicator.py, ``MPICommunicator.from_mpi``'s
stale-plan warning at kernels/mpi/communicator.py, a sweep's at synth/sweep/driver.py.  Each test records the
warning (``warnings.catch_warnings``) and compares its file and line with the caller's own, read from the frame
(``inspect``), an independent reference."""

from __future__ import annotations

import inspect
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from _mpi import run_mpi

from kernels.comm.communicator import Communicator
from synth.plan.size_plan import Plan
from topo_probe.machines.generators import fully_connected

#: an identity no installed model has: a plan recording it is said to be stale
OLD_MODELS = "results 0, cost model 000000000000, NCCL model 2.18, code 000000000000"


def _stale_plan(tmp_path: Path, topo) -> Path:
    path = tmp_path / topo.name / "plan.json"
    path.parent.mkdir(parents=True)
    Plan(topo.name, topo.fingerprint(), model=OLD_MODELS).save(path)
    return path


def _here() -> tuple[str, int]:
    """The caller's file and next line."""
    caller = inspect.currentframe().f_back
    return caller.f_code.co_filename, caller.f_lineno + 1


def _where(caught) -> list[tuple[str, int]]:
    return [(w.filename, w.lineno) for w in caught]


def test_a_communicator_calls_no_plan_warning_points_at_the_call():
    comm, x = Communicator(4, topology=fully_connected(4), plan=False), [np.ones(8, np.float32) for _ in range(4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _here()
        comm.all_reduce(x, [np.empty_like(a) for a in x])
    assert _where(caught) == [line], [str(w.message)[:80] for w in caught]


def test_a_communicators_stale_plan_warning_points_at_the_constructor(tmp_path):
    topo = fully_connected(4)
    path = _stale_plan(tmp_path, topo)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _here()
        Communicator(4, topology=topo, plan=path)
    assert _where(caught) == [line] and "plan made by other models" in str(caught[0].message)


def test_the_sweep_commands_stale_plan_warning_points_at_its_caller(tmp_path, monkeypatch, capsys):
    """``sweep``'s main called from Python (the plan found in ``$TOPOCOLL_RESULTS``): its caller's line."""
    from kernels.sweep.cli import main
    from topo_probe.load import load_topology
    _stale_plan(tmp_path, load_topology("dgx-a100"))
    monkeypatch.setenv("TOPOCOLL_RESULTS", str(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _here()
        status = main(["all_reduce", "--backend", "sim", "--topology", "dgx-a100", "-b", "8", "-e", "8", "-n", "1"])
    stale = [w for w in caught if "plan made by other models" in str(w.message)]
    assert status == 0 and _where(stale) == [line], capsys.readouterr().err[-2000:]


WORKER = """
import inspect, json, sys, warnings
import numpy as np
import pytest
from kernels.mpi.communicator import MPICommunicator
out, plan = sys.argv[1], sys.argv[2]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    lines = [inspect.currentframe().f_lineno + 1]
    comm = MPICommunicator.from_mpi(plan=plan)
    x = np.ones(8, np.float32)
    lines.append(inspect.currentframe().f_lineno + 1)
    comm.all_reduce(x, np.empty_like(x))
if comm.rank == 0:
    json.dump({"want": lines, "got": [[w.filename, w.lineno, str(w.message)] for w in caught]}, open(out, "w"))
comm.close()
"""


def test_an_mpi_communicators_warnings_point_at_from_mpi_and_the_call(tmp_path):
    """Rank 0 of 2: the stale plan said at ``from_mpi``, the plan's missing entry at the call (rank 0 alone warns)."""
    script, out = tmp_path / "worker.py", tmp_path / "out.json"
    script.write_text(WORKER)
    plan = _stale_plan(tmp_path, fully_connected(2))
    proc = run_mpi(2, [str(script), str(out), str(plan)], timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert [(f, n) for f, n, _ in doc["got"]] == [(str(script), n) for n in doc["want"]], doc
    assert "plan made by other models" in doc["got"][0][2] and "no plan entry" in doc["got"][1][2], doc


def test_a_torch_process_groups_no_plan_warning_points_at_the_users_call_not_into_torch(tmp_path):
    """``dist.all_reduce`` on a ``topocoll`` group without a plan (``_torch_warning_job.no_plan_job`` on 2
    spawned ranks): rank 0's warning points at that line, past torch's own frames
    (torch/distributed/distributed_c10d.py, which calls the backend).  Before: at distributed_c10d.py, the
    first frame outside topocoll's packages."""
    pytest.importorskip("torch", reason="the torch backend needs the topocoll[torch] extra (torch)")
    from _torch_dist import run_job
    from _torch_warning_job import no_plan_job
    (tmp_path / "empty").mkdir()
    doc = run_job(no_plan_job, 2, env={"TOPOCOLL_RESULTS": str(tmp_path / "empty"), "TOPOCOLL_PLAN": ""},
                  timeout_s=300)[0]
    no_plan = [(f, n) for f, n, m in doc["got"] if "no plan for" in m]
    assert no_plan == [tuple(doc["want"])], doc


@pytest.mark.parametrize("package", ["synth", "kernels"])
def test_code_of_a_string_run_inside_a_package_folder_is_the_users(package, monkeypatch):
    """``python -c`` (or ``exec``) in a shell whose working directory is ``synth/``: the frame's file is
    ``<string>``, the user's, not ``synth/<string>``; the warning names it (line 2 of the string), as
    ``warnings.warn(stacklevel=2)`` called from there would, the reference run in the same place."""
    from synth.plan.user_warning import PACKAGE_DIRS, warn_user
    folder = next(d for d in PACKAGE_DIRS if Path(d).name == package)
    monkeypatch.chdir(folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile("x = 1\nwarn_user('from the user')\n", "<string>", "exec"), {"warn_user": warn_user})
        exec(compile("x = 1\nwarn('from the user')\n", "<string>", "exec"), {"warn": warnings.warn})
    assert _where(caught) == [("<string>", 2), ("<string>", 2)]

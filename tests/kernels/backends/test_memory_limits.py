"""Host memory admission counts the process's own limits: ``ulimit -v`` (RLIMIT_AS) and the
memory cgroup (v1 and v2, every ancestor), not only the machine's MemAvailable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernels.backends.memory import available_host_bytes, cgroup_room


def _tree(tmp_path, cgroup_line: str, files: dict[str, str]):
    (tmp_path / "proc").write_text(cgroup_line + "\n")
    for rel, text in files.items():
        p = tmp_path / "cg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")
    return tmp_path / "proc", tmp_path / "cg"


def test_v1_limit_less_usage_and_the_tightest_ancestor(tmp_path):
    proc, root = _tree(tmp_path, "4:memory:/jobs/a", {
        "memory/jobs/a/memory.limit_in_bytes": str(8 << 30), "memory/jobs/a/memory.usage_in_bytes": str(1 << 30),
        "memory/jobs/memory.limit_in_bytes": str(4 << 30), "memory/jobs/memory.usage_in_bytes": str(3 << 30),
        "memory/memory.limit_in_bytes": "9223372036854771712", "memory/memory.usage_in_bytes": str(5 << 30)})
    assert cgroup_room(proc, root) == 1 << 30          # the parent: 4 GiB - 3 GiB


def test_v2_max_means_no_limit(tmp_path):
    proc, root = _tree(tmp_path, "0::/user.slice", {"user.slice/memory.max": "max",
                                                     "user.slice/memory.current": "123"})
    assert cgroup_room(proc, root) is None


def test_unreadable_is_unknown(tmp_path):
    assert cgroup_room(tmp_path / "missing", tmp_path) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_ulimit_v_bounds_what_is_available():
    code = ("import resource; from kernels.backends.memory import available_host_bytes as a; "
            "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY)); print(a())")
    capped = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0 < capped < 6 << 30
    machine = available_host_bytes()
    assert machine is None or capped <= machine

"""``print(comm.last_route)`` is one line saying what plan.json decided and what ran.

Before: the dataclass repr printed the whole Schedule (every step of every rank: tens of KB for README's
dgx-a100 example; 1,400 characters for a 4-rank ring here).  The reference is the route's own fields and the plan
file written here by hand: each must appear in the line, and the schedule object stays reachable."""

from __future__ import annotations

import warnings

import numpy as np
from _schedules import direct, ring

from kernels.comm.communicator import Communicator
from synth.formats.schedule_file import save_schedule
from synth.plan.size_plan import Plan, PlanEntry
from topo_probe.machines.generators import fully_connected

N = 4


def _comm(tmp_path) -> Communicator:
    """allreduce: ``direct`` below 4 KiB (Simple), ``nccl`` with fallback ``ring`` from 4 KiB."""
    topo = fully_connected(N)
    save_schedule(direct("allreduce", N), tmp_path / "direct.json")
    save_schedule(ring("allreduce", N), tmp_path / "ring.json")
    Plan(topo.name, topo.fingerprint(), [PlanEntry("allreduce", 0, 4096, "direct.json"),
                                         PlanEntry("allreduce", 4096, None, "nccl", fallback="ring.json")]
         ).save(tmp_path / "plan.json")
    return Communicator(N, topology=topo, plan=tmp_path / "plan.json")


def _all_reduce(comm: Communicator, count: int):
    xs = [np.full(count, r, np.float32) for r in range(N)]
    ys = [np.empty(count, np.float32) for _ in range(N)]
    comm.all_reduce(xs, ys)
    assert all((y == sum(range(N))).all() for y in ys)          # the call itself ran right
    return comm.last_route


def test_a_route_prints_as_one_short_line_naming_the_plans_decision_and_what_ran(tmp_path):
    comm = _comm(tmp_path)
    plan = str(tmp_path / "plan.json")
    small, large = _all_reduce(comm, 16), _all_reduce(comm, 4096)      # 64 B and 16 KiB (nccl-tests sizes)
    assert str(small) == repr(small) == (f"Route(allreduce of 64 B: plan {plan} 0 B-4 KiB: direct.json; "
                                         f"ran direct.json on {small.layer} (simple))")
    assert repr(large).startswith(f"Route(allreduce of 16 KiB: plan {plan} 4 KiB-inf: nccl; ran ring.json on "
                                  f"{large.layer} (simple); ")
    assert repr(large).endswith(f"; {large.reason})") and "NCCL" in large.reason
    for route in (small, large):
        assert "\n" not in repr(route) and len(repr(route)) < 200 + len(plan), repr(route)
        assert route.schedule is not None and route.schedule.ranks == N     # still there, as an attribute
    assert repr(large.schedule) not in repr(large) and len(repr(large.schedule)) > len(repr(large))   # no dump
    comm.close()


def test_without_a_plan_the_line_says_so_and_names_the_baseline():
    comm = Communicator(N, topology=fully_connected(N), plan=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                              # the no-plan warning
        route = _all_reduce(comm, 16)
    assert repr(route).startswith(f"Route(allreduce of 64 B: no plan; ran {route.ran} on {route.layer}")
    assert route.ran.startswith("best:") and route.reason in repr(route)
    comm.close()

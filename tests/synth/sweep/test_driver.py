"""synth.sweep.driver: nccl-tests' size loop, row arithmetic and the schedule choice per size."""

import pytest

from synth.baselines import BASELINES, baseline
from synth.ir.fabric import build_fabric
from synth.model.cost import CostModel
from synth.plan.size_plan import Plan, PlanEntry
from synth.sweep.driver import (
    Result,
    Row,
    SweepConfig,
    SweepSummary,
    make_selector,
    run_sweep,
    schedule_at,
    sweep_sizes,
)
from synth.sweep.sim_backend import SimBackend
from topo_probe.errors import InvalidArgument, ScheduleInvalid, UnsupportedCollective
from topo_probe.load import load_topology
from topo_probe.machines.generators import fully_connected, ring


def test_sizes_like_nccl_tests():
    assert sweep_sizes(8, 128, 1 << 20, 2) == [8, 16, 32, 64, 128]
    assert sweep_sizes(8, 100, 1 << 20, 2) == [8, 16, 32, 64]       # stops below maxbytes
    assert sweep_sizes(0, 3000, 1000, 1) == [0, 1000, 2000, 3000]
    assert sweep_sizes(5, 5, 0, 1) == [5]
    assert len(sweep_sizes(8, 4 << 30, 1, 2)) == 30                   # the A100 log's sweep


@pytest.mark.parametrize("args, msg", [((1 << 30, 1024, 1, 2), "invalid sizes for 'minbytes' and 'maxbytes'"),
                                       ((0, 64, 1, 2), "never grows"),
                                       ((8, 64, 0, 1), "never reaches"),
                                       ((1, 1 << 30, 1, 1), "more than")])
def test_size_errors(args, msg):
    with pytest.raises(ValueError, match=msg):
        sweep_sizes(*args)


def test_config_roots_and_ops():
    assert SweepConfig("all_reduce", 4, root=2).roots() == [-1]
    assert SweepConfig("reduce", 3, root=-1).roots() == [0, 1, 2]
    assert SweepConfig("broadcast", 3, root=1).roots() == [1]
    assert SweepConfig("all_gather", 4, ops=("sum", "max")).op_list() == ["none"]
    assert SweepConfig("reduce_scatter", 4, ops=("sum", "max")).op_list() == ["sum", "max"]


class _FixedTime:
    """A backend that 'takes' 2 µs per KiB plus 10 µs and finds one wrong element at 4 KiB in place."""

    checks = True

    def __init__(self):
        self.cases = []

    def measure(self, case):
        self.cases.append(case)
        wrong = 1 if case.inplace and case.counts.size == 4096 else 0
        return 10.0 + 2.0 * case.counts.size / 1024, wrong


def test_rows_arithmetic_and_summary():
    cfg = SweepConfig("all_gather", 4, minbytes=1024, maxbytes=8192, stepfactor=2, dtypes=("float",))
    seen = []
    backend = _FixedTime()
    s = run_sweep(cfg, backend, make_selector("all_gather", fully_connected(4), "ring"), on_row=seen.append)
    assert seen == s.rows and [r.size for r in s.rows] == [1024, 2048, 4096, 8192]
    for r in s.rows:
        t = 10.0 + 2.0 * r.size / 1024
        assert r.count == r.size // 4 // 4 and (r.type, r.redop, r.root) == ("float", "none", -1)
        assert r.out_of_place.time_us == t
        assert r.out_of_place.algbw == pytest.approx(r.size / t / 1e3)
        assert r.out_of_place.busbw == pytest.approx(r.size / t / 1e3 * 3 / 4)
        assert r.algorithm == "ring"
    assert s.errors == 1
    cells = [res.busbw for r in s.rows for res in (r.out_of_place, r.in_place)]
    assert s.avg_busbw == pytest.approx(sum(cells) / 8)
    assert [c.inplace for c in backend.cases[:2]] == [False, True]


def test_every_type_op_and_root_gets_rows():
    cfg = SweepConfig("reduce", 3, minbytes=64, maxbytes=128, stepfactor=2, ops=("sum", "max"),
                      dtypes=("int8", "half"), root=-1)
    s = run_sweep(cfg, _FixedTime(), make_selector("reduce", fully_connected(3), "ring"))
    keys = [(r.type, r.redop, r.root, r.size) for r in s.rows]
    assert len(keys) == 2 * 2 * 3 * 2 == len(set(keys))
    assert keys[0] == ("int8", "sum", 0, 64) and keys[-1] == ("half", "max", 2, 128)


def test_summary_of_nothing():
    assert SweepSummary().avg_busbw == 0.0 and SweepSummary().errors == 0
    r = Result(1.0, 1.0, 1.0, None)
    assert SweepSummary([Row(8, 2, "float", "sum", -1, r, r)]).errors == 0


def test_plan_without_file_uses_best_baseline_by_cost(tmp_path):
    topo = load_topology("dgx1-v100")
    src = make_selector("allreduce", topo, "plan", plan=tmp_path)
    assert "plan: none for" in src.notes[0] and src.plan is None
    fab = build_fabric(topo)
    cost = CostModel(fab)
    for nbytes in (1024, 1 << 20, 1 << 28):
        sched, label = schedule_at(src, "allreduce", -1, nbytes)
        times = {}
        for name in BASELINES:
            try:
                times[name] = cost.schedule_time_us(baseline(name, fab, "allreduce"), nbytes)
            except UnsupportedCollective:
                pass
        best = min(times, key=times.get)
        assert label == f"best:{best}"
        assert cost.schedule_time_us(sched, nbytes) == pytest.approx(times[best])


@pytest.mark.parametrize("plan", [7, ["plan.json"]])
def test_a_plan_argument_that_is_not_a_plan_is_refused_naming_the_sweep(plan):
    """The sweep relies on the selector's one check of ``plan`` (the same line as the communicators',
    naming the sweep).  Reference: the hand-written line.  Old: a TypeError from pathlib."""
    with pytest.raises(InvalidArgument) as info:
        make_selector("allreduce", fully_connected(4), "plan", plan=plan)
    assert str(info.value) == ("sweep: plan must be a Plan, a plan.json file or folder, 'auto', None or False; "
                               f"got {type(plan).__name__} {plan!r}")


@pytest.mark.parametrize("collective", [7, None, ["allreduce"]])
def test_a_collective_that_is_not_a_name_is_refused_in_the_one_line(collective):
    """The sweep's collective check is the communicators' (synth.ir.collectives.canonical), also for a
    value that is not a string.  Reference: the hand-written line.  Old: AttributeError / TypeError."""
    with pytest.raises(UnsupportedCollective) as info:
        SweepConfig(collective)
    assert str(info.value) == (f"unknown collective {collective!r}; expected one of allgather, reducescatter, "
                               f"allreduce, broadcast, reduce, gather, scatter, alltoall")


def _write_plan(tmp_path, topo, fingerprint):
    fab = build_fabric(topo)
    folder = tmp_path / topo.name
    baseline("tree", fab, "broadcast", root=1).save(folder / "schedules" / "bcast-tree-r1.json")
    Plan(topo.name, fingerprint, [PlanEntry("broadcast", 0, 4096, "schedules/bcast-tree-r1.json", root=1)]
         ).save(folder / "plan.json")


def test_plan_entries_are_used_where_they_apply(tmp_path):
    topo = ring(4)
    _write_plan(tmp_path, topo, topo.fingerprint())
    src = make_selector("broadcast", topo, "plan", plan=tmp_path)
    assert src.plan is not None
    sched, label = schedule_at(src, "broadcast", 1, 1024)
    assert label == "plan:schedules/bcast-tree-r1.json" and sched.meta["baseline"] == "tree"
    assert schedule_at(src, "broadcast", 1, 8192)[1].startswith("best:")      # beyond the entry's range
    assert schedule_at(src, "broadcast", 0, 1024)[1].startswith("best:")      # another root


def test_plan_for_another_topology_is_not_used(tmp_path):
    topo = ring(4)
    _write_plan(tmp_path, topo, "0" * 16)
    with pytest.warns(UserWarning, match="another topology"):
        src = make_selector("broadcast", topo, "plan", plan=tmp_path)
    assert src.plan is None and "another topology" in src.notes[0]
    assert schedule_at(src, "broadcast", 1, 1024)[1].startswith("best:")


def test_schedule_file_is_checked(tmp_path):
    topo = fully_connected(4)
    fab = build_fabric(topo)
    path = tmp_path / "ag.json"
    baseline("ring", fab, "allgather").save(path)
    src = make_selector("allgather", topo, str(path))
    assert schedule_at(src, "allgather", -1, 64)[0].collective == "allgather"
    with pytest.raises(ScheduleInvalid, match="schedule is allgather on 4 ranks"):
        make_selector("allreduce", topo, str(path))
    with pytest.raises(InvalidArgument, match="not 'plan', 'nccl', a baseline"):
        make_selector("allgather", topo, str(tmp_path / "missing.json"))


def test_sim_backend_reports_the_cost_model():
    topo = load_topology("dgx-a100")
    src = make_selector("allreduce", topo, "ring")
    cfg = SweepConfig("all_reduce", 8, minbytes=1 << 20, maxbytes=1 << 22, stepfactor=2, check=0)
    s = run_sweep(cfg, SimBackend(src), src)
    cost = CostModel(build_fabric(topo))
    sched = baseline("ring", build_fabric(topo), "allreduce")
    for r in s.rows:    # plus the native executor's fixed cost: 4 µs + 157 records of the 12-ring schedule x 1 µs
        assert r.out_of_place.time_us == pytest.approx(cost.schedule_time_us(sched, r.size) + 4.0 + 157 * 1.0)
        assert r.in_place == r.out_of_place and r.out_of_place.wrong is None


def _recording_backend(seen):
    """A backend that records each measured case's op and times every case 1 us, never wrong."""
    class Recording:
        def measure(self, case):
            seen.append(case.op)
            return 1.0, None

        def devices(self, n, topology):
            return []
    return Recording()


def test_the_sweep_refuses_op_none_for_a_reducing_collective():
    """``none`` is only what op_list gives a non-reducing collective itself: an all-reduce asked with op
    ``none`` is refused in the one op line before anything is measured.  Reference: check_reduce_op's line
    for any other bad op.  Old: the check was skipped for ``none`` and the case ran as a sum labelled none."""
    seen: list = []
    with pytest.raises(InvalidArgument) as info:
        run_sweep(SweepConfig("allreduce", 1, 8, 8, ops=("none",), check=0), _recording_backend(seen), None)
    assert str(info.value) == "sweep: op must be one of sum, prod, max, min, avg; got 'none'"
    assert seen == []


def test_a_non_reducing_collective_keeps_op_none():
    """A non-reducing collective sweeps once with redop ``none`` whatever ops says.  Reference: nccl-tests
    prints ``none`` for all-gather (one row per size: 1024, 2048 bytes at stepfactor 2)."""
    seen: list = []
    s = run_sweep(SweepConfig("allgather", 1, 1024, 2048, stepfactor=2, ops=("sum", "max"), check=0),
                  _recording_backend(seen), None)
    assert [(r.size, r.redop) for r in s.rows] == [(1024, "none"), (2048, "none")]
    assert len(seen) == 4                           # out-of-place and in-place per size


def test_the_sweep_refuses_a_bad_op_before_measuring_anything():
    """Every op is checked once before any case runs (as the CLI's -o parser does).  Reference: no case
    measured.  Old: the check sat inside the dtype x op loop, so every ``sum`` size ran before ``mean``
    was refused."""
    seen: list = []
    with pytest.raises(InvalidArgument, match="got 'mean'"):
        run_sweep(SweepConfig("allreduce", 1, 8, 64, stepfactor=2, ops=("sum", "mean"), check=0),
                  _recording_backend(seen), None)
    assert seen == [], f"{len(seen)} cases measured before the refusal"

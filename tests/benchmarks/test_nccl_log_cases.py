"""benchmarks/nccl_log_cases.py: every real log has its source and a case, and no fit sees a held-out class."""

from __future__ import annotations

import re
import sys

import pytest
from _paths import FIXTURES, ROOT

from synth.formats.nccl_tests.runs import guess_collective, load_runs
from topo_probe.errors import InvalidArgument

sys.path.insert(0, str(ROOT / "benchmarks"))
import nccl_log_cases as cases  # noqa: E402

LOGS = sorted((FIXTURES / "real_logs").glob("*.txt"))
_BUS_IN_ALGBW = ("allgather", "reducescatter")


@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_every_log_names_its_source_and_parses(path):
    head = path.read_text(encoding="utf-8").splitlines()[:3]
    assert any(line.startswith("# SOURCE: ") and len(line) > 80 for line in head), path.name
    runs = load_runs(path)
    assert runs and all(r.rows for r in runs)
    # nccl-tests prints algbw = size / time (GB/s, time in us): a copying slip in a row shows here. Before June
    # 2020 its all_gather and reduce_scatter algbw already held the bus factor (n - 1) / n (NVIDIA/nccl-tests#45)
    for run in runs:
        old_factor = ((len(run.devices) - 1) / len(run.devices)
                      if run.devices and guess_collective(run, path) in _BUS_IN_ALGBW else 1)
        for row in run.rows:
            for m in (row.out_of_place, row.in_place):
                if m is not None and m.time_us and m.algbw_gbps:
                    algbw = row.size / m.time_us / 1e3
                    assert m.algbw_gbps in (pytest.approx(algbw, rel=0.02, abs=0.011),
                                            pytest.approx(algbw * old_factor, rel=0.02, abs=0.011)), row


def test_every_log_has_a_case_and_every_case_a_log_and_a_class():
    assert {c.file for c in cases.ALL_CASES} == {p.name for p in LOGS}
    assert all(c.machine_class in cases.CLASSES for c in cases.ALL_CASES)
    assert set(cases.HELD_OUT_CLASSES) <= set(cases.CLASSES)


def test_the_third_set_is_held_out_and_of_classes_no_earlier_log_has():
    """Its classes have no in-sample log (so no fit constrains them) and no log of the first two sets."""
    earlier = {c.machine_class for c in cases.CASES + cases.NEW_CASES}
    third = {c.machine_class for c in cases.THIRD_CASES}
    assert third <= set(cases.HELD_OUT_CLASSES) and not third & earlier


def test_the_fourth_set_adds_one_held_out_class_and_one_host_logs_held_out_themselves():
    """ABCI's A100 hosts over InfiniBand are a kind of machine no earlier log shows (held out); its one-host
    tables are of the in-sample A100 NVSwitch class, like the first set's A100 logs, but added after the
    committed fit: held out themselves, so no fit sees them and the fit's own tables stay what they were."""
    earlier = {c.machine_class for c in cases.CASES + cases.NEW_CASES + cases.THIRD_CASES}
    fourth = cases.FOURTH_CASES
    assert {c.machine_class for c in fourth} - earlier == {"a100-ib-multihost"}
    assert "a100-ib-multihost" in cases.HELD_OUT_CLASSES
    assert {c.machine_class for c in fourth if c.nodes == 1} == {"a100-nvswitch-1host"}
    assert all(cases.held_out(c) for c in fourth) and not any(c in cases.IN_SAMPLE for c in fourth)
    assert "a100-nvswitch-1host" not in cases.HELD_OUT_CLASSES and all(c.held_out for c in fourth if c.nodes == 1)


@pytest.mark.parametrize("case", cases.FOURTH_CASES, ids=lambda c: c.file)
def test_each_fourth_case_has_the_hosts_and_ranks_its_device_lines_show(case):
    """The case's host count is the log's own: distinct host names of the device lines, 8 ranks on each."""
    (run,) = load_runs(FIXTURES / "real_logs" / case.file)
    hosts = {d.host for d in run.devices}
    assert len(hosts) == case.nodes and len(run.devices) == 8 * case.nodes
    assert {d.name for d in run.devices} == {"A100-SXM4-40GB"}


def test_the_fifth_set_is_held_out_and_never_fitted():
    """Logs from sources no earlier fixture uses, added after the committed fit: every case is held out itself,
    so neither the committed fit nor a class holdout (which fits on the in-sample tables of other classes) sees it."""
    fifth = cases.FIFTH_CASES
    assert fifth and all(c.held_out and cases.held_out(c) for c in fifth)
    assert not any(c in cases.IN_SAMPLE for c in fifth)
    earlier = {c.file for c in cases.CASES + cases.NEW_CASES + cases.THIRD_CASES + cases.FOURTH_CASES}
    assert not {c.file for c in fifth} & earlier


def _oop_times(path):
    return [(row.size, row.out_of_place.time_us) for run in load_runs(path) for row in run.rows
            if row.out_of_place is not None]


def test_no_fifth_set_table_repeats_a_run_an_earlier_fixture_holds():
    """A second run of an already used source is new data; the same run copied again is not (the -g 8 run of
    the A100 guide is the first set's a100_8gpu_1node_all_reduce.txt, so only its -g 1 run is added)."""
    fifth = {c.file for c in cases.FIFTH_CASES}
    earlier = [_oop_times(p) for p in LOGS if p.name not in fifth]
    for name in fifth:
        rows = set(_oop_times(FIXTURES / "real_logs" / name))
        assert all(len(rows & set(other)) < 3 for other in earlier), name


@pytest.mark.parametrize("case", cases.SIXTH_CASES + cases.SEVENTH_CASES + cases.EIGHTH_CASES,
                         ids=lambda c: f"{c.file}-{c.collective}")
def test_each_sixth_to_eighth_case_has_the_hosts_ranks_and_gpu_its_device_lines_show(case):
    """The case's hosts and ranks (the preset's 8 per host unless the case says fewer) are the log's own."""
    path = FIXTURES / "real_logs" / case.file
    (run,) = [r for r in load_runs(path) if case.collective is None or guess_collective(r, path) == case.collective]
    ranks = case.machine.get("ranks", 8 * case.nodes)
    assert len({d.host for d in run.devices}) == case.nodes and len(run.devices) == ranks
    gpu = {"dgx-h100": "NVIDIA H100 80GB HBM3", "dgx2": "Tesla V100-SXM3-32GB",
           "dgx-a100": "NVIDIA A100-SXM4-40GB", "dgx1-v100": "Tesla V100-SXM2-32GB",
           "mi300x": "AMD Instinct MI300X"}[case.preset]
    assert {d.name for d in run.devices} == {gpu}


@pytest.mark.parametrize("case", [c for c in cases.NEW_CASES + cases.THIRD_CASES + cases.FOURTH_CASES
                                  + cases.FIFTH_CASES + cases.SIXTH_CASES + cases.SEVENTH_CASES
                                  + cases.EIGHTH_CASES + cases.NINTH_CASES + cases.TENTH_CASES
                                  + cases.ELEVENTH_CASES + cases.TWELFTH_CASES + cases.THIRTEENTH_CASES
                                  + cases.FOURTEENTH_CASES + cases.FIFTEENTH_CASES + cases.SIXTEENTH_CASES
                                  + cases.NINETEENTH_CASES + cases.TWENTIETH_CASES + cases.TWENTY_FIRST_CASES
                                  + cases.TWENTY_SECOND_CASES + cases.TWENTY_THIRD_CASES
                                  if not c.skip_reason],
                         ids=lambda c: c.file)
def test_each_new_case_names_a_table_of_its_log_with_at_least_8_sizes(case):
    path = FIXTURES / "real_logs" / case.file
    runs = [r for r in load_runs(path) if case.collective is None or guess_collective(r, path) == case.collective]
    assert runs and len({row.size for row in runs[0].rows}) >= 8


def test_cluster00_logs_of_unstated_nics_are_listed_not_predicted():
    """cnode2's NICs are not stated and its rates are half of what the same cluster's cnode4 hosts
    (8 x 400 Gb/s in NCCL's debug log) reach: its logs stay, with the reason, and cnode4's are predicted."""
    by_file = {}
    for c in cases.ALL_CASES:
        by_file.setdefault(c.file, []).append(c)
    for name in ("h100_2gpu_2node_alltoall_sendrecv_1gpn.txt", "h100_8gpu_2node_alltoall_sendrecv_4gpn.txt"):
        assert all("cnode4" in c.skip_reason for c in by_file[name])
        assert "speed not stated" in (FIXTURES / "real_logs" / name).read_text(encoding="utf-8").splitlines()[0]
    for name in ("h100_2gpu_2node_alltoall_sendrecv_1gpn_cnode4.txt",
                 "h100_8gpu_2node_alltoall_sendrecv_4gpn_cnode4.txt"):
        assert {c.collective for c in by_file[name] if not c.skip_reason} == {"alltoall", "sendrecv"}
        assert "speed=400000" in (FIXTURES / "real_logs" / name).read_text(encoding="utf-8").splitlines()[0]


def test_the_split_is_by_class_and_keeps_the_committed_fit_in_sample():
    held = set(cases.HELD_OUT_CLASSES)
    assert all(c.machine_class in held or c.held_out for c in cases.HELD_OUT)
    assert not any(c.machine_class in held or c.held_out or c.skip_reason for c in cases.IN_SAMPLE)
    assert {(c.file, c.collective) for c in cases.CASES} <= {(c.file, c.collective) for c in cases.IN_SAMPLE}
    assert len(cases.IN_SAMPLE) + len(cases.HELD_OUT) + sum(
        bool(c.skip_reason) and not cases.held_out(c) for c in cases.ALL_CASES) == len(cases.ALL_CASES)


def test_fit_selection_never_takes_a_held_out_log(monkeypatch, capsys):
    pytest.importorskip("scipy")
    import fit_nccl_model as fitting
    seen = []

    def solve(keys, lo, hi, x0, chosen, base, max_nfev):
        seen.append(list(chosen))
        return base, 0.0, 0

    monkeypatch.setattr(fitting, "_solve", solve)
    assert fitting.main(["--in-sample"]) == 0 and fitting.main([]) == 0 and fitting.main(["--first-12"]) == 0
    assert [c.file for c in seen[0]] == [c.file for c in seen[1]] == [c.file for c in cases.IN_SAMPLE]
    assert [c.file for c in seen[2]] == [c.file for c in cases.CASES]
    assert [c.file for c in fitting.fit_cases()] == [c.file for c in cases.IN_SAMPLE]   # what fit() defaults to
    assert not any(cases.held_out(c) for chosen in seen for c in chosen)
    with pytest.raises(InvalidArgument, match="b200_32gpu_4node_sendrecv.txt"):
        fitting.fit_cases(cases.IN_SAMPLE + [c for c in cases.HELD_OUT if c.file.startswith("b200_32")])
    with pytest.raises(InvalidArgument, match="a100_8gpu_1node_broadcast_abci.txt"):    # held out itself
        fitting.fit_cases(cases.IN_SAMPLE + [c for c in cases.HELD_OUT if c.file.endswith("broadcast_abci.txt")])


def test_class_holdout_puts_every_log_of_a_class_out_together():
    """A tiny synthetic split: two logs called class x, one class y, one of a held-out class."""
    import holdout_nccl_model as h
    from synth.model.nccl.params import DEFAULT_PARAMS
    Case = cases.Case
    tiny = [Case("a100_8gpu_1node_all_reduce.txt", "dgx-a100", machine_class="x"),
            Case("h100_8gpu_1node_all_reduce_ring.txt", "dgx-h100", machine_class="x"),
            Case("mi300x_8gpu_1node_all_reduce.txt", "mi300x", machine_class="y"),
            Case("mi300x_16gpu_2node_all_reduce_roce.txt", "mi300x", 2, machine_class=cases.HELD_OUT_CLASSES[0])]
    fitted_on = []

    def fit(chosen):
        fitted_on.append([c.file for c in chosen])
        return DEFAULT_PARAMS, []

    results = h.holdout_class("x", tiny, fit=fit)
    assert fitted_on == [["mi300x_8gpu_1node_all_reduce.txt"]]
    later = Case("a100_8gpu_1node_broadcast_abci.txt", "dgx-a100", machine_class="y", held_out=True)
    h.holdout_class("x", tiny + [later], fit=fit)              # a table of class y held out itself: never fitted
    assert fitted_on[-1] == ["mi300x_8gpu_1node_all_reduce.txt"]
    assert sorted(r["case"].file for r in results) == ["a100_8gpu_1node_all_reduce.txt",
                                                       "h100_8gpu_1node_all_reduce_ring.txt"]
    fit_on, predict = h.class_split(tiny, cases.HELD_OUT_CLASSES[0])
    assert [c.machine_class for c in fit_on] == ["x", "x", "y"] and len(predict) == 1


def test_a_bad_average_line_is_refused_naming_the_file(tmp_path):
    """The reader's ``Avg bus bandwidth`` check names the file and line (the fuzz run over the new logs
    found an overflowed average refused without them)."""
    from topo_probe.errors import NcclTestsLogError
    text = (FIXTURES / "real_logs" / "h100_8gpu_1node_all_gather_ring.txt").read_text(encoding="utf-8")
    bad = tmp_path / "bad.txt"
    bad.write_text(text.replace("# Avg bus bandwidth    : ", "# Avg bus bandwidth    : 1e999 ", 1), encoding="utf-8")
    with pytest.raises(NcclTestsLogError) as err:
        load_runs(bad)
    message = str(err.value)
    assert str(bad) in message and "Avg bus bandwidth" in message and "\n" not in message


#: a ``# SOURCE:`` line's ``github repo owner/name``
_REPO = re.compile(r"github repo (\S+?)[,( ]")


def _source_repo(case) -> str | None:
    """The ``github repo owner/name`` a fixture's ``# SOURCE:`` line names (None for other sources)."""
    found = _REPO.search((FIXTURES / "real_logs" / case.file).read_text(encoding="utf-8").splitlines()[0])
    return found.group(1) if found else None


_SETS = [cases.CASES, cases.NEW_CASES, cases.THIRD_CASES, cases.FOURTH_CASES, cases.FIFTH_CASES, cases.SIXTH_CASES,
         cases.SEVENTH_CASES, cases.EIGHTH_CASES, cases.NINTH_CASES, cases.TENTH_CASES, cases.ELEVENTH_CASES,
         cases.TWELFTH_CASES, cases.THIRTEENTH_CASES, cases.FOURTEENTH_CASES, cases.FIFTEENTH_CASES,
         cases.SIXTEENTH_CASES, cases.SEVENTEENTH_CASES, cases.EIGHTEENTH_CASES, cases.NINETEENTH_CASES,
         cases.TWENTIETH_CASES, cases.TWENTY_FIRST_CASES, cases.TWENTY_SECOND_CASES, cases.TWENTY_THIRD_CASES]


@pytest.mark.parametrize("n", [5, 6, 7], ids=["sixth", "seventh", "eighth"])
def test_source_reused_marks_exactly_the_later_tables_of_a_repository_an_earlier_set_uses(n):
    """A sixth-, seventh- or eighth-set table is ``source_reused`` when (and only when) an earlier set's
    fixture names the same GitHub repository; the class holdout reports its count without them."""
    earlier = {_source_repo(c) for s in _SETS[:n] for c in s} - {None}
    for case in _SETS[n]:
        assert case.source_reused == (_source_repo(case) in earlier), case.file
    assert not all(c.source_reused for c in _SETS[n])
    assert n != 5 or any(c.source_reused for c in cases.SIXTH_CASES)


def _source_keys(case) -> set:
    """What names a fixture's source: a ``github repo``, an issue ``owner/name#N`` (or its URL), a code-index
    file id, a web page's URL."""
    first = (FIXTURES / "real_logs" / case.file).read_text(encoding="utf-8").splitlines()[0]
    issues = {f"{o}#{n}" for o, n in re.findall(r"github\.com/([\w-]+/[\w.-]+)/(?:issues|pull)/(\d+)", first)}
    pages = set(re.findall(r"https?://(?!github\.com/)[^\s),]+", first))
    return ({f"repo {r}" for r in _REPO.findall(first)} | issues | pages
            | set(re.findall(r"\b[\w-]+/[\w.-]+#\d+", first)) | set(re.findall(r"\bid (\d{6,})", first)))


@pytest.mark.parametrize("n", [6, 7], ids=["seventh", "eighth"])
def test_the_seventh_and_eighth_sets_use_only_sources_no_earlier_fixture_names(n):
    """Issue 36 asks for independent sources: no repository, issue thread or indexed file of an earlier set."""
    earlier = set().union(*(_source_keys(c) for s in _SETS[:n] for c in s))
    for case in _SETS[n]:
        keys = _source_keys(case)
        assert keys and not keys & earlier, (case.file, keys & earlier)


def _assert_new_files_and_runs(new: list, earlier: list) -> None:
    """No file of ``new`` is one of ``earlier``'s, and no run of ``new`` repeats 3 or more out-of-place times of
    another fixture's."""
    assert not {c.file for c in new} & {c.file for c in earlier}
    later = {c.file for c in new}
    for name in later:
        rows = set(_oop_times(FIXTURES / "real_logs" / name))
        assert all(len(rows & set(_oop_times(p))) < 3 for p in LOGS if p.name not in later), name


@pytest.mark.parametrize("n, new_class", [(5, "v100-dgx2"), (6, "a100-roce-multihost"), (7, "v100-efa-multihost")],
                         ids=["sixth", "seventh", "eighth"])
def test_each_later_set_is_held_out_adds_only_its_new_class_and_repeats_no_run(n, new_class):
    """Issue 36's sixth to eighth sets: every table held out (its own flag, or its new held-out class), none
    in the fit, its files new, and no run a copy of an earlier fixture's (another run batch of a repository
    some fixtures use is new data)."""
    later_set = _SETS[n]
    assert later_set and all(cases.held_out(c) for c in later_set)
    assert not any(c in cases.IN_SAMPLE for c in later_set)
    earlier = [c for s in _SETS[:n] for c in s]
    assert {c.machine_class for c in later_set} - {c.machine_class for c in earlier} == {new_class}
    assert new_class in cases.HELD_OUT_CLASSES
    assert all(c.held_out for c in later_set if c.machine_class not in cases.HELD_OUT_CLASSES)
    _assert_new_files_and_runs(later_set, earlier)


def test_the_ninth_set_is_held_out_of_known_classes_from_a_reused_repository_and_repeats_no_run():
    """The ninth set's two AWS p5 tables: each held out itself (their classes are in-sample), of classes earlier
    sets have, marked ``source_reused`` because the first set's p4de log comes from the same repository, and no
    run a copy of an earlier fixture's."""
    ninth, earlier = cases.NINTH_CASES, [c for s in _SETS[:8] for c in s]
    assert ninth and all(c.held_out and cases.held_out(c) for c in ninth)
    assert not any(c in cases.IN_SAMPLE for c in ninth)
    assert {c.machine_class for c in ninth} <= {c.machine_class for c in earlier if not cases.held_out(c)}
    earlier_repos = {_source_repo(c) for c in earlier} - {None}
    assert all(c.source_reused and _source_repo(c) in earlier_repos for c in ninth)
    _assert_new_files_and_runs(ninth, earlier)


@pytest.mark.parametrize("case", cases.NINTH_CASES, ids=lambda c: c.file)
def test_each_ninth_case_has_the_ranks_its_bus_factor_shows(case):
    """The sources print no device lines: the rank count is the one every row's busbw / algbw = 2 (n - 1) / n
    gives (8 on one p5, 16 on two), the preset's 8 GPUs per host times the case's hosts."""
    (run,) = load_runs(FIXTURES / "real_logs" / case.file)
    n = 8 * case.nodes
    rows = [r.out_of_place for r in run.rows if r.out_of_place.algbw_gbps >= 10]
    assert len(rows) >= 8 and not run.devices
    assert all(m.busbw_gbps / m.algbw_gbps == pytest.approx(2 * (n - 1) / n, rel=0.01) for m in rows)


def test_every_predicted_case_describes_a_machine_of_its_declared_class():
    """What `simulate` and the reports quote is looked up by the class the machine maps to
    (synth.model.nccl.confidence.machine_class): a case whose machine maps to another class would
    leave its own class's validation unquoted (the DGX-2 subset once mapped to an NVL-rack name)."""
    import validate_cost_model as validation
    from synth.model.nccl.confidence import machine_class
    wrong = []
    for c in cases.ALL_CASES:
        if c.skip_reason:
            continue
        _, _, machine = validation._log_and_machine(validation._Keyed(c))
        if machine_class(machine) != c.machine_class:
            wrong.append((c.file, c.machine_class, machine_class(machine)))
    assert not wrong, wrong


def _assert_new_sources_files_and_runs(new: list, earlier: list, reuse_exact: bool = False) -> None:
    """Each case of ``new`` names a source (``_source_keys``) no ``earlier`` case names unless it is marked
    ``source_reused`` (``reuse_exact``: marked exactly when one does), no file of ``earlier``, and no run whose
    out-of-place times repeat 3 or more of another fixture's."""
    known = set().union(*(_source_keys(c) for c in earlier))
    for case in new:
        keys = _source_keys(case)
        ok = case.source_reused == bool(keys & known) if reuse_exact else case.source_reused or not keys & known
        assert keys and ok, (case.file, keys & known)
    _assert_new_files_and_runs(new, earlier)


def test_the_tenth_set_is_pcie_one_host_held_out_from_new_sources_and_repeats_no_run():
    """The tenth set: PCIe-only one-host tables (the held-out class pcie-1host), each from a source (repository,
    issue thread, indexed file, page) no earlier fixture names, none in any fit, no run a copy of an earlier one."""
    tenth, earlier = cases.TENTH_CASES, [c for s in _SETS[:9] for c in s]
    assert tenth and all(c.machine_class == "pcie-1host" and cases.held_out(c) for c in tenth)
    assert "pcie-1host" in cases.HELD_OUT_CLASSES and not any(c in cases.IN_SAMPLE for c in tenth)
    _assert_new_sources_files_and_runs(tenth, earlier)


#: the GPU name each eleventh-set log's device lines print
_ELEVENTH_GPU = {"h800_8gpu_1node_broadcast_nf5688m7.txt": "NVIDIA H800",
                 "a100_16gpu_2node_all_reduce_aws_p4de_pcluster_efa.txt": "NVIDIA A100-SXM4-80GB",
                 "a100_8gpu_1node_all_reduce_dkh.txt": "NVIDIA A100-SXM4-80GB",
                 **{f"h100_8gpu_1node_{c}_simumax.txt": None for c in ("all_reduce", "all_gather", "reduce_scatter",
                                                                         "alltoall")}}


def test_the_eleventh_set_is_held_out_of_known_classes_from_new_sources_and_repeats_no_run():
    """The eleventh set's NVLink / NVSwitch tables: each held out itself (their classes are in-sample), of
    classes earlier sets have (no new class), from sources no earlier fixture names, and no run a copy of an
    earlier fixture's."""
    eleventh, earlier = cases.ELEVENTH_CASES, [c for s in _SETS[:10] for c in s]
    assert eleventh and all(c.held_out and cases.held_out(c) for c in eleventh)
    assert not any(c in cases.IN_SAMPLE for c in eleventh)
    assert {c.machine_class for c in eleventh} <= {c.machine_class for c in earlier if not cases.held_out(c)}
    assert not any(c.source_reused for c in eleventh)
    _assert_new_sources_files_and_runs(eleventh, earlier)


@pytest.mark.parametrize("case", cases.TENTH_CASES, ids=lambda c: f"{c.file}-{c.collective}")
def test_each_tenth_case_has_the_ranks_and_gpus_its_device_lines_show(case):
    """One host, the case's ranks (the preset's 8 unless it says fewer), one GPU model of the log's own."""
    path = FIXTURES / "real_logs" / case.file
    (run,) = [r for r in load_runs(path) if case.collective is None or guess_collective(r, path) == case.collective]
    assert len({d.host for d in run.devices}) == case.nodes == 1
    assert len(run.devices) == case.machine.get("ranks", 8) and len({d.name for d in run.devices}) == 1


@pytest.mark.parametrize("case", cases.ELEVENTH_CASES, ids=lambda c: c.file)
def test_each_eleventh_case_has_the_hosts_ranks_and_gpu_its_device_lines_show(case):
    """The case's hosts, ranks (the preset's 8 per host) and GPU are the log's own; the H800's 8 NVLinks are the
    case's override of the `dgx-h100` preset's 18. SimuMax's tables print no device lines: their rank count is the
    one every row's busbw / algbw gives (2 (n - 1) / n for all_reduce, (n - 1) / n for the others), 8."""
    path = FIXTURES / "real_logs" / case.file
    (run,) = [r for r in load_runs(path) if case.collective is None or guess_collective(r, path) == case.collective]
    gpu = _ELEVENTH_GPU[case.file]
    if gpu is None:
        n, factor = 8, 2 if guess_collective(run, path) == "allreduce" else 1
        rows = [r.out_of_place for r in run.rows if r.out_of_place.algbw_gbps >= 10]
        assert len(rows) >= 8 and not run.devices and case.nodes == 1 and case.machine == {"gpus_per_process": 8}
        assert all(m.busbw_gbps / m.algbw_gbps == pytest.approx(factor * (n - 1) / n, rel=0.01) for m in rows)
        return
    assert len({d.host for d in run.devices}) == case.nodes and len(run.devices) == 8 * case.nodes
    assert {d.name for d in run.devices} == {gpu}
    assert (case.machine.get("links_per_gpu") == 8) == ("H800" in gpu)


#: the GPU name each twelfth-set log's device lines print
_TWELFTH_GPU = {"mi300x_8gpu_1node_all_reduce_rocmblog_graph.txt": "AMD Instinct MI300X",
                "mi308x_16gpu_2node_all_reduce_bnxt_roce.txt": "AMD Instinct MI308X",
                "mi350x_8gpu_1node_all_reduce_mpi_np8.txt": "AMD Instinct MI350X"}


def test_the_twelfth_set_is_held_out_or_listed_of_known_classes_and_repeats_no_run():
    """The twelfth set's AMD Instinct tables: each predicted one held out itself (its class is in-sample) or listed
    with the reason no machine describes it, of classes earlier sets have, ``source_reused`` exactly when an earlier
    fixture names the same source, new files, and no run a copy of an earlier fixture's."""
    twelfth = cases.TWELFTH_CASES
    earlier = [c for s in _SETS[:11] for c in s]
    assert twelfth and all(cases.held_out(c) or c.skip_reason for c in twelfth)
    assert not any(c in cases.IN_SAMPLE for c in twelfth)
    assert {c.machine_class for c in twelfth} <= {c.machine_class for c in earlier}
    _assert_new_sources_files_and_runs(twelfth, earlier, reuse_exact=True)


#: the GPU name and rank count each thirteenth-set log's device lines print
_THIRTEENTH_GPU = {"b200_2gpu_1node_all_gather_gke_dra.txt": ("NVIDIA B200", 2)}


def test_the_thirteenth_set_is_one_host_nvlink_held_out_from_new_or_marked_sources_and_repeats_no_run():
    """The thirteenth set: one-host NVLink / NVSwitch tables of collectives other than all_reduce, every one held out
    (its class of the fixed held-out split, or the table itself), none in any fit, from a source no earlier fixture
    names unless marked ``source_reused``, and no run a copy of an earlier fixture's."""
    thirteenth, earlier = cases.THIRTEENTH_CASES, [c for s in _SETS[:12] for c in s]
    assert thirteenth and all(cases.held_out(c) and c.nodes == 1 for c in thirteenth)
    assert not any(c in cases.IN_SAMPLE for c in thirteenth)
    assert all(c.held_out for c in thirteenth if c.machine_class not in cases.HELD_OUT_CLASSES)
    assert set(cases.HELD_OUT_CLASSES) <= set(cases.CLASSES)
    _assert_new_sources_files_and_runs(thirteenth, earlier)


@pytest.mark.parametrize("case", cases.TWELFTH_CASES, ids=lambda c: c.file)
def test_each_twelfth_case_has_the_hosts_ranks_and_gpu_its_device_lines_show(case):
    """The case's hosts, ranks (the preset's 8 per host) and GPU are the log's own."""
    (run,) = load_runs(FIXTURES / "real_logs" / case.file)
    assert len({d.host for d in run.devices}) == case.nodes and len(run.devices) == 8 * case.nodes
    assert {d.name for d in run.devices} == {_TWELFTH_GPU[case.file]}


@pytest.mark.parametrize("case", cases.THIRTEENTH_CASES, ids=lambda c: f"{c.file}-{c.collective}")
def test_each_thirteenth_case_has_the_host_ranks_and_gpu_its_device_lines_show(case):
    """One host, the case's ranks (the preset's 8 unless it says fewer) and the GPU of the log's own device lines."""
    path = FIXTURES / "real_logs" / case.file
    (run,) = [r for r in load_runs(path) if case.collective is None or guess_collective(r, path) == case.collective]
    gpu, ranks = _THIRTEENTH_GPU[case.file]
    assert len({d.host for d in run.devices}) == case.nodes == 1
    assert len(run.devices) == ranks == case.machine.get("ranks", 8)
    assert {d.name for d in run.devices} == {gpu}


def _assert_held_out_set(new: list) -> None:
    """Every case of a later set is held out (its class of the fixed held-out split, or the table itself) or listed
    with its reason, and none is in any fit."""
    assert new and all(cases.held_out(c) or c.skip_reason for c in new)
    assert not any(c in cases.IN_SAMPLE for c in new)
    assert all(c.held_out for c in new if c.machine_class not in cases.HELD_OUT_CLASSES)


def test_the_fourteenth_set_is_held_out_adds_only_its_dgx1_classes_and_repeats_no_run():
    """The fourteenth set: NVIDIA multi-host tables of dstackai/dstack's cluster examples and NVIDIA/deepops' pages,
    every one held out (its class of the fixed held-out split, or the table itself), of classes earlier sets have but
    the two DGX-1 ones (over InfiniBand, over RoCE: held out), from sources no earlier fixture names, new files, and no
    run a copy of an earlier fixture's."""
    fourteenth, earlier = cases.FOURTEENTH_CASES, [c for s in _SETS[:13] for c in s]
    _assert_held_out_set(fourteenth)
    assert all(cases.held_out(c) and c.nodes > 1 for c in fourteenth)
    new_classes = {c.machine_class for c in fourteenth} - {c.machine_class for c in earlier}
    assert new_classes == {"v100-ib-multihost", "v100-roce-multihost"} and new_classes <= set(cases.HELD_OUT_CLASSES)
    assert {_source_repo(c) for c in fourteenth} == {"dstackai/dstack", "NVIDIA/deepops"}
    _assert_new_sources_files_and_runs(fourteenth, earlier, reuse_exact=True)


@pytest.mark.parametrize("case", cases.FOURTEENTH_CASES, ids=lambda c: c.file)
def test_each_fourteenth_case_has_the_ranks_its_bus_factor_shows(case):
    """The sources print no device lines: the rank count is the one every row's busbw / algbw gives (2 (n - 1) / n for
    all_reduce, (n - 1) / n for all_gather): the preset's 8 GPUs per host on the case's hosts."""
    path = FIXTURES / "real_logs" / case.file
    (run,) = load_runs(path)
    n, factor = 8 * case.nodes, 2 if guess_collective(run, path) == "allreduce" else 1
    rows = [r.out_of_place for r in run.rows if r.out_of_place.algbw_gbps >= 10]
    assert len(rows) >= 4 and not run.devices and case.machine.get("ranks", n) == n
    assert all(m.busbw_gbps / m.algbw_gbps == pytest.approx(factor * (n - 1) / n, rel=0.01) for m in rows)


#: the GPU name and rank count each fifteenth-set log's device lines print
_FIFTEENTH_GPU = {"mi355x_8gpu_1node_all_reduce_dn_lab.txt": ("AMD Instinct MI355X", 8),
                  "mi355x_8gpu_1node_alltoall_dn_lab.txt": ("AMD Instinct MI355X", 8),
                  "mi355x_16gpu_2node_all_reduce_ionic.txt": ("AMD Instinct MI355X", 16),
                  "mi355x_2gpu_2node_all_reduce_ionic_1gpn.txt": ("AMD Instinct MI355X", 2)}


def test_the_fifteenth_set_is_amd_held_out_from_new_or_marked_sources_and_repeats_no_run():
    """The fifteenth set: AMD Instinct tables, each held out (its class of the fixed held-out split, or the table
    itself) or listed with its reason, none in any fit, ``source_reused`` exactly when an earlier fixture names the
    same source, new files, and no run a copy of an earlier fixture's."""
    fifteenth = cases.FIFTEENTH_CASES
    # the nineteenth and twentieth sets reuse this set's source (marked there), so they are no earlier source of this one
    later = (fifteenth, cases.NINETEENTH_CASES, cases.TWENTIETH_CASES)
    earlier = [c for s in _SETS if not any(s is t for t in later) for c in s]
    _assert_held_out_set(fifteenth)
    assert all(c.preset.startswith("mi3") for c in fifteenth) and set(cases.HELD_OUT_CLASSES) <= set(cases.CLASSES)
    _assert_new_sources_files_and_runs(fifteenth, earlier, reuse_exact=True)


#: the GPU name and rank count each sixteenth-set log's device lines print
_SIXTEENTH_GPU = {"a100_16gpu_2node_all_reduce_aws_p4d_eks_efa_nccl2.8.txt": ("A100-SXM4-40GB", 16),
                  "a100_16gpu_2node_all_reduce_aws_p4d_eks_efa_nccl2.9.txt": ("A100-SXM4-40GB", 16),
                  "v100_16gpu_2node_all_reduce_aws_p3dn_eks_efa.txt": ("Tesla V100-SXM2-32GB", 16),
                  "v100_64gpu_8node_all_reduce_aws_p3dn_eks_efa.txt": ("Tesla V100-SXM2-32GB", 64),
                  "v100_2gpu_2node_all_reduce_aws_p3dn_eks_efa_1gpn.txt": ("Tesla V100-SXM2-32GB", 2)}


def test_the_sixteenth_set_is_efa_multihost_held_out_from_new_sources_and_repeats_no_run():
    """The sixteenth set: V100 and A100 hosts over AWS EFA from AWS's two EKS EFA samples, each table held out (its class
    of the fixed held-out split, or the table itself) or listed with its reason, none in any fit, of classes earlier sets
    have, ``source_reused`` exactly when an earlier fixture names the same source, new files, and no run a copy of an
    earlier fixture's."""
    sixteenth = cases.SIXTEENTH_CASES
    earlier = [c for s in _SETS if s is not sixteenth for c in s]
    _assert_held_out_set(sixteenth)
    assert {c.machine_class for c in sixteenth} <= {c.machine_class for c in earlier}
    assert all(c.nodes > 1 and c.net_kind == "efa" for c in sixteenth)
    assert {_source_repo(c) for c in sixteenth} == {"aws-samples/aws-efa-eks", "aws-samples/eks-efa-examples"}
    _assert_new_sources_files_and_runs(sixteenth, earlier, reuse_exact=True)


#: the GPU name and rank count each seventeenth-set log's device lines print
_SEVENTEENTH_GPU = {"b200_4gpu_2node_all_gather_gke_dranet_2gpn.txt": ("NVIDIA B200", 4),
                    "b200_2gpu_2node_all_gather_gke_dranet_1gpn.txt": ("NVIDIA B200", 2),
                    "h200_2gpu_2node_all_gather_gke_dranet_1gpn.txt": ("NVIDIA H200", 2)}


def test_the_seventeenth_set_is_nvidia_held_out_from_new_or_marked_sources_and_repeats_no_run():
    """The seventeenth set: NVIDIA H100 / H200 / H800 / B200 tables of collectives other than all_reduce, each held out
    (its class of the fixed held-out split, or the table itself) or listed with its reason, none in any fit,
    from a source no earlier fixture names unless marked ``source_reused`` (marked also for another document of a
    project an earlier fixture cites), new files, and no run a copy of an earlier fixture's."""
    seventeenth = cases.SEVENTEENTH_CASES
    earlier = [c for s in _SETS if s is not seventeenth for c in s]
    _assert_held_out_set(seventeenth)
    assert all(c.preset in ("dgx-h100", "hgx-h200", "hgx-b200") for c in seventeenth)
    _assert_new_sources_files_and_runs(seventeenth, earlier)


#: the GPU name and rank count each eighteenth-set log's device lines print
_EIGHTEENTH_GPU = {"h100_16gpu_2node_all_reduce_dgx_ib_howto.txt": ("NVIDIA H100 80GB HBM3", 16),
                   "a100_8gpu_1node_all_reduce_galvatron_test.txt": ("NVIDIA A100-SXM4-40GB", 8)}


def test_the_eighteenth_set_is_nvidia_held_out_from_new_or_marked_sources_and_repeats_no_run():
    """The eighteenth set: NVIDIA tables, each held out (its class of the fixed held-out split, or the table itself) or
    listed with its reason, none in any fit, of NVIDIA presets, from a source no earlier fixture names unless marked
    ``source_reused``, new files, and no run a copy of an earlier fixture's."""
    eighteenth = cases.EIGHTEENTH_CASES
    earlier = [c for s in _SETS if s is not eighteenth for c in s]
    _assert_held_out_set(eighteenth)
    assert not any(c.preset.startswith("mi3") for c in eighteenth)
    assert {c.file for c in eighteenth} == set(_EIGHTEENTH_GPU)
    _assert_new_sources_files_and_runs(eighteenth, earlier)


#: the GPU name and rank count each nineteenth-set log's device lines print
_NINETEENTH_GPU = {"mi355x_8gpu_2node_all_reduce_ionic_4gpn.txt": ("AMD Instinct MI355X", 8),
                   "mi355x_8gpu_2node_alltoall_ionic_4gpn.txt": ("AMD Instinct MI355X", 8),
                   "mi355x_4gpu_2node_all_reduce_ionic_2gpn.txt": ("AMD Instinct MI355X", 4),
                   "mi355x_4gpu_2node_alltoall_ionic_2gpn.txt": ("AMD Instinct MI355X", 4),
                   "mi355x_2gpu_2node_alltoall_ionic_1gpn.txt": ("AMD Instinct MI355X", 2),
                   "mi355x_4gpu_1node_all_reduce_dn_lab.txt": ("AMD Instinct MI355X", 4),
                   "mi355x_4gpu_1node_alltoall_dn_lab.txt": ("AMD Instinct MI355X", 4)}


def test_the_nineteenth_set_is_amd_held_out_from_new_or_marked_sources_and_repeats_no_run():
    """The nineteenth set: AMD Instinct tables, each held out (its class of the fixed held-out split, or the table
    itself) or listed with its reason, none in any fit, of classes earlier sets have, ``source_reused`` exactly when an
    earlier fixture names the same source, new files, and no run a copy of an earlier fixture's."""
    nineteenth = cases.NINETEENTH_CASES
    earlier = [c for s in _SETS if s is not nineteenth for c in s]
    _assert_held_out_set(nineteenth)
    assert {c.machine_class for c in nineteenth} <= {c.machine_class for c in earlier}
    assert all(c.preset.startswith("mi3") for c in nineteenth)
    _assert_new_sources_files_and_runs(nineteenth, earlier, reuse_exact=True)


#: the GPU name and rank count the device lines of each log of the fifteenth to nineteenth sets print
_DEVICE_LINES = {**_FIFTEENTH_GPU, **_SIXTEENTH_GPU, **_SEVENTEENTH_GPU, **_EIGHTEENTH_GPU, **_NINETEENTH_GPU}


@pytest.mark.parametrize("case", cases.FIFTEENTH_CASES + cases.SIXTEENTH_CASES + cases.SEVENTEENTH_CASES
                         + cases.EIGHTEENTH_CASES + cases.NINETEENTH_CASES,
                         ids=lambda c: f"{c.file}-{c.collective}")
def test_each_later_case_has_the_hosts_ranks_and_gpu_its_device_lines_show(case):
    """The case's hosts, ranks (the preset's 8 per host unless the case says fewer) and GPU are the log's own; the
    seventeenth set's collective is not all_reduce, and its tables and the eighteenth set's have at least 6 sizes of
    64 KiB or more."""
    path = FIXTURES / "real_logs" / case.file
    (run,) = [r for r in load_runs(path) if case.collective is None or guess_collective(r, path) == case.collective]
    gpu, ranks = _DEVICE_LINES[case.file]
    assert len({d.host for d in run.devices}) == case.nodes
    assert len(run.devices) == ranks == case.machine.get("ranks", 8 * case.nodes)
    assert {d.name for d in run.devices} == {gpu}
    if case in cases.SEVENTEENTH_CASES:
        assert guess_collective(run, path) != "allreduce"
    if case in cases.SEVENTEENTH_CASES + cases.EIGHTEENTH_CASES + cases.NINETEENTH_CASES:
        assert len({row.size for row in run.rows if row.size >= 64 << 10}) >= 6


#: the GPU name and rank count each twentieth-set log's device lines print (None: the source prints no device lines;
#: "": the device lines leave the name blank)
_TWENTIETH_GPU = {"mi355x_2gpu_1node_all_reduce_dn_lab.txt": ("AMD Instinct MI355X", 2),
                  "mi355x_2gpu_1node_alltoall_dn_lab.txt": ("AMD Instinct MI355X", 2),
                  "a100_16gpu_2node_all_reduce_aks_ndv4_sriov.txt": (None, 16),
                  # the container's device lines leave the GPU name blank
                  "mi355x_8gpu_1node_all_gather_dn_container.txt": ("", 8),
                  "mi355x_8gpu_1node_all_reduce_ses2_g8.txt": ("", 8),
                  "mi355x_6gpu_1node_all_gather_dn_container.txt": ("", 6)}


def test_the_twentieth_set_is_held_out_from_new_or_marked_sources_and_repeats_no_run():
    """The twentieth set: each table held out (its class of the fixed held-out split, or the table itself) or listed
    with its reason, none in any fit, of classes earlier sets have, ``source_reused`` exactly when an earlier fixture
    names the same source, new files, and no run a copy of an earlier fixture's."""
    twentieth = cases.TWENTIETH_CASES
    earlier = [c for s in _SETS if s is not twentieth for c in s]
    _assert_held_out_set(twentieth)
    assert all(c.machine_class in cases.HELD_OUT_CLASSES for c in twentieth)
    assert {c.machine_class for c in twentieth} <= {c.machine_class for c in earlier}
    assert {c.file for c in twentieth} == set(_TWENTIETH_GPU)
    _assert_new_sources_files_and_runs(twentieth, earlier, reuse_exact=True)


@pytest.mark.parametrize("case", cases.TWENTIETH_CASES, ids=lambda c: c.file)
def test_each_twentieth_case_has_the_hosts_ranks_and_gpu_its_log_shows(case):
    """The case's hosts, ranks and GPU are the device lines' where the log prints them, else the ranks are the ones
    every large row's busbw / algbw = 2 (n - 1) / n gives; each table has at least 6 sizes of 64 KiB or more."""
    path = FIXTURES / "real_logs" / case.file
    (run,) = [r for r in load_runs(path) if case.collective is None or guess_collective(r, path) == case.collective]
    gpu, ranks = _TWENTIETH_GPU[case.file]
    assert ranks == case.machine.get("ranks", 8 * case.nodes)
    if gpu is None:
        assert not run.devices and guess_collective(run, path) == "allreduce"
        rows = [r.out_of_place for r in run.rows if r.out_of_place.algbw_gbps >= 10]
        assert len(rows) >= 4
        assert all(m.busbw_gbps / m.algbw_gbps == pytest.approx(2 * (ranks - 1) / ranks, rel=0.01) for m in rows)
    else:
        assert len({d.host for d in run.devices}) == case.nodes and len(run.devices) == ranks
        assert {d.name for d in run.devices} == {gpu}
    assert len({row.size for row in run.rows if row.size >= 64 << 10}) >= 6


#: the GPU name and rank count each twenty-first-set log's device lines print, and its GPUs per process
_TWENTY_FIRST_GPU = {"a100_16gpu_2node_all_reduce_abci_sharp.txt": ("NVIDIA A100-SXM4-40GB", 16, 1),
                     "v100_4gpu_2node_alltoall_nig_edr_2gpn.txt": ("Tesla V100-SXM2-16GB", 4, 2),
                     # the guide abridges the device lines ("Rank  0 .. Rank  7 on h100a-gpu-0001"): none parse
                     "h100_16gpu_2node_all_reduce_azure_ndv5_azcluster.txt": (None, 16, 1)}


@pytest.mark.parametrize("case", cases.TWENTY_FIRST_CASES, ids=lambda c: c.file)
def test_each_twenty_first_case_has_the_hosts_ranks_and_gpu_its_log_shows(case):
    """The case's hosts, ranks and GPU are the device lines' where the log prints them, else the ranks are the ones every
    large row's busbw / algbw = 2 (n - 1) / n gives (GPUs per process the header's nGpus); each table has a collective
    and at least 6 sizes of 64 KiB or more; the SHARP table asks for CollNet."""
    path = FIXTURES / "real_logs" / case.file
    (run,) = load_runs(path)
    gpu, ranks, per_process = _TWENTY_FIRST_GPU[case.file]
    assert ranks == case.machine.get("ranks", 8 * case.nodes) and run.n_gpus == per_process
    assert ("sharp" in case.file) == (case.env.get("NCCL_COLLNET_ENABLE") == "1") == case.machine.get("collnet", False)
    if gpu is None:
        rows = [r.out_of_place for r in run.rows if r.out_of_place.algbw_gbps >= 10]
        assert not run.devices and guess_collective(run, path) == "allreduce" and len(rows) >= 4
        assert all(m.busbw_gbps / m.algbw_gbps == pytest.approx(2 * (ranks - 1) / ranks, rel=0.01) for m in rows)
    else:
        assert len({d.host for d in run.devices}) == case.nodes and len(run.devices) == ranks
        assert {d.name for d in run.devices} == {gpu}
    assert guess_collective(run, path) is not None
    assert len({row.size for row in run.rows if row.size >= 64 << 10}) >= 6


#: the GPU name and rank count each twenty-second-set log's device lines print (None: the source prints no device lines)
_TWENTY_SECOND_GPU = {"h100_16gpu_2node_all_gather_gcp_a3mega_gke_tcpxo.txt": (None, 16),
                      "h100_16gpu_2node_all_gather_gcp_a3mega_slurm_lustre.txt": (None, 16),
                      "l40s_4gpu_1node_all_reduce_farmshare.txt": ("NVIDIA L40S", 4),
                      "l40s_2gpu_1node_all_reduce_farmshare.txt": ("NVIDIA L40S", 2),
                      "a100_8gpu_1node_all_reduce_modal.txt": ("NVIDIA A100-SXM4-40GB", 8)}


@pytest.mark.parametrize("case", cases.TWENTY_SECOND_CASES, ids=lambda c: c.file)
def test_each_twenty_second_case_has_the_hosts_ranks_and_gpu_its_log_shows(case):
    """The case's hosts, ranks and GPU are the device lines' where the log prints them, else the ranks are the ones every
    large row's busbw / algbw gives ((n - 1) / n for all_gather and reduce_scatter, 2 (n - 1) / n for all_reduce);
    each table has a collective and at least 6 sizes of 64 KiB or more."""
    path = FIXTURES / "real_logs" / case.file
    (run,) = load_runs(path)
    gpu, ranks = _TWENTY_SECOND_GPU[case.file]
    assert ranks == case.machine.get("ranks", 8 * case.nodes)
    collective = guess_collective(run, path)
    assert collective is not None
    if gpu is None:
        factor = {"allgather": 1, "reducescatter": 1, "allreduce": 2}[collective]
        rows = [r.out_of_place for r in run.rows if r.out_of_place.algbw_gbps >= 10]
        assert not run.devices and len(rows) >= 4
        assert all(m.busbw_gbps / m.algbw_gbps == pytest.approx(factor * (ranks - 1) / ranks, rel=0.01) for m in rows)
    else:
        assert len({d.host for d in run.devices}) == case.nodes and len(run.devices) == ranks
        assert {d.name for d in run.devices} == {gpu}
    assert len({row.size for row in run.rows if row.size >= 64 << 10}) >= 6


#: the GPU name and rank count each twenty-third-set log's device lines print
_TWENTY_THIRD_GPU = {**{f"h100_32gpu_4node_{c}_ib_voltagepark.txt": ("NVIDIA H100 80GB HBM3", 32)
                        for c in ("all_reduce", "all_gather", "broadcast", "reduce")},
                     "h100_8gpu_1node_all_reduce_voltagepark.txt": ("NVIDIA H100 80GB HBM3", 8),
                     **{f"h100_4gpu_1node_{c}_collectives_bench.txt": ("NVIDIA H100 80GB HBM3", 4)
                        for c in ("all_gather", "reduce_scatter", "all_reduce")},
                     **{f"a100pcie_2gpu_2node_{c}_ib_gdr_1gpn.txt": ("NVIDIA A100-PCIE-40GB", 2)
                        for c in ("all_gather", "all_reduce")}}


@pytest.mark.parametrize("case", cases.TWENTY_THIRD_CASES, ids=lambda c: c.file)
def test_each_twenty_third_case_has_the_hosts_ranks_and_gpu_its_log_shows(case):
    """The case's hosts, ranks and GPU are the device lines'; each table has a collective and at least 6 sizes of
    64 KiB or more."""
    path = FIXTURES / "real_logs" / case.file
    (run,) = load_runs(path)
    gpu, ranks = _TWENTY_THIRD_GPU[case.file]
    assert ranks == case.machine.get("ranks", 8 * case.nodes)
    assert len({d.host for d in run.devices}) == case.nodes and len(run.devices) == ranks
    assert {d.name for d in run.devices} == {gpu}
    assert guess_collective(run, path) is not None
    assert len({row.size for row in run.rows if row.size >= 64 << 10}) >= 6


@pytest.mark.parametrize("name, gpus", [("TWENTY_FIRST_CASES", _TWENTY_FIRST_GPU), ("TWENTY_SECOND_CASES", _TWENTY_SECOND_GPU),
                                        ("TWENTY_THIRD_CASES", _TWENTY_THIRD_GPU)], ids=["21st", "22nd", "23rd"])
def test_the_twenty_first_to_third_sets_are_held_out_from_new_or_marked_sources_and_repeat_no_run(name, gpus):
    """The twenty-first, -second and -third sets: each table held out (its class of the fixed held-out split, or the
    table itself), none in any fit, of classes earlier sets have, ``source_reused`` exactly when an earlier fixture
    names the same source, new files (exactly the logs the set's device-line table lists), and no run a copy of an
    earlier fixture's."""
    this = getattr(cases, name)
    earlier = [c for s in _SETS if s is not this for c in s]
    _assert_held_out_set(this)
    assert all(cases.held_out(c) for c in this)
    assert {c.machine_class for c in this} <= {c.machine_class for c in earlier}
    assert {c.file for c in this} == set(gpus)
    _assert_new_sources_files_and_runs(this, earlier, reuse_exact=True)

"""The ``sweep`` command end to end: host sweeps of every collective, exit codes, one-line
errors, JSON, the sim comparison plot and the import overlay."""

import csv
import importlib.util
import json
import warnings
from pathlib import Path

import pytest
from _paths import FIXTURES

import kernels.backends.executor
from kernels.sweep.cli import main
from synth.baselines import baseline
from synth.ir.fabric import build_fabric
from topo_probe.machines.generators import fully_connected

FIXTURE = FIXTURES / "nccl_tests_allreduce_a100x8_single_process.txt"
COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter",
               "alltoall"]
#: nccl-tests' bus bandwidth factors, written out independently of the code under test
FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "broadcast": lambda n: 1, "reduce": lambda n: 1}


def _run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _rows(out: str):
    return [ln.split() for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]


@pytest.mark.parametrize("coll", COLLECTIVES)
@pytest.mark.parametrize("n", [2, 4, 8])
def test_host_sweep_busbw_arithmetic_and_no_wrong(capsys, coll, n):
    rc, out, err = _run(capsys, [coll, "-b", "8", "-e", "64K", "-f", "2", "-g", str(n), "-n", "2", "-w", "1"])
    assert rc == 0, err
    rows = _rows(out)
    assert len(rows) == 14 and "# Out of bounds values : 0 OK" in out
    factor = FACTOR.get(coll, lambda k: (k - 1) / k)(n)
    busbws = []
    for t in rows:
        size, count = int(t[0]), int(t[1])
        per_rank_blocks = 1 if coll in ("all_reduce", "broadcast", "reduce") else n
        assert size == count * 4 * per_rank_blocks and t[2] == "float"
        assert t[4] == ("0" if coll in ("broadcast", "reduce", "gather", "scatter") else "-1")
        for k in (5, 9):
            time_us, algbw, busbw, wrong = float(t[k]), float(t[k + 1]), float(t[k + 2]), t[k + 3]
            assert wrong == "0"
            # the printed time is rounded to 4-5 significant digits
            assert algbw == pytest.approx(size / (time_us * 1e3), abs=0.006, rel=2e-3)
            assert busbw == pytest.approx(size / (time_us * 1e3) * factor, abs=0.006, rel=2e-3)
            busbws.append(busbw)
    avg = float(out.split("# Avg bus bandwidth    :")[1].split()[0])
    assert avg == pytest.approx(sum(busbws) / len(busbws), abs=0.006)


def test_corrupted_executor_fails_the_sweep(capsys, monkeypatch):
    real = kernels.backends.executor.run_schedule

    def corrupt(schedule, sendbufs, recvbufs, **kw):
        real(schedule, sendbufs, recvbufs, **kw)
        recvbufs[0][:1] += 1
        return recvbufs

    monkeypatch.setattr(kernels.backends.executor, "run_schedule", corrupt)
    rc, out, _ = _run(capsys, ["all_reduce", "-b", "64", "-e", "256", "-f", "2", "-g", "4", "-n", "1", "-w", "0"])
    assert rc == 1
    assert all(t[8] == "1" and t[12] == "1" for t in _rows(out))
    assert "# Out of bounds values : 6 FAILED" in out


@pytest.mark.parametrize("argv, corrupt_ranks, failed", [
    (["-g", "4"], range(4), 6),                   # one thread: once per failing measurement
    (["-t", "2", "-g", "2"], range(4), 12),       # two threads, both hold wrong elements: twice
    (["-t", "2", "-g", "2"], [0], 6),             # only thread 0's GPUs: once
    (["-t", "4"], [1, 3], 12)])                   # four threads of one GPU, two of them wrong
def test_out_of_bounds_counts_each_thread_whose_gpus_hold_wrong_elements(capsys, monkeypatch, argv, corrupt_ranks,
                                                                        failed):
    """nccl-tests' CheckData adds one error per thread whose own GPUs hold a wrong element (NVIDIA/nccl-tests
    v2.19.6 src/common.cu lines 474-478, ranks thread*nGpus .. +nGpus-1), summed over threads (line 1776): -t T
    is T threads here too.  3 sizes x 2 placements fail; it printed 6 for every -t."""
    real = kernels.backends.executor.run_schedule

    def corrupt(schedule, sendbufs, recvbufs, **kw):
        real(schedule, sendbufs, recvbufs, **kw)
        for r in corrupt_ranks:
            recvbufs[r][:1] += 1
        return recvbufs

    monkeypatch.setattr(kernels.backends.executor, "run_schedule", corrupt)
    rc, out, _ = _run(capsys, ["all_reduce", "-b", "64", "-e", "256", "-f", "2", "-n", "1", "-w", "0", *argv])
    assert rc == 1 and len(_rows(out)) == 3
    assert f"# Out of bounds values : {failed} FAILED" in out


def test_every_type_and_op(capsys):
    rc, out, err = _run(capsys, ["reduce_scatter", "-b", "1K", "-e", "1K", "-g", "3", "-d", "all", "-o", "all",
                                 "-n", "1", "-w", "0"])
    assert rc == 0, err
    rows = _rows(out)
    assert len(rows) == 10 * 5 and {t[3] for t in rows} == {"sum", "prod", "max", "min", "avg"}
    assert {t[2] for t in rows} >= {"int8", "uint64", "half", "bfloat16", "double"}
    # nccl-tests' -o all has a sixth op, mulsum, with NCCL >= 2.11 (common.cu lines 57-65, 1142-1149): said, not hidden
    assert "# -o all: sum, prod, max, min, avg; not mulsum" in out


def test_avg_on_integers_is_accepted_like_nccl(capsys):
    # NCCL implements ncclAvg on integer types as a sum followed by a division (SumPostDiv)
    rc, out, _ = _run(capsys, ["all_reduce", "-b", "64", "-e", "64", "-g", "4", "-d", "int32", "-o", "avg",
                               "-n", "1", "-w", "0"])
    assert rc == 0 and _rows(out)[0][3] == "avg"


def test_root_of_an_unrooted_collective_is_ignored_as_nccl_tests_does(capsys):
    """all_reduce_perf -g 4 -r 5 runs (common.cu line 1273 takes any -r; all_reduce.cu line 574 runs root -1):
    its rows print root -1, with a note; a rooted collective still refuses a root it does not have."""
    rc, out, err = _run(capsys, ["all_reduce", "-g", "4", "-r", "5", "-b", "64", "-e", "64", "-n", "1", "-w", "0"])
    assert rc == 0, err
    assert _rows(out)[0][4] == "-1" and "# -r 5 ignored: allreduce has no root" in out
    assert _run(capsys, ["broadcast", "-g", "4", "-r", "5", "-b", "64", "-e", "64"])[0] == 2


def test_check_zero_prints_na(capsys):
    rc, out, _ = _run(capsys, ["broadcast", "-b", "64", "-e", "64", "-g", "2", "-c", "0", "-n", "1", "-w", "0"])
    assert rc == 0 and _rows(out)[0][8] == "N/A" and "validation: 0" in out


@pytest.mark.parametrize("argv, msg", [
    (["all_reduce", "-b", "1G", "-e", "1K"], "invalid sizes for 'minbytes' and 'maxbytes': 1073741824 > 1024"),
    (["all_reduce", "-b", "12Q"], "invalid size specified for 'minbytes'"),
    (["all_reduce", "-d", "float8"], "invalid datatype 'float8'"),
    (["all_reduce", "-o", "mulsum"], "invalid op 'mulsum'"),
    (["all_reduce", "-g", "0"], "invalid number of GPUs: -g 0"),
    (["all_reduce", "-g", "x"], "invalid number of GPUs (-g): 'x'"),
    (["reduce", "-g", "4", "-r", "4"], "invalid root: 4"),
    (["all_reduce", "-n", "0"], "invalid iters: 0"),
    (["all_reduce", "-a", "7"], "invalid average: 7"),
    (["all_reduce", "--backend", "tpu"], "invalid backend 'tpu'"),
    (["allfoo"], "unknown collective 'allfoo'"),
    ([], "missing COLLECTIVE"),
    (["all_reduce", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["all_reduce", "--topology", "dgx-a100", "-g", "9"], "topology 'dgx-a100' has 8"),
    (["all_reduce", "--backend", "sim"], "sim backend needs at least 2 ranks"),
    (["all_reduce", "--topology", "dgx-a100", "--backend", "sim", "--algo", "nccl", "-g", "1", "-b", "8", "-e", "8"],
     "a collective needs at least 2 GPUs"),      # audit 65: a ZeroDivisionError in the NCCL model
    (["all_reduce", "--topology", "dgx-a100", "--backend", "sim", "--compare", "ring,nccl", "-g", "1"],
     "a collective needs at least 2 GPUs"),
])
def test_bad_flags_one_line_errors(capsys, argv, msg):
    rc, out, err = _run(capsys, argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and msg in err and err.startswith("sweep: error: ")


def test_bad_input_is_one_line_and_status_2_never_1(capsys, tmp_path):
    """Status 1 means wrong results (nccl-tests' "Out of bounds values"); bad input is 2."""
    rc, _, err = _run(capsys, ["all_reduce", "-g", "4", "--algo", str(tmp_path / "nope.json")])
    assert rc == 2 and err.count("\n") == 1 and "not 'plan', 'nccl', a baseline" in err
    rc, _, err = _run(capsys, ["all_reduce", "--topology", "no-such-preset"])
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    rc, out, err = _run(capsys, ["broadcast", "-g", "4", "--algo", "rhd"])
    assert rc == 2 and out == "" and err.startswith("sweep: error: rhd: broadcast is not available")


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")
def test_cupy_backend_is_skipped_without_a_gpu(capsys):
    rc, out, err = _run(capsys, ["all_reduce", "-g", "2", "--backend", "cupy"])
    assert rc == 3 and err.startswith("sweep: skipped: cupy backend: CuPy is not installed")
    assert err.count("\n") == 1


def test_json_output_and_schedule_file(capsys, tmp_path):
    sched = tmp_path / "ring.json"
    baseline("ring", build_fabric(fully_connected(4)), "allgather").save(sched)
    out_json = tmp_path / "r.json"
    argv = ["all_gather", "-b", "1K", "-e", "4K", "-f", "2", "-g", "4", "-n", "1", "-w", "0",
            "--algo", str(sched), "-J", str(out_json)]
    rc, out, _ = _run(capsys, argv)
    assert rc == 0 and out.startswith(f"# Writing JSON output to {out_json}\n")
    assert f"# schedule: {sched}" in out
    doc = json.loads(out_json.read_text())
    assert [r["size"] for r in doc["results"]] == [1024, 2048, 4096]
    assert doc["results"][0]["redop"] == "none" and doc["results"][0]["count"] == 64
    assert doc["args"][0] == "sweep" and doc["out_of_bounds"]["okay"] == "true"
    rc, out, _ = _run(capsys, argv)
    assert f"# Writing JSON output to {out_json}.0" in out


def test_topology_subset(capsys):
    rc, out, _ = _run(capsys, ["all_reduce", "--topology", "dgx1-v100", "-g", "4", "-b", "64", "-e", "64",
                               "-n", "1", "-w", "0"])
    assert rc == 0 and "nGpus 4" in out and len([ln for ln in out.splitlines() if "#  Rank" in ln]) == 4


def test_sim_compare_plot_with_imported_log(capsys, tmp_path):
    png = tmp_path / "a100.png"
    rc, out, err = _run(capsys, ["all_reduce", "--backend", "sim", "--topology", "dgx-a100", "-b", "8", "-e", "4G",
                                 "-f", "2", "--compare", "plan,ring,tree", "--import", str(FIXTURE),
                                 "--plot", str(png)])
    assert rc == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG" and out.count("# Out of bounds values : 0 OK") == 3
    table = [ln for ln in out.splitlines() if ln and not ln.startswith("#")]
    assert len(table) == 30 and out.count("#  Rank") == 8          # one table, one preamble
    for ln in table:                       # the plan is the best of ring and tree: ratio >= 1
        *_, plan, ring_bw, tree_bw, ratio = ln.split()
        assert float(ratio) >= 1 - 1e-3
        if float(plan) >= 10:              # busbw is printed with 2 decimals
            assert abs(float(ratio) - float(plan) / max(float(ring_bw), float(tree_bw))) < 0.01 * float(ratio)
    rows = list(csv.DictReader((tmp_path / "a100.csv").open()))
    by = {}
    for r in rows:
        by.setdefault(r["series"], []).append(r)
    assert set(by) == {"plan (no plan.json: best baseline)", "ring", "tree", "lower bound",
                       "NCCL measured (8 ranks)"}
    assert all(len(v) == 30 for v in by.values())
    for k in range(30):
        bound = float(by["lower bound"][k]["busbw_gbps"])
        for name in ("ring", "tree", "plan (no plan.json: best baseline)"):
            # no schedule beats the lower bound; the plan is at least as good as ring and tree
            assert float(by[name][k]["busbw_gbps"]) <= bound * (1 + 1e-9)
        plan_t = float(by["plan (no plan.json: best baseline)"][k]["time_us"])
        assert plan_t <= min(float(by["ring"][k]["time_us"]), float(by["tree"][k]["time_us"])) * (1 + 1e-5)


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed")
@pytest.mark.parametrize("extra", [["-g", "8"], ["--topology", "dgx-a100"]])
def test_mpi_backend_outside_mpirun_refuses_more_than_one_rank(extra):
    """One process cannot be 8 ranks: say how to start it instead of running alone."""
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "kernels.sweep.cli", "all_reduce", "--backend", "mpi",
                          "-b", "1K", "-e", "1K", *extra], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == ""
    assert "start it with mpirun -n 8" in res.stderr and res.stderr.count("\n") == 1


@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed")
def test_mpi_backend_one_rank_in_place_times_the_call():
    """One process is one rank: in place nothing moves, but the call is made and timed (it was a
    no-op timed at 0.1 µs, 335,544 GB/s at 32 MiB); busbw is nccl-tests' 2(n-1)/n = 0."""
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "kernels.sweep.cli", "all_reduce", "--backend", "mpi",
                          "-b", "32M", "-e", "32M", "-n", "20", "-w", "1"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    (row,) = [line.split() for line in res.stdout.splitlines() if line.strip().startswith("33554432")]
    t_ip, algbw_ip, busbw_ip = map(float, row[9:12])
    assert t_ip >= 1.0 and busbw_ip == 0.0 and algbw_ip == pytest.approx(33554432 / (t_ip * 1e3), rel=0.01)


def test_more_ranks_than_any_topology_is_refused_before_building_anything(capsys):
    """2,000 ranks of all_reduce: more than the 1,024 GPUs any topology may have (and every schedule
    would need n (n - 1) = 3,998,000 transfers); once took minutes of building a 4-million-link
    topology before saying no baseline applies."""
    import time
    t0 = time.process_time()
    assert main(["all_reduce", "-g", "2000", "-b", "8", "-e", "8"]) == 2
    assert time.process_time() - t0 < 2.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-g 2000" in err[0] and "at most 1024 ranks" in err[0]


def test_sim_sweep_of_nccl_states_the_model_class_error_as_simulate_does(capsys):
    """`sweep --backend sim --algo nccl` prints the NCCL model's machine class and its held-out error
    from the committed validation file, read here directly (not through the report code)."""
    vdoc = json.loads((Path(__file__).resolve().parents[3] / "synth/model/nccl/class_validation.json").read_text())
    rec = vdoc["classes"]["a100-nvswitch-1host"]
    rc, out, _ = _run(capsys, ["all_reduce", "--backend", "sim", "--algo", "nccl", "--topology", "dgx-a100",
                               "-b", "1M", "-e", "1M"])
    assert rc == 0
    line = next(x for x in out.splitlines() if x.startswith("# NCCL model:"))
    assert "machine class a100-nvswitch-1host" in line
    assert f"validated on {rec['logs']} real log table" in line
    assert f"median error {float(rec['held_out_median']):.0%} held out" in line
    rc, out, _ = _run(capsys, ["all_reduce", "--backend", "sim", "--algo", "ring", "--topology", "dgx-a100",
                               "-b", "1M", "-e", "1M"])
    assert rc == 0 and "# NCCL model:" not in out


def test_compare_states_the_nccl_model_class_wherever_nccl_stands(capsys):
    """--compare ring,nccl prints the NCCL model's class line as --compare nccl,ring does (audit 66: only when nccl
    came first), and every algorithm's own line, in the one preamble."""
    base = ["all_reduce", "--backend", "sim", "--topology", "dgx-a100", "-b", "1M", "-e", "1M", "--compare"]
    for order in ("ring,nccl", "nccl,ring"):
        rc, out, _ = _run(capsys, base + [order])
        assert rc == 0
        head = out[:out.index("# Using devices")]
        assert head.count("# NCCL model: machine class a100-nvswitch-1host") == 1
        assert "algo ring" in head and "algo nccl" in head


def test_a_sim_comparison_states_once_what_its_times_count(capsys):
    """A sim sweep's plan series is report.md's plan µs (the schedule under the entry's protocol plus our executor's
    fixed cost as the decision counts it): its preamble says so, once for a comparison, and the host backend's does
    not."""
    base = ["all_reduce", "--topology", "dgx-a100", "-b", "64K", "-e", "64K"]
    rc, out, _ = _run(capsys, base + ["--backend", "sim", "--compare", "plan,nccl,ring"])
    head = out[:out.index("# Using devices")]
    assert rc == 0 and head.count("# sim: a schedule's time is the cost model's under the protocol its plan entry "
                                  "records (LL where it says LL, else Simple) plus our executor's measured fixed "
                                  "cost as the plan's decision counts it") == 1, head
    rc, out, _ = _run(capsys, ["all_reduce", "-b", "8", "-e", "8", "-g", "2"])
    assert rc == 0 and "# sim:" not in out


def test_min_bw_fails_a_sweep_below_nine_tenths_of_it(capsys, monkeypatch):
    """NCCL_TESTS_MIN_BW: nccl-tests prints FAILED and exits non-zero when the average busbw is below 0.9 x the
    value (common.cu lines 1829-1830, 1853; util.cu line 778), OK otherwise."""
    argv = ["all_reduce", "--backend", "sim", "--topology", "dgx-a100", "-b", "1M", "-e", "1M", "--algo", "ring"]
    monkeypatch.setenv("NCCL_TESTS_MIN_BW", "100000")
    rc, out, _ = _run(capsys, argv)
    line = next(x for x in out.splitlines() if x.startswith("# Avg bus bandwidth"))
    avg = float(line.split()[5])
    assert rc == 1 and line.endswith(" FAILED") and avg == pytest.approx(float(_rows(out)[0][7]), abs=0.01)
    monkeypatch.setenv("NCCL_TESTS_MIN_BW", str(avg / 0.9 - 0.01))
    rc, out, _ = _run(capsys, argv)
    assert rc == 0 and "# Avg bus bandwidth    : " in out and out.count(" OK") == 2
    rc, out, _ = _run(capsys, argv + ["--compare", "ring,nccl"])
    assert rc == 0 and "OK   (ring)" in out
    monkeypatch.setenv("NCCL_TESTS_MIN_BW", "lots")
    rc, out, err = _run(capsys, argv)
    assert rc == 2 and out == "" and "NCCL_TESTS_MIN_BW='lots'" in err


def test_json_flag_of_another_name_writes_nothing_as_nccl_tests(capsys, tmp_path):
    """nccl-tests writes -J only to a .json name (common.cu lines 135-173); out.txt is left alone, with a note."""
    target = tmp_path / "out.txt"
    rc, out, err = _run(capsys, ["all_reduce", "-g", "2", "-b", "64", "-e", "64", "-n", "1", "-w", "0", "-J",
                                 str(target)])
    assert rc == 0 and not target.exists() and list(tmp_path.iterdir()) == []
    assert "Writing JSON" not in out and "nothing written" in err


@pytest.mark.parametrize("argv", [
    ["sweep", "all_gather", "--backend", "sim", "-g", "3", "-b", "100", "-e", "1000", "-i", "300"],
    ["sweep", "alltoall", "--backend", "sim", "-g", "3", "-b", "1", "-e", "13", "-f", "2"],
    ["sweep", "reduce_scatter", "--backend", "sim", "-g", "5", "-b", "7", "-e", "4099", "-f", "3"],
    ["simulate", "--topology", "dgx-a100", "--collective", "allgather", "-b", "100", "-e", "100"],
    ["simulate", "--topology", "dgx-a100", "--collective", "allreduce", "-b", "1M"]])
def test_the_header_size_range_holds_every_row(capsys, argv):
    """Issue 38: a header's maxBytes stood below the sizes of its rows.  Rows are rounded down to
    whole elements per rank, as nccl-tests does, so every row lies within the header's range."""
    import re

    from synth.cli.simulate import main as simulate_main
    rc = (main if argv[0] == "sweep" else simulate_main)(argv[1:])
    out = capsys.readouterr().out
    assert rc == 0
    lo, hi = map(int, re.search(r"minBytes (\d+) maxBytes (\d+)", out).groups())
    sizes = [int(ln.split()[0]) for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]
    assert sizes and max(sizes) <= hi and lo <= hi


def test_a_one_gpu_link_matrix_is_refused_by_the_sim_backend(capsys, tmp_path):
    """Audit 65: a 1-GPU topology file reached the NCCL model (ZeroDivisionError, exit 1)."""
    one = tmp_path / "lm_one.json"
    one.write_text('{"format": "link-matrix", "links": [[0]], "link_bandwidth_gbps": 25}')
    for algos in (["--algo", "nccl"], ["--compare", "ring,nccl"]):
        rc, out, err = _run(capsys, ["all_reduce", "--topology", str(one), "--backend", "sim", *algos,
                                     "-b", "8", "-e", "8"])
        assert rc == 2 and out == "" and err.count("\n") == 1
        assert "a collective needs at least 2 GPUs, this topology has 1" in err


@pytest.mark.parametrize("algo", ["ring", "plan"])
def test_one_gpu_sim_times_the_one_rank_call_without_nccl(capsys, algo):
    """docs/sweep.md: with ``-g 1`` the sim backend charges a one-rank call its launch cost.  The
    1-GPU refusal of audit 65 is the NCCL model's alone (``--algo nccl``); ring and plan still print a row."""
    rc, out, err = _run(capsys, ["all_reduce", "--topology", "dgx-h100", "-g", "1", "--backend", "sim",
                                 "--algo", algo])
    rows = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]
    assert rc == 0 and "needs at least 2 GPUs" not in err
    assert len(rows) == 1 and rows[0].split()[0] == "33554432"
    assert float(rows[0].split()[5]) > 0            # the call's cost, not a no-op


def _runs_parts(line: str) -> list[tuple[int, int, str]]:
    """``# runs (...): 8 B-256 KiB best:oneshot, 2 MiB best:direct (...)`` read back: (first, last size, label)."""
    import re
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    body = line.split("): ", 1)[1].split(" (no plan")[0]
    out = []
    for part in body.split(", "):
        m = re.fullmatch(r"(\d+) (B|KiB|MiB|GiB)(?:-(\d+) (B|KiB|MiB|GiB))? (\S+)", part)
        assert m, part
        lo = int(m[1]) * units[m[2]]
        out.append((lo, int(m[3]) * units[m[4]] if m[3] else lo, m[5]))
    return out


@pytest.mark.parametrize("argv, plan_dir, why", [
    (["all_reduce", "-g", "4", "-b", "8", "-e", "1M", "-f", "8", "-n", "1", "-w", "0"], None, "(no plan: "),
    (["broadcast", "--topology", "dgx-a100", "--backend", "sim", "-b", "8", "-e", "1G", "-f", "4"], "results", ""),
])
def test_the_header_names_the_schedule_each_row_ran(capsys, monkeypatch, tmp_path, argv, plan_dir, why):
    """One ``# runs`` line says which schedule ran at which sizes; before, a sweep without a plan said only
    ``algo plan`` and ``plan: none for 'full4'``.  The reference is the schedule each row ran, as the sweep
    driver records it while it runs (``Row.algorithm``), independently of the header computed before the table."""
    import synth.sweep.driver as driver
    from _paths import ROOT
    monkeypatch.setenv("TOPOCOLL_RESULTS", str(ROOT / plan_dir) if plan_dir else str(tmp_path))
    ran = []
    real = driver.run_sweep

    def recording(cfg, backend, selector, on_row=None):
        summary = real(cfg, backend, selector, on_row)
        ran.extend((row.size, row.algorithm) for row in summary.rows)
        return summary
    monkeypatch.setattr(driver, "run_sweep", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # a committed plan made by other models says so
        rc, out, err = _run(capsys, argv)
    assert rc == 0, err[-2000:]
    line = [ln for ln in out.splitlines() if ln.startswith("# runs (algo plan")]
    assert len(line) == 1 and why in line[0], out[:1500]
    parts = _runs_parts(line[0])
    assert ran and sorted({size for size, _ in ran}) == sorted(size for size, _ in ran)   # one type, op, root
    for size, label in ran:
        assert [p[2] for p in parts if p[0] <= size <= p[1]] == [label], (size, label, line[0])
    assert all(a[2] != b[2] for a, b in zip(parts, parts[1:])), line[0]
    if plan_dir:
        assert {label for _, label in ran} >= {"plan:nccl", "plan:schedules/broadcast-bwopt.json"}, ran


def test_with_every_root_swept_the_header_names_what_ran_for_each_root(capsys, monkeypatch):
    """``reduce -r -1`` sweeps every root; dgx-a100's committed plan has entries for root 0 only, so roots 1-7
    run the cost model's baselines.  Each ``# runs`` line names its roots; read back, every row (size, root) lies
    in exactly one line whose range names the schedule that row ran (``Row.algorithm``).  Before: one line for
    root 0, nothing said of the other seven roots' rows."""
    import re

    import synth.sweep.driver as driver
    from _paths import ROOT
    monkeypatch.setenv("TOPOCOLL_RESULTS", str(ROOT / "results"))
    ran, real = [], driver.run_sweep

    def recording(cfg, backend, selector, on_row=None):
        summary = real(cfg, backend, selector, on_row)
        ran.extend((row.size, row.root, row.algorithm) for row in summary.rows)
        return summary
    monkeypatch.setattr(driver, "run_sweep", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc, out, err = _run(capsys, ["reduce", "--topology", "dgx-a100", "--backend", "sim", "-b", "8", "-e", "1G",
                                     "-f", "8", "-r", "-1"])
    assert rc == 0, err[-2000:]
    lines = {}
    for ln in out.splitlines():
        m = re.match(r"# runs \(algo plan, roots? ([\d, -]+)\): ", ln)
        if m:
            roots = set()
            for part in m[1].split(", "):
                a, _, b = part.partition("-")
                roots.update(range(int(a), int(b or a) + 1))
            lines[frozenset(roots)] = _runs_parts(ln)
    assert sorted(r for roots in lines for r in roots) == list(range(8)), out[:2000]
    assert {root for _, root, _ in ran} == set(range(8))
    for size, root, label in ran:
        parts = next(p for roots, p in lines.items() if root in roots)
        assert [p[2] for p in parts if p[0] <= size <= p[1]] == [label], (size, root, label, parts)

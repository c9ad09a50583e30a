"""synth.formats.nccl_tests.runs on real logs as they come: launcher prefixes, several tests in
one file, devices of a later run; checked against numbers read off the files by hand."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _paths import FIXTURES
from synth.formats.nccl_tests.reader import parse_nccl_tests
from synth.formats.nccl_tests.runs import (
    guess_collective,
    load_nccl_tests,
    load_runs,
    parse_runs,
    select_run,
    strip_prefixes,
)
from synth.formats.nccl_tests.version import version_of
from topo_probe.errors import NcclTestsLogError

LOGS = FIXTURES / "real_logs"


@pytest.mark.parametrize("path", sorted(LOGS.glob("*.txt")), ids=lambda p: p.stem)
def test_every_real_log_reads(path):
    runs = load_runs(path)
    assert runs and all(r.rows for r in runs)
    for r in runs:
        assert all(row.size >= 0 and row.out_of_place.time_us > 0 for row in r.rows)
        assert any(row.size > 0 for row in r.rows)


def test_srun_prefixed_log_has_its_rows():
    (run,) = load_runs(LOGS / "a100_aws_p4de_16gpu_2node_all_reduce.txt")
    first, last = run.rows[0], run.rows[-1]
    # "0:            8             2     float     sum      -1    164.3    0.00    0.00      0    163.3 ..."
    assert (first.size, first.count, first.out_of_place.time_us, first.in_place.time_us) == (8, 2, 164.3, 163.3)
    assert last.size == 2147483648 and last.out_of_place.busbw_gbps == 78.33


def test_mpirun_tag_output_inside_rows_is_removed():
    (run,) = load_runs(LOGS / "h100_aws_p5_16gpu_2node_all_reduce_nccl2.22.3.txt")
    assert run.num_ranks == 16 and run.rows[0].out_of_place.time_us == 85.70 and run.rows[0].in_place.time_us == 74.97
    assert {d.host for d in run.devices} == {"test-nccl-worker-0", "test-nccl-worker-1"}


def test_two_tests_in_one_file_are_two_tables():
    a2a, sr = load_runs(LOGS / "h100_16gpu_2node_alltoall_sendrecv.txt")
    assert (a2a.collective, sr.collective) == ("alltoall", "sendrecv")
    assert a2a.avg_busbw_gbps == 72.4265 and sr.avg_busbw_gbps == 28.6299
    assert len(a2a.rows) == len(sr.rows) == 10
    assert sr.rows[0].type == "double" and sr.rows[0].out_of_place.time_us == 1185.9
    assert sr.num_ranks == 16                            # devices carried over from the first run
    assert select_run([a2a, sr], "send_recv") is sr and load_nccl_tests(
        LOGS / "h100_16gpu_2node_alltoall_sendrecv.txt", "alltoall").rows == a2a.rows
    with pytest.raises(NcclTestsLogError, match="holds 2 tests"):
        load_nccl_tests(LOGS / "h100_16gpu_2node_alltoall_sendrecv.txt")
    with pytest.raises(NcclTestsLogError, match="holds no allgather"):
        select_run([a2a, sr], "all_gather")


@pytest.mark.parametrize("name,coll", [("h100_8gpu_1node_all_gather_ring.txt", "allgather"),
                                       ("mi300x_8gpu_1node_all_reduce.txt", "allreduce"),
                                       ("h100_16gpu_2node_alltoall_sendrecv.txt", "alltoall")])
def test_collective_from_test_line_or_file_name(name, coll):
    assert guess_collective(load_runs(LOGS / name)[0], name) == coll


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["", "0: ", "12: ", "[1,0]<stdout>:", "[1,3]<stderr>: "]), min_size=1, max_size=4))
def test_prefixes_never_change_the_numbers(prefixes):
    text = (LOGS / "h100_8gpu_1node_all_reduce_ring.txt").read_text()
    plain = parse_nccl_tests(text)
    lines = text.splitlines()
    mangled = "\n".join(prefixes[k % len(prefixes)] + line for k, line in enumerate(lines))
    (run,) = parse_runs(mangled)
    assert run.rows == plain.rows


def test_strip_prefixes_keeps_rows_without_prefixes():
    assert strip_prefixes("           8             2     float") == ["           8             2     float"]


def test_the_nccl_version_a_log_prints_is_read():
    """From an ``NCCL INFO NCCL version`` line outside the table (p5 log), from the
    ``nccl-library=`` code of newer nccl-tests headers, and never from a SOURCE note that says the
    version was not printed."""
    assert [r.nccl_version for r in load_runs(LOGS / "h100_aws_p5_16gpu_2node_all_reduce_nccl2.22.3.txt")] == [(2, 22, 3)]
    assert load_runs(LOGS / "h100_8gpu_1node_all_reduce_nvls.txt")[0].nccl_version == (2, 26, 2)
    assert load_runs(LOGS / "a100_aws_p4de_16gpu_2node_all_reduce.txt")[0].nccl_version is None


def test_the_rccl_library_code_of_rccl_tests_headers_is_read():
    """rccl-tests prints ``rccl-library=22707`` where nccl-tests prints ``nccl-library=``: the unseen 8 x MI355X
    Vultr log runs RCCL 2.27.7 (its SOURCE header says so) with no other version line, and a version the reader
    misses falls back to the model's default, which the gfx950 LL cap's end at RCCL 2.27 reads."""
    path = LOGS / "unseen" / "mi355x_8gpu_1node_all_reduce_vultr.txt"
    (run,) = load_runs(path)
    assert run.nccl_version == (2, 27, 7)
    text = path.read_text(encoding="utf-8")
    assert "rccl-headers=22803 rccl-library=22707" in text
    (older,) = parse_runs(text.replace("rccl-library=22707", "rccl-library=22606"))
    assert older.nccl_version == (2, 26, 6)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 9), st.integers(0, 99), st.integers(0, 99), st.sampled_from(["nccl", "rccl"]),
       st.integers(0, 99999))
def test_a_library_code_reads_as_its_release_and_a_headers_code_never(major, minor, patch, lib, headers):
    """NCCL_VERSION_CODE major*10000 + minor*100 + patch, after ``nccl-library=`` or rccl-tests' ``rccl-library=``,
    whatever ``*-headers=`` code (the build's, not the library that ran) stands before it; a headers code alone is
    no release."""
    code = major * 10000 + minor * 100 + patch
    line = f"# {lib}-tests version 2.17.9 {lib}-headers={headers} {lib}-library={code}"
    assert version_of(line) == (major, minor, patch)
    assert version_of(f"# {lib}-tests version 2.17.9 {lib}-headers={code}") is None


@pytest.mark.parametrize("load", [load_runs, load_nccl_tests])
def test_a_log_over_the_input_limit_is_refused_before_it_is_read(tmp_path, load):
    """docs/guarantees.md: every file a user hands us, nccl-tests logs included, goes through the one guard
    (topo_probe.capped_read, 32 MiB).  The log reader read the whole file (Path.read_bytes): no cap, no
    regular-file check."""
    from topo_probe.limits import MAX_INPUT_BYTES
    assert MAX_INPUT_BYTES == 32 * 2**20
    p = tmp_path / "big.log"
    with open(p, "wb") as fh:
        fh.truncate(MAX_INPUT_BYTES + 1)        # sparse: 32 MiB + 1 of NUL bytes, no disk used
    with pytest.raises(NcclTestsLogError) as exc:
        load(p)
    assert str(exc.value) == f"{p}: 33554433 bytes is more than the 33554432 bytes a loader reads"
    with pytest.raises(NcclTestsLogError) as exc:
        load(tmp_path)
    assert str(exc.value) == f"{tmp_path}: is not a regular file"


def test_a_four_digit_library_code_is_read_with_the_codes_of_nccl_2_8_and_before():
    """NCCL up to 2.8 codes its version X*1000 + Y*100 + Z (NVIDIA/nccl v2.8.4-1 src/nccl.h.in line 19; from 2.9
    X*10000 + Y*100 + Z, v2.9.6-1 line 19), and nccl-tests prints that code as ``nccl-library=``: 2804 is 2.8.4,
    not 0.28.4; a field name glued to another word is not the header's field."""
    from synth.formats.nccl_tests.version import version_of
    assert version_of("# nccl-tests version 2.10.0 nccl-headers=2804 nccl-library=2804") == (2, 8, 4)
    assert version_of("# nccl-headers=2708 nccl-library=2708") == (2, 7, 8)
    assert version_of("# nccl-headers=20903 nccl-library=20906") == (2, 9, 6)
    assert version_of("# foo-xrccl-library=22707") is None
    assert version_of("# xnccl-library=22707") is None

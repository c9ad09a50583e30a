"""The loaders' guard against hostile input (topo_probe.limits, capped_read, json_guard, number_checks,
topology.checks) and the loaders that use it: each bug the fuzz campaign of issue 15 found in a
loader, as the hostile input that showed it, now refused with one project error naming the file
and the field or line (generic exceptions and nonsense accepts before the fix)."""

import gzip
import json
import resource
import time

import pytest

from synth.formats.schedule_file import load_schedule
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule
from synth.plan.size_plan import Plan
from topo_probe.capped_read import gunzip_capped, read_capped
from topo_probe.errors import ScheduleFormatError, ScheduleInvalid, TopocollError, TopologyError, show
from topo_probe.json_guard import parse_json
from topo_probe.limits import MAX_JSON_DEPTH, MAX_SCHEDULE_BYTES
from topo_probe.load import _parse_text, load_topology
from topo_probe.number_checks import check_float, check_int
from topo_probe.parsers.link_matrix import parse_link_matrix
from topo_probe.parsers.nvsmi import parse_nvsmi_p2p, parse_nvsmi_topo
from topo_probe.topology.checks import check_topology
from topo_probe.topology.model import Topology
from topo_probe.topology.serialize import load_topology_json, topology_to_dict
from topo_probe.machines.generators import ring

LINK_MATRIX = {"format": "link-matrix", "links": [[0, 2], [2, 0]], "link_bandwidth_gbps": 25.0}
PLAN_ENTRY = {"collective": "allgather", "min_bytes": 0, "max_bytes": None, "schedule": "x.json"}
PLAN = {"format": "topocoll.plan", "version": 1, "entries": [PLAN_ENTRY]}
SCHEDULE = Schedule.from_dict({"format": "topocoll.schedule", "version": 1, "collective": "allgather", "ranks": 2,
                               "chunks_per_rank": 1, "steps": [{"rounds": 1, "transfers": [
                                   {"chunk": 0, "src": 0, "dst": 1}, {"chunk": 1, "src": 1, "dst": 0}]}]}).to_dict()


def _write(tmp_path, name, content):
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content if isinstance(content, str) else json.dumps(content))
    return p


LOADERS = {
    "topology": lambda p: load_topology(str(p)),
    "topology-json": load_topology_json,
    "schedule": load_schedule,
    "schedule-load": Schedule.load,
    "plan": Plan.load,
}


def _refused(loader, path, match, error=TopocollError):
    with pytest.raises(error, match=match) as exc:
        LOADERS[loader](path)
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)
    return str(exc.value)


# ----------------------------------------------------------------------------- JSON level
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_numbers_over_4300_digits_are_a_project_error_with_the_line(tmp_path, loader):
    # before: ValueError: Exceeds the limit (4300 digits) for integer string conversion
    p = _write(tmp_path, "a.json", '{"format": "link-matrix",\n "links": [[0, ' + "9" * 5000 + "]]}")
    _refused(loader, p, r"line 2 column 16: a number with thousands of digits")


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_deep_json_is_refused_not_a_recursion_error(tmp_path, loader):
    # before: RecursionError: maximum recursion depth exceeded while decoding a JSON array
    p = _write(tmp_path, "a.json", '{"meta": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _refused(loader, p, rf"line 1 column {9 + MAX_JSON_DEPTH}: JSON nested deeper than 32 levels")
    p = _write(tmp_path, "b.json", '{"meta": ' + "[" * 40 + "]" * 40 + "}")      # shallow enough for json.loads
    _refused(loader, p, r"meta\[0\]\[0\].*: JSON nested deeper than 32 levels")


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_invalid_utf8_names_line_and_column(tmp_path, loader):
    # before (plans, Schedule.load): UnicodeDecodeError
    p = _write(tmp_path, "a.json", b'{"format":\n  "topo\xffcoll"}')
    _refused(loader, p, r"line 2 column 8: not UTF-8 text \(byte 0xff\)")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_refused_with_the_field_path(tmp_path, literal):
    # before: accepted (NaN/inf bandwidths) or OverflowError (plan sizes)
    doc = json.dumps({**LINK_MATRIX, "link_bandwidth_gbps": 1}).replace(": 1}", f": {literal}}}")
    _refused("topology", _write(tmp_path, "m.json", doc), r"link_bandwidth_gbps: -?inf|nan is not a finite number")
    plan = json.dumps(PLAN).replace('"min_bytes": 0', f'"min_bytes": {literal}')
    _refused("plan", _write(tmp_path, "p.json", plan), r"entries\[0\].min_bytes: .* is not a finite number")


def test_lone_surrogates_and_huge_ints_are_refused(tmp_path):
    _refused("topology", _write(tmp_path, "m.json", '{"format": "link-matrix", "name": "\\ud800"}'),
             r"name: string holds an unpaired surrogate")
    doc = json.dumps({**SCHEDULE, "ranks": 2**63})      # before: OverflowError (Python int too large)
    _refused("schedule", _write(tmp_path, "s.json", doc), r"ranks: 9223372036854775808 is out of range")


def test_meta_may_hold_infinity_as_solvers_write_it(tmp_path):
    p = _write(tmp_path, "s.json", json.dumps({**SCHEDULE, "meta": {"lp_upper": float("inf")}}))
    assert load_schedule(p).meta["lp_upper"] == float("inf")
    p = _write(tmp_path, "s.json", json.dumps({**SCHEDULE, "steps": [{"rounds": float("inf"), "transfers": []}]}))
    _refused("schedule", p, r"steps\[0\].rounds: inf is not a finite number")


def test_size_limit_and_gzip_bomb(tmp_path, monkeypatch):
    # schedules are read by synth.ir.schedule.read_schedule_bytes under their own cap, the name patched here (before,
    # the test also patched topo_probe.json_guard.MAX_INPUT_BYTES, which no schedule read looks at)
    monkeypatch.setattr("synth.ir.schedule.MAX_SCHEDULE_BYTES", 1 << 20)
    big = _write(tmp_path, "big.json", b" " * (2 << 20))
    _refused("schedule", big, r"big.json: 2097152 bytes is more than the 1048576 bytes a loader reads$")
    bomb = _write(tmp_path, "bomb.json.gz", gzip.compress(b" " * (64 << 20)))   # 64 KB -> 64 MB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _refused("schedule", bomb, r"gzip data decompresses to more than the 1048576 bytes")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 32 << 10   # KiB: never inflated
    assert gunzip_capped(gzip.compress(b"ab") + gzip.compress(b"cd"), "x", ScheduleFormatError) == b"abcd"
    with pytest.raises(ScheduleFormatError, match="x: broken gzip data"):
        gunzip_capped(gzip.compress(b"abc")[:-3], "x", ScheduleFormatError)


def test_a_small_gzip_bomb_stops_at_the_general_input_limit(tmp_path, monkeypatch):
    """Gzip content is capped at max(MAX_INPUT_BYTES, MAX_SCHEDULE_GZIP_RATIO (32) x the file) under
    MAX_SCHEDULE_BYTES: with the floor at 1 MiB, 16 MiB of spaces (about 16 KB gzipped, 32 x that under 1 MiB) stop at
    1 MiB; with the floor ignored (32 MiB) they would be inflated whole and refused as JSON instead."""
    monkeypatch.setattr("synth.ir.schedule.MAX_INPUT_BYTES", 1 << 20)
    data = gzip.compress(b" " * (16 << 20))
    assert 32 * len(data) < 1 << 20
    _refused("schedule", _write(tmp_path, "bomb.json.gz", data),
             r"bomb.json.gz: gzip data decompresses to more than the 1048576 bytes a loader reads$")


# ----------------------------------------------------------------------------- wrong types
@pytest.mark.parametrize("change,match", [
    ({"chunks": [1, 2]}, r"chunks\[0\] must be an object"),                     # before: TypeError
    ({"chunks": [{"id": 0, "pre": 5, "post": [0, 1]}, {"id": 1, "pre": [1], "post": [0, 1]}]},
     r"chunks\[0\]: pre and post must be lists of ranks"),                        # before: TypeError
    ({"chunks": [{"id": 0, "pre": [0, "a"], "post": [0, 1]}, {"id": 1, "pre": [1], "post": [0, 1]}]},
     r"chunks\[0\]: pre and post must be lists of ranks"),                        # before: TypeError (sorted)
    ({"chunks": [{"id": 0, "pre": [0], "post": [0, 1]}, {"id": 0, "pre": [0], "post": [0, 1]}]},
     r"chunks\[1\].id 0 is listed twice"),                                        # before: accepted
    ({"name": ["x"]}, r"name must be a string"),                                  # before: accepted as "['x']"
    ({"inplace": "false"}, r"inplace must be true or false"),                     # before: accepted as True
    ({"version": True}, r"version True is not supported"),                        # before: accepted (True == 1)
    ({"topology": {"fingerprint": 5}}, r"topology.fingerprint must be a string"),
])
def test_wrong_json_types_in_schedules(tmp_path, change, match):
    _refused("schedule", _write(tmp_path, "s.json", {**SCHEDULE, **change}), match, ScheduleFormatError)


@pytest.mark.parametrize("change,match", [
    ({"topology": [1]}, r"topology must be an object"),                            # before: AttributeError
    ({"entries": "abc"}, r"entries must be a list"),                               # before: odd message
    ({"entries": [{**PLAN_ENTRY, "collective": 5}]}, r"entries\[0\].collective must be a string"),  # AttributeError
    ({"entries": [{**PLAN_ENTRY, "min_bytes": "12"}]}, r"entries\[0\].min_bytes must be an integer >= 0"),
    ({"entries": [{**PLAN_ENTRY, "min_bytes": -4}]}, r"entries\[0\].min_bytes must be an integer >= 0"),
    ({"entries": [{**PLAN_ENTRY, "max_bytes": 2**60}]}, r"entries\[0\].max_bytes must be at most"),
    ({"entries": [{**PLAN_ENTRY, "root": "x"}]}, r"entries\[0\].root: allgather takes no root"),  # before: kept
    ({"entries": [{**PLAN_ENTRY, "predicted_us": -1}]}, r"entries\[0\].predicted_us must be >= 0"),
    ({"entries": [{**PLAN_ENTRY, "schedule": "a\0b"}]}, r"entries\[0\].schedule must be a file path"),  # ValueError
    ({"entries": [{**PLAN_ENTRY, "collective": "broadcast"}]}, r"entries\[0\].root must be an integer >= 0"),
])
def test_wrong_json_types_in_plans(tmp_path, change, match):
    _refused("plan", _write(tmp_path, "p.json", {**PLAN, **change}), match, ScheduleFormatError)


# ----------------------------------------------------------------------------- resource bounds
@pytest.mark.parametrize("change,match", [
    ({"collective": "alltoall", "ranks": 3000}, r"ranks must be in 1..1024"),         # before: 55 s, 6.4 GB
    ({"chunks_per_rank": 10**18}, r"chunks_per_rank must be in 1..4096"),             # before: never returned
    ({"collective": "alltoall", "ranks": 300, "chunks": []}, r"more than the 16777216"),
    ({"collective": "alltoall", "ranks": 256, "chunks": []}, r"has 65536 chunks, the document lists 0"),
    ({"collective": "allreduce", "ranks": 500}, r"needs at least 250000 transfers, the schedule lists 2"),
    ({"steps": [{"rounds": 10**12, "transfers": []}]}, r"steps\[0\].rounds must be >= 1 and at most"),
])
def test_schedule_sizes_are_bounded_before_anything_is_enumerated(tmp_path, change, match):
    doc = {**SCHEDULE, **change}
    if "chunks" not in change:
        doc.pop("chunks")
    start = time.process_time()
    _refused("schedule", _write(tmp_path, "s.json", doc), match, (ScheduleFormatError, ScheduleInvalid))
    assert time.process_time() - start < 5      # a hang guard, not a speed claim


def test_min_transfers_matches_a_count_by_hand():
    from synth.ir.collectives import CollectiveSpec
    # allgather 3 ranks: each of 3 chunks must reach 2 ranks; allreduce 3 ranks: every rank receives each of 3 chunks
    assert CollectiveSpec("allgather", 3, 1).min_transfers == 6
    assert CollectiveSpec("allreduce", 3, 1).min_transfers == 9
    assert CollectiveSpec("gather", 3, 2, root=1).min_transfers == 4
    assert CollectiveSpec("alltoall", 1, 5).min_transfers == 0


# ----------------------------------------------------------------------------- physics
@pytest.mark.parametrize("change,match", [
    ({"link_bandwidth_gbps": 1e-320}, r"link_bandwidth_gbps' must be >= 0.001 GB/s"),   # before: ZeroDivisionError
    ({"link_bandwidth_gbps": -25}, r"link_bandwidth_gbps' must be >= 0.001"),
    ({"link_bandwidth_gbps": 1e30}, r"link_bandwidth_gbps' must be at most"),            # before: accepted
    ({"link_latency_us": -1}, r"link_latency_us' must be >= 0"),
    ({"link_latency_us": 1e12}, r"link_latency_us' must be at most 1e\+06 µs"),         # before: accepted
    ({"links": [[0, 10**23], [10**23, 0]]}, r"links\[0\]\[1\]: .* out of range"),          # before: accepted
    ({"links": [[0, 65], [65, 0]]}, r"links\[0\]\[1\]: 65 links, more than the 64"),
    ({"links": [[0 if i == j else 1 for j in range(200)] for i in range(200)]}, r"joins 39800 GPU pairs"),
    ({"description": {"a": 1}}, r"field 'description' must be a string"),
])
def test_link_matrix_nonsense_is_refused(tmp_path, change, match):
    _refused("topology", _write(tmp_path, "m.json", {**LINK_MATRIX, **change}), match, TopologyError)


def test_tiny_bandwidth_no_longer_reaches_the_fabric():
    with pytest.raises(TopologyError, match="must be >= 0.001 GB/s"):
        build_fabric(parse_link_matrix({**LINK_MATRIX, "link_bandwidth_gbps": 1e-320}))


@pytest.mark.parametrize("field,value,match", [
    ("bandwidth_gbps", 1e300, r"links\[0\].bandwidth_gbps must be at most 100000 GB/s"),
    ("latency_us", 1e300, r"links\[0\].latency_us must be at most"),
    ("links", 10**23, r"links\[0\].links: .* is out of range"),
    ("links", 1000, r"links\[0\].links must be at most 64"),
])
def test_topology_json_nonsense_is_refused(tmp_path, field, value, match):
    doc = topology_to_dict(ring(3))
    doc["links"][0][field] = value
    _refused("topology-json", _write(tmp_path, "t.json", doc), match, TopologyError)
    doc = topology_to_dict(ring(3))
    doc["nodes"][-1]["numa_node"] = "²"
    _refused("topology", _write(tmp_path, "t.json", doc), r"numa_node must be an integer >= -1, got '²'")


def test_zero_gpus_is_refused_for_any_format(monkeypatch, tmp_path):
    import topo_probe.parsers.nccl_xml as nccl_xml
    monkeypatch.setattr(nccl_xml, "parse_nccl_xml", lambda text, source: Topology("empty"))
    monkeypatch.chdir(tmp_path)         # a short path: the message names it whole (a long one is cut)
    _write(tmp_path, "t.xml", "<system/>")
    _refused("topology", "t.xml", r"^'t.xml': topology 'empty' has no GPU$")


@pytest.mark.parametrize("name", ["n" * 500, "rack A\n" * 40, "x\r\n\x1b[2J" + "y" * 100])
def test_check_topology_cuts_a_long_topology_name(name):
    """check_topology names the topology as show() cuts it (60 characters, one line), not its whole repr."""
    topo = Topology(name)
    with pytest.raises(TopologyError) as exc:
        check_topology(topo, "t.json", TopologyError)
    line = str(exc.value)
    # by hand: the repr's first 57 characters, then "..."
    assert line == f"t.json: topology {repr(name)[:57]}... has no GPU", line


NVSMI = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
         "GPU0\t X \tPHB\t0-7\t{n}\t{g}\nGPU1\tPHB\t X \t0-7\t{n}\tN/A\n")


def test_nvsmi_unicode_digits_and_huge_numbers():
    # before: ValueError: invalid literal for int() with base 10: '²' ('²'.isdigit() is True)
    t = parse_nvsmi_topo(NVSMI.format(n="²", g="³"), source="smi.txt")
    assert t.graph.nodes["gpu0"]["numa_node"] == 0 and t.graph.nodes["gpu0"]["numa_affinity"] == "²"
    assert "gpu_numa_id" not in t.graph.nodes["gpu0"]
    t = parse_nvsmi_topo(NVSMI.format(n="9" * 5000, g="1"), source="smi.txt")   # before: ValueError
    assert t.graph.nodes["gpu0"]["numa_affinity"] == "9" * 5000
    text = NVSMI.format(n="0", g="1").replace("PHB", "NV" + "9" * 5000)      # before: ValueError
    with pytest.raises(TopologyError, match=r"smi.txt:line 2 column 10: cell GPU0/GPU1 is NV9999999999: more than"):
        parse_nvsmi_topo(text, source="smi.txt")
    with pytest.raises(TopologyError, match=r"smi.txt:line 1 column 7: header column 'GPU99999.*\.\.\. out of order"):
        parse_nvsmi_topo("\tGPU0\tGPU" + "9" * 5000 + "\n", source="smi.txt")        # before: ValueError


def test_nvsmi_bounds_and_parameters():
    wide = "\t".join(["", *(f"GPU{i}" for i in range(200))]) + "\n"
    with pytest.raises(TopologyError, match=r"the header has 200 columns, more than the 128"):
        parse_nvsmi_topo(wide, source="smi.txt")
    with pytest.raises(TopologyError, match=r"the header has 200 columns"):
        parse_nvsmi_p2p(wide, source="smi.txt")
    with pytest.raises(TopologyError, match=r"nvlink_gbps must be a finite number, got nan"):
        parse_nvsmi_topo(NVSMI.format(n="0", g="1"), nvlink_gbps=float("nan"))
    start = time.process_time()
    with pytest.raises(TopologyError, match="cannot tell the format"):      # before: quadratic regex, minutes
        _parse_text("\n" * 1_000_000 + "x", "blank.txt", None)
    assert time.process_time() - start < 5      # a hang guard, not a speed claim


def test_check_helpers():
    assert check_int(5, "f", TopologyError, lo=1, hi=9) == 5
    for bad, match in ((True, ">= 1, got True"), (0, ">= 1, got 0"), (10, "at most 9")):
        with pytest.raises(TopologyError, match=match):
            check_int(bad, "f", TopologyError, lo=1, hi=9)
    assert check_float(3, "f", TopologyError, lo=0, hi=9) == 3.0
    with pytest.raises(TopologyError, match="f must be > 0, got 0"):
        check_float(0, "f", TopologyError, lo=0, hi=9, lo_open=True)
    with pytest.raises(TopologyError, match="f must be a finite number, got an integer of about 401 digits"):
        check_float(10**400, "f", TopologyError, lo=0, hi=9)
    assert show("x" * 100).endswith("...'") is False and len(show("x" * 100)) == 60


# ----------------------------------------------------------------------------- nccl-tests logs
LOG_HEAD = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)      "
            "      (us)  (GB/s)  (GB/s)\n")
LOG_ROW = ("     1048576        262144     float     sum      -1    {t}    {a}   45.12      {w}    40.08   26.16"
           "   45.78      0\n")


@pytest.mark.parametrize("row,match", [
    (dict(t="nan"), r"line 3: time \(µs\) must be a finite number, got nan"),           # before: accepted NaN
    (dict(t="-41.09"), r"line 3: time \(µs\) must be > 0, got -41.09"),                  # before: accepted
    (dict(t="0.00"), r"line 3: time \(µs\) must be > 0"),
    (dict(t="1e400"), r"line 3: time \(µs\) must be a finite number, got inf"),
    (dict(a="inf"), r"line 3: algbw \(GB/s\) must be a finite number"),
    (dict(a="1e18"), r"line 3: algbw \(GB/s\) must be at most 1e\+09"),
    (dict(w="-1"), r"line 3: #wrong must be an integer >= 0, got -1"),                   # before: accepted
    (dict(w="1e30"), r"line 3: #wrong must be at most"),
])
def test_nccl_tests_rows_with_nonsense_numbers_are_refused(row, match):
    from synth.formats.nccl_tests.reader import parse_nccl_tests
    from topo_probe.errors import NcclTestsLogError
    cells = {"t": "41.09", "a": "25.52", "w": "0", **row}
    with pytest.raises(NcclTestsLogError, match=match):
        parse_nccl_tests(LOG_HEAD + LOG_ROW.format(**cells), "log.txt")
    ok = parse_nccl_tests(LOG_HEAD + LOG_ROW.format(t="41.09", a="25.52", w="0"), "log.txt")
    assert ok.rows[0].out_of_place.time_us == 41.09


def test_nccl_tests_sizes_and_meta_lines_are_bounded():
    from synth.formats.nccl_tests.reader import parse_nccl_tests
    from topo_probe.errors import NcclTestsLogError
    huge = LOG_ROW.format(t="41.09", a="25.52", w="0").replace("1048576", "1" + "0" * 30, 1)
    with pytest.raises(NcclTestsLogError, match=r"line 3: size must be at most 1125899906842624"):   # before: accepted
        parse_nccl_tests(LOG_HEAD + huge, "log.txt")
    log = parse_nccl_tests("# nThread " + "9" * 5000 + " nGpus 8\n# Out of bounds values : " + "9" * 5000 + " OK\n"
                           "# Avg bus bandwidth    : nan\n" + LOG_HEAD, "log.txt")   # before: ValueError (int)
    assert (log.n_threads, log.n_gpus, log.out_of_bounds, log.avg_busbw_gbps) == (None, 8, None, None)
    for avg, match in (("1.2.3", "is not a number"), ("-3.5", "must be >= 0"), ("inf", "must be a finite number")):
        with pytest.raises(NcclTestsLogError, match=match):   # before: ValueError, -3.5 and inf accepted
            parse_nccl_tests(LOG_HEAD + f"# Avg bus bandwidth    : {avg}\n", "log.txt")


def test_nccl_tests_device_line_with_a_long_blank_run_is_linear():
    from synth.formats.nccl_tests.reader import parse_nccl_tests
    line = "#  Rank  1 Group  0 Pid  54740 on     thanos device  1 [0x0a] NVIDIA A10" + " " * 300_000 + "0-SXM4-80GB\n"
    start = time.process_time()
    log = parse_nccl_tests(line + LOG_HEAD, "log.txt")     # before: quadratic regex, minutes
    assert time.process_time() - start < 5                 # a hang guard, not a speed claim
    assert log.devices[0].name == "NVIDIA A10" + " " * 300_000 + "0-SXM4-80GB" and log.devices[0].rank == 1
    assert parse_nccl_tests("#  Rank  0 on h device 0 [0x07]   \n" + LOG_HEAD).devices[0].name == ""


def test_read_errors_are_one_line_naming_the_file(tmp_path):
    (tmp_path / "sub").mkdir()
    with pytest.raises(TopologyError, match=r"^[^\n]*/sub: is not a regular file$"):
        read_capped(tmp_path / "sub", TopologyError)
    with pytest.raises(ScheduleFormatError, match=r"missing.json: cannot read: No such file or directory$"):
        load_schedule(tmp_path / "missing.json")
    with pytest.raises(ScheduleFormatError, match=r"cannot read: embedded null byte"):
        read_capped("a\0b", ScheduleFormatError)
    big = _write(tmp_path, "big.txt", b"x" * 100)
    with pytest.raises(TopologyError, match=r"big.txt: 100 bytes is more than the 10 bytes a loader reads"):
        read_capped(big, TopologyError, limit=10)


def test_the_long_number_locator_is_linear():
    text = "[" + ("9" * 3999 + ",") * 2000 + "9" * 5000 + "]"          # 8 MB: runs just under the limit first
    start = time.process_time()
    with pytest.raises(ScheduleFormatError, match=r"line 1 column 8000002: a number with thousands of digits"):
        parse_json(text, "x.json", ScheduleFormatError)
    assert time.process_time() - start < 5      # a hang guard: [0-9]{4000,} alone took ~90 s here


def test_a_small_file_costs_little_memory_under_a_large_cap(tmp_path):
    """read(n) allocates n bytes up front: reading a 1 KB file under the 256 MiB schedule cap once
    allocated 256 MiB per load (address space, and what tracemalloc counts)."""
    import tracemalloc
    small = tmp_path / "s.json"
    small.write_bytes(b" " * 1000)
    tracemalloc.start()
    try:
        assert read_capped(small, ScheduleFormatError, MAX_SCHEDULE_BYTES) == b" " * 1000
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20


def test_a_schedule_gzip_bomb_stops_at_32_times_its_size(tmp_path):
    """Schedules may be 256 MiB of JSON, but a .json.gz only 32x its own size beyond 32 MiB: a
    100 KB bomb of 100 MB stops at 32 MiB (real schedules compress ~16x)."""
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (100 << 20)))
    assert len(bomb.read_bytes()) < 200_000
    _refused("schedule", bomb, r"gzip data decompresses to more than the 33554432 bytes")

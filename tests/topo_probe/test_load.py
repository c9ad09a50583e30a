"""load_topology: content-based dispatch, --gpus / --nvlink-gbps handling, errors naming the file."""

import json
import sys
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.errors import TopologyError
from topo_probe.load import load_topology, parse_gpu_list
from topo_probe.machines.generators import ring
from topo_probe.machines.presets import PRESETS, get_preset
from topo_probe.topology.serialize import save_topology, topology_to_dict


@pytest.fixture
def fake_parsers(monkeypatch):
    """Stand-ins for topo_probe.parsers.* recording how they were called."""
    calls = []

    def make(mod, fn):
        def parse(arg, **kw):
            calls.append((fn, arg, kw))
            return ring(2)
        m = types.ModuleType(f"topo_probe.parsers.{mod}")
        setattr(m, fn, parse)
        monkeypatch.setitem(sys.modules, f"topo_probe.parsers.{mod}", m)

    try:
        import topo_probe.parsers  # noqa: F401  (the real package, once it exists)
    except ImportError:
        monkeypatch.setitem(sys.modules, "topo_probe.parsers", types.ModuleType("topo_probe.parsers"))
    make("nvsmi", "parse_nvsmi_topo")
    make("nccl_xml", "parse_nccl_xml")
    make("link_matrix", "parse_link_matrix")
    return calls


def test_preset_name():
    assert load_topology("dgx-h100") == get_preset("dgx-h100")


def test_our_json_detected_by_content(tmp_path):
    t = get_preset("dgx1-v100")
    path = tmp_path / "machine.txt"  # extension says nothing
    save_topology(t, path)
    assert load_topology(str(path)) == t
    sub = load_topology(str(path), gpus=[5, 0, 1])
    assert sub.num_gpus == 3 and sub.nvlink_count(0, 1) == t.nvlink_count(5, 0)


def test_nvsmi_dispatch(fake_parsers, fixtures_dir):
    path = str(fixtures_dir / "nvsmi_topo_dgx1_v100.txt")
    load_topology(path, nvlink_gbps=20.0)
    (fn, text, kw), = fake_parsers
    assert fn == "parse_nvsmi_topo" and text.startswith("        GPU0")
    assert kw == {"nvlink_gbps": 20.0, "source": path}
    t = load_topology(path, gpus=[1])
    assert t.num_gpus == 1


def test_xml_and_link_matrix_dispatch(fake_parsers, fixtures_dir, tmp_path):
    xml = str(fixtures_dir / "nccl_topo_dump_h200_partial.xml")
    load_topology(xml)
    lm = tmp_path / "m.json"
    doc = {"format": "link-matrix", "links": [[0, 1], [1, 0]]}
    lm.write_text(json.dumps(doc))
    load_topology(str(lm))
    assert [(c[0], c[2]["source"]) for c in fake_parsers] == [("parse_nccl_xml", xml),
                                                              ("parse_link_matrix", str(lm))]
    assert fake_parsers[0][1].startswith("<system") and fake_parsers[1][1] == doc


def test_missing_parser_is_one_line(monkeypatch, fixtures_dir):
    monkeypatch.setitem(sys.modules, "topo_probe.parsers.nvsmi", None)  # import fails
    path = fixtures_dir / "nvsmi_topo_dgx_a100.txt"
    with pytest.raises(TopologyError) as exc:
        load_topology(str(path))
    assert str(exc.value) == (f"{path}: looks like nvidia-smi topo -m output but its parser "
                              f"(topo_probe.parsers.nvsmi) is not available")


def test_real_nvsmi_parser_if_present(fixtures_dir):
    pytest.importorskip("topo_probe.parsers.nvsmi")
    t = load_topology(str(fixtures_dir / "nvsmi_topo_dgx_a100.txt"))
    assert t.num_gpus == 8 and t.smi_label(0, 7) == "NV12"


def test_nvlink_speed_override_on_preset():
    t = load_topology("dgx1-v100", nvlink_gbps=20.0)
    assert [t.gpu_bandwidth_gbps(i) for i in range(8)] == [6 * 20.0] * 8
    with pytest.raises(TopologyError, match="--nvlink-gbps must be >= 0.001 GB/s, got 0"):
        load_topology("dgx1-v100", nvlink_gbps=0)


def test_errors_name_the_file(tmp_path):
    with pytest.raises(TopologyError) as exc:
        load_topology("no-such-thing")
    assert "'no-such-thing' is neither an existing file nor a preset" in str(exc.value)
    assert all(p in str(exc.value) for p in PRESETS)
    junk = tmp_path / "junk"
    junk.write_text("hello\n")
    with pytest.raises(TopologyError, match=f"^{junk}: cannot tell the format"):
        load_topology(str(junk))
    other = tmp_path / "o.json"
    other.write_text('{"format": "mystery"}')
    with pytest.raises(TopologyError, match=r"o.json: JSON format 'mystery' is not one of"):
        load_topology(str(other))
    bad = tmp_path / "b.json"
    d = topology_to_dict(ring(3))
    d["links"][0]["bandwidth_gbps"] = -1
    bad.write_text(json.dumps(d))
    with pytest.raises(TopologyError, match=r"b.json: links\[0\].bandwidth_gbps must be > 0, got -1$"):
        load_topology(str(bad))
    with pytest.raises(TopologyError, match="GPU 9 does not exist"):
        load_topology("dgx1-v100", gpus=[9])
    with pytest.raises(TopologyError, match="is not a regular file"):
        load_topology(str(tmp_path))


@pytest.mark.parametrize("text,expect", [("0,2-5", [0, 2, 3, 4, 5]), ("7", [7]), (" 3 , 1 ", [3, 1]),
                                         ("4-4", [4])])
def test_parse_gpu_list(text, expect):
    assert parse_gpu_list(text) == expect


@pytest.mark.parametrize("text,message", [
    ("1,x", "--gpus '1,x': 'x' is not a GPU index or range like 2-5"),
    ("5-2", "--gpus '5-2': range '5-2' runs backwards"),
    ("0,1,1", "--gpus '0,1,1': GPU 1 is listed twice"),
    ("0-2,2", "--gpus '0-2,2': GPU 2 is listed twice"),
    ("", "--gpus: empty GPU list"),
    ("-1", "--gpus '-1': '-1' is not a GPU index or range like 2-5"),
    # MAX_GPUS is 1024 (topo_probe/limits.py): GPU indices run 0-1023; a range past them is refused before it is
    # expanded (0-99999999 was a 10**8-item list checked item by item against it: a hang)
    ("1024", "--gpus '1024': '1024' names a GPU beyond the 1024 a topology may have (0-1023)"),
    ("0-99999999", "--gpus '0-99999999': '0-99999999' names a GPU beyond the 1024 a topology may have (0-1023)"),
    # two numbers past 10 digits: cut to 10 they compared backwards (9999999999 > 1000000000)
    ("99999999999-100000000000", "--gpus '99999999999-100000000000': '99999999999-100000000000' names a GPU "
                                 "beyond the 1024 a topology may have (0-1023)"),
    ("\u0663", "--gpus '\u0663': '\u0663' is not a GPU index or range like 2-5"),     # ARABIC-INDIC DIGIT THREE
])
def test_parse_gpu_list_errors(text, message):
    with pytest.raises(TopologyError) as exc:
        parse_gpu_list(text)
    assert str(exc.value) == message


@settings(derandomize=True, max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 40), unique=True, min_size=1, max_size=12))
def test_parse_gpu_list_round_trip(gpus):
    # independent formatter: compress consecutive ascending runs into ranges
    parts, k = [], 0
    while k < len(gpus):
        e = k
        while e + 1 < len(gpus) and gpus[e + 1] == gpus[e] + 1:
            e += 1
        parts.append(str(gpus[k]) if e == k else f"{gpus[k]}-{gpus[e]}")
        k = e + 1
    assert parse_gpu_list(",".join(parts)) == gpus


@settings(derandomize=True, max_examples=80, deadline=None)
@given(st.integers(0, 10**12), st.integers(0, 30), st.integers(0, 30))
def test_zero_padded_gpu_index_reads_as_int_does(g, pad_lo, pad_hi):
    """Leading zeros change nothing (Python's int() is the reference): '00000000005' was read as GPU 0 once only
    the first 10 digits were kept, and '00000000009999' as GPU 0, not refused."""
    one, pair = "0" * pad_lo + str(g), f"{'0' * pad_lo}0-{'0' * pad_hi}{g}"
    if g < 1024:    # MAX_GPUS (topo_probe/limits.py)
        assert parse_gpu_list(one) == [int(one)] and parse_gpu_list(pair) == list(range(g + 1))
    else:
        for text in (one, pair):
            with pytest.raises(TopologyError, match="names a GPU beyond the 1024"):
                parse_gpu_list(text)


def test_rocm_smi_showtopo_is_named_not_misread(fixtures_dir, tmp_path):
    """rocm-smi --showtopo has GPU0 rows like an nvidia-smi matrix; it is refused in one line that says what
    it is (hand-written fixture, tests/fixtures/family/README.md), whichever of its tables comes first."""
    path = fixtures_dir / "family" / "rocm_smi_showtopo_4gpu.txt"
    text = path.read_text()
    for k, piece in enumerate([text, text[text.index("=" * 31 + " Link Type"):]]):
        f = tmp_path / f"r{k}.txt"
        f.write_text(piece)
        with pytest.raises(TopologyError) as exc:
            load_topology(str(f))
        msg = str(exc.value)
        assert msg.startswith(f"{f}: looks like `rocm-smi --showtopo` output") and "\n" not in msg
        assert "NCCL_TOPO_DUMP_FILE" in msg


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.sampled_from(["a", "\u00e9", "\U0001F600"]), st.integers(64, 6000), st.booleans())
def test_a_name_too_long_for_a_path_is_refused_in_one_short_line(char, n, in_folder):
    """A topology name longer than the file system takes (NAME_MAX, 255 bytes on Linux, whatever ``os.strerror``
    says) is refused as a TopologyError in one line with the name cut, never a raw OSError; a shorter one is
    not a file, a preset or a generator spec, so it is refused by name as before."""
    import errno
    import os
    spec = ("./" if in_folder else "") + char * n      # "./": a folder that exists, so the name is looked up
    with pytest.raises(TopologyError) as exc:
        load_topology(spec)
    line = str(exc.value)
    assert "\n" not in line and char * 3 in line, line
    if max(len(part.encode()) for part in spec.split("/")) > 255:
        assert os.strerror(errno.ENAMETOOLONG) in line and len(line) < 300, line
        assert f"{len(spec)} characters" in line, line
    else:
        assert "is neither an existing file nor a preset" in line, line


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.text(st.sampled_from("ab Z09-_.\n\t\r\x1b\u00e9"), max_size=8), st.integers(0, 115),
       st.sampled_from("a\n\u00e9"))
def test_a_long_or_multi_line_unknown_name_is_quoted_cut_in_one_line(head, n, filler):
    """A name that is no file, preset or generator spec is quoted in one line, cut to a few dozen characters with
    its length when long, as the too-long-for-a-path message quotes it; the rest of the line is the short
    name's (the presets to choose from)."""
    spec = "no-such-" + head + filler * n         # at most 254 bytes: a name a path lookup takes
    with pytest.raises(TopologyError) as exc:
        load_topology(spec)
    line = str(exc.value)
    short = str(pytest.raises(TopologyError, load_topology, "x").value)
    name, rest = line.split(" is neither", 1)
    assert "\n" not in line and "\r" not in line and rest == short.split(" is neither", 1)[1], line
    if len(repr(spec)) <= 60:
        assert name == repr(spec), line
    else:                       # by hand: the repr's first characters, "...", and the name's length
        assert name.startswith(repr(spec)[:40]) and name.endswith(f"... ({len(spec)} characters)"), line
        assert len(name) <= 80, line


def test_a_folder_named_with_a_newline_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "rack\nA"
    folder.mkdir()
    with pytest.raises(TopologyError) as exc:
        load_topology(str(folder))
    line = str(exc.value)
    assert len(line.splitlines()) == 1 and "is not a regular file" in line, line


def test_a_deep_folder_name_is_cut(tmp_path):
    """20 levels of 200 characters: the message quotes the path cut, with its length, not 4000 characters."""
    folder = tmp_path
    for _ in range(20):
        folder = folder / ("d" * 200)
    folder.mkdir(parents=True)
    with pytest.raises(TopologyError) as exc:
        load_topology(str(folder))
    assert len(str(exc.value)) < 400, len(str(exc.value))


def test_a_long_file_name_is_cut_in_the_topology_checks(monkeypatch, tmp_path):
    """A file whose topology check_topology refuses (no GPU) is named there as the other messages of load_topology
    name it: its repr cut, with its length, in one line (not the whole multi-line path)."""
    import topo_probe.parsers.nccl_xml as nccl_xml
    from topo_probe.topology.model import Topology
    monkeypatch.setattr(nccl_xml, "parse_nccl_xml", lambda text, source: Topology("empty"))
    folder = tmp_path / "rack\nA"
    folder.mkdir()
    path = folder / ("t" * 200 + ".xml")
    path.write_text("<system/>")
    with pytest.raises(TopologyError) as exc:
        load_topology(str(path))
    line = str(exc.value)
    spec = str(path)
    # by hand: the repr's first 57 characters, "...", the length, then check_topology's words
    assert line == f"{repr(spec)[:57]}... ({len(spec)} characters): topology 'empty' has no GPU", line

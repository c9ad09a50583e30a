"""The one nccl-tests device line (synth.formats.nccl_tests.device_line): real lines, printed lines, mutated lines.

Reference: :func:`reference`, a word-by-word reading of the line written here without regular expressions
(the shape of nccl-tests v2.19.6 src/util.cu line 687, ``Group`` / ``Pid`` optional), which says "not a device
line", "a broken device line" or the fields.  Every device line of the real logs under tests/fixtures/real_logs
must read as it does; a mutated line put back into a real log must either give that Device or an error naming
the line of the file (before, a broken device line was skipped without a word and the run's rank count came
from the parameter line).  The one line nccl-tests cuts itself (a process's device list past 2,048 bytes, ended
with ``...``) is skipped with a note, as a C rebuild of nccl-tests' loop shows.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from _paths import FIXTURES
from synth.formats.nccl_tests.device_line import Device, parse_device_line
from synth.formats.nccl_tests.runs import parse_runs, strip_prefixes
from topo_probe.errors import NcclTestsLogError

LOGS = FIXTURES / "real_logs"
BROKEN = "broken"
#: characters that end a line for str.splitlines (the reader's lines) or that the reader drops
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ufeff"


def _pop(rest: str) -> tuple[str, str]:
    parts = rest.split(None, 1)
    return (parts[0] if parts else ""), (parts[1] if len(parts) > 1 else "")


def _number(word: str) -> bool:
    return word.isdecimal()


def reference(line: str):
    """None (not a device line), BROKEN, or the Device of ``line``, read word by word."""
    s = line.strip()
    if not s.startswith("#"):
        return None
    word, rest = _pop(s[1:])
    rank, rest = _pop(rest)
    if word == "Rank" and rank[:1].isdecimal() and s.endswith("..."):
        return None         # the list nccl-tests cut at 2,048 bytes: skipped (with a note by the reader)
    if word != "Rank" or not _number(rank) or not rest:
        return None
    numbers = {"Rank": rank}
    word, rest = _pop(rest)
    for key in ("Group", "Pid"):
        if word == key:
            value, after = _pop(rest)
            if not _number(value) or not after:
                return None
            numbers[key], (word, rest) = value, _pop(after)
    if word != "on" or not rest:
        return None
    if any(len(v) > 9 for v in numbers.values()):
        return BROKEN
    host, rest = _pop(rest)
    word, rest = _pop(rest)
    dev, rest = _pop(rest)
    if word != "device" or not _number(dev) or len(dev) > 9 or not rest.startswith("[") or "]" not in rest:
        return BROKEN
    close = rest.index("]")
    group, pid = numbers.get("Group"), numbers.get("Pid")
    return Device(int(rank), None if pid is None else int(pid), host, int(dev), rest[1:close],
                  rest[close + 1:].strip(), None if group is None else int(group))


def parsed(line: str):
    try:
        return parse_device_line(line, "log: line 7")
    except NcclTestsLogError as e:
        assert str(e).startswith("log: line 7: a device line must read "), str(e)
        return BROKEN


def real_device_lines() -> list[str]:
    out = []
    for path in sorted(LOGS.glob("*.txt")):
        out += [x for x in strip_prefixes(path.read_text()) if "Rank" in x and "device" in x]
    return out


def test_every_real_device_line_reads_as_the_reference_says():
    lines = real_device_lines()
    devices = [reference(x) for x in lines]
    assert len(lines) > 3000 and sum(isinstance(d, Device) for d in devices) > 3000 and BROKEN not in devices
    assert [parsed(x) for x in lines] == devices
    kinds = {(d.group is None, d.pid is None) for d in devices if d}
    assert kinds == {(False, False), (True, False)}       # Group and Pid; Pid alone (older builds)


_WORD = st.text(st.characters(blacklist_categories=("Cs", "Z", "Cc")), min_size=1, max_size=12)


@st.composite
def devices(draw):
    small = st.integers(0, 10**9 - 1)
    return Device(draw(small), draw(st.none() | small), draw(_WORD), draw(small),
                  draw(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="]" + _LINE_BREAKS),
                               max_size=16)),
                  " ".join(draw(st.lists(_WORD, max_size=4))), draw(st.none() | small))


@given(devices())
@settings(max_examples=300, deadline=None, derandomize=True)
def test_a_printed_device_line_reads_back_as_the_same_device(d):
    assert parse_device_line(d.line(), "x") == d == reference(d.line())


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=_LINE_BREAKS), max_size=8)


@st.composite
def mutated(draw, line: str):
    k = draw(st.integers(0, len(line)))
    kind = draw(st.sampled_from(["cut", "insert", "delete", "long number", "no bracket"]))
    if kind == "cut":
        return line[:k]
    if kind == "insert":
        return line[:k] + draw(_TEXT) + line[k:]
    if kind == "delete":
        return line[:k] + line[k + draw(st.integers(1, 12)):]
    if kind == "long number":
        digits = [i for i, c in enumerate(line) if c.isdigit()]
        i = draw(st.sampled_from(digits))
        return line[:i] + draw(st.sampled_from(["1" * 10, "9" * 30])) + line[i + 1:]
    return line.replace("]", "", 1)


@pytest.mark.parametrize("name", ["a100_8gpu_1node_all_reduce_dkh.txt", "gh200_4gpu_1node_all_reduce_alps.txt"])
@given(data=st.data())
@settings(max_examples=150, deadline=None, derandomize=True)
def test_a_mutated_device_line_in_a_real_log_reads_as_the_reference_or_names_its_line(name, data):
    """The second log has ``srun -l`` prefixes (``0: #  Rank ...``): the prefix stays, the line after it is mutated."""
    raw = (LOGS / name).read_text().splitlines()
    clean = strip_prefixes("\n".join(raw))
    at = [i for i, x in enumerate(clean) if isinstance(reference(x), Device) and raw[i].endswith(x)]
    i = data.draw(st.sampled_from(at))
    prefix = raw[i][:len(raw[i]) - len(clean[i])]
    bad = data.draw(mutated(clean[i]))
    assume(not any(w in bad for w in ("nThread", "minBytes", "Collective test starting", "size")))
    assume(strip_prefixes(prefix + bad) == [bad])
    text = "\n".join(raw[:i] + [prefix + bad] + raw[i + 1:]) + "\n"
    want = reference(bad)
    if want == BROKEN:
        with pytest.raises(NcclTestsLogError) as exc:
            parse_runs(text, name)
        assert str(exc.value).startswith(f"{name}: line {i + 1}: a device line must read "), str(exc.value)
        return
    (run,) = parse_runs(text, name)
    expect = [d for d in (reference(x) for x in clean[:i] + [bad] + clean[i + 1:]) if isinstance(d, Device)]
    assert run.devices == expect and len(expect) == len(at) - (want is None)

def test_a_device_line_cut_short_before_a_long_run_of_blanks_is_named_at_once():
    line = "#  Rank  1 Group  0 Pid  7 on h device  1 [0x07" + " " * 300_000 + "x"
    with pytest.raises(NcclTestsLogError, match=r"^log: line 3: a device line must read"):
        parse_device_line(line, "log: line 3")


def nccl_tests_device_block(n: int, host: str = "dkh") -> str:
    """One process's device lines as nccl-tests v2.19.6 src/util.cu lines 668-694 build them: snprintf into a
    2,048-byte buffer while under MAX_LINE, then ``strcpy(line+MAX_LINE-5, "...\\n")`` when it filled up."""
    max_line, line = 2048, ""
    for r in range(n):
        if len(line) < max_line:
            printed = ("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n"
                       % (r, 0, 584419, host, r, 0, 0x14 + r, 0, "NVIDIA A100-SXM4-80GB"))
            line += printed[:max_line - len(line) - 1]       # snprintf keeps room for its NUL
    if len(line) >= max_line - 1:
        line = line[:max_line - 5] + "...\n"
    return line


@pytest.mark.parametrize("n, cut", [(8, False), (23, True), (24, True), (64, True)])
def test_a_device_list_nccl_tests_cut_at_2048_bytes_reads_with_a_note(n, cut):
    """A process driving 24 GPUs or more (-t 8 -g 4; an MI300X host in CPX mode under rccl-tests) prints a cut
    list: that is the tool's own output, so the rows are read, the whole ranks listed, and the cut noted."""
    block = nccl_tests_device_block(n)
    assert block.endswith("...\n") == cut and len(block) <= 2047
    real = (LOGS / "a100_8gpu_1node_all_reduce_dkh.txt").read_text()
    (whole_run,), lines = parse_runs(real, "real.txt"), real.splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith("#  Rank"))
    head = [x.replace("nThread 1 nGpus 8 ", f"nThread 1 nGpus {n} ") for x in lines[:first]]
    text = "\n".join(head) + "\n" + block + "\n".join(lines[first + 8:]) + "\n"
    (run,) = parse_runs(text, "cut.txt")
    assert run.num_ranks == n and run.n_gpus == n      # not the 21-22 ranks listed
    whole = [x for x in block.splitlines() if not x.endswith("...")]
    assert run.devices == [reference(x) for x in whole] and run.rows == whole_run.rows
    notes = [x for x in run.notes if "cut at 2,048 bytes" in x]
    assert notes == ([f"cut.txt: line {first + len(whole) + 1}: a device list cut at 2,048 bytes by nccl-tests "
                      "itself, the ranks after it not listed"] if cut else [])


def test_a_broken_device_line_not_ending_in_the_cut_mark_is_still_an_error():
    with pytest.raises(NcclTestsLogError, match=r"^log: line 4: a device line must read"):
        parse_device_line("#  Rank 22 Group  0 Pid 584419 on        dkh device 22 [0000:2a..", "log: line 4")

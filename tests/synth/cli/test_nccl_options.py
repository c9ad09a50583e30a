"""The one nccl-tests option table (synth/cli/nccl_options.py): ``sweep`` and ``simulate`` take the
same flags with the same defaults, and the defaults are nccl-tests' own (src/common.cu lines 90-120 at
NVIDIA/nccl-tests v2.19.6, commit a0b82b2, read by hand: minBytes = maxBytes = 32*1024*1024,
stepBytes = 1*1024*1024, stepFactor = 1, iters = 20, warmup_iters = 1, datacheck = 1, sum, float,
root 0, average = 1)."""

from __future__ import annotations

import pytest

from kernels.sweep.cli import build_parser as sweep_parser
from synth.cli.nccl_options import NCCL_TESTS_OPTIONS, given
from synth.cli.nccl_options import parse_size as parse_size_flag
from synth.cli.simulate import build_parser as simulate_parser
from synth.formats.nccl_tests.sizes import parse_size

#: nccl-tests' defaults, typed in from its source (NVIDIA/nccl-tests v2.19.6 src/common.cu lines 90-120; warm-up 1
#: since v2.16.8), not from our table
NCCL_TESTS_DEFAULTS = {"minbytes": 32 * 1024 * 1024, "maxbytes": 32 * 1024 * 1024, "stepbytes": 1024 * 1024,
                       "stepfactor": 1, "iters": 20, "warmup_iters": 1, "check": 1, "op": "sum",
                       "datatype": "float", "root": 0, "average": 1}
SIZES = ("minbytes", "maxbytes", "stepbytes")


def _flags(parser) -> dict[str, tuple[str, ...]]:
    """dest -> option strings of every optional argument of ``parser``."""
    return {a.dest: tuple(sorted(a.option_strings)) for a in parser._actions if a.option_strings}


def test_both_parsers_take_every_table_flag_with_the_same_names():
    sweep, simulate = _flags(sweep_parser()), _flags(simulate_parser())
    for o in NCCL_TESTS_OPTIONS:
        assert sweep[o.dest] == simulate[o.dest] == tuple(sorted((o.short, o.long)))


def test_both_parsers_have_the_same_defaults_and_they_are_nccl_tests_own():
    sweep = vars(sweep_parser().parse_args([]))
    simulate = vars(simulate_parser().parse_args(["--topology", "x"]))
    for o in NCCL_TESTS_OPTIONS:
        assert sweep[o.dest] == simulate[o.dest], o.dest
    for dest, want in NCCL_TESTS_DEFAULTS.items():
        got = sweep[dest]
        got = parse_size(got) if dest in SIZES else (got if isinstance(want, str) else int(got, 0))
        assert got == want, dest
    assert sweep["ngpus"] is None and sweep["output_file"] is None


@pytest.mark.parametrize("argv", [["-b", "1K", "-e", "4M", "-f", "2", "-g", "4", "-n", "3", "-w", "0", "-c", "0",
                                   "-o", "max", "-d", "half", "-r", "1", "-a", "3", "-i", "64K", "-J", "x.json"],
                                  ["--minbytes=1K", "--maxbytes", "4M", "--stepfactor=2", "--ngpus", "4", "--root=1"]])
def test_both_parsers_read_the_same_command_line_the_same_way(argv):
    sweep = vars(sweep_parser().parse_args(["all_reduce", *argv]))
    simulate = vars(simulate_parser().parse_args(["--topology", "x", *argv]))
    assert {o.dest: sweep[o.dest] for o in NCCL_TESTS_OPTIONS} == {o.dest: simulate[o.dest] for o in NCCL_TESTS_OPTIONS}
    assert sweep["minbytes"] == "1K" and sweep["ngpus"] == "4" and sweep["root"] == "1"


def test_given_sees_short_long_and_glued_forms_and_stops_at_double_dash():
    assert given(["-g4"], "-g") and given(["--ngpus=4"], "-g") and given(["--ngpus", "4"], "-g")
    assert not given(["--", "-g", "4"], "-g") and not given(["-b", "8"], "-e")
    assert given(["--algo", "ring"], "--algo") and not given(["--algorithm"], "--algo")


def test_size_flags_take_nccl_tests_suffixes():
    assert [parse_size_flag(s, "x") for s in ("8", "1K", "1k", "2M", "4G", "0.5K")] == [8, 1024, 1024, 2 << 20,
                                                                                         4 << 30, 512]

"""``given`` (synth/cli/nccl_options.py) must see a flag however the parser took it.  Both parsers (argparse's
``allow_abbrev``) and nccl-tests itself (glibc ``getopt_long``, NVIDIA/nccl-tests v2.19.6 src/common.cu line 1205)
take an unambiguous prefix of a long name: ``--datat half`` is ``--datatype half``.  ``given`` only knew whole names,
so ``simulate --import LOG --datat half`` printed the log's float rows (``-d half``: refused, the log has none) and
``--warm 3`` printed the log's warm-up 5 (``-w 3``: 3).  The reference here is argparse's own resolution."""

from __future__ import annotations

import pytest

from kernels.sweep.cli import build_parser as sweep_parser
from synth.cli.nccl_options import NCCL_TESTS_OPTIONS, NOT_APPLIED_OPTIONS, given
from synth.cli.simulate import build_parser as simulate_parser
from synth.cli.simulate import main as simulate
from topo_probe.errors import UsageError

TABLE = NCCL_TESTS_OPTIONS + NOT_APPLIED_OPTIONS
LOG = "tests/fixtures/real_logs/a100_8gpu_1node_all_reduce.txt"      # float sum rows, warmup iters: 5


def _resolved(parser, token: str) -> str | None:
    """The table dest argparse sets from ``token 7`` (None: it refuses the token or takes it for another option)."""
    try:
        args = parser.parse_args(["all_reduce", token, "7"] if parser.prog == "sweep" else
                                 ["--topology", "x", token, "7"])
    except (SystemExit, UsageError):
        return None
    hits = [o.dest for o in TABLE if getattr(args, o.dest) == "7"]
    return hits[0] if len(hits) == 1 else None


@pytest.mark.parametrize("make", [sweep_parser, simulate_parser])
def test_given_agrees_with_argparse_on_every_prefix_of_every_long_name(make, capsys):
    parser = make()
    checked = 0
    for o in TABLE:
        for k in range(3, len(o.long) + 1):
            token = o.long[:k]
            dest = _resolved(parser, token)
            capsys.readouterr()
            if dest is None:
                continue
            checked += 1
            for other in TABLE:
                assert given([token, "7"], other.short) == (other.dest == dest), (token, other.short)
                assert given([f"{token}=7"], other.short) == (other.dest == dest), (token, other.short)
    assert checked > 100


def test_an_abbreviated_datatype_or_warmup_is_not_dropped_by_simulate_import(capsys):
    assert simulate(["--import", LOG, "--topology", "dgx-a100", "--datat", "half"]) == 2
    assert "has no half rows" in capsys.readouterr().err
    assert simulate(["--import", LOG, "--topology", "dgx-a100", "--warm", "3"]) == 0
    assert " warmup iters: 3 " in capsys.readouterr().out

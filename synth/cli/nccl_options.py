"""The nccl-tests option table, one for every command that prints an nccl-tests table (``sweep``,
``simulate``): the same flags, long names and defaults as nccl-tests' ``src/common.cu``.

Defaults are nccl-tests' own (NVIDIA/nccl-tests, ``src/common.cu`` at commit
01d6761451d62e5b968bd8806c92898928e069ec, "Command line parameter defaults"): ``minBytes`` and
``maxBytes`` 32 MiB, ``stepBytes`` 1 MiB, ``stepFactor`` 1, ``iters`` 20, ``warmup_iters`` 5,
``datacheck`` 1, ``ncclop`` sum, ``nccltype`` float, ``ncclroot`` 0, ``average`` 1 (0 rank 0,
1 mean, 2 min, 3 max).  Two differ on purpose: ``-g`` has no default (nccl-tests' 1 GPU per
thread; here the ranks of ``--topology``), and ``-J`` writes nccl-tests' JSON document, which this
commit of nccl-tests does not have (its ``-F`` writes CSV).  Values stay text here; each command
parses them (sizes with K/M/G suffixes, powers of 1024, as nccl-tests' ``parsesize``).

>>> import argparse
>>> p = argparse.ArgumentParser(); add_nccl_tests_options(p)
>>> a = p.parse_args(["-b", "8", "--maxbytes", "1G"])
>>> a.minbytes, a.maxbytes, a.stepbytes, a.stepfactor, a.iters, a.warmup_iters, a.root
('8', '1G', '1M', '1', '20', '5', '0')
>>> given(["-g4", "--root=1"], "-g"), given(["--root=1"], "-r"), given(["-b", "8"], "-e")
(True, True, False)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["NCCL_TESTS_OPTIONS", "NcclTestsOption", "add_nccl_tests_options", "given"]


@dataclass(frozen=True)
class NcclTestsOption:
    """One nccl-tests flag: short and long name, default (text, None: none) and help text."""

    short: str
    long: str
    default: str | None
    help: str

    @property
    def dest(self) -> str:
        return self.long[2:]


#: every nccl-tests flag the table commands take, in nccl-tests' usage order
NCCL_TESTS_OPTIONS: tuple[NcclTestsOption, ...] = (
    NcclTestsOption("-g", "--ngpus", None, "ranks (default: the topology's GPUs; nccl-tests: 1 per thread)"),
    NcclTestsOption("-b", "--minbytes", "32M", "smallest size in bytes, K/M/G suffixes (default 32M)"),
    NcclTestsOption("-e", "--maxbytes", "32M", "largest size in bytes (default 32M)"),
    NcclTestsOption("-i", "--stepbytes", "1M", "size increment when -f is 1 (default 1M)"),
    NcclTestsOption("-f", "--stepfactor", "1", "size multiplier (default 1: add -i instead)"),
    NcclTestsOption("-n", "--iters", "20", "timed iterations (default 20)"),
    NcclTestsOption("-w", "--warmup_iters", "5", "warm-up iterations (default 5)"),
    NcclTestsOption("-c", "--check", "1", "validation iterations, 0 = none (default 1)"),
    NcclTestsOption("-o", "--op", "sum", "sum/prod/min/max/avg or all (default sum)"),
    NcclTestsOption("-d", "--datatype", "float", "nccl-tests type name or all (default float)"),
    NcclTestsOption("-r", "--root", "0", "root rank, -1 = every root (default 0)"),
    NcclTestsOption("-a", "--average", "1", "rank times: 0 rank 0, 1 mean, 2 min, 3 max (default 1)"),
    NcclTestsOption("-J", "--output_file", None, "write nccl-tests' JSON document here"),
)

_BY_SHORT = {o.short: o for o in NCCL_TESTS_OPTIONS}


def add_nccl_tests_options(p: argparse.ArgumentParser, helps: dict[str, str] | None = None) -> None:
    """Add every flag of :data:`NCCL_TESTS_OPTIONS` to ``p`` (``helps``: a command's own help text
    for some flags, by short name; the defaults never change)."""
    g = p.add_argument_group("nccl-tests options (same names and defaults as nccl-tests)")
    for o in NCCL_TESTS_OPTIONS:
        g.add_argument(o.short, o.long, dest=o.dest, default=o.default, help=(helps or {}).get(o.short, o.help))


def given(argv: list[str], flag: str) -> bool:
    """Whether ``flag`` (a short name of the table, or any other flag) or its long form was on the
    command line: ``-g 4``, ``-g4``, ``--ngpus=4``; nothing after ``--`` counts."""
    opt = _BY_SHORT.get(flag)
    names = [flag] + ([opt.long] if opt is not None else [])
    for tok in argv:
        if tok == "--":
            break
        if any(tok == n or tok.startswith(n + "=") for n in names):
            return True
        if len(flag) == 2 and tok.startswith(flag) and not tok.startswith("--"):
            return True
    return False

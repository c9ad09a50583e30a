"""The nccl-tests option table, one for every command that prints an nccl-tests table (``sweep``,
``simulate``): the same flags, long names and defaults as nccl-tests' ``src/common.cu``.

Defaults are nccl-tests' own (NVIDIA/nccl-tests v2.19.6, commit a0b82b2, ``src/common.cu`` lines 90-120,
"Command line parameter defaults"): ``minBytes`` and ``maxBytes`` 32 MiB, ``stepBytes`` 1 MiB,
``stepFactor`` 1, ``iters`` 20, ``warmup_iters`` 1 (5 before v2.16.8, commit f2015cb, which also made the
warm-up run at every size), ``datacheck`` 1, ``ncclop`` sum, ``nccltype`` float, ``ncclroot`` 0,
``average`` 1 (0 rank 0, 1 mean, 2 min, 3 max).  One differs on purpose: ``-g`` has no default
(nccl-tests' 1 GPU per thread; here the ranks of ``--topology``).  ``-J`` writes nccl-tests' JSON
document, only to a name ending in ``.json``, as nccl-tests (lines 135-173).  Values stay text in the parser;
:func:`make_config` turns them into a :class:`~synth.sweep.driver.SweepConfig` for both commands
(sizes as nccl-tests' ``parsesize`` reads them: K/M/G suffixes, powers of 1024, ``1KB``, ``0x100``).
The rest of nccl-tests' flags
(:data:`NOT_APPLIED_OPTIONS`) are taken so that its command lines run unchanged: ``-t`` folds into the ranks
(:func:`fold_threads`), the others are named when given (:func:`unapplied_note`).

>>> import argparse
>>> p = argparse.ArgumentParser(); add_nccl_tests_options(p)
>>> a = p.parse_args(["-b", "8", "--maxbytes", "1G"])
>>> a.minbytes, a.maxbytes, a.stepbytes, a.stepfactor, a.iters, a.warmup_iters, a.root
('8', '1G', '1M', '1', '20', '1', '0')
>>> given(["-g4", "--root=1"], "-g"), given(["--root=1"], "-r"), given(["-b", "8"], "-e")
(True, True, False)
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from synth.formats.nccl_tests.conventions import DTYPE_NAMES, OP_NAMES
from synth.formats.nccl_tests.sizes import parse_size as size_of
from topo_probe.errors import TopocollError, UnsupportedCollective, UsageError

__all__ = ["NCCL_TESTS_OPTIONS", "NOT_APPLIED_OPTIONS", "NcclTestsOption", "PLAIN_LAUNCH", "add_nccl_tests_options",
           "flag_notes", "fold_threads", "given", "make_config", "mulsum_note", "parse_int", "parse_size", "root_note",
           "unapplied_note"]


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
    NcclTestsOption("-w", "--warmup_iters", "1", "warm-up iterations per size (default 1)"),
    NcclTestsOption("-c", "--check", "1", "validation iterations, 0 = none (default 1)"),
    NcclTestsOption("-o", "--op", "sum", "sum/prod/min/max/avg or all (default sum; not mulsum)"),
    NcclTestsOption("-d", "--datatype", "float", "nccl-tests type name or all (default float)"),
    NcclTestsOption("-r", "--root", "0", "root rank, -1 = every root (default 0)"),
    NcclTestsOption("-a", "--average", "1", "rank times: 0 rank 0, 1 mean, 2 min, 3 max (default 1)"),
    NcclTestsOption("-J", "--output_file", None, "write nccl-tests' JSON document here (a name ending in .json)"),
)

#: the rest of nccl-tests' flags (NVIDIA/nccl-tests ``src/common.cu`` ``longopts``, commit a0b82b2; its defaults):
#: taken, so that an nccl-tests command line runs as it is, but not applied (``-t`` folds into the ranks, see
#: :func:`fold_threads`); a command names those given another value than the default (:func:`unapplied_note`)
NOT_APPLIED_OPTIONS: tuple[NcclTestsOption, ...] = (
    NcclTestsOption("-t", "--nthreads", "1", "threads per process: ranks = t x g, as nccl-tests (default 1)"),
    NcclTestsOption("-m", "--agg_iters", "1", "operations aggregated per launch (taken, not applied; default 1)"),
    NcclTestsOption("-N", "--run_cycles", "1", "test cycles (taken, not applied; default 1)"),
    NcclTestsOption("-p", "--parallel_init", "0", "threads initialise in parallel (taken, not applied)"),
    NcclTestsOption("-z", "--blocking", "0", "blocking collectives (taken, not applied)"),
    NcclTestsOption("-y", "--stream_null", "0", "use the NULL stream (taken, not applied)"),
    NcclTestsOption("-T", "--timeout", "0", "timeout in seconds (taken, not applied)"),
    NcclTestsOption("-G", "--cudagraph", "0", "launches of a CUDA graph of the iterations (taken, not applied)"),
    NcclTestsOption("-C", "--report_cputime", "0", "report CPU time (taken, not applied)"),
    NcclTestsOption("-S", "--report_timestamps", "0", "report timestamps (taken, not applied)"),
    NcclTestsOption("-R", "--local_register", "0", "register buffers with NCCL (taken, not applied)"),
    NcclTestsOption("-x", "--cta_policy", "-1", "NCCL CTA policy (taken, not applied)"),
    NcclTestsOption("-D", "--device_implementation", "0", "device-initiated collectives (taken, not applied)"),
    NcclTestsOption("-V", "--device_cta_count", "16", "CTAs of a device implementation (taken, not applied)"),
    NcclTestsOption("-M", "--memory", "0", "report memory use (taken, not applied)"),
    NcclTestsOption("-u", "--unalign", "0", "misalign the buffers by this many elements (taken, not applied)"),
    NcclTestsOption("-I", "--per_iter_timing", "0", "time every iteration (taken, not applied)"),
    NcclTestsOption("-K", "--per_iter_skip", "0", "iterations left out of per-iteration timing (taken, not applied)"),
)

_BY_SHORT = {o.short: o for o in NCCL_TESTS_OPTIONS + NOT_APPLIED_OPTIONS}


def add_nccl_tests_options(p: argparse.ArgumentParser, helps: dict[str, str] | None = None) -> None:
    """Add every flag of :data:`NCCL_TESTS_OPTIONS` to ``p`` (``helps``: a command's own help text
    for some flags, by short name; the defaults never change)."""
    g = p.add_argument_group("nccl-tests options (same names and defaults as nccl-tests)")
    for o in NCCL_TESTS_OPTIONS + NOT_APPLIED_OPTIONS:
        g.add_argument(o.short, o.long, dest=o.dest, default=o.default, help=(helps or {}).get(o.short, o.help))


def fold_threads(args) -> None:
    """``-t T``: nccl-tests runs ``T`` threads of ``-g G`` GPUs each (``G`` 1 unless given), ``T x G`` ranks;
    here ``-g`` counts ranks, so it becomes ``T x G`` (UsageError for a bad number).

    >>> a = argparse.Namespace(nthreads="2", ngpus="4"); fold_threads(a); a.ngpus
    '8'
    >>> a = argparse.Namespace(nthreads="8", ngpus=None); fold_threads(a); a.ngpus
    '8'
    >>> a = argparse.Namespace(nthreads="1", ngpus=None); fold_threads(a); a.ngpus is None
    True
    """
    threads = parse_int(args.nthreads, "number of threads (-t)")
    if threads < 1:
        raise UsageError(f"invalid number of threads: -t {threads} (must be >= 1)")
    if threads > 1:
        per_thread = 1 if args.ngpus is None else parse_int(args.ngpus, "number of GPUs (-g)")
        args.ngpus = str(threads * per_thread)


def unapplied_note(args, doing: str) -> str | None:
    """One line naming the nccl-tests flags given another value than their default that this command
    takes but does not apply (``doing``: what it does instead), None when there are none.

    >>> p = argparse.ArgumentParser(); add_nccl_tests_options(p)
    >>> unapplied_note(p.parse_args(["-G", "1", "-m", "4", "-z", "0"]), "the model times plain launches")
    'not applied: -m 4 (agg_iters), -G 1 (cudagraph); the model times plain launches'
    >>> unapplied_note(p.parse_args(["-b", "8"]), "x") is None
    True
    """
    named = []
    for o in NOT_APPLIED_OPTIONS[1:]:                    # -t is applied: it folds into the ranks
        value = getattr(args, o.dest)
        if parse_int(value, o.long[2:]) != int(o.default):
            named.append(f"{o.short} {value} ({o.long[2:]})")
    return f"not applied: {', '.join(named)}; {doing}" if named else None


def root_note(args, name: str) -> str | None:
    """A note when ``-r`` names a root for a collective (``name``: canonical, :func:`synth.ir.collectives.canonical`)
    that has none: nccl-tests takes any ``-r`` (NVIDIA/nccl-tests v2.19.6 src/common.cu line 1273,
    ``ncclroot = strtol(optarg, NULL, 0)``) and its unrooted tests run with root -1 whatever it says (all_reduce.cu
    line 574, all_gather.cu line 87), so it is ignored here
    too; None for a rooted collective or ``-r 0`` (the default).

    >>> root_note(argparse.Namespace(root="5"), "allreduce")
    '-r 5 ignored: allreduce has no root (nccl-tests runs it with root -1, as here)'
    >>> root_note(argparse.Namespace(root="5"), "broadcast"), root_note(argparse.Namespace(root="0"), "allgather")
    (None, None)
    """
    from synth.ir.collectives import ROOTED
    if name in ROOTED or parse_int(args.root, "root") == 0:
        return None
    return f"-r {args.root} ignored: {name} has no root (nccl-tests runs it with root -1, as here)"


def mulsum_note(args, name: str) -> str | None:
    """A note for ``-o all`` of a reducing collective (``name``: canonical, :func:`synth.ir.collectives.canonical`):
    nccl-tests' ``all`` has a sixth op, ``mulsum`` (NCCL's pre-multiplied sum, ``ncclRedOpCreatePreMulSum``, with
    NCCL 2.11 or later: NVIDIA/nccl-tests v2.19.6
    src/common.cu lines 57-65 and 1142-1149), which no executor here runs, so its rows are missing.

    >>> mulsum_note(argparse.Namespace(op="all"), "allreduce")[:40]
    '-o all: sum, prod, max, min, avg; not mu'
    >>> mulsum_note(argparse.Namespace(op="all"), "allgather"), mulsum_note(argparse.Namespace(op="sum"), "reduce")
    (None, None)
    """
    if args.op != "all" or name not in ("allreduce", "reducescatter", "reduce"):
        return None
    return ("-o all: sum, prod, max, min, avg; not mulsum (nccl-tests' sixth op with NCCL >= 2.11, a pre-multiplied "
            "sum no executor here runs)")


#: what ``sweep`` and ``simulate`` do instead of the flags :func:`unapplied_note` names
PLAIN_LAUNCH = "every call is timed as one plain launch"


def flag_notes(args, collective: str | None, argv: list[str]) -> list[str]:
    """The notes of ``sweep`` and ``simulate`` on the nccl-tests flags they take but read otherwise (none: empty):
    flags not applied (:func:`unapplied_note`), ``-r`` given for a collective without a root (:func:`root_note`),
    ``-o all``'s missing mulsum (:func:`mulsum_note`).  A bad number raises UsageError; an unknown or missing
    ``collective`` only drops the last two notes (the command's config says so, in its own line).

    >>> p = argparse.ArgumentParser(); add_nccl_tests_options(p); argv = ["-r", "2", "-G", "1"]
    >>> flag_notes(p.parse_args(argv), "all_reduce", argv)
    ['not applied: -G 1 (cudagraph); every call is timed as one plain launch', \
'-r 2 ignored: allreduce has no root (nccl-tests runs it with root -1, as here)']
    >>> flag_notes(p.parse_args(argv), "nonsense", argv)
    ['not applied: -G 1 (cudagraph); every call is timed as one plain launch']
    """
    from synth.ir.collectives import canonical
    notes = [unapplied_note(args, PLAIN_LAUNCH)]
    try:
        name = canonical(collective) if collective is not None else None
    except UnsupportedCollective:
        name = None
    if name is not None:
        notes += [root_note(args, name) if given(argv, "-r") else None, mulsum_note(args, name)]
    return [n for n in notes if n]


def drop_unwritten_json(args, prog: str) -> None:
    """``-J`` of a name nccl-tests does not write (not ``.json``:
    :func:`~synth.formats.nccl_tests.writer.is_json_name`) is dropped as there, with a note on stderr
    instead of its silence (``prog``: the command's name, first on the note)."""
    import sys

    from synth.formats.nccl_tests.writer import is_json_name
    if args.output_file and not is_json_name(args.output_file):
        print(f"{prog}: note: -J {args.output_file}: nccl-tests writes its JSON only to a name ending in .json; "
              f"nothing written", file=sys.stderr)
        args.output_file = None


def given(argv: list[str], flag: str) -> bool:
    """Whether ``flag`` (a short name of the table, or any other flag) or its long form was on the
    command line: ``-g 4``, ``-g4``, ``--ngpus=4``, and a prefix of the long name the parser took for it
    (``--datat half``: argparse's ``allow_abbrev``, as nccl-tests' ``getopt_long``, NVIDIA/nccl-tests v2.19.6
    src/common.cu line 1205; a prefix two options share is refused by the parser before this is asked, and a
    whole long name of the table, ``--op``, is that option); nothing after ``--`` counts.

    >>> given(["--datat", "half"], "-d"), given(["--op", "sum"], "-J"), given(["--output=x.json"], "-J")
    (True, False, True)
    """
    opt = _BY_SHORT.get(flag)
    long = opt.long if opt is not None else flag if flag.startswith("--") else None
    for tok in argv:
        if tok == "--":
            break
        name = tok.split("=", 1)[0]
        if name == flag or (long is not None and len(name) > 2 and long.startswith(name)
                            and (name == long or name not in _LONG_NAMES)):
            return True
        if len(flag) == 2 and tok.startswith(flag) and not tok.startswith("--"):
            return True
    return False


#: every long name of the table (a whole name is that option, never a prefix of another: ``--op``, ``--output_file``)
_LONG_NAMES = frozenset(o.long for o in NCCL_TESTS_OPTIONS + NOT_APPLIED_OPTIONS)


def parse_size(text: str, what: str) -> int:
    """nccl-tests' size syntax: a number with an optional K, M or G suffix (powers of 1024).

    >>> parse_size("64K", "maxbytes"), parse_size("1.5M", "maxbytes"), parse_size("8", "minbytes")
    (65536, 1572864, 8)
    """
    try:
        return size_of(text)
    except ValueError:
        raise UsageError(f"invalid size specified for '{what}': {text!r}") from None


def parse_int(text: str, what: str) -> int:
    """An integer flag (``0x`` and ``0o`` prefixes too); UsageError naming ``what`` otherwise."""
    try:
        return int(text, 0)
    except ValueError:
        raise UsageError(f"invalid {what}: {text!r} is not an integer") from None


def _choice(text: str, names: tuple[str, ...], what: str) -> tuple[str, ...]:
    if text == "all":
        return names
    if text not in names:
        raise UsageError(f"invalid {what} {text!r}: expected one of {', '.join(names)} or all")
    return (text,)


def _datatypes(args) -> tuple[str, ...]:
    """``-d``: a type the executors run, any of its spellings (``fp16``, ``bf16``), or ``all``; the
    float8 types with ``--backend sim`` only (modelled, not run), as ``simulate -d`` takes them."""
    from synth.formats.nccl_tests.conventions import DTYPE_ALIASES, DTYPE_BYTES
    name = DTYPE_ALIASES.get(args.datatype, args.datatype)
    if name == "all" or name in DTYPE_NAMES:
        return _choice(name, DTYPE_NAMES, "datatype")
    if name in DTYPE_BYTES:
        if getattr(args, "backend", "host") == "sim":
            return (name,)
        raise UsageError(f"datatype {args.datatype!r} is modelled, not run: use --backend sim (or simulate -d)")
    raise UsageError(f"invalid datatype {args.datatype!r}: expected one of {', '.join(DTYPE_NAMES)} or all "
                     f"(f8e4m3 and f8e5m2 with --backend sim)")


def make_config(args, nranks: int):
    """The :class:`~synth.sweep.driver.SweepConfig` of ``sweep``'s and ``simulate``'s parsed flags,
    validating each (UsageError names the flag); its ``nthreads`` is ``-t`` (``nranks`` already counts them:
    :func:`fold_threads`), so the tables print nccl-tests' ``nThread T nGpus G`` line."""
    from synth.ir.collectives import canonical
    from synth.sweep.driver import SweepConfig, sweep_sizes

    try:
        coll = canonical(args.collective)
    except TopocollError as e:
        raise UsageError(str(e)) from None
    vals = {k: parse_int(getattr(args, k), k) for k in ("stepfactor", "iters", "warmup_iters", "check", "root", "average")}
    vals["stepbytes"] = parse_size(args.stepbytes, "stepbytes")     # K/M/G, as nccl-tests' parsesize
    for k, lo in (("iters", 1), ("warmup_iters", 0), ("check", 0), ("stepbytes", 0), ("stepfactor", 1)):
        if vals[k] < lo:
            raise UsageError(f"invalid {k}: {vals[k]} (must be >= {lo})")
    if vals["average"] not in (0, 1, 2, 3):
        raise UsageError(f"invalid average: {vals['average']} (0 rank 0, 1 mean, 2 min, 3 max)")
    from synth.ir.collectives import ROOTED
    if coll in ROOTED and not -1 <= vals["root"] < nranks:      # unrooted: taken and ignored (root_note)
        raise UsageError(f"invalid root: {vals['root']} (-1 for every root, or a rank in 0..{nranks - 1})")
    if args.op == "mulsum":
        raise UsageError("invalid op 'mulsum': NCCL's pre-multiplied sum (ncclRedOpCreatePreMulSum) is not run here; "
                         f"expected one of {', '.join(OP_NAMES)} or all")
    cfg = SweepConfig(coll, nranks, parse_size(args.minbytes, "minbytes"), parse_size(args.maxbytes, "maxbytes"),
                      vals["stepbytes"], vals["stepfactor"], vals["iters"], vals["warmup_iters"], vals["check"],
                      _choice(args.op, OP_NAMES, "op"), _datatypes(args),
                      vals["root"], vals["average"], nthreads=parse_int(getattr(args, "nthreads", "1"), "nthreads"))
    try:
        sweep_sizes(cfg.minbytes, cfg.maxbytes, cfg.stepbytes, cfg.stepfactor)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return cfg

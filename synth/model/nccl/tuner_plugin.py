"""NCCL's example tuner plugin as it reads a CSV and answers NCCL: its rules as data with their
source, and an emulator of its matching (our own code, written from those rules).

Sources (NVIDIA/nccl): ``plugins/tuner/example/plugin.c`` at v2.30.3-1 (``loadConfig``,
``pluginGetCollInfo``), ``src/enqueue.cc`` at v2.30.3-1 (``ncclGetAlgoInfo``,
``topoGetAlgoInfo``), ``src/plugin/tuner.cc`` (interface look-up); ROCm/rccl ``src/misc/tuner.cc``
and ``src/include/nccl_tuner.h`` at 0cbce2a7 (RCCL 2.21.5, ROCm 6.3).

What one query does (:func:`match`): the plugin sets ``*nChannels = 1``, then walks the lines in
file order; the first line whose collective, byte range (inclusive), ``nNodes``, ``nRanks``,
``numPipeOps`` and ``regBuff`` match *and* whose (algorithm, protocol) NCCL has not marked
``NCCL_ALGO_PROTO_IGNORE`` sets that cost-table entry to 0.0 (NCCL then runs it: it takes the
smallest non-negative cost) and, unless its channels field is -1, ``*nChannels`` to that field.
A matching line whose entry is IGNORE (``nvls`` without NVLS support) is skipped. NCCL keeps its
own channel count only when ``*nChannels`` comes back 0 (``nMaxChannels == 0 ? ... : nMaxChannels``),
so a query no line takes, or a line with channels -1, runs on one channel.  There is no line
that leaves NCCL's choice as it is: every applied line pins an (algorithm, protocol).

>>> conf = parse_conf("allreduce,0,1000,nvls,simple,0,1,8\\nallreduce,0,-1,ring,ll,-1,-1,-1\\n")
>>> match(conf, Query("allreduce", 10, 1, 8, frozenset({("ring", "ll")}))).label
'line 2: ring/ll, 1 channel'
>>> match(conf, Query("reduce", 10, 1, 8, frozenset({("ring", "ll")}))).fell_through
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PluginBuild", "PLUGIN_BUILDS", "NCCL_TUNER_LOOKUPS", "WORKING_BUILD_LOADED_FROM", "RCCL_TUNER_LOOKUP",
           "LINE_RULES",
           "COLLECTIVES", "ALGORITHMS", "PROTOCOLS", "SIZE_MAX", "KEEP_NCCL_CHANNELS", "FIELDS_READ",
           "ConfLine", "ConfProblem", "ParsedConf", "Query", "Outcome", "parse_conf", "match"]

#: names the plugin compares with strcmp (case-sensitive); index = NCCL's ncclFunc_t / algorithm /
#: protocol number (plugin.c parseCollType, parseAlgorithm, parseProtocol)
COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
#: what an unknown name reads as (plugin.c: ``return ncclFuncAllReduce; // default`` etc.)
UNKNOWN_READS_AS = {"collective": "allreduce", "algorithm": "ring", "protocol": "simple"}
#: largest byte count a line can name (size_t, parsed with strtoull): 2^64 - 1
SIZE_MAX = (1 << 64) - 1
#: the channels field that hands NCCL's own channel count back (enqueue.cc ncclGetAlgoInfo:
#: ``info->nMaxChannels = nMaxChannels == 0 ? info->nMaxChannels : nMaxChannels``)
KEEP_NCCL_CHANNELS = 0
#: fgets buffer (plugin.c ``MAX_LINE_LENGTH 256``): at most 255 characters per read
LINE_BUFFER = 256
#: fields the plugin reads (8 required, numPipeOps and regBuff optional; later ones dropped)
FIELDS_READ = (8, 10)


@dataclass(frozen=True)
class PluginBuild:
    """One build of NCCL's example tuner plugin: where its source is, in which NCCL releases,
    the interface symbols it exports, and whether it reads the CSV and survives a match."""

    path: str
    releases: str
    exports: tuple
    reads_csv: bool
    works: bool
    note: str


PLUGIN_BUILDS = (
    PluginBuild("ext-tuner/example", "2.23.4-2.27.3", ("ncclTunerPlugin_v3", "ncclTunerPlugin_v4"), False, False,
                "a fixed example choice (v3 at 2.23.4, v4 from 2.24.3); no CSV file is read"),
    PluginBuild("ext-tuner/example", "2.27.5-2.27.7", ("ncclTunerPlugin_v4",), True, False,
                "reads the CSV but indexes the cost table as collCostTable[algo][proto] on NCCL's float** "
                "(plugin.c pluginGetCollInfo): the first matching line reads floats as a pointer and segfaults"),
    PluginBuild("ext-tuner/example", "2.28.3-2.29.3", ("ncclTunerPlugin_v5",), True, False,
                "same collCostTable[algo][proto] indexing (v2.28.7-1 plugin.c line 395): segfaults at the first "
                "matching line, also with NCCL's own example nccl_tuner.conf"),
    PluginBuild("plugins/tuner/example", "2.29.7", ("ncclTunerPlugin_v5",), True, False,
                "moved, same collCostTable[algo][proto] indexing: segfaults at the first matching line"),
    PluginBuild("plugins/tuner/example", "2.30.3 and later", ("ncclTunerPlugin_v6", "ncclTunerPlugin_v5"), True, True,
                "casts the table to float (*)[NCCL_NUM_PROTOCOLS] (plugin.c line 358): the build that works; its v5 "
                "interface is unchanged since NCCL 2.28.3, so NCCL 2.28.3 and later load it; its init also sets "
                "three NCCL constants (Blackwell tree and ring/LL128 bandwidth at 4+ nodes, NVLS network latency "
                "24 us: plugin.c pluginInit)"),
)

#: interface symbols NCCL's loader tries, newest first (src/plugin/tuner.cc, src/plugin/tuner/tuner_v*.cc)
NCCL_TUNER_LOOKUPS = {"2.23.4": ("v3", "v2"), "2.26.2-2.27.7": ("v4", "v3", "v2"),
                      "2.28.3-2.29.7": ("v5", "v4", "v3", "v2"),
                      "2.30.3 and later": ("v6", "v5", "v4", "v3", "v2")}
#: the oldest NCCL (major, minor) that loads the one build that works (its ncclTunerPlugin_v5 interface:
#: NCCL 2.28.3 and later, :data:`NCCL_TUNER_LOOKUPS`); an older NCCL never applies the file
WORKING_BUILD_LOADED_FROM = (2, 28)
#: RCCL's loader: one symbol (src/include/nccl_tuner.h NCCL_TUNER_PLUGIN_SYMBOL, src/misc/tuner.cc at
#: 0cbce2a7).  A later development header (src/include/plugin/nccl_tuner.h at 5db32621) names
#: ncclTunerPlugin_v5; no RCCL release with it was read, so no RCCL is known to load the plugin.
RCCL_TUNER_LOOKUP = {"rccl 2.21.5 (ROCm 6.3, 0cbce2a7)": ("v2",)}

#: the plugin's line rules, each with the code it comes from (plugin.c at v2.30.3-1 unless named)
LINE_RULES = (
    ("format", "collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]",
     "CONFIG_FIELD_* defines"),
    ("comments", "a read starting with '#' or a newline is skipped; '#' anywhere else is not a comment",
     "loadConfig: line[0] == '#' || line[0] == '\\n'"),
    ("long lines", "lines are read 255 characters at a time; the rest of a longer line is read as another line",
     "MAX_LINE_LENGTH 256, fgets"),
    ("fields", "split on ',' with strtok (empty fields vanish and later fields shift), spaces and tabs "
     "trimmed; fewer than 8 fields: line ignored; fields after the 10th dropped", "loadConfig tokenizer"),
    ("names", "collective, algorithm and protocol compared case-sensitively; unknown names read as "
     "allreduce, ring and simple", "parseCollType, parseAlgorithm, parseProtocol"),
    ("numbers", "byte bounds strtoull (-1 is 2^64-1, text is 0), the rest atoi (text is 0)", "loadConfig"),
    ("wildcards", "-1 in nNodes, nRanks, numPipeOps or regBuff matches any value; an absent numPipeOps or "
     "regBuff is -1", "pluginGetCollInfo match test"),
    ("range", "min_bytes <= nBytes <= max_bytes, both inclusive; nBytes is NCCL's "
     "elementSize * ncclFuncMaxSendRecvCount", "pluginGetCollInfo; enqueue.cc ncclGetAlgoInfo"),
    ("first match", "the first matching line in file order whose cost entry is not IGNORE applies; later "
     "lines are not read", "pluginGetCollInfo: return ncclSuccess after applying"),
    ("unavailable", "a matching line whose (algorithm, protocol) NCCL marked IGNORE (nvls without NVLS, "
     "collnet without CollNet, a protocol NCCL_PROTO excludes) is skipped and the search goes on",
     "pluginGetCollInfo: table[a][p] != NCCL_ALGO_PROTO_IGNORE"),
    ("applied line", "its cost entry becomes 0.0, so NCCL runs that algorithm and protocol",
     "pluginGetCollInfo; enqueue.cc topoGetAlgoInfo takes the smallest cost >= 0"),
    ("channels", "channels > 0 caps NCCL at that many; 0 keeps NCCL's own count; -1 leaves the plugin's "
     "1 (its README says -1 keeps NCCL's default)", "pluginGetCollInfo *nChannels = 1; enqueue.cc "
     "nMaxChannels == 0 ? info->nMaxChannels : nMaxChannels"),
    ("no match", "NCCL's own algorithm and protocol run on one channel", "pluginGetCollInfo *nChannels = 1"),
    ("no no-op", "no line leaves NCCL's choice as it is: an applied line pins its (algorithm, protocol)",
     "pluginGetCollInfo"),
    ("file", "NCCL_TUNER_CONFIG_FILE, else nccl_tuner.conf in the working directory; a missing or empty "
     "file means every query has no match", "pluginInit, loadConfig"),
)


@dataclass(frozen=True)
class ConfLine:
    """One configuration as the plugin holds it (``number``: the file line it came from)."""

    number: int
    collective: str
    min_bytes: int
    max_bytes: int
    algorithm: str
    protocol: str
    channels: int
    nodes: int
    ranks: int
    pipe_ops: int = -1
    reg_buff: int = -1


@dataclass(frozen=True)
class ConfProblem:
    """A line the plugin reads differently from how it looks (``number``: file line)."""

    number: int
    message: str


@dataclass(frozen=True)
class ParsedConf:
    """The lines the plugin keeps, in order, and what it would silently do otherwise."""

    source: str
    lines: tuple
    problems: tuple

    def report(self) -> list[str]:
        """One line per problem: ``<file>:<line>: <what the plugin does>``."""
        return [f"{self.source}:{p.number}: {p.message}" for p in self.problems]


@dataclass(frozen=True)
class Query:
    """One ``getCollInfo`` call: collective, NCCL's nBytes, the communicator's nodes and ranks, the
    (algorithm, protocol) pairs NCCL left available (not IGNORE), numPipeOps and regBuff."""

    collective: str
    nbytes: int
    nodes: int
    ranks: int
    available: frozenset
    pipe_ops: int = 1
    reg_buff: int = 0


@dataclass(frozen=True)
class Outcome:
    """What NCCL runs after the plugin: the applied line (None: no match), the pinned algorithm
    and protocol (None: NCCL's own) and the channel cap (None: NCCL's own count)."""

    line: ConfLine | None
    algorithm: str | None
    protocol: str | None
    channel_cap: int | None

    @property
    def fell_through(self) -> bool:
        return self.line is None

    @property
    def one_channel(self) -> bool:
        return self.channel_cap == 1

    @property
    def label(self) -> str:
        if self.line is None:
            return "no match: NCCL's choice, 1 channel"
        ch = "NCCL's channels" if self.channel_cap is None else f"{self.channel_cap} channel" + \
            ("s" if self.channel_cap != 1 else "")
        return f"line {self.line.number}: {self.algorithm}/{self.protocol}, {ch}"


def _reads(data: bytes):
    """``(file line, read, first read of its line)`` as fgets with a 256-byte buffer returns them."""
    number, at = 1, 0
    while at < len(data):
        end = data.find(b"\n", at)
        stop = len(data) if end < 0 else end + 1
        first = True
        while at < stop:
            piece = data[at:min(stop, at + LINE_BUFFER - 1)]
            yield number, piece.decode("latin-1"), first
            at += len(piece)
            first = False
        number += 1


def _c_number(s: str) -> tuple[int, bool]:
    """Leading blanks, a sign and the digits C's strto* read: (signed value, any digit read)."""
    s = s.lstrip(" \t\n\v\f\r")
    neg = s[:1] == "-"
    body = s[1:] if s[:1] in ("+", "-") else s
    digits = len(body) - len(body.lstrip("0123456789"))
    if not digits:
        return 0, False
    return int(body[:digits]) * (-1 if neg else 1), True


def _strtoull(s: str) -> int:
    """C ``strtoull(s, NULL, 10)``: overflow gives 2^64-1, a minus sign wraps."""
    v, _ = _c_number(s)
    if abs(v) > SIZE_MAX:
        return SIZE_MAX
    return v & SIZE_MAX


def _atoi(s: str) -> int:
    """glibc ``atoi``: ``(int) strtol(s, NULL, 10)``, strtol clamped to 64 bits, then cut to 32."""
    v, _ = _c_number(s)
    v = max(-(1 << 63), min((1 << 63) - 1, v)) & 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


_INT = re.compile(r"-?[0-9]+")


def _name(kind: str, text: str, known: tuple, number: int, problems: list) -> str:
    if text in known:
        return text
    problems.append(ConfProblem(number, f"unknown {kind} {text!r}: the plugin reads it as {UNKNOWN_READS_AS[kind]}"))
    return UNKNOWN_READS_AS[kind]


def _numbers(number: int, toks: list, problems: list) -> list[int]:
    """The five numeric fields after the names, as the plugin reads them (absent optional: -1)."""
    out = []
    for k, label in ((1, "min_bytes"), (2, "max_bytes"), (5, "channels"), (6, "nNodes"), (7, "nRanks"),
                     (8, "numPipeOps"), (9, "regBuff")):
        if k >= len(toks):
            out.append(-1)
            continue
        v = _strtoull(toks[k]) if k < 3 else _atoi(toks[k])
        plain = _INT.fullmatch(toks[k]) is not None and (int(toks[k]) == v or (k == 2 and toks[k] == "-1"))
        if not plain:
            problems.append(ConfProblem(number, f"{label} {toks[k]!r} is not a plain integer: the plugin reads {v}"))
        out.append(v)
    return out


def _checks(c: ConfLine, problems: list) -> None:
    if c.min_bytes > c.max_bytes:
        problems.append(ConfProblem(c.number, f"min_bytes {c.min_bytes} > max_bytes {c.max_bytes}: never matches"))
    if c.channels == -1:
        problems.append(ConfProblem(c.number, "channels -1: the plugin leaves NCCL 1 channel (0 keeps NCCL's)"))
    elif c.channels < -1:
        problems.append(ConfProblem(c.number, f"channels {c.channels}: NCCL is handed a negative channel count"))
    for label, v in (("nNodes", c.nodes), ("nRanks", c.ranks)):
        if v == 0 or v < -1:
            problems.append(ConfProblem(c.number, f"{label} {v}: matches no communicator"))


def _parse_line(number: int, line: str, problems: list) -> ConfLine | None:
    pieces = line.split(",")
    toks = [t.strip(" \t") for t in pieces if t != ""]
    if "" in pieces:
        problems.append(ConfProblem(number, "empty field: the plugin drops it and shifts the fields after it"))
    if len(toks) > FIELDS_READ[1]:
        problems.append(ConfProblem(number, f"{len(toks)} fields: the plugin reads the first {FIELDS_READ[1]}"))
        toks = toks[:FIELDS_READ[1]]
    if len(toks) < FIELDS_READ[0]:
        problems.append(ConfProblem(number, f"{len(toks)} fields ({FIELDS_READ[0]} needed): the plugin ignores "
                                            "the line"))
        return None
    lo, hi, *ints = _numbers(number, toks, problems)
    out = ConfLine(number, _name("collective", toks[0], COLLECTIVES, number, problems), lo, hi,
                   _name("algorithm", toks[3], ALGORITHMS, number, problems),
                   _name("protocol", toks[4], PROTOCOLS, number, problems), *ints)
    _checks(out, problems)
    return out


def parse_conf(text: str | bytes, source: str = "nccl_tuner.conf") -> ParsedConf:
    """The configurations the plugin loads from ``text``, and every line it reads otherwise than
    it looks (never raises on any text)."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    lines, problems = [], []
    for number, read, first in _reads(data):
        if not first:
            problems.append(ConfProblem(number, f"longer than {LINE_BUFFER - 1} bytes: the plugin reads "
                                                "the rest as another line"))
        if read[:1] in ("#", "\n"):
            continue
        line = read.split("\n", 1)[0].split("\x00", 1)[0]
        if not line:
            continue
        if line.lstrip(" \t").startswith("#"):
            problems.append(ConfProblem(number, "'#' after blanks is not a comment to the plugin"))
        if line.endswith("\r"):
            problems.append(ConfProblem(number, "carriage return at the end: part of the last field"))
        parsed = _parse_line(number, line, problems)
        if parsed is not None:
            lines.append(parsed)
    return ParsedConf(source, tuple(lines), tuple(problems))


def _matches(c: ConfLine, q: Query) -> bool:
    return (c.collective == q.collective and c.min_bytes <= q.nbytes <= c.max_bytes
            and c.nodes in (-1, q.nodes) and c.ranks in (-1, q.ranks)
            and c.pipe_ops in (-1, q.pipe_ops) and c.reg_buff in (-1, q.reg_buff))


def match(conf: ParsedConf, q: Query) -> Outcome:
    """What ``pluginGetCollInfo`` and ``ncclGetAlgoInfo`` make of query ``q``."""
    for c in conf.lines:
        if _matches(c, q) and (c.algorithm, c.protocol) in q.available:
            cap = 1 if c.channels == -1 else (None if c.channels == KEEP_NCCL_CHANNELS else c.channels)
            return Outcome(c, c.algorithm, c.protocol, cap)
    return Outcome(None, None, None, 1)

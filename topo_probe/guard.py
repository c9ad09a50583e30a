"""The limits every loader applies to hostile input, and the checks that enforce them.

Every loader of a user's file (``nvidia-smi topo -m`` / ``-p2p`` text, topology JSON, link-matrix JSON, schedule
JSON and ``.json.gz``, plan JSON, nccl-tests logs) reads through these helpers, so that each refuses early and
cheaply, before it builds anything, in the manner of expat's amplification limits:

* **size**: at most :data:`MAX_INPUT_BYTES` read from a file, also after gzip decompression (a gzip bomb stops there);
* **text**: strict UTF-8 (the error names the line and column of the bad byte);
* **JSON**: at most :data:`MAX_JSON_DEPTH` levels, :data:`MAX_JSON_CONTAINERS` objects and arrays and
  :data:`MAX_JSON_VALUES` values (counted before parsing); no NaN, Infinity or overflowing number (``1e400``), no
  integer beyond ±2**63, no lone surrogate in a string;
* **counts** before enumerating: :data:`MAX_GPUS` GPUs or ranks, :data:`MAX_CHUNKS_PER_RANK`, :data:`MAX_CHUNK_CELLS`
  (chunks x ranks, what the verifier's state holds), :data:`MAX_LINKS_PER_EDGE` (:data:`MAX_NETWORK_LINKS_PER_EDGE`),
  :data:`MAX_MATRIX_COLUMNS`, :data:`MAX_EDGES`, :data:`MAX_NODES`;
* **physics**: bandwidths finite in [:data:`MIN_BANDWIDTH_GBPS`, :data:`MAX_BANDWIDTH_GBPS`] GB/s per direction (a
  network edge's per port: :func:`edge_limits`), latencies finite in [0, :data:`MAX_LATENCY_US`] µs, sizes in
  [0, :data:`MAX_BYTES`] bytes, times finite in (0, :data:`MAX_TIME_US`] µs.

Every failure is one line of the caller's error class (a :class:`~topo_probe.errors.TopocollError`) naming the file
and the field path or line.

>>> from topo_probe.errors import TopologyError
>>> parse_json('{"links": [[0, 1e400]]}', "m.json", TopologyError)
Traceback (most recent call last):
...
topo_probe.errors.TopologyError: m.json: links[0][1]: inf is not a finite number
>>> check_float(float("nan"), "m.json: link_bandwidth_gbps", TopologyError, lo=MIN_BANDWIDTH_GBPS,
...             hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
Traceback (most recent call last):
...
topo_probe.errors.TopologyError: m.json: link_bandwidth_gbps must be a finite number, got nan
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import zlib
from numbers import Integral, Real
from typing import Any

__all__ = ["MAX_INPUT_BYTES", "MAX_JSON_DEPTH", "MAX_JSON_CONTAINERS", "MAX_JSON_VALUES", "MAX_GPUS",
           "MAX_CHUNKS_PER_RANK", "MAX_CHUNK_CELLS", "MAX_SCHEDULE_BYTES", "MAX_SCHEDULE_CONTAINERS",
           "MAX_SCHEDULE_VALUES", "MAX_SCHEDULE_GZIP_RATIO", "MAX_ROUNDS", "MAX_LINKS_PER_EDGE", "MAX_HOSTS",
           "MAX_NICS_PER_HOST", "MAX_OVERSUBSCRIPTION", "MAX_NETWORK_LINKS_PER_EDGE", "MAX_MATRIX_COLUMNS", "MAX_EDGES",
           "MAX_NODES", "MIN_BANDWIDTH_GBPS", "MAX_BANDWIDTH_GBPS", "MAX_LATENCY_US", "MAX_BYTES", "MAX_TIME_US",
           "show", "read_capped", "gunzip_capped", "decode_utf8", "read_text", "parse_json", "check_int", "check_float",
           "ascii_int", "edge_limits", "check_edge", "check_topology", "is_int", "is_int_type", "is_real"]

#: Largest file (and largest gzip output) a loader reads, bytes (the largest schedule under ``results/``: 2.3 MB).
MAX_INPUT_BYTES = 32 * 2**20
#: Deepest JSON nesting accepted (our documents use at most 5 levels).
MAX_JSON_DEPTH = 32
#: Most JSON objects + arrays in one document (``{`` and ``[`` counted before parsing).
MAX_JSON_CONTAINERS = 2**18
#: Most JSON values in one document (commas counted before parsing).
MAX_JSON_VALUES = 2**21
#: Most GPUs in a topology, ranks in a schedule.
MAX_GPUS = 1024
#: Most chunks per rank of a schedule.
MAX_CHUNKS_PER_RANK = 4096
#: Most chunks x ranks of a schedule (the verifier keeps a dict entry per pair it touches; a 256-rank AllToAll: 256**3).
MAX_CHUNK_CELLS = 2**24
#: Schedules are the one document that grows with the cluster (a 1,024-rank AllReduce is about 2.1 million
#: transfers: ~100 MB of JSON, ~10 million values): own limits of bytes read (also after gunzip), containers, values.
MAX_SCHEDULE_BYTES = 256 * 2**20
MAX_SCHEDULE_CONTAINERS = 2**23
MAX_SCHEDULE_VALUES = 2**24
#: A ``.json.gz`` schedule decompresses to at most this many times its size (real ones: ~16x)
#: beyond :data:`MAX_INPUT_BYTES`, so a small gzip bomb costs no more than a general loader's.
MAX_SCHEDULE_GZIP_RATIO = 32
#: Most fabric rounds one schedule step may declare.
MAX_ROUNDS = 10**6
#: Most physical links bonded in one edge (NVLink: 18 per GPU today); a ``network`` edge has its own limit.
MAX_LINKS_PER_EDGE = 64
#: Most columns (GPUs + NICs) of one host's ``nvidia-smi topo -m`` matrix.
MAX_MATRIX_COLUMNS = 128
#: Most hosts in a host count (``--nodes``, ``--hosts-per-leaf``), NICs of one host a cluster joins (as many as a
#: host's matrix has columns; GB200 NVL72: 72) and spine oversubscription (R:1) of a leaf-spine cluster.
MAX_HOSTS, MAX_NICS_PER_HOST, MAX_OVERSUBSCRIPTION = 4096, MAX_MATRIX_COLUMNS, 1024
#: Most ports of one ``network`` edge: a cluster's leaf uplink has hosts per leaf x NICs per host at most (R >= 1).
MAX_NETWORK_LINKS_PER_EDGE = MAX_HOSTS * MAX_NICS_PER_HOST
#: Most directed edges of a topology.
MAX_EDGES = 2**15
#: Most nodes (GPUs, switches, CPUs, NICs) of a topology.
MAX_NODES = 2**14
#: Bandwidth range of one edge, GB/s per direction (1 MB/s .. 100 TB/s).
MIN_BANDWIDTH_GBPS = 1e-3
MAX_BANDWIDTH_GBPS = 1e5
#: Largest one-way latency of an edge, µs (one second).
MAX_LATENCY_US = 1e6
#: Largest message size, bytes (1 PiB).
MAX_BYTES = 2**50
#: Longest time of one measured operation, µs (about 17 minutes).
MAX_TIME_US = 1e9

_INT_LIMIT = 2**63
_LONG_DIGITS = re.compile(r"(?<![0-9])[0-9]{4000,}")   # the lookbehind keeps it linear


def show(value: Any) -> str:
    """A short repr for messages, in one line (huge numbers and long strings are cut; a repr's line breaks become
    spaces, its own spaces are kept)."""
    if is_int(value) and abs(value) >= 10**30:
        return f"an integer of about {int(int(value).bit_length() * 0.30103) + 1} digits"
    text = " ".join(repr(value).splitlines())
    return text if len(text) <= 60 else text[:57] + "..."


# ----------------------------------------------------------------------------- bytes and text
def read_capped(path: str | os.PathLike, error: type[Exception], limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of regular file ``path``, refusing more than ``limit`` bytes (reads at most ``limit + 1``)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError) as exc:       # ValueError: a NUL in the path
        raise error(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: is not a regular file")
    if info.st_size > limit:
        raise error(f"{path}: {info.st_size} bytes is more than the {limit} bytes a loader reads")
    try:
        with open(path, "rb") as fh:
            data = _read_up_to(fh, limit + 1)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise error(f"{path}: more than the {limit} bytes a loader reads")
    return data


def _read_up_to(fh, most: int) -> bytes:
    """At most ``most`` bytes of ``fh``, in 1 MiB reads (``read(n)`` allocates ``n`` bytes up front)."""
    parts, total = [], 0
    while total < most:
        part = fh.read(min(1 << 20, most - total))
        if not part:
            break
        parts.append(part)
        total += len(part)
    return b"".join(parts)


def gunzip_capped(data: bytes, source: str, error: type[Exception], limit: int = MAX_INPUT_BYTES) -> bytes:
    """Decompress gzip ``data`` (one or more members), stopping with ``error`` once the output passes ``limit``."""
    out, rest = bytearray(), data
    while rest:
        unz = zlib.decompressobj(wbits=31)
        try:
            out += unz.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise error(f"{source}: broken gzip data: {exc}") from None
        if len(out) > limit or unz.unconsumed_tail:
            raise error(f"{source}: gzip data decompresses to more than the {limit} bytes a loader reads")
        if not unz.eof:
            raise error(f"{source}: broken gzip data: truncated")
        rest = unz.unused_data
        if rest and not rest.startswith(b"\x1f\x8b"):
            if rest.strip(b"\0"):
                raise error(f"{source}: broken gzip data: {len(rest)} bytes of garbage after the end")
            break
    return bytes(out)


def decode_utf8(data: bytes, source: str, error: type[Exception]) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); a bad byte is an error naming its line and column."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(f"{source}: line {line} column {col}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: str | os.PathLike, error: type[Exception], limit: int = MAX_INPUT_BYTES) -> str:
    """:func:`read_capped` then :func:`decode_utf8`."""
    return decode_utf8(read_capped(path, error, limit), str(path), error)


# ----------------------------------------------------------------------------- JSON
def _path_text(path: tuple) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "top level"


def _line_col(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    return f"line {line} column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


def _deep_place(text: str, max_depth: int) -> str:
    """Where the nesting first passes ``max_depth`` (strings skipped), for the RecursionError case."""
    depth = 0
    for m in re.finditer(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', text, re.DOTALL):
        tok = m.group()
        if tok in "[{":
            depth += 1
            if depth > max_depth:
                return _line_col(text, m.start())
        elif tok in "]}":
            depth -= 1
    return "somewhere"


def parse_json(text: str, source: str, error: type[Exception], max_depth: int = MAX_JSON_DEPTH,
               free_form: tuple[str, ...] = (), *, schedule: bool = False) -> Any:
    """Decode JSON ``text`` within the limits of the module docstring; errors name ``source`` and the line/column
    (syntax) or the field path (values).  Under the top-level keys ``free_form`` (e.g. a schedule's ``meta``, where a
    solver records an unbounded LP as ``Infinity``) non-finite floats are allowed; every other limit holds there too.
    With ``schedule`` the schedule limits (:data:`MAX_SCHEDULE_BYTES`, ...) replace the general ones."""
    max_bytes, max_containers, max_values = ((MAX_SCHEDULE_BYTES, MAX_SCHEDULE_CONTAINERS, MAX_SCHEDULE_VALUES)
                                             if schedule else (MAX_INPUT_BYTES, MAX_JSON_CONTAINERS, MAX_JSON_VALUES))
    if len(text) > max_bytes:
        raise error(f"{source}: more than the {max_bytes} bytes a loader reads")
    containers = text.count("[") + text.count("{")
    if containers > max_containers:
        raise error(f"{source}: {containers} JSON objects/arrays, more than the {max_containers} a loader takes")
    if text.count(",") >= max_values:
        raise error(f"{source}: more than the {max_values} JSON values a loader takes")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{source}: line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise error(f"{source}: {_deep_place(text, max_depth)}: JSON nested deeper than {max_depth} levels") from None
    except ValueError:   # int() of a number over sys.get_int_max_str_digits() digits
        m = _LONG_DIGITS.search(text)
        where = _line_col(text, m.start()) if m else "a number"
        raise error(f"{source}: {where}: a number with thousands of digits") from None
    _check_values(doc, source, error, max_depth, free_form)
    return doc


def _check_values(doc: Any, source: str, error: type[Exception], max_depth: int, free_form: tuple[str, ...]) -> None:
    """Walk ``doc`` (iteratively): depth, finite floats, ints within ±2**63, encodable strings."""
    if not isinstance(doc, (dict, list)):
        _check_scalar(doc, (), source, error, False)
        return
    stack: list[tuple[Any, tuple, bool]] = [(doc, (), False)]
    while stack:
        obj, path, lax = stack.pop()
        if len(path) >= max_depth:
            raise error(f"{source}: {_path_text(path)}: JSON nested deeper than {max_depth} levels")
        inner = []
        for key, val in (obj.items() if isinstance(obj, dict) else enumerate(obj)):
            if isinstance(key, str) and not key.isascii():
                _check_string(key, path, source, error)
            if isinstance(val, (dict, list)):
                inner.append((val, path + (key,), lax or (not path and key in free_form)))
            elif not (isinstance(val, str) and val.isascii()) and val is not None:
                _check_scalar(val, path + (key,), source, error, lax or (not path and key in free_form))
        stack.extend(reversed(inner))     # first child on top: errors come in document order


def _check_scalar(val: Any, path: tuple, source: str, error: type[Exception], lax: bool) -> None:
    if isinstance(val, float):
        if not lax and not math.isfinite(val):
            raise error(f"{source}: {_path_text(path)}: {val} is not a finite number")
    elif is_int(val):
        if not -_INT_LIMIT < val < _INT_LIMIT:
            raise error(f"{source}: {_path_text(path)}: {show(val)} is out of range (beyond ±2**63)")
    elif isinstance(val, str):
        _check_string(val, path, source, error)


def _check_string(text: str, path: tuple, source: str, error: type[Exception]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(f"{source}: {_path_text(path)}: string holds an unpaired surrogate "
                    f"{text[exc.start]!r}") from None


# ----------------------------------------------------------------------------- numbers
def is_int_type(kind: type) -> bool:
    """Whether ``kind`` is an integer type (``int``, NumPy's, :class:`numbers.Integral`), but not ``bool``/``bool_``."""
    return kind is int or (issubclass(kind, Integral) and not issubclass(kind, bool))   # int first: ABC check is slow


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer by :func:`is_int_type`, the project's one rule for it.

    >>> [is_int(v) for v in (3, True, 3.0, "3")]
    [True, False, False, False]
    """
    return is_int_type(type(value))


def is_real(value: Any) -> bool:
    """Whether ``value`` is a real number: an int, a float, a NumPy integer or float or another
    :class:`numbers.Real`, but not a bool, ``numpy.bool_`` or complex; the project's one rule for it,
    beside :func:`is_int` (finiteness and range are the caller's: :func:`check_float`).

    >>> [is_real(v) for v in (3, 2.5, True, 1j, "3")]
    [True, True, False, False, False]
    """
    kind = type(value)
    return kind is float or kind is int or (isinstance(value, Real) and not isinstance(value, bool))


def check_int(value: Any, where: str, error: type[Exception], *, lo: int = 0, hi: int, what: str = "") -> int:
    """``value`` as an int if it is an integer (:func:`is_int`) in ``lo..hi``; else ``error`` naming ``where``."""
    if not is_int(value) or value < lo:
        raise error(f"{where} must be an integer >= {lo}, got {show(value)}")
    if value > hi:
        raise error(f"{where} must be at most {hi}{' ' + what if what else ''}, got {show(value)}")
    return int(value)


def check_float(value: Any, where: str, error: type[Exception], *, lo: float, hi: float,
                lo_open: bool = False, unit: str = "") -> float:
    """``value`` as a float if finite real (:func:`is_real`) in [lo, hi] (``(lo, hi]`` with ``lo_open``); else error."""
    rel = ">" if lo_open else ">="
    if not is_real(value):
        raise error(f"{where} must be {rel} {lo:g}, got {show(value)}")
    try:
        num = float(value)
    except OverflowError:
        num = math.inf
    if not math.isfinite(num):
        raise error(f"{where} must be a finite number, got {show(value)}")
    if num < lo or (lo_open and num == lo):
        raise error(f"{where} must be {rel} {lo:g}{' ' + unit if unit and lo else ''}, got {show(value)}")
    if num > hi:
        raise error(f"{where} must be at most {hi:g}{' ' + unit if unit else ''}, got {show(value)}")
    return num


def ascii_int(text: str | None, max_digits: int = 18) -> int | None:
    """``int(text)`` when ``text`` is 1..max_digits ASCII digits, else None (``'²'.isdigit()``
    is True in Python, ``int('²')`` raises; a 5000-digit string would too).

    >>> ascii_int("12"), ascii_int("²"), ascii_int("1" * 40), ascii_int(None)
    (12, None, None, None)
    """
    if text is None or not 0 < len(text) <= max_digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)


# ----------------------------------------------------------------------------- topologies
def edge_limits(kind: Any) -> tuple[int, float, float]:
    """(most links, least and most GB/s per direction) of an edge of ``kind``; a ``network`` edge's bandwidth is
    bounded per port (``bandwidth_gbps / links``: one NIC over R .. one NIC; a cluster's leaf uplink has
    :data:`MAX_NETWORK_LINKS_PER_EDGE` ports at most)."""
    if kind == "network":
        return MAX_NETWORK_LINKS_PER_EDGE, MIN_BANDWIDTH_GBPS / MAX_OVERSUBSCRIPTION, MAX_BANDWIDTH_GBPS
    return MAX_LINKS_PER_EDGE, MIN_BANDWIDTH_GBPS, MAX_BANDWIDTH_GBPS


def check_edge(kind: Any, links: Any, bw: Any, where: str, error: type[Exception]) -> tuple[int, float]:
    """(links, bandwidth_gbps) of an edge of ``kind`` checked by :func:`edge_limits`; errors start ``where`` + field.
    A network port's upper bound has a rounding's slack: cluster()'s m*S/R GB/s over ceil(m*P/R) ports can pass S
    by an ulp (S = 1e5, R = 2.3, m*P = 23)."""
    most, lo, hi = edge_limits(kind)
    n = check_int(links, f"{where}links", error, lo=1, hi=most)
    if kind != "network":
        return n, check_float(bw, f"{where}bandwidth_gbps", error, lo=lo, hi=hi, unit="GB/s")
    total = check_float(bw, f"{where}bandwidth_gbps", error, lo=lo, hi=hi * n * (1 + 1e-12), unit="GB/s")
    if total < lo * n:
        raise error(f"{where}bandwidth_gbps {total:g} GB/s over {n} links is {total / n:g} GB/s a port, less than "
                    f"the {lo:g} GB/s of a network port")
    return n, total


def check_topology(topo: Any, source: str, error: type[Exception]) -> Any:
    """Refuse a built topology that breaks physics or the size limits: no GPU, more than :data:`MAX_GPUS` GPUs /
    :data:`MAX_NODES` nodes / :data:`MAX_EDGES` edges, GPU indices (ranks) other than 0..n-1, an edge whose ``links``,
    ``bandwidth_gbps`` (:func:`check_edge`) or ``latency_us`` is out of range, a node whose ``numa_node``/``host``/
    ``gpu_numa_id`` is not an integer in -1..:data:`MAX_NODES` or whose NIC ``speed_gbps`` is.  Returns ``topo``."""
    g = topo.graph
    indices = [d.get("index") for _, d in g.nodes(data=True) if d.get("kind") == "gpu"]
    gpus = len(indices)
    if not all(map(is_int, indices)):
        raise error(f"{source}: topology {show(topo.name)}: a GPU index is not an integer: {show(indices)}")
    indices.sort()
    if gpus < 1:
        raise error(f"{source}: topology {show(topo.name)} has no GPU")
    if indices != list(range(gpus)):
        raise error(f"{source}: topology {show(topo.name)}: GPU indices must be 0..{gpus - 1}, got {show(indices)}")
    if gpus > MAX_GPUS or g.number_of_nodes() > MAX_NODES or g.number_of_edges() > MAX_EDGES:
        raise error(f"{source}: topology {show(topo.name)} has {gpus} GPUs, {g.number_of_nodes()} nodes and "
                    f"{g.number_of_edges()} edges; the limits are {MAX_GPUS}, {MAX_NODES} and {MAX_EDGES}")
    for n, d in g.nodes(data=True):
        for key in ("numa_node", "host", "gpu_numa_id"):
            if d.get(key) is not None:
                check_int(d[key], f"{source}: node {n}: {key}", error, lo=-1, hi=MAX_NODES)
        if d.get("speed_gbps") is not None:
            check_float(d["speed_gbps"], f"{source}: node {n}: speed_gbps", error, lo=MIN_BANDWIDTH_GBPS,
                        hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    for u, v, d in g.edges(data=True):
        where = f"{source}: link {u}->{v}"
        check_edge(d.get("kind"), d.get("links"), d.get("bandwidth_gbps"), f"{where}: ", error)
        check_float(d.get("latency_us"), f"{where}: latency_us", error, lo=0.0, hi=MAX_LATENCY_US, unit="µs")
    return topo

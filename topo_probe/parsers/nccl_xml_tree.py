"""The element tree of an NCCL/RCCL topology XML, read with bounds, and checked attribute values.

Shared by :mod:`topo_probe.parsers.nccl_xml` (reader) and
:mod:`topo_probe.parsers.nccl_xml_export` (writer): PCI class codes.  Reading refuses hostile
input before building anything (:mod:`topo_probe.parsers.xml_bounds`): more than
:data:`MAX_XML_CHARS` characters, DOCTYPE or ENTITY declarations, more than :data:`MAX_DEPTH`
levels or :data:`MAX_ELEMENTS` elements.  Numbers are parsed strictly and bounded: NaN,
infinities, negative or absurd values are one-line :class:`~topo_probe.errors.TopologyError`
messages naming file, line and column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from xml.parsers.expat import errors as expat_errors

from topo_probe.errors import TopologyError
from topo_probe.limits import MIN_BANDWIDTH_GBPS
from topo_probe.parsers.hardware import MAX_NIC_MBPS, SLOWEST_NIC_MBPS
from topo_probe.parsers.xml_bounds import MESSAGES, ExpatError, XmlRefused, int_attribute, stream

# PCI class codes in ``nvlink``/``xgmi`` ``tclass`` (reader and writer)
NVSWITCH_CLASS = "0x068000"
CPU_CLASS = "0x068001"
#: bounds checked while reading
MAX_XML_CHARS = 16 * 2**20
MAX_DEPTH = 48
MAX_ELEMENTS = 500_000
#: Lowest <net speed>, Mb/s (an int): NCCL takes <= 0 as 10,000 (v2.28.9-1 src/graph/topo.cc lines 370-373)
MIN_NIC_MBPS = -2**31
NCCL_DEFAULT_NIC_MBPS = 10000


@dataclass
class El:
    """One element: tag, attributes, position, children."""

    tag: str
    attrs: dict
    line: int
    col: int
    children: list = field(default_factory=list)


def read_tree(text: str, source: str, strict: bool) -> tuple[El, str | None]:
    """The root element and, for a truncated file read leniently, a note saying where it stopped."""
    stack: list[El] = []
    root: list[El] = []

    def start(tag, attrs, line, col):
        el = El(tag, dict(attrs), line, col)
        (stack[-1].children if stack else root).append(el)
        stack.append(el)

    try:
        stream(text, start=start, end=lambda tag: stack.pop(), max_chars=MAX_XML_CHARS, max_depth=MAX_DEPTH,
               max_elements=MAX_ELEMENTS)
        return root[0], None
    except XmlRefused as exc:
        raise TopologyError(f"{source}: {exc}") from None
    except ExpatError as exc:
        where = f"{source}:line {exc.lineno} column {exc.offset + 1}"
        msg = MESSAGES[exc.code]
        at_end = msg == expat_errors.XML_ERROR_NO_ELEMENTS or (
            msg in (expat_errors.XML_ERROR_UNCLOSED_TOKEN, expat_errors.XML_ERROR_PARTIAL_CHAR)
            and ">" not in _rest(text, exc.lineno, exc.offset))
        if not root or not stack or not at_end:
            raise TopologyError(f"{where}: {msg}") from None
        if strict:
            raise TopologyError(f"{where}: truncated XML: {len(stack)} elements still open "
                                f"(<{'> <'.join(e.tag for e in stack)}>)") from None
        return root[0], (f"{source} is truncated at line {exc.lineno} (inside <{'> <'.join(e.tag for e in stack)}>): "
                         f"parsed the complete elements before it"
                         + ("; a partial last tag was dropped" if msg != expat_errors.XML_ERROR_NO_ELEMENTS else ""))


def _rest(text: str, line: int, offset: int) -> str:
    lines = text.split("\n")
    return "\n".join([lines[line - 1][offset:]] + lines[line:]) if line - 1 < len(lines) else ""


def _where(el: El, source: str) -> str:
    return f"{source}:line {el.line} column {el.col}"


def attr(el: El, key: str, source: str) -> str:
    """A required string attribute."""
    if key not in el.attrs:
        raise TopologyError(f"{_where(el, source)}: <{el.tag}> has no {key!r} attribute")
    return el.attrs[key]


def attr_int(el: El, key: str, source: str, lo: int, hi: int, default: int | None = None) -> int:
    """A required (or defaulted) integer attribute within [lo, hi]."""
    if key not in el.attrs and default is not None:
        return default
    return int_attribute(attr(el, key, source), key, lo, hi, f"{_where(el, source)}: <{el.tag}>", TopologyError)


def attr_float(el: El, key: str, source: str, lo: float, hi: float, default: float | None = None) -> float:
    """A finite number within [lo, hi] (NaN and infinities refused)."""
    if key not in el.attrs and default is not None:
        return default
    val = attr(el, key, source)
    try:
        num = float(val)
    except ValueError:
        num = math.nan
    if not (math.isfinite(num) and lo <= num <= hi):
        raise TopologyError(f"{_where(el, source)}: <{el.tag} {key}={val[:40]!r}> is not a number in {lo:g}..{hi:g}")
    return num


def net_speed_gbps(net: El, source: str) -> float:
    """GB/s per direction of a ``<net speed="Mb/s">`` (8000 Mb/s per GB/s): none, empty or <= 0 is NCCL's default
    10,000 Mb/s; 1 .. :data:`~topo_probe.parsers.hardware.SLOWEST_NIC_MBPS` - 1 (under the loaders'
    MIN_BANDWIDTH_GBPS) and anything past an int or MAX_NIC_MBPS are refused at the attribute."""
    mbps = attr_int(net, "speed", source, MIN_NIC_MBPS, MAX_NIC_MBPS, 0) if net.attrs.get("speed") else 0
    if 0 < mbps < SLOWEST_NIC_MBPS:
        raise TopologyError(f"{_where(net, source)}: <net> attribute speed={mbps} is under {SLOWEST_NIC_MBPS} Mb/s, "
                            f"the slowest NIC the loaders take ({MIN_BANDWIDTH_GBPS:g} GB/s); <= 0 means NCCL's "
                            f"default {NCCL_DEFAULT_NIC_MBPS}")
    return (mbps if mbps > 0 else NCCL_DEFAULT_NIC_MBPS) / 8000.0


def walk(el: El, tag: str):
    """Every descendant element named ``tag``, depth first."""
    for c in el.children:
        if c.tag == tag:
            yield c
        yield from walk(c, tag)

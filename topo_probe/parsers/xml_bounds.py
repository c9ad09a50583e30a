"""Stream XML through expat with the bounds every loader of this project keeps.

:func:`stream` refuses, before anything is built, what makes XML expensive: more than
``max_chars`` characters, DOCTYPE and ENTITY declarations (expat expands internal entities, so a
"billion laughs" document would blow up in memory), more than ``max_depth`` levels or
``max_elements`` elements.  Refusals raise :class:`XmlRefused` (its message names the line),
malformed XML expat's own ``ExpatError``; each loader turns them into its own one-line error.

>>> seen = []
>>> stream("<a><b x='1'/></a>", start=lambda tag, attrs, line, col: seen.append((tag, attrs)),
...        end=lambda tag: None, max_chars=100, max_depth=4, max_elements=10)
>>> seen
[('a', {}), ('b', {'x': '1'})]
>>> stream("<!DOCTYPE a [<!ENTITY e 'x'>]><a>&e;</a>", start=lambda *a: None, end=lambda t: None,
...        max_chars=100, max_depth=4, max_elements=10)
Traceback (most recent call last):
...
topo_probe.parsers.xml_bounds.XmlRefused: line 1: DOCTYPE and ENTITY declarations are refused
"""

from __future__ import annotations

import re
import xml.parsers.expat as expat
from typing import Callable

ExpatError = expat.ExpatError
MESSAGES = expat.errors.messages

#: an integer attribute: a sign and at most 20 digits (int64's 2**63 - 1, MSCCL's largest maxBytes, has 19; a
#: bound on the digits int() reads, the range is the caller's), blanks around it allowed
_INT = re.compile(r"\s*[+-]?\d{1,20}\s*")


class XmlRefused(Exception):
    """The text is over a bound or declares a DOCTYPE/ENTITY (not a project error: loaders wrap it)."""


def stream(text: str, *, start: Callable, end: Callable, max_chars: int, max_depth: int,
           max_elements: int) -> None:
    """Parse ``text`` calling ``start(tag, attrs, line, column)`` and ``end(tag)`` per element."""
    if len(text) > max_chars:
        raise XmlRefused(f"{len(text)} characters is more than the {max_chars} allowed")
    p = expat.ParserCreate()
    depth, count = [0], [0]

    def on_start(tag, attrs):
        count[0] += 1
        depth[0] += 1
        if depth[0] > max_depth or count[0] > max_elements:
            raise XmlRefused(f"line {p.CurrentLineNumber}: more than {max_depth} levels or {max_elements} elements")
        start(tag, attrs, p.CurrentLineNumber, p.CurrentColumnNumber + 1)

    def on_end(tag):
        depth[0] -= 1
        end(tag)

    def refuse(*_args):
        raise XmlRefused(f"line {p.CurrentLineNumber}: DOCTYPE and ENTITY declarations are refused")

    p.StartElementHandler, p.EndElementHandler = on_start, on_end
    p.StartDoctypeDeclHandler = p.EntityDeclHandler = refuse
    p.Parse(text, True)


def int_attribute(val: str, key: str, lo: int, hi: int, where: str, error: type[Exception]) -> int:
    """The XML attribute ``key="val"`` as an int in ``lo..hi``; else ``error`` in one line that starts with ``where``
    (the file, line and element: both XML loaders' one rule).

    >>> int_attribute(" 4 ", "count", 1, 8, "t.xml:line 3 column 5: <gpu>", ValueError)
    4
    >>> int_attribute("1e400", "speed", 0, 10, "t.xml:line 3 column 5: <nic>", ValueError)
    Traceback (most recent call last):
    ...
    ValueError: t.xml:line 3 column 5: <nic> attribute speed='1e400' is not an integer
    """
    if not _INT.fullmatch(val):
        raise error(f"{where} attribute {key}={val[:40]!r} is not an integer")
    num = int(val)
    if not lo <= num <= hi:
        raise error(f"{where} attribute {key}={num} is out of range {lo}..{hi}")
    return num

"""JSON decoded within the loaders' limits (:mod:`topo_probe.limits`): :func:`parse_json` refuses, in one line of
the caller's error class naming the file and the line/column (syntax) or the field path (values), more than
:data:`~topo_probe.limits.MAX_JSON_DEPTH` levels, :data:`~topo_probe.limits.MAX_JSON_CONTAINERS` objects and arrays
or :data:`~topo_probe.limits.MAX_JSON_VALUES` values (counted before parsing), NaN, Infinity or an overflowing
number (``1e400``), an integer beyond ±2**63 and a lone surrogate in a string.

>>> from topo_probe.errors import TopologyError
>>> parse_json('{"links": [[0, 1e400]]}', "m.json", TopologyError)
Traceback (most recent call last):
...
topo_probe.errors.TopologyError: m.json: links[0][1]: inf is not a finite number
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from topo_probe.errors import show
from topo_probe.limits import (MAX_INPUT_BYTES, MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, MAX_JSON_VALUES,
                               MAX_SCHEDULE_BYTES, MAX_SCHEDULE_CONTAINERS, MAX_SCHEDULE_VALUES)
from topo_probe.number_rules import is_int

__all__ = ["parse_json"]

_INT_LIMIT = 2**63
_LONG_DIGITS = re.compile(r"(?<![0-9])[0-9]{4000,}")   # the lookbehind keeps it linear


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
    """Walk ``doc`` (iteratively): depth, finite floats, ints within ±2**63, encodable strings.

    A document :func:`_accepted` passes is done with; else the walk below finds the first refusal in document order
    (a container's scalars, then its containers), keeping a container's place as a link ``(parent's link, key)``
    and building the path tuple only for the refusal."""
    if _accepted(doc, max_depth, free_form):
        return
    if not isinstance(doc, (dict, list)):
        _check_scalar(doc, (), source, error, False)
        return
    stack: list[tuple[Any, tuple | None, int, bool]] = [(doc, None, 0, False)]
    while stack:
        obj, link, depth, lax = stack.pop()
        if depth >= max_depth:
            raise error(f"{source}: {_path_text(_path(link))}: JSON nested deeper than {max_depth} levels")
        inner = []
        for key, val in (obj.items() if isinstance(obj, dict) else enumerate(obj)):
            if type(key) is str and not key.isascii():
                _check_string(key, _path(link), source, error)
            kind = type(val)
            if kind is int:
                if -_INT_LIMIT < val < _INT_LIMIT:
                    continue
            elif kind is float:
                if val - val == 0.0:       # finite (inf - inf and nan - nan are nan)
                    continue
            elif kind is str:
                if val.isascii():
                    continue
            elif val is None or kind is bool:
                continue
            elif kind is dict or kind is list or isinstance(val, (dict, list)):
                inner.append((val, (link, key), depth + 1, lax or (not depth and key in free_form)))
                continue
            _check_scalar(val, _path((link, key)), source, error, lax or (not depth and key in free_form))
        stack.extend(reversed(inner))     # first child on top: errors come in document order


def _accepted(doc: Any, max_depth: int, free_form: tuple[str, ...]) -> bool:
    """Whether :func:`_check_values` accepts ``doc`` (a :func:`json.loads` result), checked level by level in no
    particular order and without paths; non-finite floats are let through under the top-level keys ``free_form``."""
    if isinstance(doc, dict) and max_depth > 0 and any(key in free_form for key in doc):
        return (_plain(list(doc), 1, max_depth, False)          # the top-level keys, as strings
                and _plain([v for k, v in doc.items() if k not in free_form], 1, max_depth, False)
                and _plain([v for k, v in doc.items() if k in free_form], 1, max_depth, True))
    return _plain([doc], 0, max_depth, False)


def _plain(values: list, depth: int, max_depth: int, lax: bool) -> bool:
    """Whether ``values`` (at nesting ``depth``) and all below them pass: ints within ±2**63, finite floats (any
    with ``lax``), UTF-8-encodable strings (a dict's keys too), null, bools, containers less than ``max_depth``
    deep."""
    while values:
        deeper: list = []
        for val in values:
            kind = type(val)
            if kind is int:
                if not -_INT_LIMIT < val < _INT_LIMIT:
                    return False
            elif kind is float:
                if val - val != 0.0 and not lax:       # inf - inf and nan - nan are nan; finite x - x is 0.0
                    return False
            elif kind is str:
                if not val.isascii() and not _encodes(val):
                    return False
            elif kind is dict or kind is list:
                if depth >= max_depth:
                    return False
                deeper.extend(val)                      # a dict's keys: strings, checked as values one level down
                if kind is dict:
                    deeper.extend(val.values())
            elif val is not None and kind is not bool:
                return False                            # anything else: the walk decides
        values, depth = deeper, depth + 1
    return True


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _path(link: tuple | None) -> tuple:
    """The path tuple of a place kept as nested ``(parent's link, key)`` pairs (``None``: the top level)."""
    keys = []
    while link is not None:
        link, key = link
        keys.append(key)
    return tuple(reversed(keys))


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

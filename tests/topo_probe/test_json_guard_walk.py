"""json_guard's value walk (``_check_values``) against the walk it replaced, kept here as the reference: the new one
first checks the whole document without paths (``_accepted``) and walks it in order, building a field path, only
when that refuses; on every document, hostile ones included, both accept the same documents and refuse with
byte-identical messages (the first refusal in document order)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.errors import ScheduleFormatError, TopologyError, show
from topo_probe.json_guard import _accepted, _check_values, parse_json
from topo_probe.number_rules import is_int

_LIMIT = 2**63


# ---------------------------------------------------------------- the reference: the walk as it was before
def _ref_path_text(path: tuple) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "top level"


def _ref_check_values(doc, source, error, max_depth, free_form):
    if not isinstance(doc, (dict, list)):
        _ref_check_scalar(doc, (), source, error, False)
        return
    stack = [(doc, (), False)]
    while stack:
        obj, path, lax = stack.pop()
        if len(path) >= max_depth:
            raise error(f"{source}: {_ref_path_text(path)}: JSON nested deeper than {max_depth} levels")
        inner = []
        for key, val in (obj.items() if isinstance(obj, dict) else enumerate(obj)):
            if isinstance(key, str) and not key.isascii():
                _ref_check_string(key, path, source, error)
            if isinstance(val, (dict, list)):
                inner.append((val, path + (key,), lax or (not path and key in free_form)))
            elif not (isinstance(val, str) and val.isascii()) and val is not None:
                _ref_check_scalar(val, path + (key,), source, error, lax or (not path and key in free_form))
        stack.extend(reversed(inner))


def _ref_check_scalar(val, path, source, error, lax):
    if isinstance(val, float):
        if not lax and not math.isfinite(val):
            raise error(f"{source}: {_ref_path_text(path)}: {val} is not a finite number")
    elif is_int(val):
        if not -_LIMIT < val < _LIMIT:
            raise error(f"{source}: {_ref_path_text(path)}: {show(val)} is out of range (beyond ±2**63)")
    elif isinstance(val, str):
        _ref_check_string(val, path, source, error)


def _ref_check_string(text, path, source, error):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(f"{source}: {_ref_path_text(path)}: string holds an unpaired surrogate "
                    f"{text[exc.start]!r}") from None


# ---------------------------------------------------------------- hostile documents
_ints = st.one_of(st.integers(-10, 10), st.sampled_from([2**63 - 1, 2**63, -(2**63) + 1, -(2**63), 2**64, -(2**70)]),
                  st.integers())
_floats = st.one_of(st.floats(), st.sampled_from([math.inf, -math.inf, math.nan, 0.0, -0.0, 1e308]))
_texts = st.one_of(st.text(max_size=6), st.sampled_from(["\ud800", "a\udfffb", "é", "ok", "free", "meta"]))
_scalars = st.one_of(st.none(), st.booleans(), _ints, _floats, _texts)
_docs = st.recursive(_scalars, lambda kids: st.one_of(st.lists(kids, max_size=5),
                                                      st.dictionaries(_texts, kids, max_size=5)), max_leaves=40)


def _outcome(check, doc, max_depth, free_form):
    try:
        check(doc, "d.json", ScheduleFormatError, max_depth, free_form)
    except ScheduleFormatError as exc:
        return str(exc)
    return None


@settings(max_examples=250, deadline=None, derandomize=True)
@given(doc=_docs, max_depth=st.integers(1, 8), free_form=st.sampled_from([(), ("meta",), ("free", "ok", "")]))
def test_the_walk_refuses_as_the_reference_does(doc, max_depth, free_form):
    assert _outcome(_check_values, doc, max_depth, free_form) == _outcome(_ref_check_values, doc, max_depth, free_form)


@settings(max_examples=250, deadline=None, derandomize=True)
@given(doc=_docs, max_depth=st.integers(0, 8), free_form=st.sampled_from([(), ("meta",), ("free", "ok", "")]))
def test_the_quick_check_accepts_exactly_what_the_reference_accepts(doc, max_depth, free_form):
    """``_accepted`` is not only safe (never passes a document the reference refuses) but exact, so a refused
    document is the only one walked twice."""
    assert _accepted(doc, max_depth, free_form) == (_outcome(_ref_check_values, doc, max_depth, free_form) is None)


@pytest.mark.parametrize("text, want", [
    ('{"a": [1, {"b": 1e400}]}', "d.json: a[1].b: inf is not a finite number"),
    ('[[0, 9223372036854775808]]', "d.json: [0][1]: 9223372036854775808 is out of range (beyond ±2**63)"),
    ('{"meta": {"x": Infinity}, "y": [-Infinity]}', "d.json: y[0]: -inf is not a finite number"),
    ('{"k": {"\\ud800": 1}}', "d.json: k: string holds an unpaired surrogate '\\ud800'"),
    ('{"s": ["ok", "\\udc00"]}', "d.json: s[1]: string holds an unpaired surrogate '\\udc00'"),
    ('[[[[1]]]]', "d.json: [0][0][0]: JSON nested deeper than 3 levels"),
    ('NaN', "d.json: top level: nan is not a finite number"),
    ('{"a": [{"b": NaN}], "c": 1e999}', "d.json: c: inf is not a finite number"),   # a container's scalars first
])
def test_hand_written_refusals(text, want):
    """By hand: the field path, the value as written and, among several, the first in the walk's order."""
    with pytest.raises(TopologyError) as exc:
        parse_json(text, "d.json", TopologyError, 3, ("meta",))
    assert str(exc.value) == want
    assert _outcome(_ref_check_values, json.loads(text), 3, ("meta",)) == want


@settings(max_examples=100, deadline=None, derandomize=True)
@given(doc=_docs, cut=st.integers(0, 400), junk=st.text(max_size=3))
def test_mutated_json_text_is_refused_alike(doc, cut, junk):
    """Cut or spliced JSON text (NaN/Infinity as Python writes them): parse_json's message matches the reference's
    for every document json.loads takes, and a syntax error is one line."""
    text = json.dumps(doc)
    text = text[:cut] + junk + text[cut:]
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        with pytest.raises(TopologyError) as exc:
            parse_json(text, "d.json", TopologyError, 6, ("meta",))
        assert "\n" not in str(exc.value)
        return
    want = _outcome(_ref_check_values, parsed, 6, ("meta",))
    try:
        parse_json(text, "d.json", ScheduleFormatError, 6, ("meta",))
        got = None
    except ScheduleFormatError as exc:
        got = str(exc)
    assert got == want

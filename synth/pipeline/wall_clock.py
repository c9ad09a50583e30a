"""Which parts of a ``synthesize`` result are wall-clock times, and whether two results differ
only there.

A run over a folder that already holds results leaves them as they are when the new ones differ
from them only in wall-clock times (:mod:`synth.pipeline.keep`); this module says what counts
as a wall-clock time, in one place:

* in ``summary.json``, the value of every key in :data:`WALL_CLOCK_KEYS`, wherever it sits (a
  number, or for ``stages`` a mapping of stage names to numbers).  Everything else, a ratio, a
  time predicted by a model (``simulated_us``, ``time_us``, ...), an option such as
  ``time_limit_s``, a key's name or order, is a result;
* in ``report.md``, the spans the report writer marks with :func:`wall_number` (a number of
  seconds) and :func:`wall_stages` (a line of :func:`synth.pipeline.progress.format_stages`).
  Every other character of the report is a result.

Any other file of a result set is compared byte for byte.

>>> same_json('{\\n "total_s": 2.5,\\n "ratio": 1.0\\n}', '{\\n "total_s": 3.1,\\n "ratio": 1.0\\n}')
True
>>> same_json('{\\n "total_s": 2.5,\\n "ratio": 1.0\\n}', '{\\n "total_s": 2.5,\\n "ratio": 1.5\\n}')
False
>>> new = "total " + wall_number("3.1") + " s; ratio 1.0"
>>> unmarked(new), same_text("total 2.5 s; ratio 1.0", new), same_text("total 2.5 s; ratio 1.5", new)
('total 3.1 s; ratio 1.0', True, False)
"""

from __future__ import annotations

import json
import re
import secrets

from synth.pipeline.progress import STAGES_PATTERN
from topo_probe.number_rules import is_real

#: schedule metadata that measures wall-clock time (left out of saved schedule files)
WALL_CLOCK_META = frozenset({"solve_s", "wall_s", "build_s", "search_wall_s"})
#: keys of ``summary.json`` whose values are wall-clock times, at any depth
WALL_CLOCK_KEYS = WALL_CLOCK_META | {"total_s", "pareto_solve_s", "stages"}
#: what a marked span of the report may hold
NUMBER_PATTERN = r"[0-9]+(?:\.[0-9]+)?(?:e[-+][0-9]+)?"
_KINDS = {"n": NUMBER_PATTERN, "s": STAGES_PATTERN}
#: marks a span; random per process, so no text of a report (a topology's name) can forge one
_TOKEN = secrets.token_hex(8)
_SPAN = re.compile(f"\0{_TOKEN}([ns])\0(.*?)\0/{_TOKEN}\0", re.S)


def dump_json(doc) -> str:
    """``summary.json``'s text for ``doc`` (what the writer writes and :func:`same_json` assumes)."""
    return json.dumps(doc, indent=1)


def _is_time(value) -> bool:
    """A number of seconds, or a mapping of stage names to numbers of seconds."""
    return is_real(value) or (isinstance(value, dict) and all(is_real(v) for v in value.values()))


class _Shape(Exception):
    """The two documents differ in more than wall-clock values."""


def _with_times_of(new, old):
    """``new`` with every wall-clock value replaced by ``old``'s at the same place; raises _Shape
    where the keys or lengths differ or a wall-clock value is not a time."""
    if isinstance(new, dict):
        if not isinstance(old, dict) or list(new) != list(old):
            raise _Shape
        out = {}
        for key, value in new.items():
            if key in WALL_CLOCK_KEYS:
                if not (_is_time(value) and _is_time(old[key])):
                    raise _Shape
                out[key] = old[key]
            else:
                out[key] = _with_times_of(value, old[key])
        return out
    if isinstance(new, list):
        if not isinstance(old, list) or len(new) != len(old):
            raise _Shape
        return [_with_times_of(a, b) for a, b in zip(new, old)]
    return new


def same_json(old: str, new: str) -> bool:
    """``old`` is exactly the text ``new`` would be with the wall-clock values it holds: they
    differ in nothing else (no value, key, order, spacing).  ``new`` must be :func:`dump_json`'s
    text; any other text is compared as it is."""
    if old == new:
        return True
    try:
        new_doc, old_doc = json.loads(new), json.loads(old)
    except ValueError:
        return False
    if dump_json(new_doc) != new:
        return False
    try:
        return dump_json(_with_times_of(new_doc, old_doc)) == old
    except _Shape:
        return False


def wall_number(text: str) -> str:
    """``text`` (a number of seconds) marked as wall-clock time in a report."""
    return f"\0{_TOKEN}n\0{text}\0/{_TOKEN}\0"


def wall_stages(text: str) -> str:
    """``text`` (:func:`synth.pipeline.progress.format_stages`'s) marked as wall-clock times."""
    return f"\0{_TOKEN}s\0{text}\0/{_TOKEN}\0"


def unmarked(marked: str) -> str:
    """The report's text: ``marked`` without the marks."""
    return _SPAN.sub(lambda m: m.group(2), marked)


def text_pattern(marked: str) -> re.Pattern:
    """What a text equal to ``marked`` apart from its wall-clock spans matches (in full): every
    character outside the spans literally, each span by its kind's pattern."""
    parts, pos = [], 0
    for m in _SPAN.finditer(marked):
        parts += [re.escape(marked[pos:m.start()]), f"(?:{_KINDS[m.group(1)]})"]
        pos = m.end()
    parts.append(re.escape(marked[pos:]))
    return re.compile("".join(parts))


def same_text(old: str, marked: str) -> bool:
    """``old`` equals the report ``marked`` stands for apart from the marked wall-clock spans."""
    return text_pattern(marked).fullmatch(old) is not None

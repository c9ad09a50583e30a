"""A schedule's steps as JSON text, written one string format per transfer: byte for byte what
``json.dumps`` writes for them, indented (``indent=1``, one level down) or compact
(``separators=(",", ":")``), without building a dict per transfer (a 1,024-rank schedule has
millions).  :meth:`synth.ir.schedule.Schedule.to_json` puts them in place of :data:`STEPS_HOLE`.
"""

from __future__ import annotations

import json

__all__ = ["STEPS_HOLE", "compact_steps", "indented_steps"]


class _Quoted(dict):
    """op -> its JSON string, made on first use."""

    def __missing__(self, op: str) -> str:
        text = self[op] = json.dumps(op)
        return text

STEPS_HOLE = "\x00steps\x00"
_TRANSFER = ' {{\n     "chunk": {},\n     "src": {},\n     "dst": {},\n     "op": {}\n    }}'


def indented_steps(steps) -> str:
    """``steps`` as ``json.dumps(..., indent=1)`` writes them one level down, byte for byte, in
    one string format per transfer (the pure-Python indenting encoder took seconds per
    10,000-transfer schedule)."""
    if not steps:
        return "[]"
    ops = _Quoted()
    out = []
    for st in steps:
        if st.transfers:
            body = ",\n   ".join(_TRANSFER.format(int(t.chunk), int(t.src), int(t.dst), ops[t.op])
                                  for t in st.transfers)
            tr = "[\n   " + body + "\n   ]"
        else:
            tr = "[]"
        out.append(f'{{\n   "rounds": {json.dumps(st.rounds)},\n   "transfers": {tr}\n  }}')
    return "[\n  " + ",\n  ".join(out) + "\n ]"


_COMPACT_TRANSFER = '{"chunk":%d,"src":%d,"dst":%d,"op":%s}'


def compact_steps(steps) -> str:
    """``steps`` as ``json.dumps(..., separators=(",", ":"))`` writes them, byte for byte, in one
    string format per transfer (not a dict per transfer: a 1,024-rank schedule has millions)."""
    ops = _Quoted()
    fmt = _COMPACT_TRANSFER
    out = []
    for st in steps:
        body = ",".join([fmt % (int(t.chunk), int(t.src), int(t.dst), ops[t.op]) for t in st.transfers])
        out.append(f'{{"rounds":{json.dumps(st.rounds)},"transfers":[{body}]}}')
    return "[" + ",".join(out) + "]"

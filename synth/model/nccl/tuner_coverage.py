"""Run many ``getCollInfo`` queries through the tuner-plugin emulator (:mod:`.tuner_plugin`) and
judge a configuration file: how many queries no line takes (NCCL then runs on one channel), and,
on the machine the file was written for, whether every applied line is one the NCCL model says
is at least as fast as NCCL's own choice there.

Queries (:func:`queries`): sizes 1 B to 64 GiB (log-uniform, plus both sides of every line
bound), every collective the plugin tunes, the file's own communicator with the (algorithm,
protocol) pairs NCCL leaves available with NVLS on and off (:meth:`TuneTable.enabled`), and other
communicators of 1-64 hosts and 2-1,024 ranks with random non-empty sets of the pairs NCCL can
offer for the collective (``ALGOS_FOR``: NCCL's tuning.cc gives the others no bandwidth).

>>> from topo_probe import get_preset
>>> from synth.model.nccl.tuner_config import tuner_lines, tuner_models, tuner_text
>>> from synth.model.nccl.tuner_plugin import parse_conf
>>> on, off = tuner_models(get_preset("dgx-a100"))
>>> conf = parse_conf(tuner_text(tuner_lines(on, off)))
>>> r = judge(conf, on, off, queries(conf, on, off, 400, seed=1))
>>> r.queries > 800, r.fell_through, r.slower
(True, 0, 0)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from synth.model.nccl.constants import PROTO_NAMES
from synth.model.nccl.tuner_plugin import ALGORITHMS, COLLECTIVES, PROTOCOLS, ParsedConf, Query, match
from synth.model.nccl.tuning import ALGOS_FOR

__all__ = ["Judged", "queries", "judge", "judge_shapes", "available_pairs", "MAX_QUERY_BYTES"]

#: largest query size (bytes): 64 GiB
MAX_QUERY_BYTES = 64 << 30
_EVERY = frozenset((a, p) for a in ALGORITHMS for p in PROTOCOLS)
#: a line is "as fast" when its modelled time is within this fraction of NCCL's default
TOLERANCE = 1e-9


def available_pairs(model, coll: str) -> frozenset:
    """The plugin-named (algorithm, protocol) pairs NCCL does not mark IGNORE for ``coll``."""
    return frozenset((a, p.lower()) for a, p in model.table.enabled(coll))


@dataclass
class Judged:
    """Counts over the queries; ``gains`` the modelled speed-up of each help line where it
    applied, by file line number."""

    queries: int = 0
    fell_through: int = 0
    one_channel: int = 0
    machine_queries: int = 0
    slower: int = 0
    capped: int = 0
    changed: int = 0
    foreign_pinned_by_machine_line: int = 0
    #: lines the plugin checks per query, up to and including the one that applies (all: none)
    checked_max: int = 0
    checked_sum: int = 0
    gains: dict = field(default_factory=dict)
    #: fall-throughs by cause: ``other shape``, ``no line for the size``, ``lines unavailable``
    causes: dict = field(default_factory=dict)
    examples: list = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.examples) < 5:
            self.examples.append(text)


def _sizes(rng: random.Random, n: int, bounds: list[int]) -> list[int]:
    out = [max(1, round(2 ** rng.uniform(0, 36))) for _ in range(n)]
    extra = [b + d for b in bounds for d in (-1, 0, 1) if 1 <= b + d <= MAX_QUERY_BYTES]
    return out + extra


def queries(conf: ParsedConf, model, model_without_nvls, n: int, seed: int = 0) -> list[tuple[Query, str]]:
    """``n`` queries on the model's own communicator per NVLS state, and ``n`` on other
    communicators; each with ``"on"``, ``"off"`` (the file's machine) or ``"other"``."""
    rng = random.Random(seed)
    m = model.machine
    bounds = sorted({l.min_bytes for l in conf.lines} | {l.max_bytes + 1 for l in conf.lines})
    out = []
    worlds = [("on", model), ("off", model_without_nvls or model)]
    for name, world in worlds:
        for size in _sizes(rng, n // 2, bounds):
            coll = rng.choice(COLLECTIVES)
            out.append((Query(coll, size, m.nodes, m.ranks, available_pairs(world, coll)), name))
    for size in _sizes(rng, n, []):
        hosts = rng.choice([1, 1, 2, 4, 8, 16, 32, 64, rng.randint(1, 64)])
        ranks = max(2, hosts * rng.choice([1, 2, 4, 8, 16])) if rng.random() < 0.7 else rng.randint(max(2, hosts), 1024)
        coll = rng.choice(COLLECTIVES)
        every = [(a, p) for a in ALGOS_FOR[coll] for p in PROTOCOLS]      # what NCCL can offer (tuning.cc)
        pairs = frozenset(p for p in every if rng.random() < 0.5) or frozenset([rng.choice(every)])
        out.append((Query(coll, size, hosts, min(ranks, 1024), pairs), "other"))
    return out


def judge(conf: ParsedConf, model, model_without_nvls, qs: list[tuple[Query, str]],
          shapes: frozenset = frozenset()) -> Judged:
    """Emulate every query; on the file's machine, time the applied line with the model.
    ``shapes``: the other ``(nodes, ranks)`` the file has lines for (:func:`judge_shapes` times
    those); a query of another shape pinned by a line that is not ``-1,-1`` counts as foreign."""
    r = Judged()
    m = model.machine
    for q, world in qs:
        r.queries += 1
        out = match(conf, q)
        checked = len(conf.lines) if out.line is None else conf.lines.index(out.line) + 1
        r.checked_max, r.checked_sum = max(r.checked_max, checked), r.checked_sum + checked
        if out.fell_through:
            r.fell_through += 1
            if world == "other" and (q.nodes, q.ranks) != (m.nodes, m.ranks):
                cause = "other shape"
            elif match(conf, Query(q.collective, q.nbytes, q.nodes, q.ranks, _EVERY)).fell_through:
                cause = "no line for the size"
            else:
                cause = "lines unavailable"
            r.causes[cause] = r.causes.get(cause, 0) + 1
            r.note(f"{q.collective} {q.nbytes} B on {q.nodes} node(s) x {q.ranks} ranks: no line")
        if out.one_channel:
            r.one_channel += 1
        if world == "other":
            foreign = (q.nodes, q.ranks) != (m.nodes, m.ranks) and (q.nodes, q.ranks) not in shapes
            if foreign and out.line is not None and (out.line.nodes != -1 or out.line.ranks != -1):
                r.foreign_pinned_by_machine_line += 1
            continue
        r.machine_queries += 1
        if out.fell_through:
            continue
        if out.channel_cap is not None:       # a fixed channel count: not what the model times
            r.capped += 1
            continue
        wm = model if world == "on" or model_without_nvls is None else model_without_nvls
        d = wm.choose(q.collective, q.nbytes)
        c = wm.forced(q.collective, out.algorithm, PROTO_NAMES[out.protocol], q.nbytes)
        if c.time_us > d.time_us * (1 + TOLERANCE):
            r.slower += 1
            r.note(f"{q.collective} {q.nbytes} B ({world}): line {out.line.number} {c.label} {c.time_us:.1f} us, "
                   f"NCCL's own {d.label} {d.time_us:.1f} us")
        if (c.algorithm, c.protocol) != (d.algorithm, d.protocol):
            r.changed += 1
            r.gains.setdefault(out.line.number, []).append(d.time_us / c.time_us)
    return r


def judge_shapes(conf: ParsedConf, shapes, n: int, seed: int = 0, tolerance: float = TOLERANCE) -> dict:
    """Per shape (:class:`~.tuner_shapes.CommShape`) label: ``(queries, slower, fell_through, worst)``
    over ``n`` queries per GPU subset (one per class) and NVLS state of it (sizes as :func:`queries`,
    every collective); slower: the applied line's modelled time above NCCL's own choice by more than
    ``tolerance`` on that subset; worst: the largest ratio of the two."""
    rng = random.Random(seed)
    bounds = sorted({l.min_bytes for l in conf.lines} | {l.max_bytes + 1 for l in conf.lines})
    out = {}
    for shape in shapes:
        counts = [0, 0, 0, 1.0]
        for on, off in shape.models:
            for world in (on,) if off is None else (on, off):
                for size in _sizes(rng, n, bounds):
                    coll = rng.choice(COLLECTIVES)
                    o = match(conf, Query(coll, size, shape.nodes, shape.ranks, available_pairs(world, coll)))
                    counts[0] += 1
                    if o.fell_through:
                        counts[2] += 1
                        continue
                    d = world.choose(coll, size)
                    c = world.forced(coll, o.algorithm, PROTO_NAMES[o.protocol], size)
                    counts[1] += c.time_us > d.time_us * (1 + tolerance)
                    counts[3] = max(counts[3], c.time_us / d.time_us)
        out[shape.label] = tuple(counts)
    return out

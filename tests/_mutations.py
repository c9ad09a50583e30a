"""Hostile-input mutations, the loaders they are fed to, and an independent physics check; shared
by tests/test_fuzz_loaders.py and benchmarks/fuzz_loaders.py (not a test module).

``mutate(data, rng, fmt)`` applies one to three mutations of the kinds of issue 15 to a real file:
byte flips, truncation, deletion/duplication/swaps of lines, invalid UTF-8, unicode look-alikes
(``'²'``, NBSP, BOM), hostile numbers (NaN, inf, negative, 1e-320, 1e400, 2**63, 5000 digits,
``'²'``), token swaps, deep nesting, 1 MB amplification, and for JSON type swaps, deleted and
duplicated fields, for XML attribute values and duplicated elements, for gzip the inner JSON.

``nonsense(result)`` says what in an *accepted* result breaks physics (NaN/inf/negative numbers,
no GPU, absurd link counts...), written without the loaders' own checks (:mod:`topo_probe.topology.checks`)
so it checks them.
"""

from __future__ import annotations

import gzip
import json
import math
import random
import re
from pathlib import Path

HOSTILE_NUMBERS = ["NaN", "nan", "-nan", "Infinity", "-Infinity", "inf", "1e400", "-1e400", "-1", "-0", "0",
                   "0.0", "1e-320", "5e-324", "-2.5", "1e30", "1e18", "9223372036854775808", "18446744073709551616",
                   "9" * 5000, "9" * 4000, "1" * 300, "²", "³", "\u0663", "\uff11\uff12", "0x1F", "1_000", "3000",
                   "65536", "4294967296", "1.7976931348623157e308", "", "1.5", "2", "7"]
HOSTILE_TEXT = ["\x00", "\ufeff", "\u2028", "\u00a0", "²", "\U0001f642", "<", ">", "&", '"', "'", "{", "}",
                "[", "]", ",", ":", "#", "\t", "\r", "\n", "X", "NV12", "GPU0", "SYS", "N/A", "null", "-", "<!--"]
INVALID_UTF8 = [b"\xff", b"\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xe2\x82", b"\x80", b"\xf8\x88\x80\x80\x80"]
JSON_VALUES = [None, True, False, 0, -1, 1.5, "", "x", "²", [], {}, [1, 2], {"a": 1}, [[[[]]]], 10**30, 1e308]
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_WORD = re.compile(rb"[A-Za-z_#%/][A-Za-z0-9_#%/.\-]*")
_ATTR = re.compile(rb'(\w{1,64})="([^"]*)"')     # bounded: (\w+)= is quadratic on long word runs


# ----------------------------------------------------------------------------- byte/text mutations
def billion_laughs(root: str, attr: str) -> str:
    """The entity-expansion bomb ("billion laughs", 10**9 ``a``s once expanded) as a ``<root>``
    element whose ``attr`` holds the last entity."""
    return (f'<?xml version="1.0"?><!DOCTYPE {root} [<!ENTITY a "aaaaaaaaaa">'
            + "".join(f'<!ENTITY {chr(98 + k)} "{("&" + chr(97 + k) + ";") * 10}">' for k in range(9))
            + f']><{root} {attr}="&j;"/>')


def _pos(rng: random.Random, data: bytes) -> int:
    return rng.randrange(len(data) + 1)


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _flip(data, rng, big):
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if b:
            b[rng.randrange(len(b))] ^= rng.randrange(1, 256)
    return bytes(b)


def _truncate(data, rng, big):
    return data[:_pos(rng, data)]


def _delete_lines(data, rng, big):
    ls = _lines(data)
    for _ in range(rng.randint(1, 3)):
        if ls:
            del ls[rng.randrange(len(ls))]
    return b"\n".join(ls)


def _dup_lines(data, rng, big):
    ls = _lines(data)
    k = rng.randrange(len(ls))
    times = min(rng.choice([1, 2, 10, 200]), max(1, big // (len(ls[k]) + 1)))    # stay near ``big`` bytes
    return b"\n".join(ls[:k] + [ls[k]] * times + ls[k:])


def _swap_lines(data, rng, big):
    ls = _lines(data)
    i, j = rng.randrange(len(ls)), rng.randrange(len(ls))
    ls[i], ls[j] = ls[j], ls[i]
    return b"\n".join(ls)


def _invalid_utf8(data, rng, big):
    p = _pos(rng, data)
    return data[:p] + rng.choice(INVALID_UTF8) + data[p:]


def _unicode(data, rng, big):
    p = _pos(rng, data)
    return data[:p] + rng.choice(HOSTILE_TEXT).encode("utf-8") + data[p:]


def _number(data, rng, big):
    spans = [m.span() for m in _NUMBER.finditer(data)]
    if not spans:
        return _unicode(data, rng, big)
    a, b = rng.choice(spans)
    return data[:a] + rng.choice(HOSTILE_NUMBERS).encode("utf-8") + data[b:]


def _token(data, rng, big):
    spans = [m.span() for m in _WORD.finditer(data)]
    if not spans:
        return _flip(data, rng, big)
    a, b = rng.choice(spans)
    c, d = rng.choice(spans)
    new = data[c:d] if rng.random() < 0.6 else rng.choice(HOSTILE_TEXT).encode("utf-8")
    return data[:a] + new + data[b:]


def _deep(data, rng, big):
    k = rng.choice([40, 1000, big // 4])
    p = _pos(rng, data)
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}"), (b"<a>", b"</a>"), (b"(", b")")])
    tail = closer * k if rng.random() < 0.5 else b""
    return data[:p] + opener * k + tail + data[p:]


def _amplify(data, rng, big):
    ls = _lines(data)
    line = rng.choice(ls) + b"\n"
    how = rng.randrange(4)
    if how == 0:                                   # one line repeated to ~big bytes
        k = rng.randrange(len(ls))
        return b"\n".join(ls[:k]) + b"\n" + line * max(1, big // max(len(line), 1)) + b"\n".join(ls[k:])
    p = _pos(rng, data)
    pad = [b" " * big, b"\n" * big, b"9" * big][how - 1]
    return data[:p] + pad + data[p:]


TEXT_KINDS = {"byte_flip": _flip, "truncate": _truncate, "delete_lines": _delete_lines, "dup_lines": _dup_lines,
              "swap_lines": _swap_lines, "invalid_utf8": _invalid_utf8, "unicode": _unicode, "number": _number,
              "token": _token, "deep": _deep, "amplify": _amplify}


# ----------------------------------------------------------------------------- JSON mutations
def _paths(doc, limit: int = 20000) -> list[tuple]:
    out, stack = [], [((), doc)]
    while stack and len(out) < limit:
        path, obj = stack.pop()
        out.append(path)
        if isinstance(obj, dict):
            stack.extend((path + (k,), v) for k, v in obj.items())
        elif isinstance(obj, list):
            stack.extend((path + (i,), v) for i, v in enumerate(obj))
    return out


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _json(kind):
    def mutate(data, rng, big):
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            return _number(data, rng, big)
        paths = _paths(doc)
        path = rng.choice(paths)
        raw = None
        if not path:
            doc = rng.choice(JSON_VALUES)
        elif kind == "json_type_swap":
            _get(doc, path[:-1])[path[-1]] = rng.choice(JSON_VALUES)
        elif kind == "json_delete":
            del _get(doc, path[:-1])[path[-1]]
        elif kind == "json_dup":
            parent = _get(doc, path[:-1])
            if isinstance(parent, list):
                size = len(json.dumps(parent[path[-1]])) + 2
                parent[path[-1]:path[-1]] = [parent[path[-1]]] * min(rng.choice([1, 3, 1000]), max(1, big // size))
            else:
                parent[path[-1] + "_"] = parent[path[-1]]
        elif kind == "json_number":
            nums = [p for p in paths if p and type(_get(doc, p)) in (int, float)]
            path = rng.choice(nums or paths[1:] or [path])
            raw = rng.choice(HOSTILE_NUMBERS)
            _get(doc, path[:-1])[path[-1]] = "@@HOSTILE@@"
        else:   # json_deep
            k = rng.choice([40, 1000, big // 4])
            raw = "[" * k + "]" * k
            _get(doc, path[:-1])[path[-1]] = "@@HOSTILE@@"
        text = json.dumps(doc, indent=1)
        if raw is not None:
            text = text.replace('"@@HOSTILE@@"', raw)
        return text.encode("utf-8", "surrogatepass")
    return mutate


JSON_KINDS = {k: _json(k) for k in ("json_type_swap", "json_delete", "json_dup", "json_number", "json_deep")}


# ----------------------------------------------------------------------------- XML mutations
def _xml_attr(data, rng, big):
    spans = [m.span(2) for m in _ATTR.finditer(data)]
    if not spans:
        return _number(data, rng, big)
    a, b = rng.choice(spans)
    new = rng.choice(HOSTILE_NUMBERS + HOSTILE_TEXT[:6] + ["abc", "100000", "-5", "1" * 40])
    return data[:a] + new.replace('"', "&quot;").encode("utf-8") + data[b:]


def _xml_elem(data, rng, big):
    ls = _lines(data)
    tags = [k for k, ln in enumerate(ls) if b"<" in ln]
    if not tags:
        return _dup_lines(data, rng, big)
    k = rng.choice(tags)
    times = min(rng.choice([1, 2, 50]), max(1, big // (len(ls[k]) + 1)))
    return b"\n".join(ls[:k] + [ls[k]] * times + ls[k:])


XML_KINDS = {"xml_attr": _xml_attr, "xml_elem_dup": _xml_elem}


def kinds_for(fmt: str) -> dict:
    """The mutation kinds that apply to a seed of format ``fmt`` (text, json, json.gz, xml)."""
    extra = {"json": JSON_KINDS, "json.gz": JSON_KINDS, "xml": XML_KINDS}.get(fmt, {})
    return {**TEXT_KINDS, **extra}


def mutate(data: bytes, rng: random.Random, fmt: str, big: int = 1 << 20) -> tuple[str, bytes]:
    """One to three mutations of ``data`` (a ``fmt`` file); returns (kinds joined by '+', bytes).
    ``big`` is the size the amplifying kinds aim at (bytes).  For ``json.gz`` the inner JSON is
    mutated and recompressed, or the compressed bytes themselves."""
    kinds = kinds_for(fmt)
    if fmt == "json.gz":
        if rng.random() < 0.3:
            name = rng.choice(["byte_flip", "truncate", "invalid_utf8"])
            return "gz_" + name, TEXT_KINDS[name](data, rng, big)
        inner = gzip.decompress(data)
        name, out = mutate(inner, rng, "json", big)
        return "gz_" + name, gzip.compress(out, mtime=0)
    names = [rng.choice(sorted(kinds)) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    for name in names:
        data = kinds[name](data, rng, big)
    return "+".join(names), data


# ----------------------------------------------------------------------------- the physics check
def _bad_number(x, lo=0.0, hi=1e7, lo_open=False) -> bool:
    return (isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < lo
            or (lo_open and x == lo) or x > hi)


def _topology_nonsense(t) -> str | None:
    g = t.graph
    gpus = [d for _, d in g.nodes(data=True) if d.get("kind") == "gpu"]
    if not gpus:
        return "no GPU"
    if sorted(d.get("index") for d in gpus) != list(range(len(gpus))):
        return "GPU indices are not 0..n-1"
    if len(gpus) > 4096 or g.number_of_edges() > 10**6:
        return f"{len(gpus)} GPUs / {g.number_of_edges()} edges"
    for u, v, d in g.edges(data=True):
        if not isinstance(d.get("links"), int) or not 1 <= d["links"] <= 1000:
            return f"edge {u}->{v}: links {d.get('links')!r}"
        if _bad_number(d.get("bandwidth_gbps"), 1e-6, 1e7, lo_open=True):
            return f"edge {u}->{v}: bandwidth {d.get('bandwidth_gbps')!r} GB/s"
        if _bad_number(d.get("latency_us"), 0.0, 1e7):
            return f"edge {u}->{v}: latency {d.get('latency_us')!r} µs"
    for n, d in g.nodes(data=True):
        for key in ("numa_node", "speed_gbps", "host"):
            x = d.get(key)
            if x is not None and _bad_number(x, -1, 1e7):
                return f"node {n}: {key} {x!r}"
    return None


def _schedule_nonsense(s) -> str | None:
    if not 1 <= s.ranks <= 4096 or not 1 <= s.chunks_per_rank <= 10**5:
        return f"ranks {s.ranks}, chunks_per_rank {s.chunks_per_rank}"
    m = s.spec.num_chunks
    for si, st in enumerate(s.steps):
        if not isinstance(st.rounds, int) or not 1 <= st.rounds <= 10**7:
            return f"step {si}: rounds {st.rounds!r}"
        for t in st.transfers:
            if not (0 <= t.chunk < m and 0 <= t.src < s.ranks and 0 <= t.dst < s.ranks and t.src != t.dst):
                return f"step {si}: transfer {t}"
    return None


def _plan_nonsense(p) -> str | None:
    for e in p.entries:
        if _bad_number(e.min_bytes, 0, 2**60) or (e.max_bytes is not None and (_bad_number(e.max_bytes, 0, 2**60)
                                                                              or e.max_bytes <= e.min_bytes)):
            return f"entry sizes {e.min_bytes!r}..{e.max_bytes!r}"
        if e.predicted_us is not None and _bad_number(e.predicted_us, 0, 1e12):
            return f"predicted_us {e.predicted_us!r}"
        if e.root is not None and (not isinstance(e.root, int) or not 0 <= e.root < 4096):
            return f"root {e.root!r}"
    if p.model is not None and (not isinstance(p.model, str) or not 0 < len(p.model) <= 256
                                or any(c in p.model for c in "\n\r\t\0")):     # quoted in a one-line warning
        return f"model {p.model!r}"
    return None


def _log_nonsense(log) -> str | None:
    for r in log.rows:
        if _bad_number(r.size, 0, 2**60) or _bad_number(r.count, 0, 2**60):
            return f"size/count {r.size!r}/{r.count!r}"
        for m in (r.out_of_place, r.in_place):
            if m is None:
                continue
            if m.time_us is not None and _bad_number(m.time_us, 0.0, 1e12, lo_open=True):
                return f"time {m.time_us!r} µs"
            for x in (m.algbw_gbps, m.busbw_gbps):
                if x is not None and _bad_number(x, 0.0, 1e9):     # measured: generous, but not 1e18
                    return f"bandwidth {x!r} GB/s"
            # #wrong counts elements (int); the "error" column of old builds is a max error (any finite float)
            if m.wrong is not None and _bad_number(m.wrong, 0.0, 2**60 if isinstance(m.wrong, int) else 1e308):
                return f"#wrong {m.wrong!r}"
    if log.avg_busbw_gbps is not None and _bad_number(log.avg_busbw_gbps, 0.0, 1e9):
        return f"avg busbw {log.avg_busbw_gbps!r}"
    return None


def nonsense(result) -> str | None:
    """What in an accepted loader result breaks physics, or None."""
    name = type(result).__name__
    if name == "Topology":
        return _topology_nonsense(result)
    if name == "Schedule":
        return _schedule_nonsense(result)
    if name == "Plan":
        return _plan_nonsense(result)
    if name == "NcclTestsLog":
        return _log_nonsense(result)
    if isinstance(result, dict):        # nvidia-smi -p2p table
        bad = [k for k in result if not (isinstance(k, tuple) and len(k) == 2 and k[0] != k[1]
                                         and all(isinstance(i, int) and 0 <= i < 4096 for i in k))]
        return f"p2p pairs {bad[:3]}" if bad else (None if result else "no GPU pair")
    return f"unexpected result type {name}"


# ----------------------------------------------------------------------------- the loaders
def _nvsmi_p2p(path):
    from topo_probe.errors import TopologyError
    from topo_probe.capped_read import read_text
    from topo_probe.parsers.nvsmi import parse_nvsmi_p2p
    return parse_nvsmi_p2p(read_text(path, TopologyError), source=str(path))


def _nccl_tests(path):
    from synth.formats.nccl_tests import reader
    if hasattr(reader, "load_nccl_tests"):
        return reader.load_nccl_tests(path)
    return reader.parse_nccl_tests(reader.read_log_text(path), str(path))


def _topology(path):
    from topo_probe.load import load_topology
    return load_topology(str(path))


def _schedule(path):
    from synth.formats.schedule_file import load_schedule
    from synth.ir.verifier import verify
    s = load_schedule(path)
    verify(s)              # what simulate does next: it must not crash or hang either
    return s


def _plan(path):
    from synth.plan.size_plan import Plan
    return Plan.load(path)


def _nccl_xml_direct(path):
    from topo_probe.parsers.nccl_xml import parse_nccl_xml
    return parse_nccl_xml(Path(path).read_bytes().decode("utf-8", "replace"), source=str(path))


def _msccl_direct(path):
    from synth.formats.msccl.reader import from_msccl_xml
    return from_msccl_xml(Path(path).read_bytes().decode("utf-8", "replace"), source=str(path))


#: loader name -> (seed format, function(path) -> result).  All but the two ``*-direct`` rows are
#: the entry points users reach from the command lines.
LOADERS = {
    "nvidia-smi": ("text", _topology),
    "nvidia-smi-p2p": ("text", _nvsmi_p2p),
    "nccl-xml": ("xml", _topology),
    "topology-json": ("json", _topology),
    "link-matrix": ("json", _topology),
    "nccl-tests-log": ("text", _nccl_tests),
    "schedule-json": ("json", _schedule),
    "plan-json": ("json", _plan),
    "msccl-xml": ("xml", _schedule),
    "nccl-xml-direct": ("xml", _nccl_xml_direct),
    "msccl-xml-direct": ("xml", _msccl_direct),
}


# ----------------------------------------------------------------------------- seeds
def _generated_seeds() -> dict[str, list[tuple[str, bytes]]]:
    """Topology JSON, schedules and a plan written by the project itself from its presets."""
    from synth.baselines import baseline
    from synth.formats.schedule_file import save_schedule
    from synth.ir.fabric import build_fabric
    from synth.plan.size_plan import Plan, PlanEntry
    from topo_probe.machines.presets import get_preset
    from topo_probe.topology.serialize import topology_to_json
    import tempfile

    topo = {name: get_preset(name) for name in ("dgx1-v100", "mi300x", "pcie-8gpu-2socket")}
    out = {"topology-json": [(f"{n}.json", topology_to_json(t).encode()) for n, t in topo.items()]}
    schedules = []
    dgx1, mi = build_fabric(topo["dgx1-v100"]), build_fabric(topo["mi300x"])
    with tempfile.TemporaryDirectory() as tmp:
        for fabric, name, coll, root in ((dgx1, "ring", "allgather", None), (mi, "ring", "allreduce", None),
                                         (dgx1, "tree", "broadcast", 0), (mi, "direct", "alltoall", None),
                                         (dgx1, "ring", "reducescatter", None)):
            s = baseline(name, fabric, coll, root=root)
            for suffix in (".json", ".json.gz") if coll == "allgather" else (".json",):
                p = Path(tmp) / f"{coll}-{name}{suffix}"
                save_schedule(s, p)
                schedules.append((p.name, p.read_bytes()))
    out["schedule-json"] = schedules
    plan = Plan("dgx1-v100", topo["dgx1-v100"].fingerprint(), [
        PlanEntry("allgather", 0, 65536, "schedules/allgather-ring.json", None, 7.9),
        PlanEntry("allgather", 65536, None, "schedules/allgather-lp.json"),
        PlanEntry("broadcast", 0, None, "schedules/broadcast-tree.json", 0, 12.5)],
        model="results 3, cost model bb99449d8dd8, NCCL model 2.28, code 6b3457645bf6")   # as synthesize writes it
    out["plan-json"] = [("plan.json", json.dumps(plan.to_dict(), indent=1).encode())]
    codes = ["OK", "CNS", "GNS", "TNS", "NS", "DR", "U"]
    rows = [" \t" + "\t".join(f"GPU{j}" for j in range(8)) + "\t"]
    rows += [f" GPU{i}\t" + "\t".join("X" if i == j else codes[(i * j) % 7] for j in range(8)) + "\t" for i in range(8)]
    legend = "\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
    out["nvidia-smi-p2p"] = [("p2p_8gpu_generated.txt", ("\n".join(rows) + legend).encode())]
    return out


def seeds(fixtures: Path) -> dict[str, list[tuple[str, bytes]]]:
    """Seed files per loader: the real files under ``fixtures`` and documents the project writes."""
    def files(*patterns):
        return [(p.name, p.read_bytes()) for pat in patterns for p in sorted(fixtures.glob(pat))]

    out = {"nvidia-smi": [s for s in files("nvsmi_topo_*.txt") if b"p2p" not in s[0].encode()],
           "nvidia-smi-p2p": files("nvsmi_topo_p2p_*.txt"),
           "nccl-xml": files("nccl_topo_dump_*.xml", "rccl_topo/*.xml"),
           "link-matrix": files("link_matrix_*.json"),
           "nccl-tests-log": files("nccl_tests_*.txt", "real_logs/*.txt"),
           "msccl-xml": files("msccl/*.xml")}
    out.update(_generated_seeds())
    out["nccl-xml-direct"], out["msccl-xml-direct"] = out["nccl-xml"], out["msccl-xml"]
    return out


def seed_format(loader: str, data: bytes) -> str:
    """The mutation format of a seed: ``json.gz`` for gzip data, else the loader's."""
    return "json.gz" if data[:2] == b"\x1f\x8b" else LOADERS[loader][0]

"""MSCCL XML to a Schedule: replay the threadblocks' steps (sends matched to receives FIFO per connection)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from synth.formats.msccl.layout import Loc, chunk_offset
from synth.ir.collectives import CollectiveSpec, canonical
from synth.ir.schedule import Schedule, Step, Transfer
from topo_probe.errors import ScheduleFormatError


@dataclass
class _XStep:
    rank: int
    tb: int
    index: int
    kind: str
    src: Loc
    dst: Loc
    dep: tuple[int, int] | None
    peer: int
    chan: int = 0


def _attr_int(el: ET.Element, key: str, where: str) -> int:
    val = el.get(key)
    if val is None:
        raise ScheduleFormatError(f"{where}: missing attribute {key!r}")
    try:
        return int(val)
    except ValueError:
        raise ScheduleFormatError(f"{where}: attribute {key}={val!r} is not an integer") from None


def _parse_program(text: str, source: str):
    try:
        algo = ET.fromstring(text)
    except ET.ParseError as e:
        raise ScheduleFormatError(f"{source}: invalid XML: {e}") from None
    if algo.tag != "algo":
        raise ScheduleFormatError(f"{source}: root element must be <algo>, got <{algo.tag}>")
    coll = algo.get("coll", "")
    try:
        name = canonical(coll)
    except Exception:
        raise ScheduleFormatError(f"{source}: unknown coll {coll!r}") from None
    n = _attr_int(algo, "ngpus", source)
    tbs: dict[tuple[int, int], list[_XStep]] = {}
    tb_peers: dict[tuple[int, int], tuple[int, int]] = {}
    i_chunks = o_chunks = 0
    for g in algo.findall("gpu"):
        rank = _attr_int(g, "id", f"{source}: <gpu>")
        i_chunks = _attr_int(g, "i_chunks", f"{source}: gpu {rank}")
        o_chunks = _attr_int(g, "o_chunks", f"{source}: gpu {rank}")
        for tb in g.findall("tb"):
            tid = _attr_int(tb, "id", f"{source}: gpu {rank} <tb>")
            where = f"{source}: gpu {rank} tb {tid}"
            send, recv = _attr_int(tb, "send", where), _attr_int(tb, "recv", where)
            chan = _attr_int(tb, "chan", where)
            tb_peers[(rank, tid)] = (send, recv)
            steps = []
            for st in tb.findall("step"):
                sw = f"{where} step {st.get('s')}"
                kind = st.get("type", "")
                if kind not in ("s", "r", "rrc", "cpy", "nop"):
                    raise ScheduleFormatError(f"{sw}: step type {kind!r} is not supported by the importer")
                depid, deps = _attr_int(st, "depid", sw), _attr_int(st, "deps", sw)
                peer = send if kind == "s" else recv if kind in ("r", "rrc") else -1
                steps.append(_XStep(rank, tid, _attr_int(st, "s", sw), kind,
                                    (st.get("srcbuf", "i"), _attr_int(st, "srcoff", sw)),
                                    (st.get("dstbuf", "o"), _attr_int(st, "dstoff", sw)),
                                    (depid, deps) if depid >= 0 else None, peer, chan))
            tbs[(rank, tid)] = steps
    return algo, name, n, i_chunks, o_chunks, tbs


def _infer_spec(algo, name: str, n: int, i_chunks: int, o_chunks: int, tbs) -> CollectiveSpec:
    chunks = max(i_chunks, o_chunks)
    per_rank = chunks if name in ("broadcast", "reduce") else max(1, chunks // n)
    root = None
    if name in ("broadcast", "reduce", "gather", "scatter"):
        senders = {s.rank for lst in tbs.values() for s in lst if s.kind == "s"}
        receivers = {s.rank for lst in tbs.values() for s in lst if s.kind in ("r", "rrc")}
        lonely = [r for r in range(n) if r not in (receivers if name in ("broadcast", "scatter") else senders)]
        root = lonely[0] if lonely else 0
    return CollectiveSpec(name, n, per_rank, root)


def from_msccl_xml(text: str, *, source: str = "<xml>", fabric=None) -> Schedule:
    """Rebuild a Schedule from MSCCL XML by replaying its program.

    Sends are matched to receives first-in first-out per (sender, receiver) connection.  Each
    transfer gets the earliest step consistent with the data it reads and the places it writes
    (reads see the start of a step, writes land at its end).  Chunk identities come from
    tracking what every buffer slot holds, starting from the collective's input layout.
    With a :class:`synth.ir.fabric.Fabric`, each step declares the rounds its loads need and the
    schedule is tagged with the fabric's topology; without one every step declares 1 round.
    """
    algo, name, n, i_chunks, o_chunks, tbs = _parse_program(text, source)
    spec = _infer_spec(algo, name, n, i_chunks, o_chunks, tbs)
    content: list[dict[Loc, int]] = [{} for _ in range(n)]
    for ch in spec.chunks():
        for r in ch.pre:
            content[r][("i", chunk_offset(spec, spec.input_position(ch.id, r)))] = ch.id
    last_write = [dict() for _ in range(n)]   # loc -> time the last write lands
    last_read = [dict() for _ in range(n)]    # loc -> latest read time
    base_write = [dict() for _ in range(n)]   # loc -> time the last non-accumulating write lands
    done: dict[tuple[int, int, int], float] = {}
    heads = {key: 0 for key in tbs}
    fifo: dict[tuple[int, int, int], list[tuple[int, int, float, Loc]]] = {}
    transfers: list[tuple[int, Transfer]] = []
    tb_busy: dict[tuple[int, int], float] = {}  # a threadblock runs its network steps one per step
    progress = True
    while progress:
        progress = False
        for key, lst in tbs.items():
            while heads[key] < len(lst):
                st = lst[heads[key]]
                if st.dep is not None and (st.rank, *st.dep) not in done:
                    break
                rank = st.rank
                if st.kind == "nop":
                    t = 0.0
                elif st.kind == "cpy":
                    t = max(last_write[rank].get(st.src, 0.0), last_read[rank].get(st.dst, 0.0),
                            last_write[rank].get(st.dst, 0.0))
                    content[rank][st.dst] = content[rank].get(st.src, -1)
                    last_read[rank][st.src] = max(last_read[rank].get(st.src, 0.0), t)
                    last_write[rank][st.dst] = base_write[rank][st.dst] = t
                elif st.kind == "s":
                    if st.src not in content[rank]:
                        raise ScheduleFormatError(f"{source}: gpu {rank} tb {st.tb} step {st.index}: sends "
                                                  f"{st.src[0]}[{st.src[1]}] before anything is there")
                    t = max(float(int(last_write[rank].get(st.src, 0.0))), tb_busy.get(key, 0.0))
                    tb_busy[key] = t + 1
                    fifo.setdefault((rank, st.peer, st.chan), []).append((content[rank][st.src], st.tb, t, st.src))
                else:  # r / rrc
                    queue = fifo.get((st.peer, rank, st.chan), [])
                    if not queue:
                        break
                    chunk, _, t_send, src_loc = queue.pop(0)
                    t = max(t_send, last_read[rank].get(st.dst, 0.0), last_write[rank].get(st.dst, 1.0) - 1,
                            tb_busy.get(key, 0.0))
                    if st.kind == "rrc":  # reduces into one place may share a step (they commute)
                        t = max(t, base_write[rank].get(st.dst, 0.0))
                    else:
                        t = max(t, last_write[rank].get(st.dst, 0.0))
                    t = float(int(t))
                    tb_busy[key] = t + 1
                    sender_read = last_read[st.peer]
                    sender_read[src_loc] = max(sender_read.get(src_loc, 0.0), t)
                    last_write[rank][st.dst] = max(last_write[rank].get(st.dst, 0.0), t + 1)
                    if st.kind == "r":
                        base_write[rank][st.dst] = t + 1
                    content[rank][st.dst] = chunk
                    transfers.append((int(t), Transfer(chunk, st.peer, rank,
                                                       "reduce" if st.kind == "rrc" else "copy")))
                done[(rank, st.tb, st.index)] = t
                heads[key] += 1
                progress = True
    stuck = [f"gpu {k[0]} tb {k[1]} step {heads[k]}" for k, lst in tbs.items() if heads[k] < len(lst)]
    if stuck:
        raise ScheduleFormatError(f"{source}: program cannot finish (deadlock or unmatched send/recv) at "
                                  f"{', '.join(stuck[:3])}")
    nsteps = 1 + max((t for t, _ in transfers), default=-1)
    by_step: list[list[Transfer]] = [[] for _ in range(nsteps)]
    for t, tr in transfers:
        by_step[t].append(tr)
    if fabric is None:
        steps = tuple(Step(1, tuple(ts)) for ts in by_step if ts)
        topo_name = topo_fp = ""
    else:
        from synth.ir.verifier import required_rounds
        steps = tuple(Step(required_rounds(fabric, [(t.src, t.dst) for t in ts]), tuple(ts))
                      for ts in by_step if ts)
        topo_name, topo_fp = fabric.topology_name, fabric.fingerprint
    return Schedule(spec.name, n, spec.chunks_per_rank, steps, spec.root, False,
                    algo.get("name", ""), topo_name, topo_fp, meta={"imported_from": "msccl-xml"})

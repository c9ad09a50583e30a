"""MSCCL XML to a verified Schedule: parse and check the program
(:mod:`synth.formats.msccl.program`), replay it (:mod:`synth.formats.msccl.replay`), verify.

>>> from synth.formats.msccl.writer import to_msccl_xml
>>> from synth.baselines import baseline
>>> from synth.ir.fabric import build_fabric
>>> from topo_probe.machines.generators import ring
>>> f = build_fabric(ring(4))
>>> s = baseline("ring", f, "allreduce")
>>> back = from_msccl_xml(to_msccl_xml(s), fabric=f)
>>> key = lambda sch: sorted((t.chunk, t.src, t.dst, t.op) for st in sch.steps for t in st.transfers)
>>> back.collective, back.ranks, key(back) == key(s)
('allreduce', 4, True)
"""

from __future__ import annotations

from synth.formats.msccl.program import RECEIVES, parse_program
from synth.formats.msccl.replay import Replay, infer_spec
from synth.ir.schedule import Schedule, Step
from topo_probe.errors import ScheduleFormatError, ScheduleInvalid


def _run(rp: Replay, source: str) -> None:
    """Advance every threadblock as far as its dependencies and messages allow, until done."""
    prog = rp.prog
    step_end: dict[tuple[int, int, int], int] = {}
    for (rank, tb), ops in prog.tbs.items():
        for k, op in enumerate(ops):
            step_end[(rank, tb, op.step)] = k + 1
    heads = {key: 0 for key in prog.tbs}
    done_t: dict[tuple[int, int, int], float] = {}
    busy: dict[tuple[int, int], float] = {}
    progress = True
    while progress:
        progress = False
        for key, ops in prog.tbs.items():
            while heads[key] < len(ops):
                op = ops[heads[key]]
                t0 = busy.get(key, 0.0)
                if op.dep is not None:
                    dkey = (op.rank, *op.dep)
                    if dkey not in step_end:
                        raise ScheduleFormatError(f"{source}: {op.where}: waits for tb {op.dep[0]} step {op.dep[1]}, "
                                                  f"which does not exist")
                    if heads[(op.rank, op.dep[0])] < step_end[dkey]:
                        break
                    t0 = max(t0, done_t.get(dkey, 0.0))
                if op.kind == "nop":
                    t = t0
                elif op.kind in ("cpy", "re"):
                    t = rp.local(op, t0)
                elif op.kind in RECEIVES:
                    t = rp.receive(op, t0)
                    if t is None:
                        break
                    busy[key] = t + 1
                else:                                  # s
                    src = rp.norm(op.rank, op.src)
                    chunk = rp._holding(op, src)
                    t = max(t0, float(int(rp.write_t[op.rank].get(src, 0.0))))
                    busy[key] = t + 1
                    rp.send(op, src, chunk, t)
                dkey = (op.rank, op.tb, op.step)
                done_t[dkey] = max(done_t.get(dkey, 0.0), t)
                heads[key] += 1
                progress = True
    stuck = [f"gpu {k[0]} tb {k[1]} step {prog.tbs[k][heads[k]].step}" for k in prog.tbs if heads[k] < len(prog.tbs[k])]
    if stuck:
        raise ScheduleFormatError(f"{source}: program cannot finish (deadlock or unmatched send/recv) at "
                                  f"{', '.join(stuck[:3])}")
    left = [k for k, q in rp.fifo.items() if q]
    if left:
        raise ScheduleFormatError(f"{source}: gpu {left[0][0]} sends to gpu {left[0][1]} on channel {left[0][2]} "
                                  f"more than that gpu receives")


def from_msccl_xml(text: str, *, source: str = "<xml>", fabric=None) -> Schedule:
    """Rebuild a verified Schedule from MSCCL XML by replaying its program.

    With a :class:`~synth.ir.fabric.Fabric` each step declares the rounds its loads need and the
    schedule is checked against the fabric's channels and capacities; without one every step
    declares 1 round and only the collective's semantics are checked.

    Raises
    ------
    ScheduleFormatError
        A malformed or hostile file, or a program that does not implement its collective (one
        line naming gpu, threadblock and step where it can).
    """
    prog = parse_program(text, source)
    spec = infer_spec(prog)
    if fabric is not None and fabric.num_ranks != prog.ngpus:
        raise ScheduleFormatError(f"{source}: ngpus={prog.ngpus} but the topology has {fabric.num_ranks} ranks")
    rp = Replay(prog, spec, source)
    _run(rp, source)
    rp.check_outputs()
    nsteps = 1 + max((t for t, _ in rp.transfers), default=-1)
    by_step = [[] for _ in range(nsteps)]
    for t, tr in rp.transfers:
        by_step[t].append(tr)
    if fabric is None:
        steps = tuple(Step(1, tuple(ts)) for ts in by_step if ts)
        topo_name = topo_fp = ""
    else:
        from synth.ir.verifier import required_rounds
        steps = tuple(Step(required_rounds(fabric, [(t.src, t.dst) for t in ts]), tuple(ts)) for ts in by_step if ts)
        topo_name, topo_fp = fabric.topology_name, fabric.fingerprint
    sched = Schedule(spec.name, prog.ngpus, spec.chunks_per_rank, steps, spec.root, False, prog.name, topo_name,
                     topo_fp, meta={"imported_from": "msccl-xml", "msccl": {
                         "proto": prog.proto, "channels": len(prog.channels), "inplace": prog.inplace,
                         "min_bytes": prog.min_bytes, "max_bytes": prog.max_bytes}})
    from synth.ir.verifier import check
    try:
        check(sched, fabric)
    except ScheduleInvalid as e:
        raise ScheduleFormatError(f"{source}: the program does not implement {spec.name}: {e}") from None
    return sched


__all__ = ["from_msccl_xml"]

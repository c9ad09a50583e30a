"""Small MSCCL XML programs written by hand for tests (not a test module), and an independent
numeric check of imported schedules.

``program(coll, ngpus, chunks, gpus)`` writes the XML: ``gpus`` maps a gpu id to
``(i_chunks, o_chunks, s_chunks, tbs)``, a tb is ``(send, recv, chan, steps)`` and a step a tuple
``(type, srcbuf, srcoff, dstbuf, dstoff[, cnt[, depid, deps[, hasdep]]])``.  ``hasdep`` defaults
to 1 so hand-written dependencies are signalled.
"""

from __future__ import annotations

import numpy as np

HEAD = ('<algo name="{name}" proto="Simple" nchannels="{nchan}" nchunksperloop="{chunks}" ngpus="{n}" '
        'coll="{coll}" inplace="{ip}" outofplace="{oop}" minBytes="0" maxBytes="0">')


def program(coll: str, n: int, chunks: int, gpus: dict, *, inplace: int = 0, outofplace: int = 1,
            name: str = "hand") -> str:
    nchan = 1 + max((tb[2] for g in gpus.values() for tb in g[3]), default=0)
    out = [HEAD.format(name=name, nchan=nchan, chunks=chunks, n=n, coll=coll, ip=inplace, oop=outofplace)]
    for gid in sorted(gpus):
        i, o, s, tbs = gpus[gid]
        out.append(f'<gpu id="{gid}" i_chunks="{i}" o_chunks="{o}" s_chunks="{s}">')
        for tid, (send, recv, chan, steps) in enumerate(tbs):
            out.append(f'<tb id="{tid}" send="{send}" recv="{recv}" chan="{chan}">')
            for k, st in enumerate(steps):
                kind, sb, so, db, do = st[:5]
                cnt = st[5] if len(st) > 5 else (0 if kind == "nop" else 1)
                depid, deps = (st[6], st[7]) if len(st) > 7 else (-1, -1)
                hasdep = st[8] if len(st) > 8 else 1
                out.append(f'<step s="{k}" type="{kind}" srcbuf="{sb}" srcoff="{so}" dstbuf="{db}" dstoff="{do}" '
                           f'cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>')
            out.append("</tb>")
        out.append("</gpu>")
    out.append("</algo>")
    return "\n".join(out)


def ring_allreduce_fused(n: int) -> str:
    """Ring allreduce of n GPUs with one chunk per rank in RCCL's fused style: chunk g starts
    at rank g+1 (s), passes n-2 ranks with rrs, ends reduced at rank g (rrcs into o[g]), goes
    round with rcs and lands at rank g-1 with r.  One threadblock per GPU (send next, recv prev)."""
    gpus = {}
    for r in range(n):
        steps = [("s", "i", (r - 1) % n, "o", (r - 1) % n)]
        for k in range(1, n - 1):
            g = (r - 1 - k) % n
            steps.append(("rrs", "i", g, "o", g))
        steps.append(("rrcs", "i", r, "o", r))
        for k in range(1, n - 1):
            g = (r - k) % n
            steps.append(("rcs", "i", g, "o", g))
        g = (r + 1) % n
        steps.append(("r", "i", g, "o", g))
        steps = [st + (1, -1, -1, 0) for st in steps]
        gpus[r] = (n, n, 0, [((r + 1) % n, (r - 1) % n, 0, steps)])
    return program("allreduce", n, n, gpus, inplace=1, outofplace=1, name="ring-fused")


def check_numerically(schedule, seed: int = 0) -> None:
    """Run the schedule's transfers on random integers and compare every post rank's chunks
    with the collective's definition (sum of the pre ranks' inputs, or the source's input)."""
    spec = schedule.spec
    rng = np.random.default_rng(seed)
    data = {(r, c.id): int(rng.integers(1, 1000)) for c in spec.chunks() for r in c.pre}
    held = dict(data)
    for step in schedule.steps:
        snap = dict(held)
        for t in step.transfers:
            v = snap[(t.src, t.chunk)]
            held[(t.dst, t.chunk)] = held.get((t.dst, t.chunk), 0) + v if t.op == "reduce" else v
    for c in spec.chunks():
        want = sum(data[(r, c.id)] for r in c.pre)
        for r in c.post:
            assert held.get((r, c.id)) == want, (r, c.id)


def chain_broadcast(n: int, chunks: int, root: int, name: str = "chain"):
    """A pipelined chain broadcast from ``root`` (chunk c crosses hop h at step c + h)."""
    from synth.ir.schedule import Schedule, Step, Transfer
    order = [(root + i) % n for i in range(n)]
    steps = []
    for t in range(chunks + n - 2):
        ts = [Transfer(c, order[h], order[h + 1]) for h in range(n - 1) for c in range(chunks) if c + h == t]
        steps.append(Step(1, tuple(ts)))
    return Schedule("broadcast", n, chunks, tuple(steps), root=root, name=name)

"""An independent NumPy replay of schedules, shared by tests (not a test module).

It reads only the schedule's transfers and the chunk pre/postconditions, never the verifier.
"""

import numpy as np


def replays_correctly(s, seed: int = 0) -> bool:
    """Execute ``s`` on random integers: combining chunks must end as the sum of the per-rank
    contributions, other chunks as their owner's value (-1 marks a slot never written).  Every
    transfer of a step reads the state at the start of the step."""
    spec = s.spec
    n, m = spec.ranks, spec.num_chunks
    rng = np.random.default_rng(seed)
    contrib = rng.integers(1, 2**40, size=(n, m))
    buf = np.full((n, m), -1, dtype=np.int64)
    chunks = spec.chunks()
    for c in chunks:
        buf[list(c.pre), c.id] = contrib[list(c.pre), c.id]
    for step in s.steps:
        new = buf.copy()
        for t in step.transfers:
            if t.op == "copy":
                new[t.dst, t.chunk] = buf[t.src, t.chunk]
            else:
                new[t.dst, t.chunk] += buf[t.src, t.chunk]
        buf = new
    return all(int(buf[r, c.id]) == int(contrib[list(c.pre), c.id].sum()) for c in chunks for r in c.post)

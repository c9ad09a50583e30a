"""The verifier's replay of one step in bulk, for a step that breaks no transfer rule.

:class:`synth.ir.verifier._Replay` checks transfer by transfer and explains every broken rule;
most steps of a big schedule break none.  :func:`replay_clean_step` tests a whole step at once
(ranks, chunks and ops over NumPy arrays read by :mod:`synth.ir.step_columns`, collected for
the same-bits check where the replay keeps them; channels over the fabric's route table; the symbolic
state with one pass over the transfers and nothing else) and, when every transfer passes, writes
the step's result into the state exactly as the transfer-by-transfer replay would: a copy sets
the destination's value, reduces into one (rank, chunk) combine the contributions.  When any
check fails it changes nothing and returns None: the caller then replays the step one transfer
at a time and reports what is wrong.
"""

from __future__ import annotations

import numpy as np

from synth.ir.route_table import route_table
from synth.ir.step_columns import read_columns

__all__ = ["replay_clean_step"]


def _channels_ok(replay, src: np.ndarray, dst: np.ndarray) -> bool:
    """Is every ``src[k] -> dst[k]`` a channel of the replay's fabric?  (The route table where the
    fabric has one, else the replay's per-pair memo of ``has_channel``.)"""
    fabric, n = replay.fabric, replay.n
    table = route_table(fabric) if type(fabric.channels) is dict else None
    if table is not None:
        return bool((table.slot[src * n + dst] >= 0).all())
    memo = replay.channel_ok
    for code in np.unique(src * n + dst).tolist():
        pair = divmod(code, n)
        ok = memo.get(pair)
        if ok is None:
            ok = memo[pair] = fabric.has_channel(*pair)
        if not ok:
            return False
    return True


def _combine(state: dict, keys: list[int], vals: list[int], reduces: list[bool]) -> dict | None:
    """The new values of the written (rank, chunk) slots of a combining collective, or None where
    some write breaks a rule (reduce into nothing, contributions counted twice, a copy that loses
    contributions or meets another write)."""
    get = state.get
    new: dict[int, int] = {}
    copied: set[int] = set()
    for key, val, reduce in zip(keys, vals, reduces):
        acc = new.get(key)
        if acc is None:
            cur = get(key, 0)
            if reduce:
                if not cur or cur & val:
                    return None
                new[key] = cur | val
            else:
                if cur & ~val:
                    return None
                new[key] = val
                copied.add(key)
        elif not reduce or key in copied or acc & val:
            return None
        else:
            new[key] = acc | val
    return new


def replay_clean_step(replay, si: int, step) -> list[tuple[int, int]] | None:
    """Replay ``step`` (index ``si``) of ``replay`` (a :class:`synth.ir.verifier._Replay`) in bulk
    when none of its transfers breaks a rule: the state is updated and the ``(src, dst)`` pairs of
    its transfers, in order, are returned for the capacity test (an empty list when the replay has
    no fabric).  None, with nothing changed, when some transfer may break a rule, the step
    declares fewer than 1 round."""
    if step.rounds < 1:
        return None
    n, m, state = replay.n, replay.m, replay.state
    cols = replay.columns[si] if replay.columns is not None else None    # read by an earlier verification
    if cols is None:
        cols = read_columns(step.transfers)
        if cols is None:
            return None
        if replay.columns is not None:                    # for the same-bits check of this schedule
            replay.columns[si] = cols
    chunk, src, dst, is_reduce = cols
    if ((chunk < 0) | (chunk >= m) | (src < 0) | (src >= n) | (dst < 0) | (dst >= n) | (src == dst)).any():
        return None
    if not replay.combining and is_reduce.any():
        return None
    if replay.fabric is not None and not _channels_ok(replay, src, dst):
        return None
    vals = list(map(state.get, (src * m + chunk).tolist(), [0] * len(chunk)))
    if not all(vals):
        return None
    keys = (dst * m + chunk).tolist()
    if replay.combining:
        new = _combine(state, keys, vals, is_reduce.tolist())
        if new is None:
            return None
    else:
        new = dict(zip(keys, vals))
        if len(new) != len(keys):            # two copies into one (rank, chunk)
            return None
    state.update(new)
    return list(zip(src.tolist(), dst.tolist())) if replay.fabric is not None else []

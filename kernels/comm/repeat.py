"""Repeated calls bound once: a Communicator collective called again with the same array objects
and arguments replays the native launch bound by its first call (no validation, lowering or
binding again), so its host time is one CUDA graph launch per GPU."""

from __future__ import annotations

import functools

from kernels.comm.validation import _is_list

#: bound native launches a Communicator keeps for repeated calls
BOUND_CALLS_KEPT = 64


def repeatable(method):
    """A collective whose identical repeat (same arrays, same arguments) on GPU arrays runs the
    launch bound the first time, skipping validation, lowering and binding; each array is
    referenced by the cache, so its ``id`` cannot be reused while the entry lives."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        arrays, scalars = [], []
        for a in args:
            if _is_list(a):
                arrays.extend(a)
            else:
                scalars.append(a)
        key = (name, tuple(map(id, arrays)), tuple(scalars), tuple(sorted(kwargs.items())))
        if self._bound:
            hit = self._bound.get(key)
            if hit is not None:
                hit[0]()
                self.last_route = hit[3]         # the route of the call it repeats
                return hit[2]
        self._bound_call = None
        out = method(self, *args, **kwargs)
        if self._bound_call is not None:
            self._remember(key, tuple(arrays), out)
        return out
    return wrapper




__all__ = ["repeatable", "BOUND_CALLS_KEPT"]

"""Repeated collective calls with the same arguments: the checks and choices of the first call
are not made again.

A training loop calls ``all_reduce(grad, grad)`` on the same arrays every step.  The first call
checks the arrays, picks the schedule, lowers it, binds the buffers and computes the call's
header digest; everything that follows from its arguments is the same next time.  When a call
of :class:`~kernels.mpi.communicator.MPICommunicator` ran exactly one schedule, :class:`CallMemo`
keeps what it prepared (:meth:`MPICommunicator._launch`'s argument) under the call's arguments:
the method, the identity and the shape, strides, dtype and writeability of each NumPy array, and the other
arguments' values.  A later call with the same key skips to the launch: the per-call agreement
and the run.  Only arguments met twice are kept (so a loop over fresh arrays keeps nothing),
at most :data:`MAX_CALLS` of them and only calls whose arrays hold at most
:data:`MAX_CALL_BYTES`; each kept call keeps its arrays alive until dropped, and a call that
raises drops its entry.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

#: calls remembered per communicator
MAX_CALLS = 16
#: largest total size of a remembered call's arrays, bytes
MAX_CALL_BYTES = 16 << 20


class CallMemo:
    """The calls of one communicator worth replaying (see module docstring).

    The collective wrapper (:func:`kernels.mpi.agreement.agreed`) asks :meth:`key` and
    :meth:`get` before a call; a miss runs the method with :attr:`trace` set to a list, into
    which the communicator appends what it launches, and :meth:`keep` stores it afterwards.
    """

    def __init__(self) -> None:
        self._calls: OrderedDict = OrderedDict()   # key -> (arrays, signatures, prepared, result)
        self._seen: OrderedDict = OrderedDict()    # keys met once
        #: launches of the call in progress (a list while a call is traced, else None)
        self.trace: list | None = None

    def clear(self) -> None:
        self._calls.clear()
        self._seen.clear()

    @staticmethod
    def key(name: str, args: tuple, kwargs: dict):
        """The call's key, or None when an argument is neither a NumPy array nor a plain value
        (a list, a CuPy array, a stream object: such calls are never replayed)."""
        parts: list = [name]
        for v in (*args, *kwargs.values()):
            if type(v) is np.ndarray:
                parts.append(id(v))
            elif v is None or type(v) in (int, str, bool, float):
                parts.append(v)
            else:
                return None
        parts.extend(kwargs)
        return tuple(parts)

    def get(self, key, args: tuple, kwargs: dict):
        """``(prepared, result)`` of the call kept under ``key`` if its arrays are still the
        ones it was made with, unchanged in shape, strides, dtype and writeability (an output made
        read-only since is refused by the full call, not written); else None."""
        hit = self._calls.get(key)
        if hit is None:
            return None
        arrays, sigs, prepared, result = hit
        k = 0
        for v in (*args, *kwargs.values()):
            if type(v) is np.ndarray:
                shape, strides, dtype, writeable = sigs[k]
                if (v is not arrays[k] or v.shape != shape or v.strides != strides or v.dtype != dtype
                        or v.flags.writeable != writeable):
                    del self._calls[key]
                    return None
                k += 1
        self._calls.move_to_end(key)
        return prepared, result

    def keep(self, key, args: tuple, kwargs: dict, result) -> None:
        """After a traced call with ``key`` that launched exactly one schedule: remember it if
        the same key was met before and its arrays are small enough."""
        trace, self.trace = self.trace, None
        if key is None or trace is None or len(trace) != 1:
            return
        if key not in self._seen:
            self._seen[key] = None
            if len(self._seen) > 4 * MAX_CALLS:
                self._seen.popitem(last=False)
            return
        arrays = [v for v in (*args, *kwargs.values()) if type(v) is np.ndarray]
        if sum(a.nbytes for a in arrays) > MAX_CALL_BYTES:
            return
        del self._seen[key]
        self._calls[key] = (arrays, [(a.shape, a.strides, a.dtype, a.flags.writeable) for a in arrays], trace[0], result)
        if len(self._calls) > MAX_CALLS:
            self._calls.popitem(last=False)

    def drop(self, key) -> None:
        self._calls.pop(key, None)


__all__ = ["CallMemo", "MAX_CALLS", "MAX_CALL_BYTES"]

"""Results computed from a fabric's structure, kept across fabric objects of that structure.

Every command builds its own :class:`synth.ir.fabric.Fabric`, often of one topology again
(``synthesize``, ``simulate`` and ``sweep`` of one machine, each collective's baselines), so a pure
search on a fabric is repeated for equal fabrics.  :func:`structure_key` digests what such a
search may read, :class:`SharedResults` keeps the last results by that key.  The topology's
fingerprint alone is not a key: fabrics of one topology with another ``transport`` or
``unit_gbps`` share it but not their channels or capacities.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Callable, Generic, TypeVar

from synth.ir.fabric import Fabric

__all__ = ["SharedResults", "structure_key"]

T = TypeVar("T")


def structure_key(fabric: Fabric, *args: object) -> str:
    """A SHA-256 digest of the fabric's class (``capacity`` may be overridden), rank count, hosts,
    round unit (GB/s), resources in order with their bandwidths (GB/s), every channel's route
    (exact fractions) in order, and ``args`` (by ``repr``).  Latencies, names and the
    fingerprint do not count.

    >>> from synth.ir.fabric import build_fabric
    >>> from topo_probe.machines.generators import ring
    >>> f = build_fabric(ring(4))
    >>> structure_key(f, 8) == structure_key(build_fabric(ring(4)), 8), structure_key(f, 8) == structure_key(f, 9)
    (True, False)
    >>> structure_key(f) == structure_key(build_fabric(ring(4), unit_gbps=2 * f.unit_gbps))
    False
    """
    digest = hashlib.sha256(repr((type(fabric).__module__, type(fabric).__qualname__, fabric.num_ranks,
                                  list(fabric.hosts), float(fabric.unit_gbps), args,
                                  [(r, info.bandwidth_gbps) for r, info in fabric.resources.items()])).encode())
    digest.update(repr([(pair, [(r, f.numerator, f.denominator) for r, f in route])
                        for pair, route in fabric.channels.items()]).encode())
    return digest.hexdigest()


class SharedResults(Generic[T]):
    """The last ``size`` results by key (least recently used dropped first), thread-safe.  Keep
    only immutable results here: every caller gets the same object."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, make: Callable[[], T]) -> T:
        """The result kept for ``key``, else ``make()`` (outside the lock), kept."""
        with self._lock:
            got = self._kept.get(key)
            if got is not None:
                self._kept.move_to_end(key)
                return got
        got = make()
        with self._lock:
            self._kept[key] = got
            while len(self._kept) > self.size:
                self._kept.popitem(last=False)
        return got

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

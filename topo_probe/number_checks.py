"""The range checks of numbers every loader and argument check uses: :func:`check_int` and :func:`check_float`
refuse a value that is no integer / finite real number (:mod:`topo_probe.number_rules`) or is out of range, in one
line of the caller's error class naming ``where`` and quoting the value (:func:`topo_probe.errors.show`).

>>> from topo_probe.errors import TopologyError
>>> from topo_probe.limits import MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
>>> check_float(float("nan"), "m.json: link_bandwidth_gbps", TopologyError, lo=MIN_BANDWIDTH_GBPS,
...             hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
Traceback (most recent call last):
...
topo_probe.errors.TopologyError: m.json: link_bandwidth_gbps must be a finite number, got nan
"""

from __future__ import annotations

import math
from typing import Any

from topo_probe.errors import show
from topo_probe.number_rules import is_int, is_real

__all__ = ["check_int", "check_float"]


def check_int(value: Any, where: str, error: type[Exception], *, lo: int = 0, hi: int, what: str = "") -> int:
    """``value`` as an int if it is an integer (:func:`is_int`) in ``lo..hi``; else ``error`` naming ``where``."""
    if not is_int(value) or value < lo:
        raise error(f"{where} must be an integer >= {lo}, got {show(value)}")
    if value > hi:
        raise error(f"{where} must be at most {hi}{' ' + what if what else ''}, got {show(value)}")
    return int(value)


def check_float(value: Any, where: str, error: type[Exception], *, lo: float, hi: float,
                lo_open: bool = False, unit: str = "") -> float:
    """``value`` as a float if finite real (:func:`is_real`) in [lo, hi] (``(lo, hi]`` with ``lo_open``); else error."""
    rel = ">" if lo_open else ">="
    if not is_real(value):
        raise error(f"{where} must be {rel} {lo:g}, got {show(value)}")
    try:
        num = float(value)
    except OverflowError:
        num = math.inf
    if not math.isfinite(num):
        raise error(f"{where} must be a finite number, got {show(value)}")
    if num < lo or (lo_open and num == lo):
        raise error(f"{where} must be {rel} {lo:g}{' ' + unit if unit and lo else ''}, got {show(value)}")
    if num > hi:
        raise error(f"{where} must be at most {hi:g}{' ' + unit if unit else ''}, got {show(value)}")
    return num

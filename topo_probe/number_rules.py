"""What counts as a number: the project's one rule for an integer (:func:`is_int`) and a real number
(:func:`is_real`), and :func:`ascii_int` for digits read from text.  The range checks that refuse a value in one
line are :mod:`topo_probe.number_checks`.

>>> [is_int(v) for v in (3, True, 3.0)], [is_real(v) for v in (2.5, True, 1j)]
([True, False, False], [True, False, False])
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

__all__ = ["is_int", "is_int_type", "is_real", "ascii_int"]


def is_int_type(kind: type) -> bool:
    """Whether ``kind`` is an integer type (``int``, NumPy's, :class:`numbers.Integral`), but not ``bool``/``bool_``."""
    return kind is int or (issubclass(kind, Integral) and not issubclass(kind, bool))   # int first: ABC check is slow


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer by :func:`is_int_type`, the project's one rule for it.

    >>> [is_int(v) for v in (3, True, 3.0, "3")]
    [True, False, False, False]
    """
    return is_int_type(type(value))


def is_real(value: Any) -> bool:
    """Whether ``value`` is a real number: an int, a float, a NumPy integer or float or another
    :class:`numbers.Real`, but not a bool, ``numpy.bool_`` or complex; the project's one rule for it,
    beside :func:`is_int` (finiteness and range are the caller's:
    :func:`~topo_probe.number_checks.check_float`).

    >>> [is_real(v) for v in (3, 2.5, True, 1j, "3")]
    [True, True, False, False, False]
    """
    kind = type(value)
    return kind is float or kind is int or (isinstance(value, Real) and not isinstance(value, bool))


def ascii_int(text: str | None, max_digits: int = 18) -> int | None:
    """``int(text)`` when ``text`` is 1..max_digits ASCII digits, else None (``'²'.isdigit()``
    is True in Python, ``int('²')`` raises; a 5000-digit string would too).

    >>> ascii_int("12"), ascii_int("²"), ascii_int("1" * 40), ascii_int(None)
    (12, None, None, None)
    """
    if text is None or not 0 < len(text) <= max_digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)

"""Wire formats and cast kernels of the compressed collectives (:mod:`kernels.comm.compression`).

Formats (``compression=``)
--------------------------
``"fp16"``  IEEE half: unit roundoff ``u = 2**-11``, largest value 65504 (larger |x| raise
            ValueError), subnormal rounding error ``alpha = 2**-25`` (absolute).
``"bf16"``  bfloat16: ``u = 2**-8``, float32's range, ``alpha = 2**-134`` (absolute).
``"fp8"``   float8 e4m3 (``float8_e4m3fn``, max 448) with one float32 scale per *group*
            of ``group_size`` elements: ``s = max|x| / 448`` over the group, ``q = e4m3(x / s)``,
            ``x^ = q * s``.  ``u = 2**-4``; subnormal error ``alpha = 2**-10`` relative to ``s``.

The cost of one quantization (``u'``, ``alpha'``) is in :mod:`kernels.comm.compression`.

Device seam
-----------
The casts are one function pair per format, looked up in :data:`CAST_KERNELS` by
``(backend, format)``: ``encode(x, group_size) -> uint8 payload`` with ``x`` float32 of shape
``(k, B)`` and ``decode(payload, B, group_size) -> float32 (k, B)``.  Host kernels use NumPy +
ml_dtypes.  For CuPy, fp16 (native float16) and bf16 (integer bit rounding,
:func:`encode_bf16_bits`, tested bit for bit against ml_dtypes on the host) are registered;
fp8 has no device kernel here: :func:`register_cast` ``("cupy", "fp8", ...)`` installs one
(a CuPy ``ElementwiseKernel`` for instance), until then CuPy arrays take a host round trip
(correct, slow; warned once).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np

from synth.plan.user_warning import warn_user
from topo_probe.errors import InvalidArgument, show

E32 = 2.0 ** -24
"""float32 unit roundoff."""


@dataclass(frozen=True)
class Format:
    """A wire format: unit roundoff ``u``, subnormal error ``alpha``, largest value, scaled?"""

    name: str
    u: float
    alpha: float
    max_value: float
    scaled: bool
    itemsize: int


FORMATS = {
    "fp16": Format("fp16", 2.0 ** -11, 2.0 ** -25, 65504.0, False, 2),
    "bf16": Format("bf16", 2.0 ** -8, 2.0 ** -134, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), False, 2),
    "fp8": Format("fp8", 2.0 ** -4, 2.0 ** -10, 448.0, True, 1),
}
DEFAULT_GROUP = 512
"""Elements per fp8 scale (4 bytes of scale per 512 bytes of payload: < 1% overhead)."""


def get_format(name: str, owner: str = "get_format") -> Format:
    """The :class:`Format` called ``name`` (fp16, bf16, fp8; e4m3, float16 and bfloat16 are aliases), else
    InvalidArgument in one line naming ``owner`` (the caller, e.g. ``"Communicator.compressed_all_reduce"``),
    the value through :func:`topo_probe.errors.show`.  The one rule for a compression name; it reads the plain
    string (``str.__str__``), so a str subclass cannot pass by lying in ``__eq__``/``__hash__``/``lower``.

    >>> get_format("fp4", "Communicator.compressed_all_reduce")
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: Communicator.compressed_all_reduce: compression must be one of fp16, \
bf16, fp8; got 'fp4'
    """
    key = str.lower(str.__str__(name)) if isinstance(name, str) else None
    key = {"e4m3": "fp8", "float16": "fp16", "bfloat16": "bf16"}.get(key, key)
    if key not in FORMATS:
        raise InvalidArgument(f"{owner}: compression must be one of {', '.join(FORMATS)}; got {show(name)}")
    return FORMATS[key]


def _groups(b: int, group_size: int | None) -> tuple[int, int]:
    """(groups per block, elements per group) for blocks of ``b`` elements."""
    g = b if not group_size else min(int(group_size), max(b, 1))
    g = max(g, 1)
    return max(1, math.ceil(b / g)), g


def payload_bytes(fmt: str, b: int, group_size: int | None = DEFAULT_GROUP) -> int:
    """Bytes on the wire for one block of ``b`` elements (a multiple of 4).

    >>> payload_bytes("fp16", 10), payload_bytes("fp8", 10, 4)
    (20, 24)
    """
    f = get_format(fmt)
    if not f.scaled:
        return -(-b * f.itemsize // 4) * 4
    ng, _ = _groups(b, group_size)
    return 4 * ng + -(-b // 4) * 4


# ---------------------------------------------------------------- host cast kernels
def _check_range(x: np.ndarray, f: Format) -> None:
    if x.size and f.name == "fp16":
        top = float(abs(x).max())
        if not top <= f.max_value:
            raise InvalidArgument(f"fp16 compression: max |x| = {top:g} exceeds 65504; use bf16 or fp8")


def encode_fp16(x, group_size: int | None = None):
    """float32 (k, B) -> uint8 (k, P) payload of IEEE half values (round to nearest even).

    Written with array methods only, so it serves NumPy and CuPy arrays alike."""
    _check_range(x, FORMATS["fp16"])
    return _pad_bytes(x.astype(np.float16).view(np.uint8), payload_bytes("fp16", x.shape[1]))


def decode_fp16(payload, b: int, group_size: int | None = None):
    """uint8 (k, P) payload -> float32 (k, B) (NumPy or CuPy)."""
    return _xp(payload).ascontiguousarray(payload[:, :2 * b]).view(np.float16).astype(np.float32)


def encode_bf16(x: np.ndarray, group_size: int | None = None) -> np.ndarray:
    """float32 (k, B) -> uint8 (k, P) payload of bfloat16 values (ml_dtypes, nearest even)."""
    return _pad_bytes(x.astype(ml_dtypes.bfloat16).view(np.uint8), payload_bytes("bf16", x.shape[1]))


def decode_bf16(payload: np.ndarray, b: int, group_size: int | None = None) -> np.ndarray:
    """uint8 (k, P) payload -> float32 (k, B)."""
    return np.ascontiguousarray(payload[:, :2 * b]).view(ml_dtypes.bfloat16).astype(np.float32)


def encode_bf16_bits(x, group_size: int | None = None):
    """:func:`encode_bf16` with integer arithmetic only (NumPy or CuPy, no bfloat16 dtype):
    round the float32 bit pattern to nearest even at bit 16; NaN stays a quiet NaN."""
    xp = _xp(x)
    u = xp.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    r = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    r = xp.where(xp.isnan(x), np.uint32(0x7FC0), r).astype(np.uint16)
    return _pad_bytes(r.view(np.uint8), payload_bytes("bf16", x.shape[1]))


def decode_bf16_bits(payload, b: int, group_size: int | None = None):
    """uint8 (k, P) payload -> float32 (k, B) by shifting the bits (NumPy or CuPy)."""
    xp = _xp(payload)
    bits = xp.ascontiguousarray(payload[:, :2 * b]).view(np.uint16).astype(np.uint32)
    return (bits << np.uint32(16)).view(np.float32)


def encode_fp8(x: np.ndarray, group_size: int | None = DEFAULT_GROUP) -> np.ndarray:
    """float32 (k, B) -> uint8 (k, P): per group ``[scales float32 x ng][e4m3 x B][pad]``.

    Scale ``s = max|x| / 448`` per group of ``group_size`` elements (0 for an all-zero group).
    """
    k, b = x.shape
    ng, g = _groups(b, group_size)
    xg = np.zeros((k, ng * g), np.float32)
    xg[:, :b] = x
    xg = xg.reshape(k, ng, g)
    scale = (np.max(np.abs(xg), axis=2) / np.float32(448.0)).astype(np.float32)
    if not np.all(np.isfinite(scale)):
        raise InvalidArgument("fp8 compression: the input holds inf or NaN")
    safe = np.where(scale > 0, scale, np.float32(1.0))
    v = np.clip(xg / safe[..., None], -448.0, 448.0)
    q = v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).reshape(k, ng * g)[:, :b]
    out = np.zeros((k, payload_bytes("fp8", b, group_size)), np.uint8)
    out[:, :4 * ng] = scale.view(np.uint8).reshape(k, 4 * ng)
    out[:, 4 * ng:4 * ng + b] = q
    return out


def decode_fp8(payload: np.ndarray, b: int, group_size: int | None = DEFAULT_GROUP) -> np.ndarray:
    """uint8 (k, P) payload of :func:`encode_fp8` -> float32 (k, B)."""
    k = payload.shape[0]
    ng, g = _groups(b, group_size)
    scale = np.ascontiguousarray(payload[:, :4 * ng]).view(np.float32)
    q = np.zeros((k, ng * g), np.uint8)
    q[:, :b] = payload[:, 4 * ng:4 * ng + b]
    vals = q.view(ml_dtypes.float8_e4m3fn).astype(np.float32).reshape(k, ng, g) * scale[..., None]
    return vals.reshape(k, ng * g)[:, :b]


def _pad_bytes(raw, width: int):
    if raw.shape[1] == width:
        return raw
    out = _xp(raw).zeros((raw.shape[0], width), np.uint8)
    out[:, :raw.shape[1]] = raw
    return out


Encode = Callable[[object, "int | None"], object]
Decode = Callable[[object, int, "int | None"], object]

#: (backend, format) -> (encode, decode); backends "host" and "cupy".
CAST_KERNELS: dict[tuple[str, str], tuple[Encode, Decode]] = {
    ("host", "fp16"): (encode_fp16, decode_fp16),
    ("host", "bf16"): (encode_bf16, decode_bf16),
    ("host", "fp8"): (encode_fp8, decode_fp8),
    ("cupy", "fp16"): (encode_fp16, decode_fp16),
    ("cupy", "bf16"): (encode_bf16_bits, decode_bf16_bits),
}
_warned: set[str] = set()


def register_cast(backend: str, fmt: str, encode: Encode, decode: Decode) -> None:
    """Install device cast kernels (same contract as :func:`encode_fp8` / :func:`decode_fp8`)."""
    CAST_KERNELS[(backend, get_format(fmt).name)] = (encode, decode)


def _is_cupy(a) -> bool:
    return type(a).__module__.split(".")[0] == "cupy"


def _kernels(fmt: str, sample) -> tuple[Encode, Decode]:
    if not _is_cupy(sample):
        return CAST_KERNELS[("host", fmt)]
    if ("cupy", fmt) in CAST_KERNELS:
        return CAST_KERNELS[("cupy", fmt)]
    import cupy  # lazily: only reached with CuPy arrays
    if fmt not in _warned:
        _warned.add(fmt)
        warn_user(f"no device kernel for {fmt} compression: casting on the host (slow)")
    enc, dec = CAST_KERNELS[("host", fmt)]
    return (lambda x, gs: cupy.asarray(enc(cupy.asnumpy(x), gs)),
            lambda p, b, gs: cupy.asarray(dec(cupy.asnumpy(p), b, gs)))


def _xp(a):
    if _is_cupy(a):
        import cupy
        return cupy
    return np


def _on(a):
    """Context making ``a``'s GPU current (CuPy allocates there); a no-op for NumPy."""
    return a.device if _is_cupy(a) else contextlib.nullcontext()

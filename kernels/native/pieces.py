"""How the native executor cuts an op into pieces: channels (one thread block each per writing
rank), slices (pipeline stages of a large piece) and tiles (large ops dealt to the channels in
turn).  Every cut depends only on the op's length, the channel count and the element size, so two
ops of one length are cut alike and a dependency between them links equal pieces
(:mod:`kernels.native.device_program`).

>>> channel_pieces(40, 2, 1, 4, 1, tile_bytes=16)     # 10 tiles of 4 elements: channel 1 gets 1, 3, ..., 9
[(4, 20, 4, 8)]
>>> record_runs(20, 4, 8, 0, 20)[:2]
[(0, 4), (8, 4)]
"""

from __future__ import annotations

#: bytes of one 16-byte vector access: piece boundaries are rounded to whole vectors
VECTOR_BYTES = 16
#: pieces at least this large (bytes) are cut into slices of about this size
SLICE_BYTES = 256 << 10
#: bytes of one tile of the dealt layout (see module docstring); a multiple of VECTOR_BYTES
TILE_BYTES = 32 << 10


def piece_bounds(length: int, pieces: int, itemsize: int) -> list[int]:
    """Cut points of ``length`` elements into ``pieces`` parts, each boundary on a whole
    16-byte vector; a function of ``length`` alone, so equal-length ops are cut alike.

    >>> piece_bounds(10, 3, 4), piece_bounds(2, 4, 4)
    ([0, 4, 8, 10], [0, 2, 2, 2, 2])
    """
    v = max(1, VECTOR_BYTES // itemsize)
    out = [0]
    for i in range(1, pieces):
        cut = -(-length * i // pieces)
        out.append(min(length, -(-cut // v) * v))
    out.append(length)
    return out


def _slices(piece_bytes: int) -> int:
    return max(1, -(-piece_bytes // SLICE_BYTES)) if piece_bytes >= 2 * SLICE_BYTES else 1


def tile_elements(length: int, channels: int, itemsize: int, tile_bytes: int | None = TILE_BYTES) -> int:
    """Elements per tile for an op of ``length`` elements cut into ``channels`` channels: 0 (one
    contiguous piece per channel) unless tiles are on and every channel gets at least two.

    >>> tile_elements(1 << 24, 8, 4), tile_elements(1 << 15, 8, 4), tile_elements(1 << 24, 1, 4)
    (8192, 0, 0)
    """
    if not tile_bytes or channels < 2:
        return 0
    t = max(1, tile_bytes // itemsize)
    return t if length >= 2 * channels * t else 0


def channel_pieces(length: int, channels: int, c: int, itemsize: int, slices: int | None,
                   tile_bytes: int | None = TILE_BYTES) -> list[tuple[int, int, int, int]]:
    """The records of channel ``c`` of an op of ``length`` elements: ``(first element, count,
    tile, tile_stride)`` per slice (empty slices left out); a function of ``length`` alone.

    >>> channel_pieces(10, 3, 1, 4, None)
    [(4, 4, 0, 0)]
    >>> channel_pieces(5 * 8192 + 3, 2, 0, 4, 2)     # 6 tiles: channel 0 gets 0, 2, 4 in 2 slices
    [(0, 16384, 8192, 16384), (32768, 8192, 8192, 16384)]
    >>> channel_pieces(5 * 8192 + 3, 2, 1, 4, 1)     # ... channel 1 gets 1, 3, 5 (3 elements)
    [(8192, 16387, 8192, 16384)]
    """
    t = tile_elements(length, channels, itemsize, tile_bytes)
    if not t:
        bounds = piece_bounds(length, channels, itemsize)
        a, b = bounds[c], bounds[c + 1]
        if a == b:
            return []
        k = slices if slices is not None else _slices((b - a) * itemsize)
        cuts = piece_bounds(b - a, k, itemsize)
        return [(a + lo, hi - lo, 0, 0) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]
    tiles = -(-length // t)
    mine = max(0, -(-(tiles - c) // channels))          # tiles c, c + channels, ...
    k = slices if slices is not None else _slices(mine * t * itemsize)
    cuts = [-(-mine * j // k) for j in range(k + 1)]
    out = []
    for t0, t1 in zip(cuts, cuts[1:]):
        if t1 > t0:
            last = (t1 - 1) * channels + c
            out.append(((t0 * channels + c) * t, (t1 - t0 - 1) * t + min(t, length - last * t), t, channels * t))
    return out


def record_runs(count: int, tile: int, stride: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """Elements ``lo:hi`` of a record of ``count`` elements as ``(memory offset, elements)`` runs,
    offsets from the record's first element (one run when ``tile`` is 0).

    >>> record_runs(10, 4, 12, 2, 9)
    [(2, 2), (12, 4), (24, 1)]
    """
    if not tile:
        return [(lo, hi - lo)] if hi > lo else []
    out = []
    while lo < hi:
        k, within = divmod(lo, tile)
        n = min(hi, (k + 1) * tile) - lo
        out.append((k * stride + within, n))
        lo += n
    return out


__all__ = ["VECTOR_BYTES", "SLICE_BYTES", "TILE_BYTES", "piece_bounds", "tile_elements", "channel_pieces",
           "record_runs"]

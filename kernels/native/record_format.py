"""The native executor's record format, in one place: the kind word's bits, the resolved
record's words and the limits the kernel sizes its shared memory by.

The device program (:mod:`kernels.native.device_program`) writes these, the CPU stand-ins read
them through these names, and the CUDA kernel (``interpreter.cu``) gets them as ``-D`` options
from :func:`cuda_defines` (the ``.cu`` defines none of them itself and refuses to compile
without them), so the three cannot drift apart.

A record's *kind word* (``records[:, 0]`` of a device program, word 4 of a resolved record):

====================  ======================================================================
bits 0-3              the kind (:data:`KINDS`)
bit 4 (``PUBLISH``)   after this record the block publishes its flag (a block waits for it)
bit 5 (``PREMUL_ACC``) a chain's ``acc`` is pre-multiplied (floating avg)
bit 6 (``BATCH``)     LL protocol: this record runs in the same pass as the record before it
bit 7 (``LL``)        LL protocol: the record runs in 8-byte units, reading LL inputs line by line
bits 8-15             a chain's number of sources
bits 16-31            which chain sources are pre-multiplied
bits 32-39            LL outputs: how many LL regions this record also writes its result to
bits 40-55            LL inputs: which sources are read from LL lines (bit 40: ``src`` or a
                      chain's source 0, bit 40 + j: a chain's source j)
====================  ======================================================================

>>> KINDS["reduce_chain"], PUBLISH, LL, LL_OUT_SHIFT, LL_SRC_SHIFT
(6, 16, 128, 32, 40)
>>> [d for d in cuda_defines() if d.startswith("-DTC_REC_WORDS")]
['-DTC_REC_WORDS=7']
"""

from __future__ import annotations

from typing import NamedTuple

#: record kinds: copy, reduce (acc op src), the three floating-avg reduces that pre-multiply
#: acc, src or both by 1/n (NCCL's PreMulSum), integer avg's final division, and a chain
#: ``dst = acc op src_0 op src_1 ...``
KINDS = {"copy": 0, "reduce": 1, "reduce_premul_acc": 2, "reduce_premul_src": 3, "reduce_premul_both": 4,
         "scale": 5, "reduce_chain": 6}
KIND_MASK = 15
PUBLISH = 16
PREMUL_ACC = 32
BATCH = 64
LL = 128
CHAIN_COUNT_SHIFT = 8
PREMUL_SRC_SHIFT = 16
LL_OUT_SHIFT = 32
LL_SRC_SHIFT = 40
#: the floating-avg reduce kinds: whether ``acc`` / ``src`` is pre-multiplied by 1/n
PREMUL = {KINDS["reduce_premul_acc"]: (True, False), KINDS["reduce_premul_src"]: (False, True),
          KINDS["reduce_premul_both"]: (True, True)}
#: the status word the kernel reports as the awaited block when an LL line, not a flag, timed out
LL_WAIT = 0xFFFFFFFF
#: most reduces joined into one chain record
MAX_CHAIN = 16
#: most records of one LL pass, and most LL regions one record writes
MAX_BATCH = 16
MAX_LL_OUT = 16
#: an LL line: 16 bytes ``{data 4 B, flag 4 B, data 4 B, flag 4 B}`` carrying 8 data bytes
#: (NCCL's ``ncclLLFifoLine``); the flag is the call's epoch (low 32 bits)
LL_LINE_BYTES = 16
LL_DATA_BYTES = 8
#: words of a resolved record as the kernel reads it: dst, src, acc, count, kind word, tile word,
#: address of the record's LL output list (0: none)
REC_WORDS = 7
#: resolved record word indices
W_DST, W_SRC, W_ACC, W_COUNT, W_KIND, W_TILE, W_LL_OUT = range(REC_WORDS)

_DEFINES = {"TC_REC_WORDS": REC_WORDS, "TC_MAX_CHAIN": MAX_CHAIN, "TC_MAX_BATCH": MAX_BATCH,
            "TC_MAX_LL_OUT": MAX_LL_OUT, "TC_K_MASK": KIND_MASK, "TC_K_PUBLISH": PUBLISH,
            "TC_K_PREMUL_ACC": PREMUL_ACC, "TC_K_BATCH": BATCH, "TC_K_LL": LL,
            "TC_K_CHAIN_SHIFT": CHAIN_COUNT_SHIFT, "TC_K_PREMUL_SHIFT": PREMUL_SRC_SHIFT,
            "TC_K_LL_OUT_SHIFT": LL_OUT_SHIFT, "TC_K_LL_SRC_SHIFT": LL_SRC_SHIFT,
            "TC_KIND_CHAIN": KINDS["reduce_chain"], "TC_LL_LINE_BYTES": LL_LINE_BYTES, "TC_LL_WAIT": f"{LL_WAIT:#x}u",
            "TC_W_DST": W_DST, "TC_W_SRC": W_SRC, "TC_W_ACC": W_ACC, "TC_W_COUNT": W_COUNT, "TC_W_KIND": W_KIND,
            "TC_W_TILE": W_TILE, "TC_W_LL_OUT": W_LL_OUT,
            **{f"TC_KIND_{name.upper()}": code for name, code in KINDS.items() if name != "reduce_chain"}}


class Resolved(NamedTuple):
    """One resolved record as the kernel reads it (:data:`REC_WORDS` words; addresses in bytes),
    for the CPU interpreters of resolved records."""

    dst: int
    src: int
    acc: int
    count: int
    word: int
    tile: int
    tile_stride: int
    ll_out: int

    @property
    def kind(self) -> int:
        return self.word & KIND_MASK


def decode_resolved(row) -> Resolved:
    """A resolved record's words (:func:`kernels.native.device_program.resolve_records`) by name.

    >>> decode_resolved([0x1000, 0x2000, 0, 4, KINDS["copy"] | PUBLISH, 8 | 16 << 32, 0]).tile_stride
    16
    """
    w = [int(x) for x in row[:REC_WORDS]]
    return Resolved(w[W_DST], w[W_SRC], w[W_ACC], w[W_COUNT], w[W_KIND], w[W_TILE] & 0xFFFFFFFF, w[W_TILE] >> 32,
                    w[W_LL_OUT])


def cuda_defines() -> tuple[str, ...]:
    """The format as NVRTC ``-D`` options for ``interpreter.cu``."""
    return tuple(f"-D{k}={v}" for k, v in _DEFINES.items())


def defined_names() -> frozenset[str]:
    """Names :func:`cuda_defines` gives the kernel (a test checks the ``.cu`` uses, never defines, them)."""
    return frozenset(_DEFINES)


def chain_sources(word: int) -> int:
    return (int(word) >> CHAIN_COUNT_SHIFT) & 255


def ll_outputs(word: int) -> int:
    return (int(word) >> LL_OUT_SHIFT) & 255


def ll_source(word: int, j: int) -> bool:
    """Whether source ``j`` (``src`` for ``j == 0`` of a plain record) is read from LL lines."""
    return bool((int(word) >> (LL_SRC_SHIFT + j)) & 1)


def src_premultiplied(word: int, j: int) -> bool:
    return bool((int(word) >> (PREMUL_SRC_SHIFT + j)) & 1)


def check_limits(records, block_start) -> None:
    """Refuse, before anything is uploaded, a device program whose records exceed what the kernel
    sizes its shared memory by: a chain of more than :data:`MAX_CHAIN` sources, more than
    :data:`MAX_LL_OUT` LL outputs, an LL pass of more than :data:`MAX_BATCH` records (the kernel
    itself does not check them).

    >>> import numpy as np
    >>> check_limits(np.array([[KINDS["reduce_chain"] | 17 << CHAIN_COUNT_SHIFT]]), np.array([0, 1]))
    Traceback (most recent call last):
    ...
    topo_probe.errors.InvalidArgument: device program: record 0 of block 0 is a chain of 17 sources (the kernel holds 16)
    """
    from topo_probe.errors import InvalidArgument
    for b in range(len(block_start) - 1):
        run = 0
        for i in range(int(block_start[b]), int(block_start[b + 1])):
            word = int(records[i][0])
            where = f"device program: record {i - int(block_start[b])} of block {b}"
            if word & KIND_MASK == KINDS["reduce_chain"] and chain_sources(word) > MAX_CHAIN:
                raise InvalidArgument(f"{where} is a chain of {chain_sources(word)} sources (the kernel holds "
                                      f"{MAX_CHAIN})")
            if ll_outputs(word) > MAX_LL_OUT:
                raise InvalidArgument(f"{where} writes {ll_outputs(word)} LL regions (the kernel holds {MAX_LL_OUT})")
            run = run + 1 if word & BATCH else 1
            if run > MAX_BATCH:
                raise InvalidArgument(f"{where} makes an LL pass of {run} records (the kernel holds {MAX_BATCH})")


def ll_units(count: int, itemsize: int) -> int:
    """LL lines (8 data bytes each) of a record of ``count`` elements.

    >>> ll_units(3, 4), ll_units(4, 4), ll_units(1, 8)
    (2, 2, 1)
    """
    return -(-count * itemsize // LL_DATA_BYTES)


__all__ = ["KINDS", "KIND_MASK", "PREMUL", "LL_WAIT", "PUBLISH", "PREMUL_ACC", "BATCH", "LL", "CHAIN_COUNT_SHIFT", "PREMUL_SRC_SHIFT",
           "LL_OUT_SHIFT", "LL_SRC_SHIFT", "MAX_CHAIN", "MAX_BATCH", "MAX_LL_OUT", "LL_LINE_BYTES", "LL_DATA_BYTES",
           "REC_WORDS", "W_DST", "W_SRC", "W_ACC", "W_COUNT", "W_KIND", "W_TILE", "W_LL_OUT", "cuda_defines",
           "defined_names", "Resolved", "decode_resolved", "chain_sources", "ll_outputs", "ll_source", "src_premultiplied", "ll_units", "check_limits"]

"""Misaligned per-rank blocks: the ring steps NCCL copies with narrower loads.

A ring all_gather or reduce_scatter addresses rank ``r``'s block of the user buffer at ``r x count``
elements (NVIDIA/nccl v2.5.7-1 ``src/collectives/device/reduce_scatter.h`` lines 44, 51, 58 and
``all_gather.h`` lines 44, 55, 62: ``offset = chunkOffset + rankDest * size``, ``size`` the per-rank count;
``chunkOffset`` itself is aligned, line 34 ``ALIGN_SIZE``).  nccl-tests rounds that count down from the swept size, so
on 12 ranks no power-of-two size gives a block that is a multiple of 16 bytes.  The Simple copy then
compares the 16-byte alignments of its sources and destinations (``common_kernel.h`` lines 323-334,
``ReduceOrCopyMulti``): the user block and the aligned FIFO buffer differ, ``alignDiff`` is set and the
whole step goes through ``ReduceCopyMulti`` (lines 249-264), one ``T`` per thread and iteration, instead of
``ReduceCopy128bMulti`` (lines 267-307), ``AUTOUNROLL`` 16-byte packs per thread and iteration
(``AUTOUNROLL = UNROLL x (4 / (MINSRCS + MINDSTS))``, line 314, ``COLL_UNROLL`` 4, ``common.h`` line 159:
4 for a step that reduces or copies two sources into one destination).  LL128 does the same
(``prims_ll128.h`` lines 284-288: a source not 16-byte aligned is loaded one ``T`` per lane,
``loadSrcToShmem``, instead of ``NCCL_LL128_SHMEM_ELEMS_PER_THREAD`` / 2 = 4 16-byte loads).

A CTA keeps ``sizeof(T) / (16 x 4)`` = 1/16 as many bytes in flight in the element loop as in the packed
loop, so the model takes its copy rate (:func:`.ring_steps.cta_copy_gbs`) at 1/16 on a misaligned step
(:data:`ELEMENT_LOOP_SHARE`; float, nccl-tests' default type).  The one step per chunk with a single source and
destination (reduce_scatter's first ``send``, all_gather's last ``recv``: ``AUTOUNROLL`` 8, so 1/32) is taken at
the same share: a simplification that makes the model at most one step in ``ranks`` faster.  Every rank works through every block
index once per chunk (one step each), so a ring's chunk takes ``aligned + misaligned x max(1, channel
rate / element rate)`` step times against ``ranks`` when all are aligned.

NCCL 2.8 and 2.9 copy a misaligned Simple step with an unrolled loop by type instead (v2.8.4-1
``common_kernel.h`` lines 376-404: the packed loop only when every pointer is aligned, else ``ReduceCopyMulti``
of ``UNROLL x PACKELEMS / 2`` elements per thread, half the packed loop's ``UNROLL`` x 16 bytes:
:data:`UNROLLED_BY_TYPE_SHARE`), while their LL128 still loads a misaligned source one element per lane
(v2.9.9-1 ``prims_ll128.h`` lines 123-126, 270, 281).  Simple keeps that half rate in every later release: v2.10.3-1
to v2.16.5-1 take the same unrolled loop by type whenever a pointer is misaligned (v2.12.12-1 ``common_kernel.h``
lines 640-680), and ``reduceCopyPacks`` from v2.17.1-1 falls back to packs of ``sizeof(T)`` with ``Unroll x
(16 / sizeof(T)) / 2`` of them (v2.30.7-1 ``src/device/common_kernel.h`` lines 240-243), the same bytes in
flight.  LL128 stages a misaligned source through aligned packs from 2.10, which the model does not time.
"""

from __future__ import annotations

import math

from synth.model.nccl.ring_steps import cta_copy_gbs

#: bytes of one element: nccl-tests' default ``-d float``
ELEMENT_BYTES = 4
#: bytes of NCCL's packed load (``Pack128``, common_kernel.h line 231)
PACK_BYTES = 16
#: packs a thread keeps in flight in the packed loop of a two-source step: ``COLL_UNROLL`` 4 x (4 / 3)
AUTOUNROLL_TWO_SOURCES = 4
#: the element loop's rate over the packed loop's (bytes in flight per thread): 4 / (16 x 4)
ELEMENT_LOOP_SHARE = ELEMENT_BYTES / (PACK_BYTES * AUTOUNROLL_TWO_SOURCES)
#: 2.8-2.9's misaligned Simple loop over the packed one: ``UNROLL x 4 / 2`` floats against ``UNROLL`` 16-byte packs
UNROLLED_BY_TYPE_SHARE = (ELEMENT_BYTES * (PACK_BYTES // ELEMENT_BYTES) // 2) / PACK_BYTES
#: the first NCCL release whose Simple copy unrolls a misaligned step by type (v2.8.3-1)
UNROLLED_FROM = (2, 8)
#: the first NCCL release whose LL128 loads a misaligned source in packs instead of single elements (2.10 rewrote
#: the primitives); Simple's misaligned loop stays :data:`UNROLLED_BY_TYPE_SHARE` from 2.8 on
PACKED_FROM = (2, 10)


def misaligned_blocks(nbytes: int, ranks: int, elem_bytes: int = ELEMENT_BYTES) -> int:
    """How many of the ``ranks`` per-rank blocks of an ``nbytes`` buffer start off a 16-byte boundary
    (block ``r`` at ``r x count x elem_bytes``, ``count`` rounded down as nccl-tests does).

    >>> misaligned_blocks(67108848, 12), misaligned_blocks(134217696, 12), misaligned_blocks(2**26, 8)
    (9, 6, 0)
    """
    block = (nbytes // ranks // elem_bytes) * elem_bytes
    return sum(1 for r in range(ranks) if (r * block) % PACK_BYTES)


def element_copy_slowdown(coll: str, algo: str, proto: str, nbytes: int, ranks: int, version: tuple,
                          channel_gbs: float, cta_gbs: float, amd: bool = False) -> float:
    """Factor (>= 1) on a ring all_gather / reduce_scatter's transfer time for its misaligned blocks:
    ``(aligned + misaligned x max(1, channel_gbs / (cta_gbs x share))) / ranks``, ``share``
    :data:`ELEMENT_LOOP_SHARE` (:data:`UNROLLED_BY_TYPE_SHARE` for Simple from 2.8; LL128 from 2.10 untimed);
    ``channel_gbs`` the rate one channel's steps run at (GB/s), ``cta_gbs`` a CTA's packed copy rate (GB/s).

    >>> round(element_copy_slowdown("reducescatter", "ring", "Simple", 67108848, 12, (2, 5), 10.0, 48.0), 3)
    2.75
    >>> element_copy_slowdown("reducescatter", "ring", "Simple", 67108848, 12, (2, 12), 10.0, 48.0)   # 10 < 24
    1.0
    >>> element_copy_slowdown("reducescatter", "ring", "Simple", 67108848, 12, (2, 8), 48.0, 48.0)   # 48 / 24
    1.75
    """
    if (amd or algo != "ring" or proto not in ("Simple", "LL128") or coll not in ("allgather", "reducescatter")
            or (proto == "LL128" and tuple(version) >= PACKED_FROM) or ranks < 2 or cta_gbs <= 0.0):
        return 1.0
    bad = misaligned_blocks(nbytes, ranks)
    unrolled = proto == "Simple" and tuple(version) >= UNROLLED_FROM
    slow = max(1.0, channel_gbs / (cta_gbs * (UNROLLED_BY_TYPE_SHARE if unrolled else ELEMENT_LOOP_SHARE)))
    return (ranks - bad + bad * slow) / ranks


def ring_element_copy_factor(t, coll: str, algo: str, proto: str, channels: int, nbytes: int, bus_gbs: float,
                             params) -> float:
    """:func:`element_copy_slowdown` for a tuning table ``t`` (its machine and NCCL version) whose ring runs
    at ``bus_gbs`` bus bandwidth (GB/s) on ``channels`` channels, each CTA copying at
    :func:`.ring_steps.cta_copy_gbs` of ``params``; 1 where the GPU links set no rate (one GPU a host: no
    GPU-to-GPU step to slow).

    >>> ring_element_copy_factor(None, "allgather", "ring", "Simple", 4, 10 << 20, float("inf"), None)
    1.0
    """
    if not math.isfinite(bus_gbs):
        return 1.0
    m = t.machine
    return element_copy_slowdown(coll, algo, proto, nbytes, m.ranks, t.version, bus_gbs / max(1, channels),
                                 cta_copy_gbs(m.arch, params, m.gpu_name), m.amd)


__all__ = ["ELEMENT_BYTES", "ELEMENT_LOOP_SHARE", "PACKED_FROM", "UNROLLED_BY_TYPE_SHARE", "UNROLLED_FROM",
           "element_copy_slowdown", "misaligned_blocks", "ring_element_copy_factor"]

"""The MSCCL export stays byte for byte what it was: SHA-256 digests of the XML written for
schedules built here (fan-in partials summed with ``re`` chains, concurrent transfers spread over
channels, fused ``rcs``/``rrcs``/``rrs`` forwarding, multi-chunk merged steps, ``nop`` waits,
threadblocks paired under a cap, every dialect and protocol), recorded from the export before it
was rewritten for speed.  A change that alters any byte of the output fails here."""

from __future__ import annotations

import hashlib

import pytest
from _msccl import chain_broadcast

from synth.formats.msccl import to_msccl_xml
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.verifier import check



def star_allreduce(n: int, chunks: int) -> Schedule:
    """Every rank's partials of every chunk to rank 0 in one step (fan-in), then a chain
    0 -> 1 -> ... -> n-1 forwards the sums, one hop per step."""
    steps = [Step(chunks, tuple(Transfer(g, r, 0, "reduce") for r in range(1, n) for g in range(n * chunks)))]
    for h in range(n - 1):
        steps.append(Step(chunks, tuple(Transfer(g, h, h + 1) for g in range(n * chunks))))
    return Schedule("allreduce", n, chunks, tuple(steps), name="star-chain")


def ring_reducescatter(n: int, chunks: int) -> Schedule:
    steps = []
    for k in range(n - 1):
        steps.append(Step(chunks, tuple(Transfer(((r - k - 1) % n) * chunks + c, r, (r + 1) % n, "reduce")
                                        for r in range(n) for c in range(chunks))))
    return Schedule("reducescatter", n, chunks, tuple(steps), name="ring-rs")


def ring_allreduce(n: int, chunks: int) -> Schedule:
    rs = ring_reducescatter(n, chunks).steps
    ag = []
    for k in range(n - 1):
        ag.append(Step(chunks, tuple(Transfer(((r - k) % n) * chunks + c, r, (r + 1) % n)
                                     for r in range(n) for c in range(chunks))))
    return Schedule("allreduce", n, chunks, rs + tuple(ag), name="ring-ar")


def direct_allgather(n: int, chunks: int) -> Schedule:
    return Schedule("allgather", n, chunks, (Step(chunks, tuple(
        Transfer(r * chunks + c, r, d) for r in range(n) for d in range(n) if d != r for c in range(chunks))),),
        name="direct-ag")


def tree_allgather(n: int, chunks: int) -> Schedule:
    """Each rank's chunks down a binary tree rooted at that rank (relabelled), one level per step."""
    steps: list[list[Transfer]] = []
    for r in range(n):
        for c in range(chunks):
            for v in range(1, n):                     # v's parent in the tree of r: (v - 1) // 2
                level = (v + 1).bit_length() - 2
                while len(steps) <= level:
                    steps.append([])
                steps[level].append(Transfer(r * chunks + c, (r + (v - 1) // 2) % n, (r + v) % n))
    return Schedule("allgather", n, chunks, tuple(Step(chunks, tuple(ts)) for ts in steps), name="tree-ag")


def direct_alltoall(n: int, chunks: int) -> Schedule:
    return Schedule("alltoall", n, chunks, (Step(chunks, tuple(
        Transfer((s * n + d) * chunks + c, s, d) for s in range(n) for d in range(n) if d != s
        for c in range(chunks))),), name="direct-a2a")




#: (schedule, export options, SHA-256 of the XML the export wrote before its speed-up)
CASES = [
    (lambda: star_allreduce(4, 2), {},
     "e0f477a3259618fd8261a2e0c88dcc120dd4d30aa4e61b0d50ded9f68760ed42"),
    (lambda: star_allreduce(4, 2), {"fuse": False},
     "f270476d7a655e2afd20bc6880a7cc50d63d0751515d042c4f8411bb9c41ed2f"),
    (lambda: star_allreduce(5, 3), {"style": "msccl", "proto": "LL"},
     "d2f48ad3b8a6248f87825dd4c91824d5c4c7d6a70d5d5e382614c5a0f4345c1a"),
    (lambda: ring_reducescatter(5, 3), {},
     "8c01d95c0fef0521dbe4898d74500926a881bff4b09c2e2037666f81be294b60"),
    (lambda: ring_allreduce(4, 3), {"style": "azure", "proto": "LL128", "max_channels": 2},
     "f7e895f452763563e0a750b888b110db34d99529b1f6e16402d95a8174477ed2"),
    (lambda: ring_allreduce(6, 2), {"inplace": False},
     "c12541b98a18a8f3e6155231bc3e694764e6cb98c108388e1154b1ba3f6ef70e"),
    (lambda: direct_allgather(5, 4), {},
     "b80279565fb8fbcb3b7b6e5c3750e0bdf083d572aa7c5ee114f2e41d30f51cea"),
    (lambda: direct_allgather(6, 2), {"max_tbs_per_gpu": 6},
     "50de854048beed86ed4186e07c861dc073f6a2df56e978bd6aa6420446088156"),
    (lambda: tree_allgather(7, 3), {},
     "797dcd9b1a5b1ae6e6ea09fb2fd95ca0f3daf525dc716f55a03901a01ed084c8"),
    (lambda: tree_allgather(8, 2), {"max_channels": 1, "min_bytes": 1024, "max_bytes": 65536},
     "638601566b8215bcc1caf410d2c9a60b4f10f647ba5064321d731fb8a94216e9"),
    (lambda: direct_alltoall(4, 3), {},
     "377ef49850608bec7b3c8f500a418b5997915622791fae9930105aba082ab936"),
    (lambda: chain_broadcast(5, 4, 2, name="chain-bc"), {},
     "42730cad92787167c3fdecd6a597f3ac530859fddd430fa341e18f040e7398e6"),
]


@pytest.mark.parametrize("k", range(len(CASES)))
def test_the_export_is_byte_for_byte_the_recorded_one(k):
    make, kwargs, digest = CASES[k]
    s = make()
    check(s)
    text = to_msccl_xml(s, **kwargs)
    assert hashlib.sha256(text.encode()).hexdigest() == digest, (s.name, kwargs)

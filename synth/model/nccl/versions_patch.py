"""NCCL rules that change inside a minor version, keyed by release ``(major, minor, patch)``.

The model is given NCCL's version as ``(major, minor)`` or, where a log prints it (the ``NCCL version
2.28.9+cuda..`` INFO line, nccl-tests' ``nccl-library=22809``), ``(major, minor, patch)``.  Every rule keyed
on a minor (:mod:`.versions`, ``tuple(version) >= (2, 29)``) reads a patch-level version as its minor.  The
rules here changed at a patch release; for them :func:`release` reads a bare ``(major, minor)`` as that
minor's first release (patch 0: before any patch-level change), which is what the model did before it kept
patches, unless a rule names another patch (:data:`P2P_EPOCH_BARE_PATCH`, :data:`NVLS_BARE_PATCH`).

Blackwell rows of src/graph/tuning.cc ``ncclTunerConstantsDefaults`` (GB/s per channel, one / two / more
nodes), read at NVIDIA/nccl v2.28.3-1, v2.28.7-1 (ae7aed19), v2.28.9-1 (dbc86fd0), v2.29.2-1, v2.29.3-1,
v2.29.7-1, v2.30.3-1:

* ``perChMaxRingLL128Bws``: 2 x 36.7 on 1, 2, >2 nodes (v2.28.3-1 line 179) -> two nodes 34.6 (v2.28.7-1
  line 179, kept in v2.28.9-1 line 179) -> (34.5, 34.6, 34.5) (v2.29.2-1 and v2.29.3-1 line 179) -> 40.0 on
  all (v2.29.7-1 line 180, v2.30.3-1);
* ``perChMaxNVLSTreeBws`` on more than two nodes: 43.1 (v2.28.3-1 and v2.28.7-1 line 197) -> 43.8
  (v2.28.9-1 line 197) -> 80.0 (v2.30.3-1);
* ``hwLatencies`` NET row, NVLSTree/Simple: 14 us a hop (v2.28.3-1 and v2.28.7-1 line 165) -> 20.9
  (v2.28.9-1 line 165 on).

No other row of ``ncclTunerConstantsDefaults`` changes between v2.28.3-1 and v2.29.3-1 (``git diff`` of tuning.cc;
outside it v2.29.2-1 changes ``treeCorrectionFactor``, keyed on 2.29 in :mod:`.constants`).

NVLS's GPU count (:func:`nvls_supported`): ``ncclNvlsInit`` (src/transport/nvls.cc) needs three GPUs a node
from 2.18 through v2.28.3-1 (line 160, ``gpuCount <= 2``) and two from v2.28.7-1 (line 161, ``gpuCount < 2``);
a bare ``(2, 28)`` is ASSUMED to be 2.28.7 here (:data:`NVLS_BARE_PATCH`).
"""

from __future__ import annotations

#: patch a bare ``(major, minor)`` stands for in the rules of this module: the minor's first release
BARE_PATCH = 0
#: Blackwell ``perChMaxRingLL128Bws`` from each release on (``(2, 29, 0)``: 2.29's first, v2.29.2-1)
BLACKWELL_RING_LL128_BY_RELEASE = (((2, 28, 7), (2 * 36.7, 34.6, 2 * 36.7)), ((2, 29, 0), (34.5, 34.6, 34.5)),
                                   ((2, 29, 7), (40.0, 40.0, 40.0)))
#: Blackwell ``perChMaxNVLSTreeBws`` from each release on
BLACKWELL_NVLS_TREE_BY_RELEASE = (((2, 28, 9), (0.0, 96.0, 43.8)), ((2, 30, 0), (0.0, 96.0, 80.0)))
#: ``hwLatencies[NET][NVLSTree][Simple]`` (us a hop) from each release on
NVLS_TREE_NET_HOP_BY_RELEASE = (((2, 28, 9), 20.9),)
#: first release whose p2p work batches keep to one epoch of 8 rounds (src/enqueue.cc ``addWorkBatchToPlan``,
#: v2.28.7-1 lines 131-138, "Make sure we only aggregate p2p operations within the same p2p round epoch";
#: absent in v2.28.3-1)
P2P_EPOCH_RELEASE = (2, 28, 7)
#: the patch a bare ``(2, 28)`` stands for in the epoch rule: 2.28.7, an ASSUMPTION kept from before the model
#: held patches (a Case whose log prints no version keeps the rule it had)
P2P_EPOCH_BARE_PATCH = 7


def release(version: tuple, bare_patch: int = BARE_PATCH) -> tuple[int, int, int]:
    """``(major, minor, patch)`` of ``version``; a bare ``(major, minor)`` gets ``bare_patch``.

    >>> release((2, 28, 9)), release((2, 28)), release((2, 28), P2P_EPOCH_BARE_PATCH)
    ((2, 28, 9), (2, 28, 0), (2, 28, 7))
    """
    v = tuple(version)
    return (v[0], v[1], v[2] if len(v) > 2 else bare_patch)


def since(version: tuple, first: tuple, bare_patch: int = BARE_PATCH) -> bool:
    """Whether ``version`` is release ``first`` or later (a bare minor read by :func:`release`).

    >>> since((2, 28, 3), P2P_EPOCH_RELEASE), since((2, 28, 7), P2P_EPOCH_RELEASE), since((2, 29), P2P_EPOCH_RELEASE)
    (False, True, True)
    """
    return release(version, bare_patch) >= tuple(first)


def row_from(changes: tuple, version: tuple, default=None):
    """The row of the latest entry ``(first release, row)`` of ``changes`` that ``version`` has reached, else
    ``default``.

    >>> [row_from(BLACKWELL_RING_LL128_BY_RELEASE, v) for v in ((2, 28, 3), (2, 28, 9), (2, 29), (2, 29, 7))]
    [None, (73.4, 34.6, 73.4), (34.5, 34.6, 34.5), (40.0, 40.0, 40.0)]
    """
    rows = [row for first, row in changes if since(version, first)]
    return rows[-1] if rows else default


#: the fewest GPUs (in the communicator's topology, on each node) with which NCCL's ``ncclNvlsInit``
#: (src/transport/nvls.cc) turns NVLS on, from each release: v2.17.1-1 line 232 ``localRanks <= 1``; v2.18.3-1
#: line 239 .. v2.20.5-1 line 240 ``gpuCount <= 2``; v2.21.5-1 line 241 .. v2.24.3-1 line 155
#: ``(!MNNVL && gpuCount <= 2) || (MNNVL && clique.size <= 2)``; v2.25.1-1 line 157 .. v2.27.7-1 line 160 and
#: v2.28.3-1 line 160 ``gpuCount <= 2``; v2.28.7-1 line 161 .. v2.30.7-1 line 262 ``gpuCount < 2``
NVLS_MIN_GPUS_BY_RELEASE = (((2, 17, 0), 2), ((2, 18, 0), 3), ((2, 28, 7), 2))
#: the patch a bare ``(major, minor)`` stands for in the GPU-count rule: 2.28 is read as 2.28.7 (ASSUMED, as
#: before the model held patches; only 2.28's entry depends on it)
NVLS_BARE_PATCH = 7


def nvls_supported(gpus_per_node: int, version: tuple) -> bool:
    """Whether NCCL ``version`` turns NVLS (and with it NVLS-tree) on for ``gpus_per_node`` GPUs a node
    (``ncclNvlsInit``'s ``gpuCount``, the GPUs of the communicator its topology holds; one NVLink domain's
    where it spans trays): :data:`NVLS_MIN_GPUS_BY_RELEASE`.  2.21-2.24 test the NVLink clique's size instead
    where the communicator is multi-node NVLink (MNNVL); the model treats an NVL72 domain as one node, so
    ``gpus_per_node`` is that size and the rule agrees in practice.

    The rule changed in a patch release: v2.28.3-1 still needs 3 GPUs, v2.28.7-1 2, so a release
    ``(2, 28, patch)`` is read as it is.  ASSUMED: a bare ``(2, 28)`` (a log that prints no release) takes
    2.28.7's rule (``gpuCount < 2``: 2 GPUs on), :data:`NVLS_BARE_PATCH`.  The model's 2.28 tables are
    2.28.3's (:mod:`.constants`); both readings give the same choice on every validated table today.

    Known deviation from NCCL 2.20: v2.20.3-1 and v2.20.5-1 (line 240) also turn NVLS and NVLS-tree off on
    more than one node (``nNodes > 1``, as 2.17 did).  That rule is left out: the only 2.20 multi-host
    NVLS-capable Case (``h100_16gpu_2node_all_reduce_aws_p5_efa_readme.txt``, 2 x p5; its 2.20.3 is assumed
    from the README's build, not printed) reaches 487 GB/s busbw at 16 GiB, above the 400 GB/s a ring over
    2 x p5's 32 x 100 Gb/s could give, so it is unlikely to be a plain 2.20 ring run; the rule would take it
    from 5.0 % to 21 % (rings).  Left open (docs/nccl-model.md).

    >>> [nvls_supported(2, v) for v in ((2, 17), (2, 26), (2, 28, 3), (2, 28), (2, 28, 7))]
    [True, False, False, True, True]
    >>> nvls_supported(3, (2, 18)), nvls_supported(1, (2, 29))
    (True, False)
    """
    rows = [least for first, least in NVLS_MIN_GPUS_BY_RELEASE if since(version, first, NVLS_BARE_PATCH)]
    return bool(rows) and gpus_per_node >= rows[-1]


__all__ = ["BARE_PATCH", "BLACKWELL_RING_LL128_BY_RELEASE", "BLACKWELL_NVLS_TREE_BY_RELEASE",
           "NVLS_TREE_NET_HOP_BY_RELEASE", "P2P_EPOCH_RELEASE", "P2P_EPOCH_BARE_PATCH", "release", "since",
           "row_from", "NVLS_MIN_GPUS_BY_RELEASE", "NVLS_BARE_PATCH", "nvls_supported"]

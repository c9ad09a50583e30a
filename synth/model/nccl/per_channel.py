"""NCCL's tuner caps per GPU generation, by release: which row of its per-generation tables
(``llMaxBws``, ``perChMaxTreeBws``, ``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``) a communicator
reads, what those rows held, and the bus-bandwidth cap (or, in 2.7.3, discount) NCCL puts on a GPU
generation's graph (src/graph/tuning.cc ``ncclTopoTuneModel``, NVIDIA/nccl tags v2.7.3-1 .. v2.30.7-1).

The row is the one-host ``llMaxBws`` row (:func:`~.constants.ll_row_index`): an exact compute capability
(``compCap80``, v2.8.3-1 line 100; exactly 80 / 90, v2.15.1-1 line 111) before 2.17, ``minCompCap >= 90 /
>= 80`` from v2.17.1-1 (line 115), Blackwell's own row from v2.25.1-1 (line 215).  Across hosts ``llMaxBws``
reads the CPU vendor's row instead (:func:`ll_max_bws_row`).  The execution model's ceilings
(:mod:`.channel_caps`) take NCCL's newest per-channel figures as rates of the hardware, not these.
"""

from __future__ import annotations

from synth.model.nccl.constants import (
    LL_MAX_BWS_SINCE,
    PER_CH_MAX_TREE,
    PER_CH_MAX_TREE_LL128,
    ll_row_index,
)
from synth.model.nccl.machine import NcclMachine
from synth.model.nccl.versions import LL128_PER_CHANNEL_VERSION, ll128_ring_per_channel_gbs, per_channel_tables

#: first NCCL whose tuner reads the communicator's CPU vendor, "mixed" taking the AMD ``llMaxBws`` row across hosts
#: (v2.24.3-1 tuning.cc lines 213-214, ``cpuVendor == AMD || cpuVendor == MIXED``); init.cc has computed "mixed"
#: since v2.22.3-1, but up to 2.23 the tuner reads each rank's own host's CPU (v2.23.4-1 lines 148, 151).
#: :class:`~.machine.NcclMachine` holds one vendor, so only the ``cpu_vendor`` argument of :func:`ll_max_bws_row`
#: can say "mixed"
LL_MIXED_VENDOR_VERSION = (2, 24)
#: ``perChMaxTreeBws`` [generation][1, 2, > 2 nodes] by release: Volta and Ampere from v2.8.3-1 (line 76), Ampere
#: (24.0, 23.6, 17.8) from v2.10.3-1 (line 75), a Hopper row equal to Ampere's from v2.15.1-1 (lines 88-92),
#: Hopper (38.7, 41.4, 33.0) from v2.17.1-1 (lines 91-95), 36.0 on > 2 nodes from v2.18.3-1 (line 105), Blackwell
#: twice Hopper's from v2.25.1-1 (line 174), (70.0, 42.8, 24.0) from v2.28.3-1 (line 191) to v2.30.7-1 (line 203)
TREE_BY_VERSION = (
    (LL_MAX_BWS_SINCE, (PER_CH_MAX_TREE[0], (24.0, 22.5, 16.0))),
    ((2, 10), PER_CH_MAX_TREE[:2]),
    ((2, 15), PER_CH_MAX_TREE[:2] + (PER_CH_MAX_TREE[1],)),
    ((2, 17), PER_CH_MAX_TREE[:2] + ((38.7, 41.4, 33.0),)),
    ((2, 18, 3), PER_CH_MAX_TREE[:3]),
    ((2, 25), PER_CH_MAX_TREE[:3] + ((2 * 38.7, 2 * 41.4, 2 * 36.0),)),
    ((2, 28), PER_CH_MAX_TREE),
)
#: one LL128 rate per channel, rings and trees, any GPU: ``ll128MaxBwPerCh = 20.0`` (v2.10.3-1 line 73 ..
#: v2.16.5-1 line 81)
LL128_SCALAR_GBS, LL128_SCALAR_UNTIL = 20.0, (2, 17)
#: ``ll128MaxBwPerCh[compCapIndex]`` = {20, 20, 36.7} for rings and trees alike (v2.17.1-1 line 84, v2.18.1-1 line
#: 88); from v2.18.3-1 the tables ``perChMaxRingLL128Bws`` / ``perChMaxTreeLL128Bws`` (lines 92-101), the tree's
#: Hopper row (36.7, 36.7, 29.0), Blackwell 2 x Hopper's from v2.25.1-1 (line 168), (55.6, 31.67, 20.0) from v2.28.3-1
LL128_BY_GEN_17, LL128_TABLES_SINCE = (20.0, 20.0, 36.7), (2, 18, 3)
TREE_LL128_BY_VERSION = (
    (LL128_TABLES_SINCE, PER_CH_MAX_TREE_LL128[:3]),
    ((2, 25), PER_CH_MAX_TREE_LL128[:3] + ((2 * 36.7, 2 * 36.7, 2 * 29.0),)),
    ((2, 28), PER_CH_MAX_TREE_LL128),
)
#: v2.7.3-1 line 110 ``if (compCap80) busBw *= 0.92`` (every algorithm), replaced in v2.7.5-1 (line 112) by
#: ``min(busBw, 235)``, kept to v2.17.1-1 (line 153, ``compCapIndex == AMPERE``), which also caps Hopper and later
#: at 370 (line 154); v2.18.1-1 has neither
AMPERE_BUS_FACTOR_273, AMPERE_BUS_CAP_GBS, HOPPER_BUS_CAP_GBS = 0.92, 235.0, 370.0
AMPERE_BUS_CAP_SINCE, HOPPER_BUS_CAP_VERSION, BUS_CAP_UNTIL = (2, 7, 5), (2, 17), (2, 18)
#: the 2.7 tree rules (v2.7.3-1 lines 115-120; 2.5-2.6 have none of them, v2.6.4-1 lines 112-114): tree LL at
#: 1/3.8 (not 1/3), Ampere LL128's own ``maxTreeBw`` 105 / 130, tree LL128 at most ``ll128MaxBwPerCh`` per channel
TREE_27_VERSION = (2, 7)
#: first NCCL with ``perChMaxTreeBws`` and the tree's ``min(busBw*.92, nChannels*perChMaxTreeBw)`` (v2.8.3-1 l. 127)
TREE_PER_CH_SINCE = LL_MAX_BWS_SINCE


def _rows(table: tuple, version: tuple) -> tuple:
    rows = table[0][1]
    for since, r in table:
        rows = r if tuple(version) >= since else rows
    return rows


def ll_max_bws_row(m: NcclMachine, version: tuple, cpu_vendor: str | None = None) -> int:
    """The ``llMaxBws`` row NCCL ``version`` reads for ``m``: on one host its GPU generation's
    (:func:`~.constants.ll_row_index`), across hosts 1 for an AMD CPU (and from 2.24 a mix of vendors,
    :data:`LL_MIXED_VENDOR_VERSION`), else 0.  ``cpu_vendor`` overrides ``m.cpu_vendor`` (``"mixed"``: the
    communicator's hosts disagree; before 2.24 each rank reads its own host's row, which one machine cannot say).

    >>> from topo_probe import cluster
    >>> m = NcclMachine.from_topology(cluster("dgx-a100", nodes=2))
    >>> m.cpu_vendor, ll_max_bws_row(m, (2, 12)), ll_max_bws_row(m, (2, 12), "intel"), ll_max_bws_row(m, (2, 24), "mixed")
    ('amd', 1, 0, 1)
    >>> ll_max_bws_row(m.with_(nodes=1), (2, 12))
    1
    """
    vendor = cpu_vendor or m.cpu_vendor
    if m.nodes == 1:
        return ll_row_index(m.sm, version)
    if vendor == "mixed" and tuple(version) < LL_MIXED_VENDOR_VERSION:
        raise ValueError(f"NCCL {'.'.join(map(str, version))}: on hosts of mixed CPU vendors each rank reads its own "
                         "host's llMaxBws row; give the vendor of one")
    return 1 if vendor in ("amd", "mixed") else 0


def tree_per_channel_gbs(sm: int, nodes: int, version: tuple) -> float:
    """``perChMaxTreeBw`` (GB/s a tree channel is credited) of NCCL ``version`` (2.8 on) for compute capability
    ``sm`` on ``nodes`` hosts (:data:`TREE_BY_VERSION`, row :func:`~.constants.ll_row_index`).

    >>> [tree_per_channel_gbs(80, 2, v) for v in ((2, 8), (2, 10))], tree_per_channel_gbs(90, 1, (2, 12))
    ([22.5, 23.6], 26.5)
    >>> [tree_per_channel_gbs(90, 4, v) for v in ((2, 15), (2, 17), (2, 18, 3))], tree_per_channel_gbs(100, 1, (2, 25))
    ([17.8, 33.0, 36.0], 77.4)
    """
    return _rows(TREE_BY_VERSION, version)[ll_row_index(sm, version)][min(nodes, 3) - 1]


def ring_ll128_per_channel_gbs(coll: str, sm: int, nodes: int, version: tuple) -> float:
    """GB/s NCCL ``version``'s tuner credits one ring LL128 channel of ``coll`` (2.7 on): 2.7-2.9 a rate per
    collective (:func:`~.versions.ll128_ring_per_channel_gbs`), 2.10-2.16 20 for every GPU, 2.17-2.18.1 by
    generation (:data:`LL128_BY_GEN_17`), then ``perChMaxRingLL128Bws`` (:func:`~.versions.per_channel_tables`).

    >>> [ring_ll128_per_channel_gbs("allreduce", 90, 1, v) for v in ((2, 8), (2, 15), (2, 17), (2, 28))]
    [16.9, 20.0, 36.7, 36.7]
    """
    if tuple(version) < LL128_SCALAR_UNTIL:
        return ll128_ring_per_channel_gbs(coll, LL128_SCALAR_GBS, version)
    row = ll_row_index(sm, version)
    if tuple(version) < LL128_TABLES_SINCE:
        return LL128_BY_GEN_17[row]
    return per_channel_tables(version)[0][row][min(nodes, 3) - 1]


def tree_ll128_per_channel_gbs(coll: str, sm: int, nodes: int, version: tuple) -> float:
    """GB/s NCCL ``version``'s tuner credits one tree LL128 channel (2.8 on: 2.8-2.9 the ring's rate per
    collective, then as :func:`ring_ll128_per_channel_gbs` until 2.18.3's ``perChMaxTreeLL128Bws``).

    >>> [tree_ll128_per_channel_gbs("allreduce", 90, 4, v) for v in ((2, 9), (2, 16), (2, 17), (2, 18, 3))]
    [16.9, 20.0, 36.7, 29.0]
    """
    if tuple(version) < LL128_TABLES_SINCE:
        return ring_ll128_per_channel_gbs(coll, sm, nodes, version)
    return _rows(TREE_LL128_BY_VERSION, version)[ll_row_index(sm, version)][min(nodes, 3) - 1]


def graph_bus_gbs(bus: float, sm: int, version: tuple) -> float:
    """A graph's bus bandwidth (GB/s) after NCCL ``version``'s generation rule: v2.7.3-1 takes 92 % of it on
    Ampere (exactly sm80); 2.7.5-2.17 cap Ampere at 235 (2.17: any sm 80-89, and Hopper and later at 370).

    >>> [graph_bus_gbs(300.0, 80, v) for v in ((2, 7, 3), (2, 7, 5), (2, 17), (2, 18))]
    [276.0, 235.0, 235.0, 300.0]
    >>> graph_bus_gbs(400.0, 86, (2, 16)), graph_bus_gbs(400.0, 86, (2, 17)), graph_bus_gbs(400.0, 90, (2, 17))
    (400.0, 235.0, 370.0)
    """
    v, row = tuple(version), ll_row_index(sm, version)
    if TREE_27_VERSION <= v < AMPERE_BUS_CAP_SINCE:
        return bus * AMPERE_BUS_FACTOR_273 if sm == 80 else bus
    if not AMPERE_BUS_CAP_SINCE <= v < BUS_CAP_UNTIL:
        return bus
    if row == 1:
        return min(bus, AMPERE_BUS_CAP_GBS)
    return min(bus, HOPPER_BUS_CAP_GBS) if row >= 2 and v >= HOPPER_BUS_CAP_VERSION else bus


def tree_bus_pre28(bus: float, proto: str, coll: str, m: NcclMachine, n: int, v: tuple) -> float:
    """Tree busBw (GB/s) by NCCL 2.5-2.7's tuner: ``min(busBw*.9, maxTreeBw)``, maxTreeBw 70 on several nodes else
    90 (v2.5.6-1 src/graph/tuning.cc line 109), 80 on > 2 nodes else 110 (v2.6.4-1 line 112; v2.7.8-1 lines
    115-118, where Ampere LL128 has 105 / 130); LL a third of it (v2.5.6-1 line 110, v2.6.4-1 line 113), 1/3.8 in
    2.7 (v2.7.8-1 line 119); LL128 7/9 of it (lines 111, 114), in 2.7 ``min(x 7/9 on one node else .915,
    ll128MaxBwPerCh x channels x 7/9)`` (v2.7.8-1 line 120)."""
    rules_27 = v >= TREE_27_VERSION
    ampere_ll128 = m.sm == 80 and proto == "LL128" and rules_27
    if v < (2, 6):
        bus = min(bus * 0.9, 70.0 if m.nodes > 1 else 90.0)
    else:
        bus = min(bus * 0.9, (105.0 if ampere_ll128 else 80.0) if m.nodes > 2 else (130.0 if ampere_ll128 else 110.0))
    if proto == "LL":
        return bus / (3.8 if rules_27 else 3.0)
    if proto == "LL128" and v >= LL128_PER_CHANNEL_VERSION:
        per_ch = ll128_ring_per_channel_gbs(coll, LL128_SCALAR_GBS, v)
        return min(bus * (7.0 / 9.0 if m.nodes == 1 else 0.915), per_ch * n * 7.0 / 9.0)
    return bus * 7.0 / 9.0 if proto == "LL128" else bus


__all__ = ["ll_max_bws_row", "tree_per_channel_gbs", "ring_ll128_per_channel_gbs", "tree_ll128_per_channel_gbs",
           "graph_bus_gbs", "tree_bus_pre28", "TREE_PER_CH_SINCE"]

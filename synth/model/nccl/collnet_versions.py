"""NCCL's CollNet (SHARP) algorithms and their tuner rules, by NCCL version.

Read in src/graph/tuning.cc ``ncclTopoTuneModel`` of NVIDIA/nccl at every tag v2.8.4-1 .. v2.30.7-1 (the
lines cited below).  2.6-2.8 have one CollNet, a chain up the node's GPUs (the model's ``collnet_chain``
with 2.8's rules, :data:`COLLNET_BW_28`); 2.9-2.13 one "Oneshot" CollNet whose heads talk to the network
directly (``collnet_direct``); 2.14 on both.  What each version's tuner does with them is
:data:`COLLNET_RULES_BY_VERSION`: 2.9 credits the direct CollNet 0.9 of its graph, 2.10-2.13 all of it;
only from 2.14 does NCCL divide by the GPUs per NIC; 2.14-2.17 give the chain 0.75; the direct CollNet's
latency costs 0.5 µs per arity step up to 2.18, 0.4 from 2.19 (2.9 times it as the chain).

>>> r = collnet_rules((2, 12))
>>> r.direct_factor, r.direct_per_nic, r.direct_arity_us, collnet_rules((2, 15)).chain_factor
(1.0, False, 0.5, 0.75)
"""

from __future__ import annotations

from typing import NamedTuple

#: NCCL's CollNet algorithms by version: none before v2.6 (v2.5.7-1 src/include/core.h line 56: "Tree/Ring"); one
#: CollNet from v2.6 to v2.8 that reduces up a chain of the node's GPUs
#: (``channel->collTree``, a ``struct ncclTree``: v2.8.4-1 src/collectives/device/all_reduce.h lines 200-209), the
#: chain the model calls ``collnet_chain``; from v2.9.9-1 to v2.13.4-1 one "Oneshot" CollNet whose heads talk to
#: the network directly (v2.9.9-1 all_reduce.h: ``struct ncclDirect* tree = &channel->collTree``, ``nHeads``;
#: tuning.cc line 133 "Oneshot CollNet only supports Simple"), ``collnet_direct``; from v2.14.3-1 both
#: (src/include/devcomm.h ``NCCL_ALGO_COLLNET_DIRECT`` / ``NCCL_ALGO_COLLNET_CHAIN``)
COLLNET_ALGOS_BY_VERSION = (((0, 0), ()), ((2, 6), ("collnet_chain",)), ((2, 9), ("collnet_direct",)),
                            ((2, 14), ("collnet_direct", "collnet_chain")))
#: v2.8.4-1 src/graph/tuning.cc lines 130-132: CollNet's busBw x .9, LL a sixth of that ("GDR read is disabled
#: on both sides"), no LL128; its latency rows (lines 57, 65-69): base (LL, LL128, Simple) 4.4 / 4.4 / 0 µs,
#: a hop on NVLink .5 / 1.2 / 4.0, PCI 1.0 / 1.9 / 5.5, network 5.0 / 5.0 / 10.7
COLLNET_BW_28, COLLNET_LL_SHARE_28 = 0.9, 1.0 / 6.0
COLLNET_LAT_28 = ((4.4, 4.4, 0.0), ((.5, 1.2, 4.0), (1.0, 1.9, 5.5), (5.0, 5.0, 10.7)))


class CollNetRules(NamedTuple):
    """One NCCL version's CollNet tuner rules (from 2.9; 2.6-2.8's chain has :data:`COLLNET_BW_28`)."""

    direct_factor: float       # busBw x this for collnet_direct
    direct_per_nic: bool       # busBw / (f - (f - 1) / 2), f = GPUs per node / CollNet channels (NICs)
    direct_hopper: float       # busBw x this for collnet_direct when every GPU is sm90+
    chain_factor: float        # busBw x this for collnet_chain
    direct_arity_us: float | None   # µs per arity step of collnet_direct's latency; None: the chain's formula
    chain_inter: bool          # collnet_chain's latency adds one network hop
    direct_needs_nvswitch: bool     # collnet_direct off on a node without NVSwitch
    gather_scatter: bool       # collnet_direct offered for all_gather / reduce_scatter
    latency: tuple             # (collnet_direct rows, collnet_chain rows): (base, (NVLink, PCI, NET) hops)


#: 2.14-2.17 hwLat rows of both CollNets, Simple only (v2.14.3-1 tuning.cc lines 56, 66, 69, 72)
_LAT_214 = ((4.4, 4.4, 0.0), ((0.0, 0.0, 8.0), (0.0, 0.0, 8.0), (0.0, 0.0, 10.7)))
_V29 = CollNetRules(0.9, False, 1.0, 1.0, None, True, False, False, (COLLNET_LAT_28, COLLNET_LAT_28))
#: each row from the first version that holds it (later rows replace only the named fields)
COLLNET_RULES_BY_VERSION = (
    # v2.9.9-1 tuning.cc lines 132-133: ``busBw *= .9``, Simple only; lines 158-160: latency 2 x (ppn - 1)
    # intra hops + one network hop (the chain's formula); rows lines 56, 65-69 (2.8's)
    ((2, 9), _V29),
    # v2.10.3-1 (same to v2.13.4-1): no .9 (line 133 keeps "Simple only"); lines 159-160: 2 x (min(1, ppn - 1)
    # intra hop + (ppn - 1) x 0.5 µs "arity serialization") + one network hop; rows lines 56, 65, 67, 69:
    # Simple 8.0 µs a hop on NVLink and PCI, 10.7 on the network
    ((2, 10), _V29._replace(direct_factor=1.0, direct_arity_us=0.5, latency=(
        ((4.4, 4.4, 0.0), ((.5, 1.2, 8.0), (1.0, 1.9, 8.0), (5.0, 5.0, 10.7))),) * 2)),
    # v2.14.3-1 (to v2.17.1-1): lines 139-144 the GPU/NIC divisor ("Collnet+Direct requires all GPUs to have a
    # local NIC"); line 145 the chain's ``busBw *= .75`` (v2.17.1-1 line 168); lines 174-175 the chain's latency
    # 2 x (ppn - 1) intra hops, no network hop; lines 206-209 no CollNet direct without NVSwitch
    ((2, 14), _V29._replace(direct_factor=1.0, direct_per_nic=True, chain_factor=0.75, direct_arity_us=0.5,
                            chain_inter=False, direct_needs_nvswitch=True, latency=(_LAT_214, _LAT_214))),
    # v2.18.1-1 (and v2.18.3-1): no .75; line 182 ``busBw *= .85`` for the direct one on sm90+; lines 223-224
    # the chain adds a network hop; rows lines 56-59, 70, 74, 78 (base 6.8 / 14.0 / 0, chain 4.75 / 8.0 / 14)
    ((2, 18), _V29._replace(direct_factor=1.0, direct_per_nic=True, direct_hopper=0.85, direct_arity_us=0.5,
                            direct_needs_nvswitch=True, latency=(
                                ((6.8, 14.0, 0.0), ((0.0, 0.0, 8.0), (0.0, 0.0, 8.0), (0.0, 0.0, 10.7))),
                                ((6.8, 14.0, 0.0), ((0.0, 0.0, 4.75), (0.0, 0.0, 8.0), (0.0, 0.0, 14.0)))))),
    # v2.19.3-1: lines 234-236 "Add 0.4 us arity serialization latency"; rows lines 56-59, 68, 72, 76 (base 0,
    # direct 3.7 / 3.7 / 31, chain 2.8 / 2.8 / 30: the model's 2.28 table, latency None = that table)
    ((2, 19), _V29._replace(direct_factor=1.0, direct_per_nic=True, direct_hopper=0.85, direct_arity_us=0.4,
                            direct_needs_nvswitch=True, latency=None)),
    # v2.20.3-1 lines 169-170: CollNet direct for all_gather / reduce_scatter too (v2.19.3-1 lines 168-169: not)
    ((2, 20), _V29._replace(direct_factor=1.0, direct_per_nic=True, direct_hopper=0.85, direct_arity_us=0.4,
                            direct_needs_nvswitch=True, gather_scatter=True, latency=None)),
)


def collnet_rules(version: tuple) -> CollNetRules:
    """NCCL ``version``'s CollNet tuner rules (:data:`COLLNET_RULES_BY_VERSION`; before 2.9, 2.9's row,
    which only the 2.6-2.8 chain's own rules override).

    >>> [collnet_rules(v).direct_factor for v in ((2, 9), (2, 13), (2, 28))]
    [0.9, 1.0, 1.0]
    >>> [collnet_rules(v).chain_factor for v in ((2, 13), (2, 14), (2, 17), (2, 18))]
    [1.0, 0.75, 0.75, 1.0]
    >>> [collnet_rules(v).direct_arity_us for v in ((2, 9), (2, 10), (2, 18), (2, 19))]
    [None, 0.5, 0.5, 0.4]
    """
    rows = [r for first, r in COLLNET_RULES_BY_VERSION if tuple(version) >= first]
    return rows[-1] if rows else COLLNET_RULES_BY_VERSION[0][1]


def collnet_algorithms(version: tuple) -> tuple[str, ...]:
    """The CollNet algorithms NCCL ``version`` has (:data:`COLLNET_ALGOS_BY_VERSION`).

    >>> collnet_algorithms((2, 5)), collnet_algorithms((2, 8)), collnet_algorithms((2, 12)), collnet_algorithms((2, 28))
    ((), ('collnet_chain',), ('collnet_direct',), ('collnet_direct', 'collnet_chain'))
    """
    return [algos for first, algos in COLLNET_ALGOS_BY_VERSION if tuple(version) >= first][-1]


def collnet_chain_28(version: tuple) -> bool:
    """Whether ``collnet_chain`` is NCCL 2.6-2.8's one CollNet, with its own tuner rules and latency rows."""
    return tuple(version) < COLLNET_ALGOS_BY_VERSION[2][0]


def collnet_latency_rows(algo: str, version: tuple) -> tuple | None:
    """``(base, (NVLink, PCI, NET) hops)`` µs (LL, LL128, Simple) NCCL ``version``'s tuner holds for CollNet
    ``algo``; None where it is the model's 2.28 table (from 2.19).

    >>> collnet_latency_rows("collnet_direct", (2, 12))[1][0], collnet_latency_rows("collnet_chain", (2, 18))[1][2]
    ((0.5, 1.2, 8.0), (0.0, 0.0, 14.0))
    >>> collnet_latency_rows("collnet_chain", (2, 8)) == COLLNET_LAT_28, collnet_latency_rows("collnet_direct", (2, 19))
    (True, None)
    """
    if algo == "collnet_chain" and collnet_chain_28(version):
        return COLLNET_LAT_28
    rows = collnet_rules(version).latency
    return None if rows is None else rows[algo == "collnet_chain"]


__all__ = ["COLLNET_ALGOS_BY_VERSION", "COLLNET_BW_28", "COLLNET_LL_SHARE_28", "COLLNET_LAT_28", "CollNetRules",
           "COLLNET_RULES_BY_VERSION", "collnet_rules", "collnet_algorithms", "collnet_chain_28",
           "collnet_latency_rows"]

"""PCIe links several of a host's GPUs stream over at once: the switch uplink two GPUs share to host memory, the link
between two CPU sockets that a second socket's GPUs cross to a NIC on the first, a NIC whose own PCIe link is
narrower than its line rate.  NCCL's search gives each channel its bandwidth from every link the channel's path
crosses and takes it off that link (NVIDIA/nccl v2.28.9-1 src/graph/search.cc ``followPath`` lines 79-117: line
110 refuses a link with less left than the channel's ``fwBw``, line 111 ``SUB_ROUND(link->bw, fwBw)`` takes it
off), so ``k`` GPUs whose channels cross one link share it, ``1 / k`` each.  That is NCCL's rule for the rings
and trees it searches; point-to-point transfers are not searched, but their streams share a link the same way when
they cross it at once, as an alltoall's do (not a sendrecv's or a gather/scatter's: one GPU a host streams toward
the NIC, so :func:`.p2p.p2p_time_us` applies the share to an alltoall only).  An alltoall runs every peer's
transfer at once: NCCL v2.28.9-1 has no alltoall call of its own (nccl-tests and PyTorch issue ``ncclSend`` /
``ncclRecv`` per peer inside one group), and src/enqueue.cc ``scheduleP2pTasksToPlan`` (lines 1039-1119) puts every
round's send and receive into the same kernel plan, each round on its own channels (``addP2pToPlan`` line 803,
``ncclP2pChannelBaseForRound``), so every GPU of a host streams toward its NIC at the same time and each GPU behind
a shared link gets its share of it.

>>> from topo_probe.machines.presets import get_preset
>>> t = get_preset("dgx-h100")
>>> set(nic_shares(t, list(range(t.num_gpus)), 5)), uplink_gpus(t, list(range(t.num_gpus)))
({()}, 1)
"""

from __future__ import annotations

import math

import networkx as nx

from synth.model.nccl.constants import PCIE_X16_GBS
from synth.model.nccl.pcie_path import counted_link
from topo_probe.topology.model import Topology


def _host_view(g, host: int):
    """The host's PCIe and CPU links (GPUs and NICs as end points only: no path runs through another GPU)."""
    nodes = [n for n, d in g.nodes(data=True) if int(d.get("host", 0)) == host]
    sub = g.subgraph(nodes)
    return nx.subgraph_view(sub, filter_edge=lambda u, v: sub.edges[u, v]["kind"] in ("pcie", "cpu"))


def nic_links(topo: Topology, local: list[int]) -> dict[int, list[tuple[str, str]]]:
    """Per GPU of ``local``: the counted links (:func:`.pcie_path.counted_link`: PCIe but a ``<pcilink>``, socket to
    socket) of its shortest PCIe path to its host's nearest NIC (ties: the NIC of the smallest name), the NIC's own
    link left out (it is the NIC's rate, which :func:`.p2p.p2p_inter_gbs` already splits over the host's GPUs).
    Empty where the host has no NIC."""
    g = topo.graph
    host = int(g.nodes[topo.gpu(local[0])].get("host", 0))
    view, out = _host_view(g, host), {}
    for k in local:
        paths = nx.single_source_shortest_path(view, topo.gpu(k))
        nics = sorted((len(p), n) for n, p in paths.items() if g.nodes[n]["kind"] == "nic")
        if nics:
            path = paths[nics[0][1]][:-1]                       # the NIC's own link is its rate: not counted here
            out[k] = [(u, v) for u, v in zip(path, path[1:]) if counted_link(g, u, v)]
    return out


def _share(g, links: dict[int, list[tuple[str, str]]], gen: int) -> tuple[tuple[float, str], ...]:
    """Per ``link_eff`` kind (``pcie``, ``shm``), the least link rate / GPUs of ``links`` crossing it, where below the
    x16 rate of ``gen``: ``((GB/s, kind), ...)``, one pair a kind, ``()`` where none is narrower.  One pair a kind, not
    the least GB/s overall: which link is slowest depends on each kind's efficiency (a socket link at 10 GB/s x shm's
    0.5 is slower than a PCIe link at 7.875 x 0.8), which the model's parameters hold, not the topology."""
    users: dict[frozenset, int] = {}
    for path in links.values():
        for u, v in path:
            users[frozenset((u, v))] = users.get(frozenset((u, v)), 0) + 1
    least = {"pcie": math.inf, "shm": math.inf}
    for path in links.values():
        for u, v in path:
            kind = "pcie" if g.edges[u, v]["kind"] == "pcie" else "shm"
            least[kind] = min(least[kind], g.edges[u, v]["bandwidth_gbps"] / users[frozenset((u, v))])
    return tuple((float(gbs), kind) for kind, gbs in least.items() if gbs < PCIE_X16_GBS[gen] - 1e-9)


def nic_shares(topo: Topology, local: list[int], gen: int) -> tuple[tuple[tuple[float, str], ...], ...]:
    """:attr:`.machine.NcclMachine.nic_shares`: for the host's first 1, 2, ... ``len(local)`` GPUs in use (a run of
    fewer GPUs per host uses devices 0, 1, ...), per ``link_eff`` kind the least, over those GPUs, of a link's rate
    divided by how many of them cross it on their NIC paths (:func:`nic_links`; GB/s per direction), where below the
    x16 rate of ``gen``: ``shm`` for a link between two CPU sockets (as the bound rates a ``cpu`` link:
    :data:`synth.model.physics.LINK_KIND`), else ``pcie``; ``()`` where no such link is narrower (:func:`_share`)."""
    links = nic_links(topo, local)
    return tuple(_share(topo.graph, {k: links[k] for k in local[:n] if k in links}, gen)
                 for n in range(1, len(local) + 1))


def nic_pcie_limited(topo: Topology, nics: list[str], rates: list[float]) -> bool:
    """Whether the host's fastest NICs (``rates``: :func:`.pcie_path.nic_gbs` of ``nics``) run at their own PCIe
    link's rate, below their line rate (``speed_gbps``): then that rate is a PCIe link's, which moves data at the
    PCIe efficiency (the bound's ``pcie`` efficiency for the same link), not the network's."""
    if not rates:
        return False
    g, top = topo.graph, max(rates)
    fastest = [n for n, r in zip(nics, rates) if r == top]
    return all(top < float(g.nodes[n].get("speed_gbps") or 0.0) - 1e-9 for n in fastest)


def restated_nic(m, changes: dict) -> dict:
    """The ``nic_gbps`` and ``nic_pcie_limited`` a copy of machine ``m`` with ``changes`` takes where these state a NIC
    rate but not the flag, by the rule :meth:`.machine.NcclMachine.from_topology` applies: a NIC runs at its line rate,
    at most its own PCIe link's (:func:`.pcie_path.nic_gbs`), limited where that link is below it
    (:func:`nic_pcie_limited`).  A limited ``m``'s rate is its slot's: a faster line rate keeps it and the flag, a
    slower one runs unlimited at its own rate; an unlimited ``m``'s slot is unknown: the new rate, unlimited.
    ``{}`` where ``changes`` leaves the rate alone or sets the flag itself.

    >>> from synth.model.nccl import NcclMachine
    >>> slot = NcclMachine("vm", "sm80", 4, 2, "nvlink", 12, nics_per_node=1, nic_gbps=15.75, nic_pcie_limited=True)
    >>> restated_nic(slot, {"nic_gbps": 50.0}), restated_nic(slot, {"nic_gbps": 12.5}), restated_nic(slot, {})
    ({'nic_gbps': 15.75, 'nic_pcie_limited': True}, {'nic_gbps': 12.5, 'nic_pcie_limited': False}, {})
    """
    if "nic_gbps" not in changes or "nic_pcie_limited" in changes:
        return {}
    line = float(changes["nic_gbps"])
    if m.nic_pcie_limited and line > m.nic_gbps + 1e-9:
        return {"nic_gbps": m.nic_gbps, "nic_pcie_limited": True}
    return {"nic_gbps": line, "nic_pcie_limited": False}


def uplink_gpus(topo: Topology, local: list[int]) -> int:
    """How many of ``local`` GPUs send through host memory over one PCIe switch uplink with GPU 0: GPU 0 and every GPU
    whose PCIe path to it stays below the host (switches only, :meth:`Topology.pcie_paths`), when none of them has P2P
    with GPU 0 (then every ring hop between them climbs to host memory); 1 where GPU 0 links to the host bridge
    itself, or where they have P2P (a ring then enters and leaves the switch once per channel)."""
    g = topo.graph
    below = [k for k in local[1:] if any(len(p) > 2 and all(g.nodes[v]["kind"] == "pcie_switch" for v in p[1:-1])
                                         for p in topo.pcie_paths(local[0], k))]
    if any(topo.p2p(local[0], k).read for k in below):
        return 1
    return 1 + len(below)


__all__ = ["nic_links", "nic_shares", "nic_pcie_limited", "restated_nic", "uplink_gpus"]

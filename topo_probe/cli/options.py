"""Command-line flags that describe a whole machine, shared by every command that takes
``--topology``: ``--nodes N``, ``--nic-gbps G``, ``--nics-per-node K``, ``--rail-optimized``,
``--spine-oversubscription R``, ``--hosts-per-leaf M`` and ``--net KIND``.

They apply after the topology is loaded (and cut to ``--gpus``): ``--nodes N`` (N > 1) joins N
copies of it into a cluster (:func:`topo_probe.machines.clusters.cluster`), with ``K`` NICs of
``G`` GB/s per direction each per host when given, one network switch per rail with
``--rail-optimized``, else one switch for every NIC; ``--spine-oversubscription R`` puts the
hosts under leaf switches (``--hosts-per-leaf M`` each) joined by a spine whose uplinks carry
1/R of the leaves' downlink bandwidth.  With one node, ``--nics-per-node`` / ``--nic-gbps`` only
change the host's NICs.  ``--net`` names the NICs' transport (``ib``, ``roce``, ``efa``, ``efa2``,
``tcpxo``, ``socket``), which NCCL's network model reads (InfiniBand without it).
``--host-path-class`` sets the class assumed between GPUs of a topology without a PCIe tree
(:mod:`topo_probe.topology.host_assumption`).
Host counts (``--nodes``, ``--hosts-per-leaf``) are at most :data:`MAX_NODES` hosts, checked before a
topology is read (:func:`check_host_counts`).

>>> import argparse
>>> p = argparse.ArgumentParser()
>>> add_machine_arguments(p)
>>> args = p.parse_args(["--nodes", "2", "--nics-per-node", "4", "--nic-gbps", "50"])
>>> from topo_probe.machines.presets import get_preset
>>> t = apply_machine_arguments(get_preset("dgx-h100"), args)
>>> t.num_gpus, len(t.nodes_of_kind("nic")), t.path_class(0, 8)
(16, 8, 'NET')
"""

from __future__ import annotations

import argparse

from topo_probe.errors import TopologyError
from topo_probe.limits import MAX_BANDWIDTH_GBPS, MAX_HOSTS, MAX_NICS_PER_HOST, MAX_OVERSUBSCRIPTION, MIN_BANDWIDTH_GBPS
from topo_probe.number_checks import check_float, check_int
from topo_probe.topology.host_assumption import DEFAULT_HOST_PATH_CLASS, HOST_PATH_CLASSES, set_host_path_class
from topo_probe.topology.model import NIC_TRANSPORTS, Topology

#: at most this many hosts in any host count a flag gives (``--nodes``, ``--hosts-per-leaf``), checked before a
#: topology is loaded; ``--nodes`` is also bounded by the GPUs it gives
#: (:func:`topo_probe.machines.clusters.check_hosts`)
MAX_NODES = MAX_HOSTS
#: the flags that give a host count, with their ``argparse`` names
HOST_COUNT_FLAGS = (("--nodes", "nodes"), ("--hosts-per-leaf", "hosts_per_leaf"))


def add_machine_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``--nodes``, ``--nic-gbps``, ``--nics-per-node``, ``--rail-optimized``,
    ``--spine-oversubscription`` and ``--hosts-per-leaf`` to ``p``."""
    g = p.add_argument_group("machine shape (applied to --topology)")
    g.add_argument("--nodes", type=int, metavar="N", help="join N copies of the host into a cluster")
    g.add_argument("--nic-gbps", type=float, metavar="G", help="NIC speed, GB/s per direction per NIC")
    g.add_argument("--nics-per-node", type=int, metavar="K",
                   help=f"NICs per host (spread over the GPUs), at most {MAX_NICS_PER_HOST}")
    g.add_argument("--rail-optimized", action="store_true",
                   help="one network switch per NIC rail (default: one switch for all NICs)")
    g.add_argument("--spine-oversubscription", type=float, metavar="R",
                   help="two-tier network: leaf switches joined by a spine with R:1 oversubscribed uplinks")
    g.add_argument("--hosts-per-leaf", type=int, metavar="M",
                   help="hosts under one leaf switch with --spine-oversubscription (default: 32 NIC ports a leaf)")
    g.add_argument("--net", choices=NIC_TRANSPORTS, metavar="KIND",
                   help="the NICs' transport for NCCL's model: ib (default), roce, efa (AWS p4d/p4de), efa2 (p5), "
                        "tcpxo (GCP A3), socket")
    g.add_argument("--host-path-class", choices=HOST_PATH_CLASSES, metavar="CLASS", type=str.upper,
                   help="for a topology without a PCIe tree (a link matrix): the NCCL path class assumed between "
                        "GPUs with no NVLink path of at most 2 hops, for NCCL's side only: "
                        f"{', '.join(HOST_PATH_CLASSES)} (default {DEFAULT_HOST_PATH_CLASS}, as NCCL places GPUs "
                        "it has no PCI information for)")


def check_host_counts(args: argparse.Namespace) -> None:
    """Each host count of :data:`HOST_COUNT_FLAGS` that is given: an integer in 1..:data:`MAX_NODES`, else
    TopologyError in one line naming the flag (``--nodes must be at most 4096 hosts, got 5000``); needs no topology,
    so a command can call it before loading or probing one."""
    for flag, name in HOST_COUNT_FLAGS:
        value = getattr(args, name, None)
        if value is not None:
            check_int(value, flag, TopologyError, lo=1, hi=MAX_NODES, what="hosts")


def apply_machine_arguments(topo: Topology, args: argparse.Namespace) -> Topology:
    """``topo`` reshaped by the flags of :func:`add_machine_arguments` (unchanged without them;
    a copy when ``--net`` is given).  The host counts are checked once, by the command, before it reads the
    topology (:func:`check_host_counts`); here ``--nodes`` is bounded by the GPUs it gives.

    Raises
    ------
    TopologyError
        A flag out of range (``--nodes 0``, ``--nodes 129`` of 8-GPU hosts, ``--nic-gbps -1``) or a shape the
        topology cannot take (no NICs and no ``--nic-gbps``), in one line naming the flag.
    """
    nodes = getattr(args, "nodes", None)
    gbps = getattr(args, "nic_gbps", None)
    k = getattr(args, "nics_per_node", None)
    rail = bool(getattr(args, "rail_optimized", False))
    ratio = getattr(args, "spine_oversubscription", None)
    per_leaf = getattr(args, "hosts_per_leaf", None)
    if nodes is not None:
        from topo_probe.machines.clusters import check_hosts
        check_hosts(nodes, topo.num_gpus, "--nodes")
    if gbps is not None:        # the rules cluster() and with_nics() use, so both refuse a value alike
        check_float(gbps, "--nic-gbps", TopologyError, lo=MIN_BANDWIDTH_GBPS, hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    if k is not None:
        check_int(k, "--nics-per-node", TopologyError, lo=1, hi=MAX_NICS_PER_HOST, what="NICs")
    if ratio is not None:
        check_float(ratio, "--spine-oversubscription", TopologyError, lo=1.0, hi=MAX_OVERSUBSCRIPTION)
    if per_leaf is not None and ratio is None:
        raise TopologyError("--hosts-per-leaf needs --spine-oversubscription R")
    topo = _with_host_path_class(topo, getattr(args, "host_path_class", None))
    return _with_transport(_shaped(topo, nodes, gbps, k, rail, ratio, per_leaf), getattr(args, "net", None))


def _with_host_path_class(topo: Topology, cls: str | None) -> Topology:
    """A copy of ``topo`` with the assumed host path class ``cls`` (``topo`` itself without one)."""
    if cls is None:
        return topo
    out = topo.copy()
    set_host_path_class(out.graph, cls, "--host-path-class")
    return out


def _shaped(topo, nodes, gbps, k, rail, ratio, per_leaf) -> Topology:
    from topo_probe.machines.clusters import check_one_host, cluster, with_nics
    if (nodes or 1) > 1:
        return cluster(topo, nodes, gbps, rail_optimized=rail, nics_per_node=k, spine_oversubscription=ratio,
                       hosts_per_leaf=per_leaf)
    if rail or ratio is not None:
        flag = "--rail-optimized" if rail else "--spine-oversubscription"
        raise TopologyError(f"{flag} needs --nodes N with N > 1")
    if k is not None or gbps is not None:
        check_one_host(topo, f"{'--nics-per-node' if k is not None else '--nic-gbps'} without --nodes N > 1")
        count = k if k is not None else len(topo.nodes_of_kind("nic")) or 1
        return with_nics(topo, count, gbps)
    return topo


def _with_transport(topo: Topology, net: str | None) -> Topology:
    """A copy of ``topo`` whose every NIC has ``transport`` ``net`` (``topo`` itself without one)."""
    if net is None:
        return topo
    nics = topo.nodes_of_kind("nic")
    if not nics:
        raise TopologyError(f"--net {net}: topology {topo.name!r} has no NICs (add them with --nics-per-node "
                            f"and --nic-gbps)")
    out = topo.copy()
    for n in nics:
        out.graph.nodes[n]["transport"] = net
    return out


__all__ = ["add_machine_arguments", "apply_machine_arguments", "check_host_counts", "HOST_COUNT_FLAGS", "MAX_NODES"]

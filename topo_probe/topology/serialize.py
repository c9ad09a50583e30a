"""Versioned JSON for :class:`~topo_probe.topology.model.Topology` (format ``topocoll.topology`` v1).

Document layout::

    {"format": "topocoll.topology", "version": 1, "name": "...", "description": "...",
     "nodes": [{"id": "gpu0", "kind": "gpu", "index": 0, ...attrs}, ...],
     "links": [{"src": "gpu0", "dst": "gpu1", "kind": "nvlink", "links": 2,
                "bandwidth_gbps": 50.0, "latency_us": 0.7, "both": true}, ...],
     "p2p_overrides": [{"src": 0, "dst": 1, "read": true, "write": true,
                        "atomics": false, "reason": "..."}],
     "assumptions": ["..."], "host_path_class": "SYS"}

``host_path_class`` (optional) is the class assumed between GPUs of a topology without a PCIe
tree (:mod:`topo_probe.topology.host_assumption`).

``bandwidth_gbps`` is the edge total in GB/s per direction, ``latency_us`` one-way µs.
``both`` (default ``true``) adds the reverse direction with the same attributes; the writer
folds symmetric pairs into one entry and writes one-way edges with ``"both": false``.
Loading validates every field and names the bad one (``links[3].bandwidth_gbps must be > 0``; a
link field it does not know, such as ``latency`` for ``latency_us``, is refused, not ignored),
and rejects a topology whose GPUs are not all connected.

>>> from topo_probe.machines.generators import ring
>>> t = ring(3)
>>> d = topology_to_dict(t)
>>> d["format"], d["version"], len(d["links"]), topology_from_dict(d) == t
('topocoll.topology', 1, 3, True)
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

from topo_probe.capped_read import read_text
from topo_probe.errors import TopologyError, UsageError, show
from topo_probe.json_guard import parse_json
from topo_probe.limits import MAX_BANDWIDTH_GBPS, MAX_EDGES, MAX_GPUS, MAX_LATENCY_US, MAX_NODES, MIN_BANDWIDTH_GBPS
from topo_probe.number_checks import check_float, check_int
from topo_probe.number_rules import is_int, is_real
from topo_probe.topology.checks import check_edge, check_topology
from topo_probe.topology.host_assumption import GRAPH_KEY, set_host_path_class
from topo_probe.topology.model import LINK_KINDS, NIC_TRANSPORTS, NODE_KINDS, P2PCapability, Topology

FORMAT = "topocoll.topology"
VERSION = 1
_EDGE_FIELDS = ("kind", "links", "bandwidth_gbps", "latency_us")
#: every field a link entry may have (what :func:`topology_to_dict` writes)
_LINK_KEYS = frozenset(("src", "dst", "both") + _EDGE_FIELDS)


def topology_to_dict(topo: Topology) -> dict[str, Any]:
    """The JSON-ready document of ``topo`` (see the module docstring)."""
    nodes = [{"id": n, "kind": d["kind"], **{k: v for k, v in sorted(d.items()) if k != "kind"}}
             for n, d in topo.graph.nodes(data=True)]
    links, done = [], set()
    for u, v, d in topo.graph.edges(data=True):
        if (u, v) in done:
            continue
        entry = {"src": u, "dst": v, **{f: d[f] for f in _EDGE_FIELDS}}
        back = topo.graph.edges[v, u] if topo.graph.has_edge(v, u) else None
        sym = back is not None and all(back[f] == d[f] for f in _EDGE_FIELDS)
        entry["both"] = sym
        done.add((u, v))
        if sym:
            done.add((v, u))
        links.append(entry)
    p2p = [{"src": i, "dst": j, "read": c.read, "write": c.write, "atomics": c.atomics, "reason": c.reason}
           for (i, j), c in sorted(topo.p2p_overrides.items())]
    return {"format": FORMAT, "version": VERSION, "name": topo.name, "description": topo.description,
            "nodes": nodes, "links": links, "p2p_overrides": p2p, "assumptions": list(topo.assumptions),
            **({GRAPH_KEY: topo.graph.graph[GRAPH_KEY]} if topo.graph.graph.get(GRAPH_KEY) else {})}


def _fail(source: str, msg: str) -> TopologyError:
    return TopologyError(f"{source}: {msg}")


def _check_attrs(attrs: dict, where: str, source: str) -> None:
    """The numeric node attributes our loaders and exporters read: in range or absent/None
    (``host`` -1 marks a cluster's network switches; ``numa_node`` -1 is Linux's "unknown");
    each is set to the int or float it checked (a NumPy scalar does not save as JSON)."""
    for key, lo, hi in (("index", 0, MAX_GPUS - 1), ("host", -1, MAX_NODES), ("numa_node", -1, MAX_NODES),
                        ("gpu_numa_id", -1, MAX_NODES)):
        if attrs.get(key) is not None or key == "index" and "index" in attrs:
            attrs[key] = check_int(attrs[key], f"{source}: {where}.{key}", TopologyError, lo=lo, hi=hi)
    if attrs.get("speed_gbps") is not None:
        attrs["speed_gbps"] = check_float(attrs["speed_gbps"], f"{source}: {where}.speed_gbps", TopologyError,
                                          lo=MIN_BANDWIDTH_GBPS, hi=MAX_BANDWIDTH_GBPS, unit="GB/s")
    for key in ("pci_bus_id", "compute_capability", "name", "gcn_arch", "affinity"):   # read with str methods
        if attrs.get(key) is not None and not isinstance(attrs[key], str):
            raise TopologyError(f"{source}: {where}.{key} must be a string, got {show(attrs[key])}")
    cc = attrs.get("compute_capability")
    # "9.0" from NVML; the NCCL XML loader writes sm // 10 . sm % 10, so an sm of 1000 is "100.0"
    if cc is not None and not re.fullmatch(r"[0-9]{1,7}\.[0-9]", cc):      # one rule with sm_from_compute_capability
        raise TopologyError(f"{source}: {where}.compute_capability {show(cc)} is not a major.minor like '9.0'")
    if attrs.get("transport") is not None and attrs["transport"] not in NIC_TRANSPORTS:
        raise TopologyError(f"{source}: {where}.transport {show(attrs['transport'])} is not one of "
                            f"{', '.join(NIC_TRANSPORTS)}")


def _nodes(topo: Topology, nodes: Any, source: str) -> None:
    if not isinstance(nodes, list):
        raise _fail(source, "nodes must be a list")
    if len(nodes) > MAX_NODES:
        raise _fail(source, f"nodes lists {len(nodes)} nodes, more than the {MAX_NODES} a topology may have")
    gpu_at: dict[int, int] = {}
    for k, nd in enumerate(nodes):
        where = f"nodes[{k}]"
        if not isinstance(nd, dict):
            raise _fail(source, f"{where} must be an object")
        nid, kind = nd.get("id"), nd.get("kind")
        if not isinstance(nid, str) or not nid:
            raise _fail(source, f"{where}.id must be a non-empty string")
        if kind not in NODE_KINDS:
            raise _fail(source, f"{where}.kind {show(kind)} is not one of {', '.join(NODE_KINDS)}")
        if nid in topo.graph:
            raise _fail(source, f"{where}.id {show(nid)} is defined twice")
        attrs = {a: v for a, v in nd.items() if a not in ("id", "kind")}
        if kind == "gpu":
            idx = attrs.get("index")
            if not is_int(idx) or idx < 0:
                raise _fail(source, f"{where}.index must be an integer >= 0, got {show(idx)}")
            if idx in gpu_at:
                raise _fail(source, f"{where}.index {idx} duplicates the GPU index of nodes[{gpu_at[idx]}]")
            gpu_at[idx] = k
        if "host" in attrs and not is_int(attrs["host"]):
            raise _fail(source, f"{where}.host must be an integer, got {show(attrs['host'])}")
        _check_attrs(attrs, where, source)
        topo.graph.add_node(nid, kind=kind, **attrs)


def _links(topo: Topology, links: Any, source: str) -> None:
    if not isinstance(links, list):
        raise _fail(source, "links must be a list")
    if len(links) > MAX_EDGES:
        raise _fail(source, f"links lists {len(links)} links, more than the {MAX_EDGES} a topology may have")
    for k, ln in enumerate(links):
        where = f"links[{k}]"
        if not isinstance(ln, dict):
            raise _fail(source, f"{where} must be an object")
        for end in ("src", "dst"):
            if not isinstance(ln.get(end), str) or ln[end] not in topo.graph:
                raise _fail(source, f"{where}.{end} {show(ln.get(end))} is not a node")
        if ln["src"] == ln["dst"]:
            raise _fail(source, f"{where}: src and dst are both {ln['src']!r}")
        unknown = sorted(set(ln) - _LINK_KEYS, key=str)
        if unknown:     # a misspelt "latency" would otherwise leave latency_us at 0 without a word
            raise _fail(source, f"{where}: unknown field {show(unknown[0])} (a link has {', '.join(sorted(_LINK_KEYS))})")
        if not isinstance(ln.get("kind"), str) or ln["kind"] not in LINK_KINDS:
            raise _fail(source, f"{where}.kind {show(ln.get('kind'))} is not one of {', '.join(LINK_KINDS)}")
        bw = ln.get("bandwidth_gbps")
        if not is_real(bw) or not bw > 0:
            raise _fail(source, f"{where}.bandwidth_gbps must be > 0, got {show(bw)}")
        n, bw = check_edge(ln["kind"], ln.get("links", 1), bw, f"{source}: {where}.", TopologyError)
        lat = check_float(ln.get("latency_us", 0.0), f"{source}: {where}.latency_us", TopologyError, lo=0.0,
                          hi=MAX_LATENCY_US, unit="µs")
        both = ln.get("both", True)
        if not isinstance(both, bool):
            raise _fail(source, f"{where}.both must be true or false, got {show(both)}")
        pairs = [(ln["src"], ln["dst"])] + ([(ln["dst"], ln["src"])] if both else [])
        for u, v in pairs:
            if topo.graph.has_edge(u, v):
                raise _fail(source, f"{where}: link {u}->{v} is defined twice")
            topo.graph.add_edge(u, v, kind=ln["kind"], links=n, bandwidth_gbps=bw, latency_us=lat)


def _p2p(topo: Topology, items: Any, source: str) -> None:
    if not isinstance(items, list):
        raise _fail(source, "p2p_overrides must be a list")
    n = topo.num_gpus
    if len(items) > n * n:
        raise _fail(source, f"p2p_overrides lists {len(items)} entries, more than the {n * n} GPU pairs")
    for k, it in enumerate(items):
        where = f"p2p_overrides[{k}]"
        if not isinstance(it, dict):
            raise _fail(source, f"{where} must be an object")
        for end in ("src", "dst"):
            if not is_int(it.get(end)) or not 0 <= it[end] < n:
                raise _fail(source, f"{where}.{end} must be a GPU index 0..{n - 1}, got {show(it.get(end))}")
        for f in ("read", "write", "atomics"):
            if not isinstance(it.get(f), bool):
                raise _fail(source, f"{where}.{f} must be true or false, got {show(it.get(f))}")
        reason = it.get("reason", "")
        if not isinstance(reason, str):
            raise _fail(source, f"{where}.reason must be a string")
        topo.p2p_overrides[(it["src"], it["dst"])] = P2PCapability(it["read"], it["write"], it["atomics"], reason)


def topology_from_dict(doc: Any, source: str = "<dict>") -> Topology:
    """Build and validate a Topology from a ``topocoll.topology`` v1 document.

    Raises
    ------
    TopologyError
        ``"<source>: <field> <rule>"`` for the first bad field, or when GPUs are cut off.
    """
    if not isinstance(doc, dict):
        raise _fail(source, "top level must be a JSON object")
    if doc.get("format") != FORMAT:
        raise _fail(source, f"format must be {FORMAT!r}, got {show(doc.get('format'))}")
    if not is_int(doc.get("version")) or doc.get("version") != VERSION:
        raise _fail(source, f"version {show(doc.get('version'))} is not supported (this toolkit reads {VERSION})")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(source, "name must be a non-empty string")
    desc = doc.get("description", "")
    if not isinstance(desc, str):
        raise _fail(source, "description must be a string")
    topo = Topology(name, description=desc)
    _nodes(topo, doc.get("nodes"), source)
    _links(topo, doc.get("links"), source)
    _p2p(topo, doc.get("p2p_overrides", []), source)
    assumptions = doc.get("assumptions", [])
    if not isinstance(assumptions, list) or not all(isinstance(a, str) for a in assumptions):
        raise _fail(source, "assumptions must be a list of strings")
    topo.assumptions = list(assumptions)
    if GRAPH_KEY in doc:                                 # the host assumed for NCCL's side, when set
        set_host_path_class(topo.graph, doc[GRAPH_KEY], f"{source}: {GRAPH_KEY}")
    try:
        topo.check_connected()
    except TopologyError as exc:
        raise _fail(source, str(exc)) from None
    return check_topology(topo, source, TopologyError)


def current_umask() -> int:
    """The process's umask, read without changing it (Linux 4.7+: the ``Umask:`` line of
    ``/proc/self/status``); elsewhere set and put back at once (``os.umask`` has no read-only form,
    and setting it is process-wide: another thread's new file could get the wrong mode)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def atomic_write(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically (temporary file in the same
    folder, then rename), with the mode a plain ``open`` would give (0o666 minus the umask)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_replaceable(flag: str, path: str | os.PathLike, is_ours: Callable[[bytes], bool], what: str,
                      hint: str = "name another file") -> None:
    """Refuse (UsageError, one line naming ``flag`` and the file) to replace an existing ``path``
    unless ``is_ours`` recognises its first 4 KiB as a file of ours (``what``: what ours are, e.g.
    ``a sweep CSV``), so that no command overwrites a user's unrelated file.  A missing path passes,
    and so does an empty file (nothing to lose: e.g. one ``mktemp`` made for the output).

    >>> check_replaceable("--csv", "/no/such/file.csv", lambda head: False, "a sweep CSV")
    """
    path = Path(path)
    if not path.exists():
        return
    if not path.is_file():
        raise UsageError(f"{flag} would replace {path}, which is not a regular file; {hint}")
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError as e:
        raise UsageError(f"{flag} would replace {path}: {e.strerror or e}") from None
    if head and not is_ours(head):
        raise UsageError(f"{flag} would replace {path}, which is not {what}; {hint}")


def is_topology_json(head: bytes) -> bool:
    """Whether a file's first bytes are a ``topocoll.topology`` document as :func:`save_topology`
    writes it (its first key is ``format``)."""
    return re.match(rb'\s*\{\s*"format"\s*:\s*"' + re.escape(FORMAT.encode()) + rb'"', head) is not None


def topology_to_json(topo: Topology) -> str:
    """The document of :func:`topology_to_dict` as indented JSON text."""
    return json.dumps(topology_to_dict(topo), indent=1) + "\n"


def save_topology(topo: Topology, path: str | os.PathLike) -> None:
    """Write ``topo`` as ``topocoll.topology`` v1 JSON to ``path`` (atomically)."""
    try:
        atomic_write(path, topology_to_json(topo))
    except OSError as exc:
        raise TopologyError(f"{path}: cannot write topology ({exc.strerror or exc})") from None


def load_topology_json(path: str | os.PathLike) -> Topology:
    """Read and validate a ``topocoll.topology`` JSON file (errors name ``path``; the limits of
    :mod:`topo_probe.limits` apply)."""
    doc = parse_json(read_text(path, TopologyError), str(path), TopologyError)
    return topology_from_dict(doc, source=str(path))

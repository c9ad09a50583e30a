"""One entry point for every way of naming a topology: :func:`load_topology`.

``spec`` is a preset name (:data:`topo_probe.machines.presets.PRESETS`), a generator spec such as
``full:16``, ``torus:4x4`` or ``pcie:8`` (:mod:`topo_probe.machines.specs`) or a file holding one of:

* our JSON (``{"format": "topocoll.topology", ...}``),
* a link-matrix JSON (``{"format": "link-matrix", ...}``),
* an NCCL topology XML dump (``NCCL_TOPO_DUMP_FILE``; text starting with ``<``),
* ``nvidia-smi topo -m`` output (a header row ``GPU0 GPU1 ...``).

The format is detected from the content, never the file extension.  An existing file wins
over a preset of the same name.
"""

from __future__ import annotations

import re
from pathlib import Path

from topo_probe.capped_read import read_text
from topo_probe.errors import TopologyError, show
from topo_probe.json_guard import parse_json
from topo_probe.limits import MAX_BANDWIDTH_GBPS, MAX_GPUS, MAX_LINKS_PER_EDGE, MIN_BANDWIDTH_GBPS
from topo_probe.number_checks import check_float
from topo_probe.terminal_text import CSI
from topo_probe.topology.checks import check_topology
from topo_probe.topology.model import Topology

#: the banner and table titles rocm-smi prints (``==== Link Type between two GPUs ====``)
_ROCM_SMI = re.compile(r"ROCm System Management Interface|^=+ (?:Weight|Hops|Link Type) between two GPUs =+",
                       re.MULTILINE)
#: a line that starts with GPU0, after blanks and terminal colour sequences (:data:`~topo_probe.terminal_text.CSI`);
#: [ \t]*: \s* is quadratic on blank lines
_GPU_HEADER = re.compile(rf"^[ \t]*(?:{CSI.pattern}[ \t]*)*GPU0(?:\s|\x1b|$)", re.MULTILINE)


def parse_gpu_list(text: str) -> list[int]:
    """Parse a ``--gpus`` list such as ``"0,2-5"`` into ``[0, 2, 3, 4, 5]`` (order kept).

    Raises
    ------
    TopologyError
        One line naming the bad item (not an index or range, reversed range, repeated GPU, an
        index of :data:`~topo_probe.limits.MAX_GPUS` or more: checked before a range is expanded).

    Examples
    --------
    >>> parse_gpu_list("0,2-5")
    [0, 2, 3, 4, 5]
    >>> parse_gpu_list("3, 1")
    [3, 1]
    >>> parse_gpu_list("1,x")
    Traceback (most recent call last):
    ...
    topo_probe.errors.TopologyError: --gpus '1,x': 'x' is not a GPU index or range like 2-5
    """
    out: list[int] = []
    seen: set[int] = set()
    if not text.strip():
        raise TopologyError("--gpus: empty GPU list")
    for item in text.split(","):
        item = item.strip()
        m = re.fullmatch(r"([0-9]+)(?:\s*-\s*([0-9]+))?", item)    # ASCII digits: \d also takes '٣'
        if not m:
            raise TopologyError(f"--gpus {text!r}: {item!r} is not a GPU index or range like 2-5")
        # int() of 5,000 digits fails: a number of more than 10 significant digits reads as 10**10 (past MAX_GPUS,
        # and still above any shorter one, so a range of two such numbers is refused as too big, not as backwards)
        lo, hi = (min(int(d.lstrip("0")[:11] or "0"), 10**10) if d else None for d in m.groups())
        hi = lo if hi is None else hi
        if hi < lo:
            raise TopologyError(f"--gpus {text!r}: range {item!r} runs backwards")
        if hi >= MAX_GPUS:      # before expanding: 0-99999999 would otherwise build a list of 10**8
            raise TopologyError(f"--gpus {show(text)}: {show(item)} names a GPU beyond the {MAX_GPUS} a topology "
                                f"may have (0-{MAX_GPUS - 1})")
        for g in range(lo, hi + 1):
            if g in seen:
                raise TopologyError(f"--gpus {text!r}: GPU {g} is listed twice")
            seen.add(g)
            out.append(g)
    return out


def _missing(what: str, module: str, source: str) -> TopologyError:
    return TopologyError(f"{source}: looks like {what} but its parser ({module}) is not available")


def _parse_text(text: str, source: str, nvlink_gbps: float | None) -> Topology:
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith("{"):
        doc = parse_json(text, source, TopologyError)
        fmt = doc.get("format") if isinstance(doc, dict) else None
        if fmt == "topocoll.topology":
            from topo_probe.topology.serialize import topology_from_dict
            return topology_from_dict(doc, source=source)
        if fmt == "link-matrix":
            try:
                from topo_probe.parsers.link_matrix import parse_link_matrix
            except ImportError:
                raise _missing("a link-matrix JSON", "topo_probe.parsers.link_matrix", source) from None
            return parse_link_matrix(doc, source=source)
        raise TopologyError(f"{source}: JSON format {show(fmt)} is not one of 'topocoll.topology', 'link-matrix'")
    if stripped.startswith("<"):
        try:
            from topo_probe.parsers.nccl_xml import parse_nccl_xml
        except ImportError:
            raise _missing("an NCCL topology XML", "topo_probe.parsers.nccl_xml", source) from None
        return parse_nccl_xml(text, source=source)
    if _ROCM_SMI.search(text):  # its GPU0 rows would otherwise be misread as an nvidia-smi matrix
        raise TopologyError(f"{source}: looks like `rocm-smi --showtopo` output, which gives no link counts or PCIe "
                            f"tree and is not read: give RCCL's topology dump instead (NCCL_TOPO_DUMP_FILE=FILE)")
    if _GPU_HEADER.search(text):
        try:
            from topo_probe.parsers.nvsmi import parse_nvsmi_topo
        except ImportError:
            raise _missing("nvidia-smi topo -m output", "topo_probe.parsers.nvsmi", source) from None
        return parse_nvsmi_topo(text, nvlink_gbps=nvlink_gbps, source=source)
    raise TopologyError(f"{source}: cannot tell the format: expected topocoll.topology or link-matrix JSON, "
                        f"NCCL topology XML, or nvidia-smi topo -m output")


def set_nvlink_speed(topo: Topology, nvlink_gbps: float) -> None:
    """Set every ``nvlink`` edge of ``topo`` to ``links * nvlink_gbps`` GB/s (in place)."""
    for u, v, d in topo.graph.edges(data=True):
        if d["kind"] == "nvlink":
            d["bandwidth_gbps"] = d["links"] * float(nvlink_gbps)
    topo.assumptions.append(f"NVLink speed set to {nvlink_gbps} GB/s per link per direction")


def _quoted(spec: str) -> str:
    """``spec`` as a message quotes it, in one line: its repr cut by :func:`~topo_probe.errors.show`, with its
    length in characters when cut (a name can be a file name of 255 bytes, or hold newlines)."""
    text = show(spec)
    return text if text == repr(spec) else f"{text} ({len(spec)} characters)"


def load_topology(spec: str, gpus: list[int] | None = None, nvlink_gbps: float | None = None) -> Topology:
    """Load a topology from a preset name or a file (format detected from its content).

    Parameters
    ----------
    spec : str
        Preset name or path (see the module docstring).
    gpus : list of int, optional
        Keep only these GPUs, renumbered 0.. in the given order (:meth:`Topology.subset`).
    nvlink_gbps : float, optional
        NVLink speed per link per direction (GB/s).  Passed to the ``nvidia-smi`` parser;
        for the other sources every ``nvlink`` edge is set to ``links * nvlink_gbps``.

    Raises
    ------
    TopologyError
        Unknown preset / missing file / unrecognised or malformed content (names the file).

    Examples
    --------
    >>> load_topology("dgx1-v100", gpus=[0, 1, 4]).smi_label(0, 2)
    'NV2'
    """
    from topo_probe.machines.presets import PRESETS, get_preset
    from topo_probe.machines.specs import is_generator_spec, parse_generator_spec

    if nvlink_gbps is not None:
        check_float(nvlink_gbps, "--nvlink-gbps", TopologyError, lo=MIN_BANDWIDTH_GBPS,
                    hi=MAX_BANDWIDTH_GBPS / MAX_LINKS_PER_EDGE, unit="GB/s")
    path = Path(spec)
    try:
        is_file = path.is_file()
    except OSError as exc:          # ENAMETOOLONG: longer than the file system takes
        raise TopologyError(f"topology {_quoted(spec)}: {exc.strerror or exc}") from None
    if is_file:
        text = read_text(path, TopologyError)
        topo = _parse_text(text, spec, nvlink_gbps)
        is_nvsmi = not text.lstrip("\ufeff \t\r\n").startswith(("{", "<"))
    elif spec in PRESETS:
        topo, is_nvsmi = get_preset(spec), False
    elif is_generator_spec(spec):
        topo, is_nvsmi = parse_generator_spec(spec), False
    elif path.exists():
        raise TopologyError(f"{_quoted(spec)}: is not a regular file")
    else:
        raise TopologyError(f"{_quoted(spec)} is neither an existing file nor a preset (presets: "
                            f"{', '.join(sorted(PRESETS))}) "
                            f"nor a generator spec like full:16, ring:8, torus:4x4, pcie:8")
    if nvlink_gbps is not None and not is_nvsmi:
        set_nvlink_speed(topo, nvlink_gbps)
    if gpus is not None:
        topo = topo.subset(gpus)
    return check_topology(topo, _quoted(spec), TopologyError)

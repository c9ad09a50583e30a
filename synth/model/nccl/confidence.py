"""How sure the NCCL model is about a machine: its machine class and what real logs say of it.

Every real log the model is checked on belongs to a *machine class* (GPU generation, host fabric,
network; never a run size).  ``benchmarks/holdout_nccl_model.py --by-class`` holds each class out
in turn (fitted on the others) and writes, per class, how many logs it has, the collectives they
cover and the median error of its tables when held out, to ``class_validation.json`` beside this
module.  ``benchmarks/published_nccl_anchors.py --write`` adds, per class, the published figures
(peak busbw of machines with no full table) the model was checked on, to ``anchor_validation.json``.
A prediction for a machine whose class no log has validated, or for a collective no log of its class
covers, says so plainly, with what does exist, in ``simulate``'s and ``synthesize``'s reports.

>>> from topo_probe import get_preset, cluster
>>> machine_class(NcclMachine.from_topology(get_preset("dgx-h100")))
'h100-nvswitch-1host'
>>> machine_class(NcclMachine.from_topology(cluster("dgx-a100", nodes=2)))
'a100-ib-multihost'
>>> machine_class(NcclMachine.from_topology(get_preset("gb200-nvl72")))
'b200-nvl72'
>>> machine_class(NcclMachine.from_topology(get_preset("gb200-nvl72")).with_(ranks=16))   # part of the rack: same class
'b200-nvl72'
>>> machine_class(NcclMachine.from_topology(get_preset("dgx2")))
'v100-dgx2'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from synth.model.nccl.machine import NcclMachine
from synth.ir.collectives import canonical

#: the committed per-class validation (written by benchmarks/holdout_nccl_model.py --by-class)
VALIDATION = Path(__file__).with_name("class_validation.json")
#: the committed published-figure checks (written by benchmarks/published_nccl_anchors.py --write)
ANCHORS = Path(__file__).with_name("anchor_validation.json")

#: architecture -> the GPU family a class name starts with
_GPU = {"sm60": "p100", "sm70": "v100", "sm80": "a100", "sm86": "a10-l40", "sm89": "l40s", "sm90": "h100",
        "sm100": "b200", "sm120": "rtx50", "gfx90a": "mi250", "gfx942": "mi300x", "gfx950": "mi355x"}


def machine_class(m: NcclMachine) -> str:
    """The class name of a machine (see the module docstring); the names the log cases use."""
    amd = m.arch.startswith("gfx")
    if m.nodes > 1 and m.gpus_per_node == 1:
        return "1gpu-per-host"
    if m.intra == "pcie":
        return "pcie-multihost" if m.nodes > 1 else "pcie-1host"
    if amd and m.nodes > 1:
        return "amd-multihost"
    gpu = _GPU.get(m.arch, m.arch)
    if m.arch == "sm70" and m.intra == "nvlink" and m.nodes == 1:
        return "v100-dgx1"
    if m.arch == "sm70" and m.intra == "nvswitch" and m.nodes == 1:    # DGX-2: two NVSwitch baseboards, any subset
        return "v100-dgx2"
    fabric = {"nvswitch": "nvswitch", "xgmi": "1host", "nvlink": "nvlink"}.get(m.intra, m.intra)
    if m.nodes == 1 and m.intra == "nvswitch" and m.gpus_per_node > 8:
        # a multi-node NVLink domain (a GB200 / GB300 NVL72 rack's, the only one the presets and logs have):
        # one class whatever part of it a run uses, like every other class
        return f"{gpu}-nvl72"
    if m.nodes == 1:
        return f"{gpu}-1host" if amd else f"{gpu}-{fabric}-1host"
    net = "efa" if m.net_kind == "efa2" else m.net_kind          # one class for both EFA generations
    return f"{gpu}-{net}-multihost"


#: the validation's bar: a table's median |error| at >= 64 KiB within this fraction, held out
TARGET_MEDIAN = 0.15
#: NCCL 2.10.3 rewrote the device primitives (src/collectives/device/prims_ll.h, prims_ll128.h: LL128 no
#: longer stages every line through shared memory; its release notes: better medium sizes); the model's
#: constants come from later NCCL, so a prediction for an older one says how its tables of that era fare
PRIMITIVES_REWRITE = (2, 10)


@dataclass(frozen=True)
class ClassRecord:
    """What the logs of one class say: ``logs`` tables, median |error| held out (fraction), the
    collectives the tables are of (empty: not recorded) and how many tables meet
    :data:`TARGET_MEDIAN` held out (None: not recorded)."""

    name: str
    logs: int
    held_out_median: float
    collectives: tuple = ()
    within_target: int | None = None
    #: ``(tables, within the bar)`` of NCCL before :data:`PRIMITIVES_REWRITE` (None: not recorded)
    before_rewrite: tuple | None = None

    def verdict(self) -> str:
        """``median error X% held out`` and, where recorded, how many of its tables meet the bar;
        a class whose median misses the bar says so in capitals."""
        tables = ("" if self.within_target is None
                  else f", {self.within_target} of {self.logs} within {TARGET_MEDIAN:.0%}")
        miss = "" if self.held_out_median <= TARGET_MEDIAN else (
            f"; OUTSIDE the {TARGET_MEDIAN:.0%} bar: read its numbers as NCCL's tuning tables plus data-sheet rates")
        return f"median error {self.held_out_median:.0%} held out{tables}{miss}"


def load_validation(path: Path = VALIDATION) -> dict[str, ClassRecord]:
    """The committed per-class records ({} when the file is absent)."""
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text())
    return {k: ClassRecord(k, int(v["logs"]), float(v["held_out_median"]), tuple(v.get("collectives", ())),
                           int(v["within_15"]) if "within_15" in v else None,
                           tuple(int(x) for x in v["before_2_10"]) if "before_2_10" in v else None)
            for k, v in doc.get("classes", {}).items()}


def load_anchors(path: Path = ANCHORS) -> dict[str, tuple[int, int, float]]:
    """Per class: ``(published figures, figures within 15 %, median |error|)`` ({} when absent)."""
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text())
    return {k: (int(v["figures"]), int(v["within_15"]), float(v["median"])) for k, v in doc.get("classes", {}).items()}


def _similarity(a: str, b: str) -> tuple[int, int, int]:
    pa, pb = a.split("-"), b.split("-")
    return (int(pa[-1] == pb[-1]), int(pa[0] == pb[0]), len(set(pa) & set(pb)))


def confidence_line(m: NcclMachine, records: dict[str, ClassRecord] | None = None, collective: str | None = None,
                    anchors: dict | None = None, version: tuple | None = None) -> str:
    """One line for a report: the machine's class and how well real logs validate it (for
    ``collective``, when given: a class whose tables are all of other collectives says so; for an
    NCCL ``version`` before :data:`PRIMITIVES_REWRITE`, how the class's tables of that era fare).

    >>> recs = {"h100-ib-multihost": ClassRecord("h100-ib-multihost", 12, 0.08, ("allreduce",))}
    >>> from topo_probe import get_preset, cluster
    >>> h100x4 = NcclMachine.from_topology(cluster("dgx-h100", nodes=4))
    >>> confidence_line(h100x4, recs, anchors={})
    'NCCL model: machine class h100-ib-multihost, validated on 12 real log tables (median error 8% held out)'
    >>> confidence_line(h100x4, recs, "alltoall", anchors={})[:98]
    'NCCL model: machine class h100-ib-multihost, validated on 12 real log tables of allreduce only: NO'
    >>> confidence_line(NcclMachine.from_topology(get_preset("dgx-h100")), recs, anchors={})[:90]
    'NCCL model: machine class h100-nvswitch-1host: NO real log validates it; nearest validated'
    >>> ClassRecord("amd-multihost", 3, 0.40, ("allreduce",), 1).verdict()[:60]
    'median error 40% held out, 1 of 3 within 15%; OUTSIDE the 15'
    >>> a100 = {"a100-nvswitch-1host": ClassRecord("a100-nvswitch-1host", 6, 0.13, ("allreduce",), 3, (2, 0))}
    >>> confidence_line(NcclMachine.from_topology(get_preset("dgx-a100")), a100, anchors={}, version=(2, 8))[-74:]
    '; NCCL 2.8: 2 of its tables are of NCCL before 2.10, 0 within 15% held out'
    """
    return _class_line(m, records, collective, anchors) + _era(m, records, version)


def _era(m: NcclMachine, records: dict[str, ClassRecord] | None, version: tuple | None) -> str:
    """What the class's tables of NCCL before the primitives' rewrite say, for an older ``version``."""
    if version is None or tuple(version)[:2] >= PRIMITIVES_REWRITE:
        return ""
    rec = (load_validation() if records is None else records).get(machine_class(m))
    v, era = ".".join(map(str, version)), ".".join(map(str, PRIMITIVES_REWRITE[:2]))     # 2.8.4 as stated
    if rec is None or not rec.before_rewrite or not rec.before_rewrite[0]:
        return f"; NCCL {v}: NO table of NCCL before {era} (which rewrote its primitives) validates this class"
    n, ok = rec.before_rewrite
    return f"; NCCL {v}: {n} of its tables are of NCCL before {era}, {ok} within {TARGET_MEDIAN:.0%} held out"


def _class_line(m: NcclMachine, records: dict[str, ClassRecord] | None = None,
                collective: str | None = None, anchors: dict | None = None) -> str:
    """:func:`confidence_line` without the NCCL-version part."""
    records = load_validation() if records is None else records
    anchors = load_anchors() if anchors is None else anchors
    name = machine_class(m)
    rec = records.get(name)
    published = ""
    if name in anchors:
        n, ok, med = anchors[name]
        published = (f"; checked on {n} published busbw figure{'s' if n != 1 else ''}, {ok} within 15 %, "
                     f"median error {med:.0%}")
    if rec is not None:
        tables = "real log table" if rec.logs == 1 else "real log tables"
        coll = None if not collective else "sendrecv" if collective in ("sendrecv", "send_recv") \
            else canonical(collective)
        if coll and rec.collectives and coll not in rec.collectives:
            return (f"NCCL model: machine class {name}, validated on {rec.logs} {tables} of "
                    f"{'/'.join(rec.collectives)} only: NO real log validates {coll} on it "
                    f"({rec.verdict()} on those){published}")
        return f"NCCL model: machine class {name}, validated on {rec.logs} {tables} ({rec.verdict()}){published}"
    if not records:
        return f"NCCL model: machine class {name}: no validation data{published}"
    near = max(records.values(), key=lambda r: (_similarity(name, r.name), -r.held_out_median))
    tables = "table" if near.logs == 1 else "tables"
    return (f"NCCL model: machine class {name}: NO real log validates it{published}; nearest validated class "
            f"{near.name} ({near.logs} {tables}, {near.verdict()})")


__all__ = ["PRIMITIVES_REWRITE", "machine_class", "confidence_line", "load_validation",
           "load_anchors", "ClassRecord", "VALIDATION", "ANCHORS", "TARGET_MEDIAN"]

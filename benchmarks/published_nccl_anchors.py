"""The NCCL model against published nccl-tests figures that no fit or log fixture of the project uses.

    python benchmarks/published_nccl_anchors.py [--out results/model_validation] [--write]

Some machines have no full nccl-tests table anywhere the project could find, only published figures:
a peak bus bandwidth per configuration (8 x B200 on one host), or a sweep of fewer than the 8 sizes a
log fixture needs (a GB200 NVL72 rack).  Each figure below is predicted as a new user would describe
the machine (a preset, NCCL's environment and version as published), with the committed constants
(``synth.model.nccl.DEFAULT_PARAMS``): nothing here is fitted.  A "peak" figure is compared with the
model's highest busbw over the published sweep (powers of two); a per-size figure with the model at that
size.  Writes ``OUT/published_anchors.md`` and ``OUT/anchor_validation.json`` (per machine class: figures,
how many within 15 %, median |error|; ``--write`` also the package's copy that ``simulate`` quotes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from synth.ir.schedule import atomic_write_text  # noqa: E402
from synth.model.nccl import DEFAULT_PARAMS, NcclEnv, NcclMachine, NcclModel  # noqa: E402
from synth.model.nccl.confidence import ANCHORS as ANCHOR_VALIDATION  # noqa: E402
from synth.model.nccl.confidence import machine_class  # noqa: E402
from synth.model.nccl.constants import busbw_factor  # noqa: E402
from topo_probe import cluster, get_preset  # noqa: E402

#: together-nccl-tests benchmarks/README.md (commit 274b2f905422af523ed81f341af541c3cf9497b4), "Results: B200":
#: one K8s worker, 8 x B200, NCCL 2.26.5+cuda12.9, float32 sum, 1M-8G, one process per GPU; its three configs
TOGETHER = "togethercomputer/together-nccl-tests benchmarks/README.md @274b2f90"
#: coreweave/nccl-tests pull request #43 (merged 2025-02-20), "Example output for a full nvl72 rack run"
COREWEAVE = "coreweave/nccl-tests PR #43, full NVL72 rack, 72 ranks"
RING = {"NCCL_ALGO": "RING", "NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "0"}
NVLS = {"NCCL_NVLS_ENABLE": "1", "NCCL_COLLNET_ENABLE": "0"}
SHARP = {"NCCL_NVLS_ENABLE": "0", "NCCL_COLLNET_ENABLE": "1"}
MIB, GIB = 1 << 20, 1 << 30


@dataclass(frozen=True)
class Anchor:
    """One published figure: busbw (GB/s) of ``collective`` on a preset, at ``sizes`` (peak over them
    when ``peak``), under ``env`` and NCCL ``version``."""

    source: str
    preset: str
    collective: str
    config: str
    real_busbw: float
    sizes: tuple
    peak: bool = True
    nodes: int = 1
    env: dict = field(default_factory=dict)
    version: tuple = (2, 28)


def _sweep(lo: int, hi: int) -> tuple:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 2
    return tuple(out)


_B200 = dict(source=TOGETHER, preset="hgx-b200", sizes=_sweep(MIB, 8 * GIB), version=(2, 26))
_NVL72 = [(512 * MIB, 586.06), (GIB, 681.17), (2 * GIB, 757.78), (4 * GIB, 839.16), (8 * GIB, 834.57)]

ANCHORS = [
    Anchor(collective="allreduce", config="nvls (NCCL_NVLS_ENABLE=1)", real_busbw=843.53, env=NVLS, **_B200),
    Anchor(collective="allreduce", config="ring (NCCL_ALGO=RING)", real_busbw=685.35, env=RING, **_B200),
    Anchor(collective="allreduce", config="collnet_sharp (NVLS off)", real_busbw=684.89, env=SHARP, **_B200),
    Anchor(collective="allgather", config="nvls (NCCL_NVLS_ENABLE=1)", real_busbw=662.67, env=NVLS, **_B200),
    Anchor(collective="allgather", config="ring (NCCL_ALGO=RING)", real_busbw=660.48, env=RING, **_B200),
    Anchor(collective="allgather", config="collnet_sharp (NVLS off)", real_busbw=660.62, env=SHARP, **_B200),
    Anchor(collective="reducescatter", config="nvls (NCCL_NVLS_ENABLE=1)", real_busbw=685.91, env=NVLS, **_B200),
    Anchor(collective="reducescatter", config="ring (NCCL_ALGO=RING)", real_busbw=684.93, env=RING, **_B200),
    Anchor(collective="reducescatter", config="collnet_sharp (NVLS off)", real_busbw=684.56, env=SHARP, **_B200),
] + [Anchor(COREWEAVE, "gb200-nvl72", "allreduce", "NCCL defaults (not stated)", bw, (size,), peak=False,
            version=(2, 25)) for size, bw in _NVL72]


def predict(a: Anchor, params=DEFAULT_PARAMS) -> tuple[float, str, str]:
    """The model's busbw (GB/s) for an anchor, NCCL's choice there, and the machine's class."""
    topo = cluster(a.preset, nodes=a.nodes) if a.nodes > 1 else get_preset(a.preset)
    m = NcclMachine.from_topology(topo)
    model = NcclModel(m, params, NcclEnv.from_environ(a.env), version=a.version)
    best = (0.0, "")
    for size in a.sizes:
        c = model.choose(a.collective, size)
        best = max(best, (size / c.time_us / 1e3 * busbw_factor(a.collective, m.ranks), c.label))
    return best[0], best[1], machine_class(m)


def report(params=DEFAULT_PARAMS) -> tuple[list[str], dict[str, list[float]]]:
    """Markdown lines of the anchor table and, per machine class, the |error| of its anchors."""
    lines = ["| source | machine (class) | collective | config | size | published busbw | model busbw "
             "(NCCL choice) | error |", "|---|---|---|---|---|---|---|---|"]
    errors: dict[str, list[float]] = {}
    for a in ANCHORS:
        pred, label, cls = predict(a, params)
        err = pred / a.real_busbw - 1
        errors.setdefault(cls, []).append(abs(err))
        size = "peak over 1 MiB..8 GiB" if a.peak else f"{a.sizes[0] >> 20} MiB"
        lines.append(f"| {a.source} | `{a.preset}` ({cls}) | {a.collective} | {a.config} | {size} | "
                     f"{a.real_busbw:.1f} GB/s | {pred:.1f} GB/s ({label}) | {err:+.1%} |")
    return lines, errors


def class_summary(errors: dict[str, list[float]]) -> dict:
    """What ``synth.model.nccl.confidence.load_anchors`` reads."""
    return {"command": "python benchmarks/published_nccl_anchors.py --out results/model_validation --write",
            "classes": {k: {"figures": len(v), "within_15": sum(e <= 0.15 for e in v),
                            "median": round(statistics.median(v), 4)} for k, v in sorted(errors.items())}}


def main(argv: list[str] | None = None) -> int:
    """Print the anchors; with ``--out`` write the table and the per-class summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for published_anchors.md")
    ap.add_argument("--write", action="store_true", help="also write synth/model/nccl/anchor_validation.json")
    args = ap.parse_args(argv)
    lines, per_class = report()
    errors = [e for v in per_class.values() for e in v]
    within = sum(e <= 0.15 for e in errors)
    summary = (f"{within} of {len(errors)} published figures within 15 % (median |error| "
               f"{statistics.median(errors):.1%}, worst {max(errors):.1%}).")
    print("\n".join(lines + ["", summary]))
    records = json.dumps(class_summary(per_class), indent=1, sort_keys=True) + "\n"
    if args.out is not None:
        head = ["# NCCL model vs published figures no fit or fixture uses", "",
                "Command: `python benchmarks/published_nccl_anchors.py --out results/model_validation --write`", "",
                " ".join(__doc__.split("\n\n")[2].split()), ""]
        atomic_write_text(args.out / "published_anchors.md", "\n".join(head + lines + ["", summary, ""]))
        atomic_write_text(args.out / "anchor_validation.json", records)
    if args.write:
        atomic_write_text(ANCHOR_VALIDATION, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())

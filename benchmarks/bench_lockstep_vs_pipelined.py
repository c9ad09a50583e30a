"""Bandwidth-optimal schedules against their bound, pipelined and lock-step.

Usage::

    python benchmarks/bench_lockstep_vs_pipelined.py [--out results/lockstep]

"Within 1.005 of the lower bound" is a statement about a pipelined run: every chunk cut into many
slices, slice ``k``'s step ``t`` in wavefront ``k + t``, so the time per block is the busiest
link's load per chunk (:func:`synth.solve.bwopt.bandwidth_term.bandwidth_term`).  Run lock-step
instead (each step as long as its own busiest link, steps one after another:
:func:`synth.solve.bwopt.bandwidth_term.lockstep_bandwidth_term`), the same schedule can need
more.  For each topology and collective this builds the bandwidth-optimal schedule
(:func:`synth.solve.bwopt.optimal.bandwidth_optimal`, default budget), verifies it, and writes both
ratios to the bound (the cut bound; allreduce: reduce-scatter then all-gather,
:func:`synth.model.bounds.phased_allreduce_bound`), exact fractions read from the transfers.

Writes ``lockstep_vs_pipelined.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from synth.ir.fabric import build_fabric  # noqa: E402
from synth.ir.schedule import atomic_write_text  # noqa: E402
from synth.ir.verifier import check  # noqa: E402
from synth.model.bounds import lower_bounds, phased_allreduce_bound  # noqa: E402
from synth.solve.bwopt.bandwidth_term import bandwidth_term, lockstep_bandwidth_term  # noqa: E402
from synth.solve.bwopt.optimal import bandwidth_optimal  # noqa: E402
from topo_probe.machines.generators import parity_mesh  # noqa: E402
from topo_probe.machines.presets import DGX1_LINKS, get_preset  # noqa: E402
from topo_probe.parsers.link_matrix import parse_link_matrix  # noqa: E402

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


def _matrix(name: str, links) -> object:
    return parse_link_matrix({"format": "link-matrix", "name": name, "links": [list(r) for r in links],
                              "link_bandwidth_gbps": 25.0})


def cases() -> list[tuple[str, object]]:
    """(label, topology): the issue's 8-GPU mesh of 5 and 6 links per pair, the presets, and
    the link matrices of issue 40 (an 8-GPU ring, DGX-1 without its gpu0-gpu4 NVLinks)."""
    ring8 = [[1 if (j - i) % 8 in (1, 7) else 0 for j in range(8)] for i in range(8)]
    no04 = [[0 if {i, j} == {0, 4} else DGX1_LINKS[i][j] for j in range(8)] for i in range(8)]
    return ([("mesh 8 GPUs, 6 links same parity / 5 otherwise", parity_mesh(8, 25.0, 6, 5))]
            + [(name, get_preset(name)) for name in ("dgx1-v100", "dgx-a100", "dgx-h100", "mi300x",
                                                     "pcie-8gpu-2socket")]
            + [("link matrix: 8-GPU ring", _matrix("ring8", ring8)),
               ("link matrix: DGX-1 without gpu0-gpu4", _matrix("dgx1-no-0-4", no04))])


def measure(topo, collective: str) -> tuple[float, float, int]:
    """(pipelined ratio, lock-step ratio, steps) of the verified bandwidth-optimal schedule."""
    fabric = build_fabric(topo)
    s = bandwidth_optimal(fabric, collective)
    check(s, fabric)
    bound = phased_allreduce_bound(fabric) if collective == "allreduce" else \
        lower_bounds(fabric, collective, 0 if collective in ("broadcast", "reduce") else None).bandwidth_rounds_per_block
    return float(bandwidth_term(s, fabric) / bound), float(lockstep_bandwidth_term(s, fabric) / bound), len(s.steps)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "results" / "lockstep"))
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    rows = ["| topology | collective | steps | pipelined / bound | lock-step / bound |", "|---|---|---|---|---|"]
    for label, topo in cases():
        for coll in COLLECTIVES:
            piped, lock, steps = measure(topo, coll)
            rows.append(f"| {label} | {coll} | {steps} | {piped:.3f} | {lock:.3f} |")
            print(rows[-1], flush=True)
    text = "\n".join([
        "# Bandwidth-optimal schedules: pipelined and lock-step against the bound", "",
        "Command: `python benchmarks/bench_lockstep_vs_pipelined.py` "
        f"(Python {platform.python_version()}, {time.perf_counter() - t0:.0f} s on this machine's CPU).", "",
        "Ratios of a schedule's bandwidth term to its lower bound (the cut bound; allreduce: reduce-scatter then "
        "all-gather), exact from its transfers. **Pipelined**: every chunk cut into many slices, the time per block "
        "is the busiest link's load per chunk (what the cost model and pipelined runtimes do; the README's "
        "\"within 1.005\"). **Lock-step**: each step as long as its own busiest link, steps one after another "
        "(a sum of rounds).", "", *rows, ""])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "lockstep_vs_pipelined.md", text)
    print(f"wrote {out / 'lockstep_vs_pipelined.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long ``synthesize --nccl-tuner-conf`` spends on the tuner file, and how long the file is.

    python benchmarks/bench_tuner_write.py --out results/interop      # tuner_write.md

Per machine (an 8-GPU preset, 16 and 64 DGX H100s over InfiniBand, a GB200 NVL72 rack): the
smaller communicators given lines (:func:`synth.model.nccl.tuner_shapes.comm_shapes`), the lines
written and the wall time of the tuner step as ``synthesize`` runs it (``_write_tuner_conf``; the
synthesis itself not included), on this machine's cores.  docs/synthesis.md quotes it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from synth.cli.synthesize import _write_tuner_conf  # noqa: E402
from synth.ir.schedule import atomic_write_text  # noqa: E402
from synth.model.nccl.tuner_shapes import comm_shapes  # noqa: E402
from topo_probe import cluster, get_preset  # noqa: E402

MACHINES = (("dgx-h100", lambda: get_preset("dgx-h100")), ("16 x dgx-h100, ib", lambda: cluster("dgx-h100", 16)),
            ("64 x dgx-h100, ib", lambda: cluster("dgx-h100", 64)), ("gb200-nvl72", lambda: get_preset("gb200-nvl72")))


def row(name: str, make) -> str:
    topo = make()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nccl_tuner.conf"
        _write_tuner_conf(topo, path)
        seconds = time.perf_counter() - t0
        lines = sum(1 for line in path.read_text().splitlines() if line and not line.startswith("#"))
    shapes = len(comm_shapes(topo))
    return f"| {name} | {topo.num_gpus} | {shapes} | {lines} | {seconds:.1f} |"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write OUT/tuner_write.md")
    args = p.parse_args(argv)
    rows = [row(name, make) for name, make in MACHINES]
    text = "\n".join([
        "# Writing the NCCL tuner file", "",
        "Command: `python benchmarks/bench_tuner_write.py --out results/interop`", "",
        "The tuner step of `synthesize --nccl-tuner-conf` (no synthesis): smaller communicators given lines, "
        "CSV lines written (header included), wall seconds.", "",
        "| machine | GPUs | smaller communicators | lines | seconds |", "|---|---|---|---|---|", *rows, "",
        f"Host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end of the run.", ""])
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "tuner_write.md", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""NCCL's example tuner plugin configuration (``ext-tuner/example``, read through
``NCCL_TUNER_CONFIG_FILE``): per collective and message-size range, the algorithm, protocol and
channels the NCCL model predicts fastest on this machine.

Format (NVIDIA/nccl ``ext-tuner/example/README.md``): one CSV line per range,
``collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff``;
collectives ``broadcast reduce allgather reducescatter allreduce``; algorithms ``tree ring
collnet_direct collnet_chain nvls nvls_tree pat``; protocols ``ll ll128 simple``; byte ranges
inclusive, ``0`` to ``4294967295`` for every size; ``-1`` is a wildcard (or "NCCL's default" for
channels); ``#`` starts a comment.

>>> from topo_probe import get_preset
>>> from synth.model.nccl import NcclMachine, NcclModel, NcclEnv
>>> rows = tuner_rows(NcclModel(NcclMachine.from_topology(get_preset("dgx-h100")), env=NcclEnv()), ["allreduce"])
>>> rows[0].min_bytes, rows[-1].max_bytes, rows[-1].algorithm, rows[-1].protocol
(0, 4294967295, 'nvls', 'simple')
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from synth.ir.collectives import canonical
from synth.ir.schedule import atomic_write_text
from topo_probe.errors import InvalidArgument

#: the collectives the plugin tunes
PLUGIN_COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
PLUGIN_ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PLUGIN_PROTOCOLS = ("ll", "ll128", "simple")
#: the largest size the plugin's README uses for "every size" (bytes)
MAX_BYTES = 4294967295
HEADER = "collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,numPipeOps,regBuff"
#: sizes the model is asked at: 64 B to 4 GiB in powers of two
PROBE_SIZES = [1 << k for k in range(6, 33)]


@dataclass(frozen=True)
class TunerRow:
    """One line of the configuration (byte range inclusive at both ends)."""

    collective: str
    min_bytes: int
    max_bytes: int
    algorithm: str
    protocol: str
    channels: int
    nodes: int
    ranks: int

    def line(self) -> str:
        return (f"{self.collective},{self.min_bytes},{self.max_bytes},{self.algorithm},{self.protocol},"
                f"{self.channels},{self.nodes},{self.ranks},-1,-1")


def tuner_rows(model, collectives=PLUGIN_COLLECTIVES, sizes=PROBE_SIZES) -> list[TunerRow]:
    """Ranges of equal fastest (algorithm, protocol, channels) per collective; RCCL's all-pairs
    kernels (no plugin name) are left out, so NCCL keeps its own choice there."""
    m = model.machine
    out: list[TunerRow] = []
    for name in collectives:
        coll = canonical(name)
        if coll not in PLUGIN_COLLECTIVES:
            raise InvalidArgument(f"the tuner plugin has no collective {name!r} ({', '.join(PLUGIN_COLLECTIVES)})")
        picks = []
        for size in sizes:
            c = model.fastest(coll, size)
            if c.algorithm in PLUGIN_ALGORITHMS:
                picks.append((size, (c.algorithm, c.protocol.lower(), c.channels)))
        ranges: list[list] = []
        for size, key in picks:
            if ranges and ranges[-1][1] == key:
                ranges[-1][2] = size
            else:
                ranges.append([size, key, size])
        for k, (first, (algo, proto, ch), _) in enumerate(ranges):
            lo = 0 if k == 0 else (ranges[k - 1][2] + first) // 2 + 1
            hi = MAX_BYTES if k == len(ranges) - 1 else (ranges[k][2] + ranges[k + 1][0]) // 2
            out.append(TunerRow(coll, lo, hi, algo, proto, ch, m.nodes, m.ranks))
    return out


def write_tuner_config(path: str | Path, rows: list[TunerRow], comment: str = "") -> None:
    """Write ``rows`` as the plugin's CSV (atomically), with ``comment`` lines first."""
    head = [f"# {line}" for line in comment.splitlines() if line.strip()]
    text = "\n".join(head + [f"# {HEADER}"] + [r.line() for r in rows]) + "\n"
    atomic_write_text(Path(path), text)


__all__ = ["TunerRow", "tuner_rows", "write_tuner_config", "PLUGIN_COLLECTIVES", "PLUGIN_ALGORITHMS",
           "PLUGIN_PROTOCOLS", "MAX_BYTES", "HEADER"]

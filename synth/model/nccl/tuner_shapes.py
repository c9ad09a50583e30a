"""The communicator shapes a user of one machine realistically creates besides the whole machine,
each with the NCCL models a tuner file's lines for that shape are written from.

A tuner line names ``nNodes`` and ``nRanks`` exactly or ``-1`` (any); a file written only for the
whole machine leaves every smaller communicator to its ``-1,-1`` cover, a guess that can be slower
than NCCL's own choice there (a 2-GPU communicator on a P100 or a DGX-1).  So a file also carries
lines for:

* one-host communicators of k GPUs of the first host (subgroups, tensor-parallel groups) for
  k = 2 .. 8 and the powers of two above 8, plus the whole host of a multi-host topology
  (:func:`gpu_counts`): the model of the **first k GPUs** (the representative subset) plus up to
  :data:`MAX_OTHER_SUBSETS` other k-GPU subsets whose NCCL machine differs (on a DGX-1 GPUs 0,1
  and 0,5 have different NVLink counts), so a line changes NCCL's choice only where it helps on
  each of them; subsets of :data:`MAX_GPUS_READ` GPUs in all are read, shared fairly over k;
* for a topology of N hosts, N' = 2, 4, 8, .. < N full hosts (GPUs of hosts 0 .. N'-1), the
  data-/pipeline-parallel group sizes users create.

Other shapes (k = 12 GPUs, 3 hosts of 8) get the ``-1,-1`` cover as before.  The rule bounds the
shapes to about ``7 + 2 log2 G + log2 N`` (a 72-GPU NVL72 rack: 10; 64 DGX H100s: 12), so the file
is written in seconds where reading every GPU and host count took minutes.

>>> from topo_probe import get_preset
>>> [(s.nodes, s.ranks, s.subsets) for s in comm_shapes(get_preset("pcie-8gpu-2socket"))][:2]
[(1, 2, ((0, 1), (0, 4))), (1, 3, ((0, 1, 2), (0, 1, 4)))]
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

__all__ = ["CommShape", "comm_shapes", "gpu_counts", "MAX_OTHER_SUBSETS", "MAX_GPUS_READ"]

#: other k-GPU subsets (with a different NCCL machine) a one-host shape's lines are checked on
MAX_OTHER_SUBSETS = 3
#: GPUs in all of the subsets read (every k together) to find those, in itertools.combinations
#: order (GPU 0 first): 1,024 reads every subset of an 8-GPU host (1,008 GPUs in 246 subsets), a
#: larger host a fair share per k (an NVL72 rack: 51 pairs, 13 8-GPU subsets, one 64-GPU subset)
MAX_GPUS_READ = 1024
#: every one-host GPU count up to this; above it only powers of two (and the whole host)
ALL_GPU_COUNTS_UP_TO = 8


@dataclass(frozen=True)
class CommShape:
    """One communicator shape: ``nodes`` hosts, ``ranks`` GPUs in all; ``models`` one
    ``(model, model without NVLS or None)`` pair (:func:`~.tuner_config.tuner_models`) per GPU
    subset in ``subsets`` (GPU indices of the topology), the representative first."""

    nodes: int
    ranks: int
    subsets: tuple
    models: tuple

    @property
    def label(self) -> str:
        gpus = self.subsets[0]
        first = f"GPUs {gpus[0]}-{gpus[-1]}" if list(gpus) == list(range(gpus[0], gpus[-1] + 1)) else \
            f"GPUs {','.join(map(str, gpus))}"
        return f"{self.nodes} host(s), {self.ranks} ranks ({first})"


def gpu_counts(host_gpus: int, whole_host: bool) -> list[int]:
    """The one-host GPU counts given lines: 2 .. 8, the powers of two above 8 below
    ``host_gpus``, and ``host_gpus`` itself when ``whole_host`` (a multi-host topology).

    >>> gpu_counts(72, False)
    [2, 3, 4, 5, 6, 7, 8, 16, 32, 64]
    """
    small = range(2, min(host_gpus, ALL_GPU_COUNTS_UP_TO + 1))
    powers = [1 << e for e in range(4, host_gpus.bit_length()) if 1 << e < host_gpus]
    return [*small, *powers, *([host_gpus] if whole_host or host_gpus <= ALL_GPU_COUNTS_UP_TO else [])]


def _read_budget(host_gpus: int, counts: list[int]) -> dict[int, int]:
    """Subsets read per k: :data:`MAX_GPUS_READ` (reading a subset costs about its GPU count) shared
    over ``counts``, each k at most its C(host_gpus, k) subsets and at least one (the first k GPUs),
    the counts needing less than their share leaving the rest to the others."""
    need = {k: math.comb(host_gpus, k) for k in counts}
    budget, left = {}, MAX_GPUS_READ
    for i, k in enumerate(sorted(counts, key=lambda k: k * need[k])):
        budget[k] = max(1, min(need[k], left // (len(counts) - i) // k))
        left -= budget[k] * k
    return budget


def _distinct_subsets(host, gpus: list[int], k: int, reads: int) -> tuple:
    """The first ``k`` of ``gpus`` (GPUs of ``host``, a one-host topology, in its own numbering
    0 ..), then other k-subsets (of the first ``reads``) with a different NCCL machine (at most
    :data:`MAX_OTHER_SUBSETS`, spread over the ones found), as ``gpus``' values."""
    from synth.model.nccl import NcclMachine
    seen: dict = {}
    for sub in itertools.islice(itertools.combinations(range(len(gpus)), k), reads):
        m = dataclasses.replace(NcclMachine.from_topology(host.subset(sub)), name="")
        seen.setdefault(m, tuple(gpus[i] for i in sub))
    found = list(seen.values())
    rest = found[1:]
    if len(rest) > MAX_OTHER_SUBSETS:
        step = len(rest) / MAX_OTHER_SUBSETS
        rest = [rest[int(i * step)] for i in range(MAX_OTHER_SUBSETS)]
    return (found[0], *rest)


def comm_shapes(topo, version: tuple | None = None) -> list[CommShape]:
    """The shapes of ``topo`` other than the whole of it, smallest first (see the module text)."""
    from synth.model.nccl.tuner_config import tuner_models
    hosts = sorted({topo.host_of(g) for g in range(topo.num_gpus)})
    first = [g for g in range(topo.num_gpus) if topo.host_of(g) == hosts[0]]
    out = []
    counts = [k for k in gpu_counts(len(first), len(hosts) > 1) if k < topo.num_gpus]   # not the machine itself
    budget = _read_budget(len(first), counts)
    host = topo.subset(tuple(first)) if len(hosts) > 1 else topo     # subsets of a 512-GPU cluster cost more
    for k in counts:
        subs = _distinct_subsets(host, first, k, budget[k])
        out.append(CommShape(1, k, subs, tuple(tuner_models(topo.subset(s), version) for s in subs)))
    for n in (1 << e for e in range(1, max(len(hosts) - 1, 0).bit_length())):
        gpus = tuple(g for g in range(topo.num_gpus) if topo.host_of(g) in hosts[:n])
        out.append(CommShape(n, len(gpus), (gpus,), (tuner_models(topo.subset(gpus), version),)))
    return out

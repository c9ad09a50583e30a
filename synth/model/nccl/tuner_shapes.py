"""The communicator shapes a user of one machine realistically creates besides the whole machine,
each with the NCCL models a tuner file's lines for that shape are written from.

A tuner line names ``nNodes`` and ``nRanks`` exactly or ``-1`` (any); a file written only for the
whole machine leaves every smaller communicator to its ``-1,-1`` cover, a guess that can be slower
than NCCL's own choice there (a 2-GPU communicator on a P100 or a DGX-1).  So a file also carries
lines for:

* every one-host communicator of 2 .. G GPUs of the first host (subgroups, tensor-parallel groups):
  the model of the **first k GPUs** (the representative subset) plus up to :data:`MAX_OTHER_SUBSETS`
  other k-GPU subsets whose NCCL machine differs (on a DGX-1 GPUs 0,1 and 0,5 have different
  NVLink counts), so a line changes NCCL's choice only where it helps on each of them;
* for a topology of N hosts, every N' = 2 .. N-1 full hosts (GPUs of hosts 0 .. N'-1).

>>> from topo_probe import get_preset
>>> [(s.nodes, s.ranks, s.subsets) for s in comm_shapes(get_preset("pcie-8gpu-2socket"))][:2]
[(1, 2, ((0, 1), (0, 4))), (1, 3, ((0, 1, 2), (0, 1, 4)))]
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

__all__ = ["CommShape", "comm_shapes", "MAX_OTHER_SUBSETS", "MAX_SUBSETS_READ"]

#: other k-GPU subsets (with a different NCCL machine) a one-host shape's lines are checked on
MAX_OTHER_SUBSETS = 3
#: k-GPU subsets read per k to find those (in itertools.combinations order: GPU 0 first)
MAX_SUBSETS_READ = 256


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


def _distinct_subsets(topo, gpus: list[int], k: int) -> tuple:
    """The first ``k`` of ``gpus``, then other k-subsets with a different NCCL machine (at most
    :data:`MAX_OTHER_SUBSETS`, spread over the ones found)."""
    from synth.model.nccl import NcclMachine
    seen: dict = {}
    for sub in itertools.islice(itertools.combinations(gpus, k), MAX_SUBSETS_READ):
        m = dataclasses.replace(NcclMachine.from_topology(topo.subset(sub)), name="")
        seen.setdefault(m, sub)
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
    for k in range(2, len(first) + 1):
        if len(hosts) == 1 and k == topo.num_gpus:
            break                                            # the machine itself
        subs = _distinct_subsets(topo, first, k)
        out.append(CommShape(1, k, subs, tuple(tuner_models(topo.subset(s), version) for s in subs)))
    for n in range(2, len(hosts)):
        gpus = tuple(g for g in range(topo.num_gpus) if topo.host_of(g) in hosts[:n])
        out.append(CommShape(n, len(gpus), (gpus,), (tuner_models(topo.subset(gpus), version),)))
    return out

"""The communicator shapes a user of one machine realistically creates besides the whole machine,
each with the NCCL models a tuner file's lines for that shape are written from.

A tuner line names ``nNodes`` and ``nRanks`` exactly or ``-1`` (any); a file written only for the
whole machine leaves every smaller communicator to its ``-1,-1`` cover, a guess that can be slower
than NCCL's own choice there (a 2-GPU communicator on a P100 or a DGX-1).  So a file also carries
lines for:

* one-host communicators of k GPUs of the first host (subgroups, tensor-parallel groups) for
  k = 2 .. 8 and the powers of two above 8, plus the whole host of a multi-host topology
  (:func:`gpu_counts`): the model of the **first k GPUs** (the representative subset) plus one
  k-GPU subset of **every other class** (:func:`subset_class`: subsets whose NCCL machines are
  the same up to a renumbering of the GPUs; on a DGX-1 GPUs 0,1 have two NVLinks, 0,2 one and 0,5
  none (``SYS``: PCIe and the inter-socket link), and its 70 4-GPU subsets fall in 39 classes), since
  a line names ``nRanks``, not GPUs
  (:mod:`.tuner_pick` judges it on each); subsets of :data:`MAX_GPUS_READ` GPUs in all are
  read, shared fairly over k (every subset of a host of up to 8 GPUs);
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

from synth.model.nccl.tuner_plugin import COLLECTIVES as PLUGIN_COLLECTIVES

__all__ = ["CommShape", "comm_shapes", "gpu_counts", "subset_class", "MAX_GPUS_READ", "MAX_RENUMBERED_GPUS"]

#: subsets of up to this many GPUs with a link matrix are compared up to a renumbering (k! orders);
#: larger ones only as read (the same machine in the same GPU order)
MAX_RENUMBERED_GPUS = 8
#: GPUs in all of the subsets read (every k together) to find those, in itertools.combinations
#: order (GPU 0 first): 1,024 reads every subset of an 8-GPU host (1,008 GPUs in 246 subsets), a
#: larger host a fair share per k (an NVL72 rack: 51 pairs, 13 8-GPU subsets, one 64-GPU subset)
MAX_GPUS_READ = 1024
#: sizes (bytes) at which :func:`_fingerprint` times every pair: one per 4 doublings, and sizes
#: between NCCL's protocol switches on a DGX-1 (30,045 B, 64,831 B) and an odd few
FINGERPRINT_BYTES = (*(1 << e for e in range(0, 41, 4)), 3_000, 30_045, 64_831, 300_001, 3_000_017, 30_000_001)
#: every one-host GPU count up to this; above it only powers of two (and the whole host)
ALL_GPU_COUNTS_UP_TO = 8


@dataclass(frozen=True)
class CommShape:
    """One communicator shape: ``nodes`` hosts, ``ranks`` GPUs in all; ``models`` one
    ``(model, model without NVLS or None)`` pair (:func:`~.tuner_config.tuner_models`) per GPU
    subset in ``subsets`` (GPU indices of the topology; one per class), the representative first."""

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


def subset_class(machine):
    """A key equal for two NCCL machines that differ only in their name and the numbering of their
    GPUs (the least of the link matrix over every renumbering that lists GPUs by their sorted row of
    link counts, up to :data:`MAX_RENUMBERED_GPUS` GPUs): the model times both alike (every pair,
    every size: checked on every DGX-1 subset class, ``tests/synth/model/nccl/test_tuner_shapes.py``)."""
    links = machine.link_matrix
    plain = dataclasses.replace(machine, name="", link_matrix=())
    if not links or len(links) > MAX_RENUMBERED_GPUS:
        return plain, (), links
    n, rows = len(links), [tuple(sorted(r)) for r in links]
    groups = [[g for g in range(n) if rows[g] == r] for r in sorted(set(rows))]   # a GPU maps to one of like links
    orders = (sum(p, ()) for p in itertools.product(*(itertools.permutations(g) for g in groups)))
    return plain, tuple(sorted(rows)), min(tuple(links[p[i]][p[j]] for i in range(n) for j in range(n))
                                           for p in orders)


def _distinct_subsets(host, gpus: list[int], k: int, reads: int) -> tuple:
    """The first ``k`` of ``gpus`` (GPUs of ``host``, a one-host topology, in its own numbering
    0 ..), then the first-read subset of every other :func:`subset_class` among the first ``reads``
    k-subsets, as ``gpus``' values."""
    from synth.model.nccl import NcclMachine
    seen: dict = {}
    for sub in itertools.islice(itertools.combinations(range(len(gpus)), k), reads):
        seen.setdefault(subset_class(NcclMachine.from_topology(host.subset(sub))), tuple(gpus[i] for i in sub))
    return tuple(seen.values())


def _fingerprint(models) -> tuple:
    """What tells two subset classes' models apart: NCCL's table (latency, bandwidth, graphs) and every
    available pair's time at :data:`FINGERPRINT_BYTES`, NVLS on and off; classes alike in all of it
    are timed once (a DGX-1's 39 4-GPU classes: 5).  Any subset is checked against its own model in
    ``tests/synth/model/nccl/test_tuner_shapes.py``."""
    out = []
    for m in (x for x in models if x is not None):
        t = m.table
        out += [repr(t.graphs), tuple(sorted(t.latency.items())), tuple(sorted(t.bandwidth.items()))]
        out += [m.forced(c, a, p, n).time_us for c in PLUGIN_COLLECTIVES for a, p in t.enabled(c)
                for n in FINGERPRINT_BYTES]
    return tuple(out)


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
        timed: dict = {}                  # one subset per model fingerprint, the first k GPUs first
        for s in _distinct_subsets(host, first, k, budget[k]):
            models = tuner_models(topo.subset(s), version)
            timed.setdefault(_fingerprint(models), (s, models))
        out.append(CommShape(1, k, tuple(s for s, _ in timed.values()), tuple(m for _, m in timed.values())))
    for n in (1 << e for e in range(1, max(len(hosts) - 1, 0).bit_length())):
        gpus = tuple(g for g in range(topo.num_gpus) if topo.host_of(g) in hosts[:n])
        out.append(CommShape(n, len(gpus), (gpus,), (tuner_models(topo.subset(gpus), version),)))
    return out

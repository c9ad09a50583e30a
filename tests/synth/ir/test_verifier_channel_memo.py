"""The verifier asks the fabric about each (src, dst) pair once per schedule; what it reports
is what asking per transfer reports (the reference: a fabric that answers every call)."""

from __future__ import annotations

import dataclasses

import pytest

from synth.baselines import baseline
from synth.ir.fabric import Fabric, build_fabric
from synth.ir.schedule import Schedule, Step, Transfer
from synth.ir.verifier import verify
from topo_probe.machines.clusters import cluster
from topo_probe.topology.model import Topology


class CountingFabric(Fabric):
    """The same fabric, counting ``has_channel`` calls."""

    def has_channel(self, i: int, j: int) -> bool:
        self.asked.append((i, j))
        return super().has_channel(i, j)


def _counting(f: Fabric) -> CountingFabric:
    c = CountingFabric(**{fl.name: getattr(f, fl.name) for fl in dataclasses.fields(f)})
    c.asked = []
    return c


def _line4() -> Fabric:
    t = Topology("line4")
    for k in range(4):
        t.add_gpu(k)
    for k in range(3):
        t.add_link(f"gpu{k}", f"gpu{k + 1}", kind="nvlink", links=1, bandwidth_gbps=25.0)
    return build_fabric(t)


def test_no_channel_reported_at_every_transfer_as_before():
    f = _counting(_line4())
    far = Transfer(0, 0, 3)
    s = Schedule("allgather", 4, 1, (Step(1, (far, Transfer(0, 0, 1))), Step(1, (Transfer(0, 0, 3),))))
    rep = verify(s, f)
    where = [(v.step, v.transfer) for v in rep.violations if v.rule == "no-channel"]
    assert where == [(0, 0), (1, 0)]
    assert sorted(f.asked) == [(0, 1), (0, 3)]       # once per pair, not per transfer


def test_cluster_baseline_verdict_unchanged_with_fewer_questions():
    f = build_fabric(cluster("dgx-h100", 2))
    s = baseline("ring", f, "allreduce")
    counted = _counting(f)
    rep = verify(s, counted)
    assert rep.ok and rep.loads == verify(s, f).loads
    transfers = sum(len(st.transfers) for st in s.steps)
    pairs = {(t.src, t.dst) for st in s.steps for t in st.transfers}
    assert len(counted.asked) == len(pairs) < transfers

"""synth.baselines.choice: the fastest baseline per size equals a brute-force argmin."""

import pytest

from synth.baselines import available_baselines, baseline
from synth.baselines.choice import BaselineChooser
from synth.ir.fabric import build_fabric
from synth.model.cost import CostModel
from topo_probe.errors import InvalidArgument, UnsupportedCollective
from topo_probe.load import load_topology
from topo_probe.machines.generators import fully_connected, ring

SIZES = (1 << 10, 1 << 20, 1 << 24, 1 << 30)


@pytest.mark.parametrize("topo", ["dgx1-v100", "pcie-8gpu-2socket", "ring8", "full4"])
@pytest.mark.parametrize("collective,root", [("allreduce", None), ("allgather", None), ("broadcast", 3),
                                             ("alltoall", None)])
def test_choice_is_the_brute_force_argmin(topo, collective, root):
    t = {"ring8": lambda: ring(8), "full4": lambda: fully_connected(4)}.get(topo, lambda: load_topology(topo))()
    f = build_fabric(t)
    chooser = BaselineChooser(f)
    names = available_baselines(f, collective)
    for size in SIZES:
        # independent: fresh schedules and a fresh cost model per size
        times = {n: CostModel(f).schedule_time_us(baseline(n, f, collective, root=root), size) for n in names}
        sched, name = chooser.best(collective, root, size)
        assert times[name] == min(times.values()), (size, times, name)
        assert sched.meta["baseline"] == name and sched.root == root
        assert chooser.best(collective, root, size)[0] is sched          # cached


def test_no_applicable_baseline_names_every_reason():
    f = build_fabric(ring(6))
    chooser = BaselineChooser(f, names=("rhd",))
    with pytest.raises(UnsupportedCollective, match=r"allreduce on 'ring6': no baseline applies \(rhd: "):
        chooser.best("allreduce", None, 1 << 20)
    with pytest.raises(InvalidArgument, match="unknown baseline"):
        BaselineChooser(f, names=("ring", "nccl"))

"""Machines no preset has: the one list the benchmarks and test helpers that run fresh ``synthesize``
runs on them take their machines from (``benchmarks/bench_interop.py``, ``benchmarks/bench_tuner_coverage.py``,
``tests/_plan_truth.py``).  Not a test module; it imports nothing of theirs (nor they of each other).

Each is given as a user gives it to ``synthesize``: a preset name or one of our fixtures of another machine
(``tests/fixtures``; ``family/README.md`` says what each imitates), ``--gpus``, ``--nodes``, ``--net``.
Each user runs its own selection, a filter on :data:`MACHINES` (name it prints -> key), in the order its
output lists them: they differ on purpose (see :data:`INTEROP`, :data:`TUNER_COVERAGE`, :data:`PLAN_TRUTH`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: the repository root: fixture paths are relative to it
ROOT = Path(__file__).resolve().parent.parent
_FAMILY = "tests/fixtures/family/"


@dataclass(frozen=True)
class Machine:
    """``synthesize --topology TOPOLOGY [--gpus GPUS] [--nodes NODES] [--net NET]``; ``topology`` is a preset
    name or a file relative to the repository root."""

    topology: str
    gpus: str | None = None
    nodes: int | None = None
    net: str | None = None

    @property
    def topology_arg(self) -> str:
        """``--topology``'s value: the preset name, or the fixture's absolute path."""
        return str(ROOT / self.topology) if self.topology.startswith("tests/") else self.topology

    @property
    def fixture(self) -> str:
        """The file under ``tests/fixtures/`` (``family/...``); '' for a preset."""
        prefix = "tests/fixtures/"
        return self.topology[len(prefix):] if self.topology.startswith(prefix) else ""

    def synthesize_args(self) -> list[str]:
        """The ``synthesize`` arguments that name this machine."""
        args = ["--topology", self.topology_arg]
        for flag, value in (("--gpus", self.gpus), ("--nodes", self.nodes), ("--net", self.net)):
            args += [flag, str(value)] if value is not None else []
        return args

    def load(self):
        """The machine's Topology, as ``synthesize`` builds it from these arguments."""
        import argparse

        from topo_probe.cli.options import apply_machine_arguments
        from topo_probe.load import load_topology, parse_gpu_list
        topo = load_topology(self.topology_arg, gpus=parse_gpu_list(self.gpus) if self.gpus else None)
        return apply_machine_arguments(topo, argparse.Namespace(nodes=self.nodes, net=self.net))


MACHINES = {
    "dgx-a100-2nodes": Machine("dgx-a100", nodes=2),
    "p100x4-soc": Machine(_FAMILY + "nvsmi_p100x4_driver384_soc.txt"),
    "l40sx4-pcilink": Machine(_FAMILY + "nccl_topo_dump_bcm_pcilink.xml"),
    "a100x2-vm-no-sysfs": Machine(_FAMILY + "nccl_topo_dump_vm_no_sysfs.xml"),
    "rtx4090x8-sys": Machine("tests/fixtures/nvsmi_topo_8x_rtx4090_sys.txt"),
    "rtx4090-gpus0-2": Machine("tests/fixtures/nvsmi_topo_8x_rtx4090_sys.txt", gpus="0-2"),
    "dgx-a100-nvsmi-gpus0-5": Machine("tests/fixtures/nvsmi_topo_dgx_a100.txt", gpus="0-5"),
    "dgx1-v100-gpus0-2": Machine("dgx1-v100", gpus="0-2"),
    "dgx-h100-gpus0-5": Machine("dgx-h100", gpus="0-5"),
    "mi300x-gpus0-5": Machine("mi300x", gpus="0-5"),
    "dgx-h100-2nodes-roce": Machine("dgx-h100", nodes=2, net="roce"),
    "dgx-a100-4nodes-efa": Machine("dgx-a100", nodes=4, net="efa"),
}

#: bench_interop (MSCCL XML for the runtimes): a cluster, the hand-written fixtures of other machines, an AMD
#: machine's partial node (RCCL's side) and a RoCE cluster; one fresh synthesize run each. Name: the run's folder.
INTEROP = {key: key for key in ("dgx-a100-2nodes", "p100x4-soc", "l40sx4-pcilink", "a100x2-vm-no-sysfs",
                                "mi300x-gpus0-5", "dgx-h100-2nodes-roce")}

#: bench_tuner_coverage (NCCL's tuner plugin: NVIDIA machines only): clusters on RoCE and EFA, the fixtures of
#: other machines, a whole PCIe box and partial nodes (smaller communicators). Name: the table's label.
TUNER_COVERAGE = {
    "2x dgx-a100": "dgx-a100-2nodes",
    "4 x P100, two sockets (nvidia-smi, SOC)": "p100x4-soc",
    "4 x L40S, pcilink switches (NCCL dump)": "l40sx4-pcilink",
    "2 x A100 PCIe, VM without sysfs (NCCL dump)": "a100x2-vm-no-sysfs",
    "8 x RTX 4090 (nvidia-smi, SYS)": "rtx4090x8-sys",
    "dgx1-v100 GPUs 0-2": "dgx1-v100-gpus0-2",
    "dgx-h100 GPUs 0-5": "dgx-h100-gpus0-5",
    "2x dgx-h100, RoCE": "dgx-h100-2nodes-roce",
    "4x dgx-a100, EFA": "dgx-a100-4nodes-efa",
}

#: tests/_plan_truth.py (every sampled call executed on the host): user files only, at 2-6 GPUs so a test
#: runs each. Name: the test id and results/interop/plan_truth.md's row.
PLAN_TRUTH = {
    "vm-2xA100-no-sysfs": "a100x2-vm-no-sysfs",
    "rtx4090-gpus0-2": "rtx4090-gpus0-2",
    "p100x4-soc": "p100x4-soc",
    "dgx-a100-nvsmi-gpus0-5": "dgx-a100-nvsmi-gpus0-5",
}


def selection(names: dict[str, str]) -> dict[str, Machine]:
    """A user's selection (name it prints -> key) as name -> :class:`Machine`, in its order."""
    return {name: MACHINES[key] for name, key in names.items()}


__all__ = ["Machine", "MACHINES", "INTEROP", "TUNER_COVERAGE", "PLAN_TRUTH", "selection"]

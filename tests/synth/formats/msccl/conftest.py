"""Fixtures shared by the MSCCL tests: the DGX-2 one-shot all-reduce and its msccl-executor-nccl
XML per GPU, each built once per test process (the XML takes about 3 CPU s per GPU)."""

from __future__ import annotations

import pytest

from synth import build_fabric
from synth.baselines import baseline
from synth.formats.msccl.writer import to_msccl_xml
from topo_probe import get_preset


@pytest.fixture(scope="session")
def oneshot():
    """A 16-rank DGX-2 one-shot all-reduce of 2 chunks per rank: 136 threadblocks per GPU wanted."""
    return baseline("oneshot", build_fabric(get_preset("dgx2")), "allreduce", chunks=2)


@pytest.fixture(scope="session")
def executor_xml(oneshot):
    """gpu -> ``to_msccl_xml(oneshot, runtime="msccl-executor-nccl", gpu=gpu)``, each built once per
    process (the H100 file is read by tests of test_msccl_occupancy and test_msccl_runtimes, which
    check different things)."""
    made: dict = {}

    def xml(gpu):
        if gpu not in made:
            made[gpu] = to_msccl_xml(oneshot, runtime="msccl-executor-nccl", gpu=gpu)
        return made[gpu]
    return xml

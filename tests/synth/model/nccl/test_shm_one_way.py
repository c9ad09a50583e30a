"""A two-rank broadcast or reduce through host memory moves at the host's stated one-way pinned copy rate
(synth/model/nccl/shm_uplink.py ``shm_stream_gbs``): its root only sends and the other rank only receives
(NVIDIA/nccl v2.28.9-1 src/device/broadcast.h lines 42-52, src/device/reduce.h lines 32-44), so each GPU's x16 link
carries one direction, the case CUDA's bandwidthTest measures.  Checked by hand against the stated figure and on the
AutoDL 2 x RTX 2080 Ti logs (bandwidthTest 12.2 GB/s host-to-device, 13.2 device-to-host; class pcie-1host, held out:
no fit sees it)."""

from __future__ import annotations

import sys

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.shm_uplink import shm_stream_gbs

sys.path.insert(0, str(ROOT / "benchmarks"))
from nccl_log_cases import ALL_CASES, HELD_OUT_CLASSES  # noqa: E402
from validate_cost_model import evaluate, machine_for  # noqa: E402

GIB = 1 << 30
#: two GPUs under one Gen3 switch without P2P, the host's bandwidthTest stating 12.2 GB/s one way
PAIR = NcclMachine("pair", "sm70", 2, 1, "pcie", 0, pcie_gen=3, p2p=False, gpus_per_uplink=2, sockets=1,
                   gpus_per_process=2, host_copy_gbs=12.2)


def test_only_a_two_rank_rooted_chain_through_host_memory_takes_the_stated_rate():
    """15.75 GB/s (Gen3 x16) x 0.5 = 7.875 is the link's SHM rate; the two-rank broadcast and reduce take 12.2,
    every other case keeps the link's rate times its uplink share (1/2 for two streams a direction)."""
    assert shm_stream_gbs(PAIR, "broadcast", 7.875) == shm_stream_gbs(PAIR, "reduce", 7.875) == 12.2
    assert shm_stream_gbs(PAIR, "allreduce", 7.875) == shm_stream_gbs(PAIR, "allgather", 7.875) == 7.875 / 2
    assert shm_stream_gbs(PAIR.with_(ranks=4), "broadcast", 7.875) == 7.875 / 2      # middle ranks read and write
    assert shm_stream_gbs(PAIR.with_(nodes=2), "broadcast", 7.875) == 7.875           # a chain across hosts
    assert shm_stream_gbs(PAIR.with_(p2p=True), "broadcast", 7.875) == 7.875          # P2P: no host memory
    assert shm_stream_gbs(PAIR.with_(p2p=True), "broadcast", 7.875, p2p=False) == 12.2  # NCCL_P2P_DISABLE=1
    assert shm_stream_gbs(PAIR.with_(host_copy_gbs=0.0), "broadcast", 7.875) == 7.875   # not stated


def test_a_large_two_rank_broadcast_streams_at_the_stated_rate_by_hand():
    """1 GiB at 12.2 GB/s is 88.0 ms (busbw of a 2-rank broadcast = algbw); without the figure 15.75 x
    link_eff[sm70/shm] (7.875 at the hand-set 0.5), 136.3 ms.  The all_reduce does not move."""
    model = NcclModel(PAIR)
    assert model.time_us("broadcast", GIB) == pytest.approx(GIB / 12.2e3, rel=0.01)
    assert model.time_us("reduce", GIB) == pytest.approx(GIB / 12.2e3, rel=0.01)
    shm = 15.75 * DEFAULT_PARAMS.link_efficiency("sm70", "shm")
    assert NcclModel(PAIR.with_(host_copy_gbs=0.0)).time_us("broadcast", GIB) == pytest.approx(GIB / shm / 1e3, rel=0.01)
    assert model.time_us("allreduce", GIB) == NcclModel(PAIR.with_(host_copy_gbs=0.0)).time_us("allreduce", GIB)


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
def test_the_autodl_rooted_tables_held_out(coll):
    """The class is held out.  The logs hold 11.1 GB/s busbw from 64 MiB; the stated 12.2 gives +10 % (the model's
    7.9 before: 28.4 / 28.6 % median error); median within 15 % at >= 64 KiB, every row from 4 MiB within 11 %."""
    case = next(c for c in ALL_CASES if c.file == f"rtx2080ti_2gpu_1node_{coll}_autodl_shm.txt")
    assert case.machine_class in HELD_OUT_CLASSES
    m = machine_for(case, load_runs(ROOT / "tests" / "fixtures" / "real_logs" / case.file)[0])
    assert m.host_copy_gbs == 12.2
    res = evaluate(case)
    assert res["summary"]["median_big"] <= 0.15
    for r in (r for r in res["rows"] if r["size"] >= 4 << 20):
        assert r["pred_us"] == pytest.approx(r["real_us"], rel=0.11), r

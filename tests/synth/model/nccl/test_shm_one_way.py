"""A two-rank broadcast or reduce through host memory on one host and one socket streams one way per GPU link
(synth/model/nccl/shm_uplink.py ``shm_stream_gbs``): its root only sends and the other rank only receives
(NVIDIA/nccl v2.28.9-1 src/device/broadcast.h lines 42-52, src/device/reduce.h lines 32-44), so it runs at the GPU's
PCIe x16 rate times the model's hand-set ``link_eff[*/pcie]`` (0.8), not the ring's hand-set SHM figure
(``link_eff[*/shm]``, 0.5).  Checked by hand (the socket gate, 4 ranks, across hosts, P2P, the all_reduce and
all_gather untouched) and on the AutoDL 2 x RTX 2080 Ti broadcast and reduce logs (class pcie-1host, held out: no fit
sees it).  Those two tables are not independent evidence for the rule: it was written after seeing them."""

from __future__ import annotations

import sys

import pytest

from _paths import ROOT
from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.shm_uplink import shm_stream_gbs

sys.path.insert(0, str(ROOT / "benchmarks"))
from nccl_log_cases import ALL_CASES, HELD_OUT_CLASSES  # noqa: E402
from validate_cost_model import evaluate  # noqa: E402

GIB = 1 << 30
P = DEFAULT_PARAMS
#: two GPUs under one Gen3 switch without P2P, one socket, one process (-g 2)
PAIR = NcclMachine("pair", "sm70", 2, 1, "pcie", 0, pcie_gen=3, p2p=False, gpus_per_uplink=2, sockets=1,
                   gpus_per_process=2)
ONE_WAY = 15.75 * P.link_efficiency("sm70", "pcie")      # Gen3 x16 one way x the hand-set 0.8: 12.6 GB/s
SHM = 15.75 * P.link_efficiency("sm70", "shm")           # the ring's SHM figure, hand-set 0.5: 7.875 GB/s


def test_the_efficiencies_are_the_hand_set_defaults():
    """Neither efficiency is fitted: the fit (benchmarks/fit_nccl_model.py FIT_SPEC) has no pcie or shm key."""
    assert (P.link_efficiency("sm70", "pcie"), P.link_efficiency("sm70", "shm")) == (0.8, 0.5)
    assert ONE_WAY == pytest.approx(12.6)


def test_only_a_two_rank_rooted_chain_through_host_memory_on_one_socket_streams_one_way():
    """The two-rank broadcast and reduce take 15.75 x 0.8; every other case keeps the ring's rate it is given
    times its uplink share (1/2 for two streams a direction)."""
    assert shm_stream_gbs(PAIR, "broadcast", SHM, P) == shm_stream_gbs(PAIR, "reduce", SHM, P) == ONE_WAY
    assert shm_stream_gbs(PAIR, "allreduce", SHM, P) == shm_stream_gbs(PAIR, "allgather", SHM, P) == SHM / 2
    assert shm_stream_gbs(PAIR.with_(sockets=2), "broadcast", SHM, P) == SHM          # across sockets: not measured
    assert shm_stream_gbs(PAIR.with_(ranks=4), "broadcast", SHM, P) == SHM / 2       # middle ranks read and write
    assert shm_stream_gbs(PAIR.with_(nodes=2), "broadcast", SHM, P) == SHM           # a chain across hosts
    assert shm_stream_gbs(PAIR.with_(p2p=True), "broadcast", 7.0, P) == 7.0          # P2P: no host memory
    assert shm_stream_gbs(PAIR.with_(p2p=True), "broadcast", SHM, P, p2p=False) == ONE_WAY  # NCCL_P2P_DISABLE=1
    assert shm_stream_gbs(PAIR.with_(pcie_gen=4), "reduce", SHM, P) == pytest.approx(31.5 * 0.8)


def test_a_large_two_rank_broadcast_streams_one_way_by_hand():
    """1 GiB at 12.6 GB/s is 85.2 ms (busbw of a 2-rank broadcast = algbw); on a 2-socket machine the ring's
    7.875, 136.3 ms.  The all_reduce (3.94 GB/s: the SHM figure over two streams per uplink direction) and the
    all_gather do not move with the socket count."""
    one, two = NcclModel(PAIR), NcclModel(PAIR.with_(sockets=2))
    for coll in ("broadcast", "reduce"):
        assert one.time_us(coll, GIB) == pytest.approx(GIB / ONE_WAY / 1e3, rel=0.01)
        assert two.time_us(coll, GIB) == pytest.approx(GIB / SHM / 1e3, rel=0.01)
    # all_reduce: 2 sends and 1 local copy a chunk; the ring graph's 1 x 12 GB/s <= PCI_BW gives its CTA 256
    # threads (ring_steps.simple_ring_threads): a channel's 3.9375 / 2 GB/s over the CTA's 100 x 1.53 / 1.98 / 2
    # = 38.64 GB/s copy is 0.05096 of a send step, (2 + 0.05096) / 2 = 1.0255 of the streaming time
    assert P.ring_copy_gbs == 100.0
    copy = 1 + (SHM / 2 / 2) / (100.0 * 1.53 / 1.98 / 2) / 2
    assert copy == pytest.approx(1.0255, abs=1e-4)
    assert one.time_us("allreduce", GIB) == pytest.approx(GIB / (SHM / 2) / 1e3 * copy, rel=0.005)
    for coll in ("allreduce", "allgather"):
        assert one.time_us(coll, GIB) == two.time_us(coll, GIB)
    four = NcclModel(PAIR.with_(ranks=4))                     # 4 ranks behind the one uplink: 2 streams a direction
    assert four.time_us("broadcast", GIB) == pytest.approx(GIB / (SHM / 2) / 1e3, rel=0.01)


@pytest.mark.parametrize("coll", ["broadcast", "reduce"])
def test_the_autodl_rooted_tables_held_out(coll):
    """The class is held out, but the rule was written after seeing these tables: not independent evidence.  The
    logs hold 11.1 GB/s busbw from 64 MiB; 12.6 predicts 13.5 % fast (the ring's 7.9 before: 28.4 / 28.6 % median
    error); median within 15 % at >= 64 KiB, every row from 4 MiB within 13 % in time."""
    case = next(c for c in ALL_CASES if c.file == f"rtx2080ti_2gpu_1node_{coll}_autodl_shm.txt")
    assert case.machine_class in HELD_OUT_CLASSES and case.machine["sockets"] == 1
    assert "host_copy_gbs" not in case.machine
    res = evaluate(case)
    assert res["summary"]["median_big"] <= 0.15
    for r in (r for r in res["rows"] if r["size"] >= 4 << 20):
        assert r["pred_us"] == pytest.approx(r["real_us"], rel=0.13), r

"""Threads per CTA where the source sets them: a p2p receive's copy workers (``ring_steps.p2p_recv_workers``), the
tuner's small-message channel / thread cut starting from a slow ring's 256 Simple threads (``TuneTable.channels``),
and a one-rank TuneTable refused as the CLIs refuse it.  Every expectation is counted by hand from the source."""

from dataclasses import replace

import pytest

from synth.model.nccl import NcclMachine
from synth.model.nccl.params import DEFAULT_PARAMS
from synth.model.nccl.ring_steps import p2p_recv_workers, p2p_simple_fill
from synth.model.nccl.tuning import TuneTable
from topo_probe import get_preset
from topo_probe.errors import InvalidArgument


def test_rccl_p2p_receive_has_two_of_four_64_lane_warps():
    """ROCm/rccl 0cbce2a7: the p2p CTA has NCCL_MAX_NTHREADS = 256 threads (src/enqueue.cc line 962, device.h line
    68), 256 / 64 = 4 warps; finishWorkP2p (enqueue.cc lines 163-179) with a send and a receive: nGroup 2, nWarp
    doubles while nWarp x 2 <= 4 / 2, so 2 warps, 128 threads, each a worker."""
    assert p2p_recv_workers(NcclMachine.from_topology(get_preset("mi355x")), (2, 26)) == 128


def test_nvidia_p2p_receive_workers_by_version():
    """640 threads, 20 warps.  Below 2.22 (v2.21.5-1 src/enqueue.cc lines 117-133): nWarp doubles while nWarp x 2 <=
    10, so 8, and the receive (group 0) gets no extraWarp: 256.  From 2.22 (v2.28.7-1 src/device/sendrecv.h lines
    103-109): (20 - 1) / 2 = 9 receive warps: 288."""
    h100 = NcclMachine.from_topology(get_preset("dgx-h100"))
    assert [p2p_recv_workers(h100, v) for v in ((2, 18), (2, 21), (2, 22), (2, 28))] == [256, 256, 288, 288]


def test_mi355x_p2p_fill_copies_at_128_of_512_workers():
    """A 1 MiB part of two 512 KiB chunks on gfx950 (2.40 GHz boost): ring_copy_gbs 99 at H100's 1.98 GHz is
    99 x 2.40 / 1.98 = 120 GB/s for 512 workers, 30 for 128; a channel writing at 6 GB/s: x (1 + 6 / 30 / 2)."""
    m = NcclMachine.from_topology(get_preset("mi355x"))
    p = replace(DEFAULT_PARAMS, ring_copy_gbs=99.0)
    assert p2p_simple_fill(m, p, 1 << 20, 512 << 10, 6.0, (2, 26)) == pytest.approx(1 + 6.0 / 30.0 / 2)


def test_slow_ring_small_message_cut_starts_from_256_threads():
    """pcie-8gpu-2socket: the ring graph is 1 channel x 10 GB/s <= PCI_BW 12, so NCCL's tuner gives ring Simple 256
    threads (v2.28.9-1 src/graph/tuning.cc line 231) and enqueue.cc starts its cut from them (line 1866, ``nt =
    comm->maxThreads[algo][proto]``; lines 1888-1899).  2 channels, threshold 64 B a thread: 40 KiB >= 2 x 256 x 64 =
    32 KiB keeps (2, 256) (from 512 it would be 1 channel, 1 x 512 x 64 = 32 KiB <= 40 KiB: (1, 512)); 24 KiB < 32
    KiB drops to 1 channel, and 24 KiB >= 1 x 256 x 64 keeps 256 threads.  LL keeps its 512 (tuning.cc line 241)."""
    table = TuneTable.build(NcclMachine.from_topology(get_preset("pcie-8gpu-2socket")), version=(2, 28))
    assert table.graphs.ring.bw_intra * table.graphs.ring.n_channels <= 12 and table.graphs.n_channels == 2
    assert table.channels("ring", "Simple", 40 << 10) == (2, 256)
    assert table.channels("ring", "Simple", 24 << 10) == (1, 256)
    assert table.channels("ring", "LL", 40 << 10) == (1, 512)
    assert table.channels("tree", "Simple", 40 << 10) == (1, 512)    # tree keeps NCCL_SIMPLE_MAX_NTHREADS (line 233)


def test_nccl_2_5_tree_simple_shares_the_slow_default():
    """2.5 had one Simple count for every algorithm (v2.5.6-1 src/graph/tuning.cc line 81 ``maxThreads[PROTO_SIMPLE]``,
    enqueue.cc line 266), 256 where the tree graph's ``speedIntra x nChannels`` (10 x 1) <= 12: tree Simple at 40 KiB
    keeps 2 channels of 256 as ring does; from 2.6 tree has its own 512 (v2.6.4-1 tuning.cc line 83)."""
    m = NcclMachine.from_topology(get_preset("pcie-8gpu-2socket"))
    assert TuneTable.build(m, version=(2, 5)).channels("tree", "Simple", 40 << 10) == (2, 256)
    assert TuneTable.build(m, version=(2, 6)).channels("tree", "Simple", 40 << 10) == (1, 512)


def test_one_rank_table_is_refused_as_the_clis_refuse_it():
    m = NcclMachine.from_topology(get_preset("dgx-h100")).with_(ranks=1)
    with pytest.raises(InvalidArgument, match="a collective needs at least 2 GPUs, this topology has 1"):
        TuneTable.build(m)

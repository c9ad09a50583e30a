"""Threads per CTA where the source sets them: the tuner's small-message channel / thread cut starting from a slow
ring's 256 Simple threads (``TuneTable.channels``), and a one-rank TuneTable refused as the CLIs refuse it.  Every
expectation is counted by hand from the source."""

import pytest

from synth.model.nccl import NcclMachine
from synth.model.nccl.tuning import TuneTable
from topo_probe import get_preset
from topo_probe.errors import InvalidArgument


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

"""A one-host alltoall's p2p channel runs its work batches one after another, and from 2.28.7 a batch holds one
epoch of 8 rounds (NVIDIA/nccl v2.28.7-1 src/enqueue.cc ``addWorkBatchToPlan`` lines 110-138), each round's base
channel being its bit-reversed index (src/include/channel.h ``ncclP2pChannelBaseForRound``): the expectations are
worked out by hand from those lines, not read off the model."""

from __future__ import annotations

import dataclasses

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.graphs import comm_graphs, p2p_total_channels
from synth.model.nccl.p2p import p2p_channels
from synth.model.nccl.p2p_cta import p2p_channel_batches
from topo_probe.machines.presets import get_preset


def test_64_ranks_on_32_channels_run_two_batches_from_2_28():
    """Round r's base is r's low 5 bits reversed, so r and r + 32 share a channel; they are 4 epochs apart
    (r // 8 vs r // 8 + 4), so the channel opens a second batch.  2.27 (base = r, no epoch rule) appends the
    second work to the first batch (2 < 8 works, two rounds)."""
    assert p2p_channel_batches(64, 1, 32, (2, 28)) == 2
    assert p2p_channel_batches(64, 1, 32, (2, 27)) == 1


def test_parts_on_more_channels_meet_more_epochs():
    """Two parts a peer: a round of epoch e covers bases 4j + c(e) and 4j + c(e) + 1 (c(e) = 5-bit reversal of
    e's bits 3-4: 0, 2, 1, 3), so a channel meets 4 of the 8 epochs; 4 parts, every epoch."""
    assert p2p_channel_batches(64, 2, 32, (2, 28)) == 4
    assert p2p_channel_batches(64, 4, 32, (2, 28)) == 8


@pytest.mark.parametrize("ranks, parts", [(4, 8), (8, 4), (8, 1)])
def test_eight_ranks_or_fewer_share_one_epoch(ranks, parts):
    """Rounds 0-7 are one epoch: however the parts fall, a channel's works share one batch."""
    assert p2p_channel_batches(ranks, parts, 32, (2, 28)) == 1


@pytest.mark.parametrize("ranks, batches", [(64, 2), (8, 1)])
def test_alltoall_pays_the_fixed_p2p_cost_once_per_batch(ranks, batches):
    """The fixed p2p µs (``p2p_latency_us``) counts once per batch of the busiest channel: raising it by 10 µs
    raises a 512 KiB alltoall (8 KiB a peer on 64 ranks, one part each) by 2 x 10 µs on 64 ranks, 1 x on 8 (both
    values above the host's enqueue floor, so the device time sets the call's)."""
    m = NcclMachine.from_topology(get_preset("gb200-nvl72")).with_(ranks=ranks)
    params = [dataclasses.replace(DEFAULT_PARAMS, p2p_latency_us=lat) for lat in (30.0, 40.0)]
    times = [NcclModel(m, p, env=NcclEnv(), version=(2, 28)).choose("alltoall", 512 << 10).time_us for p in params]
    assert times[1] - times[0] == pytest.approx(10.0 * batches)


def test_before_2_28_one_batch():
    """NCCL 2.27 (no epoch rule): the same 64-rank call pays the fixed µs once."""
    m = NcclMachine.from_topology(get_preset("gb200-nvl72")).with_(ranks=64)
    params = [dataclasses.replace(DEFAULT_PARAMS, p2p_latency_us=lat) for lat in (30.0, 40.0)]
    times = [NcclModel(m, p, env=NcclEnv(), version=(2, 27)).choose("alltoall", 512 << 10).time_us for p in params]
    assert times[1] - times[0] == pytest.approx(10.0)


def _fixed_cost_paid(m: NcclMachine, coll: str, nbytes: int = 512 << 10, version: tuple = (2, 28)) -> float:
    """µs the call gains when ``p2p_latency_us`` rises by 10 µs (30 -> 40, both above the host's floor)."""
    params = [dataclasses.replace(DEFAULT_PARAMS, p2p_latency_us=lat) for lat in (30.0, 40.0)]
    times = [NcclModel(m, p, env=NcclEnv(), version=version).choose(coll, nbytes).time_us for p in params]
    return times[1] - times[0]


def _parts_and_channels(m: NcclMachine, coll: str, nbytes: int = 512 << 10, version: tuple = (2, 28)):
    """(channels a peer's part runs on, p2pnChannels) of the call: with (1, 32) and 64 ranks the one-host NVIDIA
    rule would count 2 batches (:func:`test_64_ranks_on_32_channels_run_two_batches_from_2_28`), i.e. pay 20 µs."""
    g = comm_graphs(m, version=version)
    return p2p_channels(m, g, nbytes if coll == "sendrecv" else nbytes // m.ranks, version), \
        p2p_total_channels(g.n_channels)


NVL64 = NcclMachine.from_topology(get_preset("gb200-nvl72")).with_(ranks=64)


@pytest.mark.parametrize("label, m, coll", [
    ("two NVLink domains of 32 (several hosts), alltoall", NVL64.with_(nodes=2), "alltoall"),
    ("one NVLink domain, sendrecv", NVL64, "sendrecv"),
    ("RCCL, one xGMI host of 64 (AMD)", NcclMachine.from_topology(get_preset("mi355x")).with_(ranks=64), "alltoall"),
])
def test_other_p2p_calls_pay_the_fixed_cost_once(label, m, coll):
    """Only an NVIDIA one-host alltoall / gather / scatter counts batches: across hosts (channel.h's other branch,
    not modelled), a sendrecv and RCCL pay ``p2p_latency_us`` once, so raising it by 10 µs adds 10 µs, although
    each of these 64-rank calls has 1 part a peer on 32 p2p channels, where the one-host NVIDIA path pays 2 x 10
    (:func:`test_alltoall_pays_the_fixed_p2p_cost_once_per_batch`)."""
    assert m.ranks == 64 and _parts_and_channels(m, coll) == _parts_and_channels(NVL64, "alltoall") == (1, 32)
    assert _fixed_cost_paid(NVL64, "alltoall") == pytest.approx(20.0)
    assert _fixed_cost_paid(m, coll) == pytest.approx(10.0), label

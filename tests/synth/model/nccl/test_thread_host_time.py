"""The host time of a process of several threads (nccl-tests ``-t T -g G``): each thread enqueues and launches its own
G GPUs, in parallel with the other threads, so the per-launch host cost counts G GPUs, not T x G; the cooperative
multi-device launch of NCCL before 2.9 covers the whole process (all T x G GPUs), as does every other rule.

Sources: nccl-tests v2.19.6 src/common.cu lines 1725-1768 (one thread per ``-t``, each with its ``-g`` GPUs, started
at line 1100 by ``threadLaunch``) and lines 548-619 (``startColl``: a thread's own ncclGroupStart/End over its G GPUs);
NVIDIA/nccl v2.28.9-1 src/group.cc line 22 (the group's communicators are ``__thread``) and lines 259-315
(``doLaunches``: the calling thread launches each of its communicators in turn); before 2.9, NVIDIA/nccl v2.8.4-1
src/init.cc lines 595-600 (``intraRanks``: the ranks of one host *and one pid*), src/enqueue.cc lines 204-212 (the
last of the process's ranks to reach the barrier launches all of them with one cooperative multi-device launch).

The expected times below are hand-computed from :func:`synth.model.nccl.latency.host_time_us`'s formula
``G x (host_us + host_us_per_channel x channels) (+ coop_launch_us before 2.9)`` with a host cost large enough
(200 µs per GPU) that it, not the device, sets the time of an 8-byte call."""

from __future__ import annotations

from dataclasses import replace

import pytest

from synth.model.nccl import DEFAULT_PARAMS, NcclEnv, NcclMachine, NcclModel
from topo_probe import get_preset
from topo_probe.errors import InvalidArgument

#: 200 µs per GPU, 3 µs per channel, 50 µs for a cooperative launch: the host sets an 8-byte call's time
HEAVY = replace(DEFAULT_PARAMS, host_us=200.0, host_us_per_channel=3.0, coop_launch_us=50.0)


def _a100(threads: int, gpus: int) -> NcclMachine:
    """One process of ``threads`` threads of ``gpus`` GPUs each on a DGX A100 (``-t threads -g gpus``)."""
    return NcclMachine.from_topology(get_preset("dgx-a100"), gpus_per_process=threads * gpus).with_(
        threads_per_process=threads)


@pytest.mark.parametrize("threads, gpus", [(2, 4), (8, 1), (1, 8)])
@pytest.mark.parametrize("version, coop", [((2, 28), 0.0), ((2, 8), 50.0)])
def test_an_allreduce_host_time_counts_one_threads_gpus(threads, gpus, version, coop):
    """-t 2 -g 4: 4 x (200 + 3 ch); -t 8 -g 1: 1 x (200 + 3 ch); -t 1 -g 8: 8 x (200 + 3 ch) (was 8 x for all
    three); NCCL 2.8 adds the one cooperative launch of the process's 8 GPUs (50 µs) to each."""
    c = NcclModel(_a100(threads, gpus), HEAVY, NcclEnv(), version=version).choose("allreduce", 8)
    assert c.time_us == pytest.approx(gpus * (200.0 + 3.0 * c.channels) + coop, rel=1e-12)


def test_by_hand_at_one_channel():
    """The same, written out for the one channel NCCL's ring/LL runs an 8-byte all_reduce on at 2.28."""
    times = {}
    for threads, gpus in ((2, 4), (8, 1)):
        c = NcclModel(_a100(threads, gpus), HEAVY, NcclEnv(), version=(2, 28)).choose("allreduce", 8)
        assert c.channels == 1
        times[threads, gpus] = c.time_us
    assert times == pytest.approx({(2, 4): 812.0, (8, 1): 203.0})


@pytest.mark.parametrize("threads, gpus", [(2, 4), (8, 1)])
def test_a_sendrecv_host_time_counts_one_threads_gpus(threads, gpus):
    """The point-to-point path (p2p.py) charges the same per-thread host time."""
    c = NcclModel(_a100(threads, gpus), HEAVY, NcclEnv(), version=(2, 28)).choose("sendrecv", 8)
    assert c.time_us == pytest.approx(gpus * (200.0 + 3.0 * c.channels), rel=1e-12)


@pytest.mark.parametrize("threads, gpus", [(8, 1), (2, 4)])
def test_rccls_msccl_host_time_counts_one_threads_gpus(threads, gpus):
    """RCCL's MSCCL all-reduce (rccl.py, 2 channels), allowed in one process of 8 GPUs by
    RCCL_MSCCL_ENABLE_SINGLE_PROCESS: gpus x (200 + 3 x 2)."""
    m = NcclMachine.from_topology(get_preset("mi300x"), gpus_per_process=8).with_(threads_per_process=threads)
    env = NcclEnv.from_environ({"RCCL_MSCCL_ENABLE_SINGLE_PROCESS": "1"})
    c = NcclModel(m, HEAVY, env=env).choose("allreduce", 1024)
    assert c.algorithm.startswith("msccl") and c.time_us == pytest.approx(gpus * 206.0, rel=1e-12)


def test_other_rules_stay_per_process():
    """MSCCL without the single-process variable stays off for -t 8 -g 1 as for -t 1 -g 8 (a process of 8 GPUs)."""
    m = NcclMachine.from_topology(get_preset("mi300x"), gpus_per_process=8)
    for threads in (1, 8):
        c = NcclModel(m.with_(threads_per_process=threads), env=NcclEnv()).choose("allreduce", 1024)
        assert not c.algorithm.startswith("msccl")
    one = NcclModel(m.with_(gpus_per_process=1), env=NcclEnv()).choose("allreduce", 1024)
    assert one.algorithm.startswith("msccl")


@pytest.mark.parametrize("changes, gpus, threads", [({"threads_per_process": 0}, 8, 0),
                                                    ({"threads_per_process": 3}, 8, 3),
                                                    ({"gpus_per_process": 2, "threads_per_process": 4}, 2, 4)])
def test_bad_thread_counts_are_refused_in_one_line(changes, gpus, threads):
    m = NcclMachine.from_topology(get_preset("dgx-a100"), gpus_per_process=8)
    with pytest.raises(InvalidArgument) as err:
        m.with_(**changes)
    assert str(err.value) == f"gpus_per_process {gpus} do not split evenly over threads_per_process {threads}"

"""NVLS works through a message one chunk per channel at a time, and NCCL cuts that chunk from
128 KiB to 16 KiB on mid-size messages (enqueue.cc): the per-chunk cost is what keeps a mid-size
NVLS all-reduce below its bandwidth.  Checked by hand and against the real 8 x H100 NVLS log
(tests/fixtures/real_logs, SOURCE header inside)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import DEFAULT_PARAMS, NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.runtime import nvls_chunk_overhead_us, simple_chunk_bytes
from topo_probe import get_preset

H100 = NcclMachine.from_topology(get_preset("dgx-h100"), gpus_per_process=8)
LOG = ROOT / "tests" / "fixtures" / "real_logs" / "h100_8gpu_1node_all_reduce_nvls.txt"
MIB = 1 << 20


def test_nccl_cuts_the_nvls_chunk_on_mid_sizes():
    """concurrentOps = 16 channels x 8 NVLS heads = 128; 128 KiB below 64 x 128 x 128 KiB = 1 GiB
    becomes 64 KiB, below 8 x 128 x 64 KiB = 64 MiB 32 KiB, below 2 x 128 x 32 KiB = 8 MiB 16 KiB."""
    t = NcclModel(H100).table
    assert (t.graphs.nvls_channels, t.graphs.nvls.n_channels) == (16, 8)
    got = [simple_chunk_bytes(t, "nvls", n, 16) for n in (4 * MIB, 8 * MIB, 64 * MIB, 1024 * MIB)]
    assert got == [16384, 32768, 65536, 131072]


def test_the_chunk_cost_adds_one_cost_per_chunk_of_each_channel():
    """4 MiB on 16 channels: 256 KiB per channel, 16 chunks of 16 KiB; the time grows by 16 x the cost."""
    t = NcclModel(H100).table
    cost = 0.7
    p = replace(DEFAULT_PARAMS, nvls_chunk_us=cost)
    assert nvls_chunk_overhead_us(t, "nvls", 4 * MIB, 16, p) == pytest.approx(16 * cost)
    slow = NcclModel(H100, p).time_us("allreduce", 4 * MIB)
    fast = NcclModel(H100, replace(p, nvls_chunk_us=0.0)).time_us("allreduce", 4 * MIB)
    assert slow - fast == pytest.approx(16 * cost)


def test_mid_size_nvls_rows_of_the_real_log():
    """The log's busbw rises from 232 GB/s at 16 MiB to 479 at 8 GiB; without a per-chunk cost a model
    that meets 8 GiB is 20-25 % fast at 16-32 MiB.  Every row from 16 MiB on within 17 %."""
    run = next(iter(load_runs(LOG)))
    model = NcclModel(H100, env=NcclEnv(), version=(2, 26))
    assert DEFAULT_PARAMS.nvls_chunk_us > 0.1
    errors = {}
    for row in run.rows:
        if row.size >= 16 * MIB:
            c = model.choose("allreduce", row.size)
            assert c.algorithm == "nvls"
            errors[row.size >> 20] = row.out_of_place.time_us / c.time_us - 1
    assert max(map(abs, errors.values())) <= 0.17, errors

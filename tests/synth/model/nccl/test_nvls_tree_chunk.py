"""NVLS-tree's chunk (NVIDIA/nccl v2.22.3-1 .. v2.28.3-1 src/enqueue.cc, its own branch of the chunk
computation, not NVLS's) and the time a tree's first Simple chunk takes to cross the network hops.
Checked by hand from the source's rule and against the real 2 x XE9680 H100 InfiniBand log
(tests/fixtures/real_logs, SOURCE header inside)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import DEFAULT_PARAMS, NcclMachine, NcclModel
from synth.model.nccl.runtime import nvls_tree_chunk_bytes, pipeline_fill_us, simple_chunk_bytes
from topo_probe import cluster

MIB = 1 << 20
LOG = ROOT / "tests" / "fixtures" / "real_logs" / "h100_16gpu_2node_all_reduce_ib_xe9680.txt"


def _by_source(max_chunk, nodes, nbytes, ops):
    """enqueue.cc, written out: chunk = 128 KiB (NCCL_NVLS_CHUNKSIZE), capped by
    NCCL_NVLSTREE_MAX_CHUNKSIZE (default: 64 KiB from 4 nodes); then four independent cuts."""
    chunk = 131072
    cap = max_chunk if max_chunk else (65536 if nodes >= 4 else chunk)
    chunk = cap if max_chunk and max_chunk > chunk else min(chunk, cap)
    if nbytes < 32 * ops * chunk and chunk > 262144:
        chunk = 262144
    if nbytes < 16 * ops * chunk and chunk > 131072:
        chunk = 131072
    if nbytes < 4 * ops * chunk and chunk > 65536:
        chunk = 65536
    if nbytes < 1 * ops * chunk and chunk > 32768:
        chunk = 32768
    return chunk


@pytest.mark.parametrize("max_chunk", [None, 65536, 524288])
@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_chunk_follows_the_source_rule(max_chunk, nodes):
    for ops in (64, 128, 192):
        for mib in (1, 4, 8, 16, 32, 64, 128, 512, 2048, 8192):
            n = mib * MIB
            assert nvls_tree_chunk_bytes(max_chunk, nodes, n, ops) == _by_source(max_chunk, nodes, n, ops)


def test_two_h100_hosts_by_hand():
    """16 channels x 8 heads = 128 concurrent ops: 128 KiB from 64 MiB (4 x 128 x 128 KiB), 64 KiB from
    8 MiB (1 x 128 x 64 KiB), 32 KiB below (the NVLS rule this replaces went down to 16 KiB below 4 MiB)."""
    t = NcclModel(NcclMachine.from_topology(cluster("dgx-h100", nodes=2))).table
    got = [simple_chunk_bytes(t, "nvls_tree", n * MIB, 16) for n in (2, 7, 8, 16, 63, 64, 1024)]
    assert got == [32768, 32768, 65536, 65536, 65536, 131072, 131072]


def test_pipeline_fill_by_hand():
    """2 x H100, 8 x 50 GB/s NICs at net_eff 0.8, 16 channels: 20 GB/s per channel; 1 GiB in 128 KiB
    chunks crosses 2 network hops: 2 x 131072 B / 20 GB/s = 13.11 us; 4 MiB (32 KiB chunks) a quarter."""
    t = NcclModel(NcclMachine.from_topology(cluster("dgx-h100", nodes=2))).table
    p = replace(DEFAULT_PARAMS, net_eff={"*": 0.8})
    assert pipeline_fill_us(t, "nvls_tree", "Simple", 16, 1 << 30, p) == pytest.approx(2 * 131072 / 20000.0)
    assert pipeline_fill_us(t, "nvls_tree", "Simple", 16, 4 * MIB, p) == pytest.approx(2 * 32768 / 20000.0)
    assert pipeline_fill_us(t, "ring", "Simple", 16, 1 << 30, p) == 0.0
    assert pipeline_fill_us(t, "tree", "LL128", 16, 1 << 30, p) == 0.0


def test_mid_size_rows_of_the_xe9680_log():
    """2 x XE9680, NCCL 2.26.2 defaults: NVLS-tree from 1 MiB.  Every row 1 MiB .. 16 GiB within 25 %
    and the median of them within 10 % under the committed constants."""
    run = next(iter(load_runs(LOG)))
    model = NcclModel(NcclMachine.from_topology(cluster("dgx-h100", nodes=2)), version=(2, 26))
    errors = []
    for row in run.rows:
        if row.size >= MIB:
            c = model.choose("allreduce", row.size)
            errors.append(abs(row.out_of_place.time_us / c.time_us - 1))
    errors.sort()
    assert len(errors) == 15
    assert errors[len(errors) // 2] <= 0.10 and errors[-1] <= 0.40, errors

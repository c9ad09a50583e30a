"""NCCL as it ran before 2.28's tables: the ring rows of NCCL's latency table by version (tuning.cc,
NVIDIA/nccl v2.5.6-1 .. v2.18.1-1) and 2.4's fixed choice (enqueue.cc getKernelInfo).  Checked by
hand, against NCCL's code rules, and against the real 8 x V100 DGX-1 log (NCCL 2.4 era, -g 8;
tests/fixtures/real_logs, SOURCE header inside)."""

from __future__ import annotations

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.constants import BASE_LAT, HW_LAT
from synth.model.nccl.params import ModelParams
from synth.model.nccl.latency import latency_us
from synth.model.nccl.versions import kernel_info_24, latency_tables
from topo_probe import get_preset

V100 = NcclMachine.from_topology(get_preset("dgx1-v100"), gpus_per_process=8)
LOG = ROOT / "tests" / "fixtures" / "real_logs" / "v100_8gpu_dgx1_hybridcubemesh_1node_all_reduce.txt"
#: hand-set constants (no fit): the model's starting values, V100's NVLink at 0.9 of its data sheet
PRIOR = ModelParams()


def test_ring_rows_from_2_18_are_the_2_28_table():
    """Every log of NCCL >= 2.18 keeps the table the model had: only older runs move."""
    for version in ((2, 18), (2, 22), (2, 26), (2, 28), (2, 29)):
        base, hops = latency_tables("ring", version)
        assert base == BASE_LAT[1] and hops == (HW_LAT[0][1], HW_LAT[1][1], HW_LAT[2][1])
    assert latency_tables("tree", (2, 4)) == (BASE_LAT[0], (HW_LAT[0][0], HW_LAT[1][0], HW_LAT[2][0]))


def test_v100_ring_latency_by_hand():
    """8 x V100 ring all_reduce, 14 NVLink steps: 2.5's table 8.4 + 14 x 5.7 = 88.2 µs Simple and
    3.6 + 14 x 0.4 = 9.2 µs LL; 2.28's 8.4 + 14 x 3.4 = 56.0 and 6.6 + 14 x 0.6 = 15.0."""
    for version, simple, ll in (((2, 4), 88.2, 9.2), ((2, 28), 56.0, 15.0)):
        t = NcclModel(V100, PRIOR, version=version).table
        scale = PRIOR.latency_scale("sm70", "Simple"), PRIOR.latency_scale("sm70", "LL")
        assert latency_us(t, "allreduce", "ring", "Simple", PRIOR) == pytest.approx(simple * scale[0])
        assert latency_us(t, "allreduce", "ring", "LL", PRIOR) == pytest.approx(ll * scale[1])


def test_nccl24_choice_follows_get_kernel_info():
    """enqueue.cc v2.4.8-1 on 8 ranks, 12 channels, Volta (threadThreshold 64): LL's threads grow
    64 -> 256 past 8 B per thread of 8 chunks, its channels are ceil(nBytes / (256 x 8 x 8)), and LL
    holds while nBytes <= nc x 256 x 8 x 64 = 1.5 MiB with 12 channels; one node never runs trees."""
    rows = {n: kernel_info_24(V100, "allreduce", n, 12) for n in (4096, 4097, 8193, 65536, 1572864, 1572865)}
    assert rows[4096] == ("ring", "LL", 1, 64)
    assert rows[4097] == ("ring", "LL", 1, 128)
    assert rows[8193] == ("ring", "LL", 1, 256)
    assert rows[65536] == ("ring", "LL", 4, 256)
    assert rows[1572864] == ("ring", "LL", 12, 256)
    assert rows[1572865] == ("ring", "Simple", 12, 257)
    model = NcclModel(V100, PRIOR, version=(2, 4))
    assert [model.choose("allreduce", n).label for n in (65536, 1 << 20, 2 << 20)] == [
        "ring/LL/4", "ring/LL/12", "ring/Simple/12"]


def test_v100_log_with_hand_set_constants():
    """No V100 constant fitted: the real DGX-1 log's Simple rows (2 MiB .. 128 MiB, device-bound) are
    within 8 % of busbw; with 2.28's tables they were 7-44 % fast below 64 MiB."""
    rows = load_runs(LOG)[0].rows
    model = NcclModel(V100, PRIOR, version=(2, 4))
    modern = NcclModel(V100, PRIOR, version=(2, 28))
    errs, modern_errs = [], []
    for r in rows:
        if r.size >= 2 << 20:
            real = r.out_of_place.time_us
            errs.append(real / model.choose("allreduce", r.size).time_us - 1)
            modern_errs.append(real / modern.choose("allreduce", r.size).time_us - 1)
    assert len(errs) == 7
    assert max(abs(e) for e in errs) < 0.08
    assert max(modern_errs) > 0.25

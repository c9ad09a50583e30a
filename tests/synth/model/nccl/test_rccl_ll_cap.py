"""The model caps LL's bus bandwidth on one AMD host at NCCL's ``llMaxBws`` row for compute capability
>= 90 (ROCm/rccl 0cbce2a7 src/graph/tuning.cc; HIP reports 9.x on gfx9, src/misc/utils.cc): 141 GB/s
with every channel, the channels' share of it with fewer (RCCL's tuner itself applies the row only in its
CUDA branch); on gfx950 only before RCCL 2.27 (2.26.6 ran its LL kernels without inlining, 2.27 changed inlining).
Checked by hand and against the real 8 x MI350X log (RCCL 2.26; tests/fixtures/real_logs, SOURCE header inside)."""

from __future__ import annotations

import math

import pytest

from _paths import ROOT
from synth.formats.nccl_tests.runs import load_runs
from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.channel_caps import GFX950_LL_INLINED, ring_channel_cap_gbs
from synth.model.nccl.latency import host_time_us, latency_us
from topo_probe import cluster, get_preset

MI350X = NcclMachine.from_topology(get_preset("mi355x"), gpus_per_process=8)
LOG = ROOT / "tests" / "fixtures" / "real_logs" / "mi350x_8gpu_1node_all_reduce.txt"
V26 = (2, 26, 6)


def test_one_host_ll_time_by_hand():
    """64 KiB all_reduce on 8 x MI350X: NCCL's channel reduction leaves 2 of 56 channels (65536 <
    nc x 512 threads x 8 B x 8 ranks for nc > 2); LL moves 2 x 7/8 x 65536 = 114,688 B per rank at
    141 x 2 / 56 = 5.036 GB/s = 22.78 us, after RCCL's LL latency 12 + 14 hops x 0.8 = 23.2 us
    (baseLat, rcclTuningModel[5] ring/LL xGMI hop): 45.98 us, above the host floor of one process
    enqueueing 8 GPUs."""
    model = NcclModel(MI350X, version=V26)
    assert model.table.graphs.n_channels == 112        # RCCL 2.26: 4 x 28 rings; LL's cap stays over 56
    c = model.choose("allreduce", 65536)
    assert (c.algorithm, c.protocol, c.channels) == ("ring", "LL", 2)
    lat = latency_us(model.table, "allreduce", "ring", "LL", model.params)
    assert lat == pytest.approx((12.0 + 14 * 0.8) * model.params.latency_scale("gfx950", "LL"))
    by_hand = lat + 2 * 7 / 8 * 65536 / (1000.0 * 141.0 * 2 / 56)
    assert by_hand > host_time_us(model.params, 8, 2)
    assert c.time_us == pytest.approx(by_hand)


def test_several_hosts_stay_uncapped():
    """Across hosts RCCL takes LL's bandwidth from its bwRatio tables, which the model does not hold."""
    two = NcclMachine.from_topology(cluster("mi300x", nodes=2))
    graphs = NcclModel(two).table.graphs
    assert ring_channel_cap_gbs(two, "LL", 4, graphs) == math.inf
    one = NcclMachine.from_topology(get_preset("mi300x"))
    g1 = NcclModel(one).table.graphs
    assert ring_channel_cap_gbs(one, "LL", 4, g1) == pytest.approx(141.0 * 4 / g1.n_channels)


def test_mid_size_ll_rows_of_the_real_log():
    """The log's 64-512 KiB rows take 50-61 us with 32 KiB per channel; uncapped, the model put them
    on the 37-41 us host floor (26-50 % fast).  Capped, each is within 36 %, and no row the cap
    leaves alone moves."""
    run = next(iter(load_runs(LOG)))
    model = NcclModel(MI350X, version=V26)
    errors = {}
    for row in run.rows:
        if 65536 <= row.size <= 524288:
            c = model.choose("allreduce", row.size)
            errors[row.size >> 10] = row.out_of_place.time_us / c.time_us - 1
    assert set(errors) == {64, 128, 256, 512}
    assert max(errors.values()) <= 0.36, errors
    assert min(errors.values()) >= 0.05, errors


def test_gfx950_cap_ends_with_rccl_227():
    """RCCL 2.26.6's CHANGELOG: gfx950's LL kernels (LLGenericOp) not inlined; 2.27.7's: inlining changed for
    small-message latency.  By hand on 8 x MI355X (112 channels, the cap spread over 56): 2 LL channels at 2.26.6
    141 x 2 / 56 = 5.036 GB/s; at 2.27.7 and the default 2.28 no cap; Simple and MI300X (gfx942) keep theirs."""
    g = NcclModel(MI350X, version=V26).table.graphs
    assert GFX950_LL_INLINED == (2, 27)
    assert ring_channel_cap_gbs(MI350X, "LL", 2, g, "allreduce", V26) == pytest.approx(141.0 * 2 / 56)
    for version in ((2, 27, 7), (2, 28)):
        assert ring_channel_cap_gbs(MI350X, "LL", 2, g, "allreduce", version) == math.inf
        assert ring_channel_cap_gbs(MI350X, "Simple", 2, g, "allreduce", version) == \
            ring_channel_cap_gbs(MI350X, "Simple", 2, g, "allreduce", V26) < math.inf
    mi300x = NcclMachine.from_topology(get_preset("mi300x"))
    g3 = NcclModel(mi300x).table.graphs
    assert ring_channel_cap_gbs(mi300x, "LL", 4, g3, "allreduce", (2, 27, 7)) == pytest.approx(141.0 * 4 / 56)


def test_gfx950_ll_faster_from_227():
    """64 KiB all_reduce on 8 x MI355X, one process: LL on 2 channels in both; at 2.26.6 the by-hand time above
    (45.98 us, capped); at 2.27.7 the same 23.2 us latency with the wire no longer at 5.036 GB/s, so faster."""
    old = NcclModel(MI350X, version=V26).choose("allreduce", 65536)
    new = NcclModel(MI350X, version=(2, 27, 7)).choose("allreduce", 65536)
    assert (old.protocol, old.channels) == (new.protocol, new.channels) == ("LL", 2)
    lat = 12.0 + 14 * 0.8
    assert old.time_us == pytest.approx(lat + 2 * 7 / 8 * 65536 / (1000.0 * 141.0 * 2 / 56))
    assert lat < new.time_us < old.time_us - 5.0


@pytest.mark.parametrize("library, capped", [("22707", False), ("22606", True)])
def test_simulate_follows_the_rccl_release_an_rccl_tests_header_prints(tmp_path, capsys, library, capped):
    """``simulate --import`` of the unseen 8 x MI355X log (RCCL 2.27.7, printed only as rccl-tests'
    ``rccl-library=22707``) follows the release it prints; the same table headed ``rccl-library=22606`` (RCCL 2.26.6)
    keeps the cap: 64 KiB at the by-hand 45.98 us of :func:`test_gfx950_ll_faster_from_227`, not the default's rules."""
    from synth.cli.simulate import main as simulate_main
    text = (ROOT / "tests" / "fixtures" / "real_logs" / "unseen" / "mi355x_8gpu_1node_all_reduce_vultr.txt").read_text()
    log = tmp_path / "mi355x.txt"
    log.write_text(text.replace("rccl-library=22707", f"rccl-library={library}"))
    assert simulate_main(["--import", str(log), "--topology", "mi355x", "--baseline", "nccl"]) == 0
    out = capsys.readouterr().out.splitlines()
    release = "2.26.6" if capped else "2.27.7"
    assert any(f"NCCL {release} rules: the log" in line for line in out), [x for x in out if "rules" in x]
    (row,) = [line.split() for line in out if line.split()[:1] == ["65536"]]
    by_hand = 12.0 + 14 * 0.8 + 2 * 7 / 8 * 65536 / (1000.0 * 141.0 * 2 / 56)
    assert (float(row[5]) == pytest.approx(by_hand, abs=0.01)) == capped, row

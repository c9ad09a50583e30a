"""Blackwell NVLS-tree all_reduce at medium sizes (NVIDIA/nccl ebd1e929, v2.29.2, src/graph/tuning.cc
``ncclTopoGetAlgoTime``): NCCL scales its NVLS-tree bandwidth by the trees' correction factor for
log2(bytes / 64) < 24 on Blackwell with an x86 CPU.  Checked against the factor as read from that
source by hand and against a real 2 x 8 B200 log that no fit sees (GCP A4, RoCE, NCCL 2.26)."""

from __future__ import annotations

import sys

import pytest
from _paths import ROOT

from synth.model.nccl import DEFAULT_PARAMS, NcclEnv, NcclMachine, NcclModel
from synth.model.nccl.tuning import TuneTable, nvls_tree_correction
from topo_probe import cluster, get_preset

sys.path.insert(0, str(ROOT / "benchmarks"))
import nccl_log_cases as cases  # noqa: E402
import validate_cost_model as validation  # noqa: E402

B200X2 = NcclMachine.from_topology(cluster("hgx-b200", nodes=2))


@pytest.mark.parametrize("mib, want", [(1, 0.5), (8, 0.8), (16, 0.7), (64, 0.8), (256, 0.9), (512, 0.9),
                                       (1024, 1.0), (8192, 1.0)])
def test_the_factor_is_nccls_simple_row_up_to_512_mib(mib, want):
    """treeCorrectionFactor[NCCL_PROTO_SIMPLE][log2(nBytes >> 6)], read by hand from tuning.cc:
    log 14 (1 MiB) .5, 17 (8 MiB) .8, 18 (16 MiB) .7, 20 (64 MiB) .8, 22-23 .9; none from log 24 (1 GiB)."""
    assert nvls_tree_correction(B200X2, "allreduce", "nvls_tree", "Simple", mib << 20) == want


def test_only_blackwell_nvls_tree_all_reduce_on_x86_takes_it():
    h100x2 = NcclMachine.from_topology(cluster("dgx-h100", nodes=2))
    grace = B200X2.with_(cpu_arch="arm")
    assert NcclMachine.from_topology(get_preset("gb200-nvl72")).cpu_arch == "arm"
    for m, coll, algo in ((h100x2, "allreduce", "nvls_tree"), (grace, "allreduce", "nvls_tree"),
                          (B200X2, "allreduce", "tree"), (B200X2, "allgather", "nvls_tree")):
        assert nvls_tree_correction(m, coll, algo, "Simple", 16 << 20) == 1.0


def test_nccls_estimate_takes_it_from_2_29_only():
    """The choice follows the version: 2.28's estimate is NCCL's plain NVLS-tree line, 2.29's is slower."""
    old, new = (TuneTable.build(B200X2, NcclEnv(), v) for v in ((2, 28), (2, 29)))
    nbytes = 16 << 20
    lat = old.latency[("allreduce", "nvls_tree", "Simple")]
    bw = old.bandwidth[("allreduce", "nvls_tree", "Simple")]
    assert old.algo_time_us("allreduce", "nvls_tree", "Simple", nbytes) == pytest.approx(lat + nbytes / (1000 * bw))
    # 2.29's latency also has its longer NVLS-tree network hop (20.9 us, test_blackwell_tables.py)
    assert new.algo_time_us("allreduce", "nvls_tree", "Simple", nbytes) == pytest.approx(
        new.latency[("allreduce", "nvls_tree", "Simple")] + nbytes / (1000 * bw * 0.7))
    assert new.latency[("allreduce", "nvls_tree", "Simple")] > lat


def test_the_two_host_gcp_a4_log_is_predicted_within_15_percent_median():
    """b200_16gpu_2node_all_reduce_gcp_a4_roce.txt (held out, class b200-roce-multihost): 8 MiB - 16 GiB.
    Without the factor the model was 13.2 % off in median and 53 % at 64 MiB (modelled 316 us, real 483).
    With two-node NVLS-tree at the ring's NIC rate (runtime.STEADY_NET_ALGOS) the 2-16 GiB rows are within
    8 % (they were 8-11 % slow; 5-8 % fast after the refit) and the median 10.1 % (was 8.9 %); the 64 MiB row, already 29 % fast,
    is 43 % fast (46 % after the refit for NVLS's one-host loop fill, which no fit of this log drives):
    this run's own mid-size dip (260 GB/s at 64 MiB), not a NIC rate."""
    case = next(c for c in cases.THIRD_CASES if c.file == "b200_16gpu_2node_all_reduce_gcp_a4_roce.txt")
    assert case.machine_class in cases.HELD_OUT_CLASSES
    result = validation.evaluate(case, DEFAULT_PARAMS)
    assert result["summary"]["median_big"] <= 0.15
    by_size = {r["size"]: r for r in result["rows"]}
    assert by_size[64 << 20]["choice"].startswith("nvls_tree")
    assert abs(by_size[64 << 20]["err"]) <= 0.50
    assert all(abs(by_size[n << 30]["err"]) <= 0.10 for n in (2, 4, 8, 16))     # 5-8 % after the refit


def test_the_runtime_divides_the_transfer_up_to_512_mib_and_leaves_8_gib(monkeypatch):
    """With the factor switched off the 8 GiB time is the same and the 64 MiB transfer 0.8 x as long."""
    import synth.model.nccl.runtime as runtime
    model = NcclModel(B200X2, DEFAULT_PARAMS, NcclEnv())
    t = model.table
    args = ("allreduce", "nvls_tree", "Simple", t.graphs.nvls_channels)
    with_factor = [runtime._transfer_us(t, *args, n, DEFAULT_PARAMS) for n in (64 << 20, 8 << 30)]
    monkeypatch.setattr(runtime, "nvls_tree_correction", lambda *a: 1.0)
    without = [runtime._transfer_us(t, *args, n, DEFAULT_PARAMS) for n in (64 << 20, 8 << 30)]
    assert with_factor[0] == pytest.approx(without[0] / 0.8)
    assert with_factor[1] == pytest.approx(without[1])

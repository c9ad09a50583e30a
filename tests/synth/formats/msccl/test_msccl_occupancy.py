"""Threadblocks per GPU against what the GPU keeps resident (:mod:`synth.formats.msccl.occupancy`).

The reference is the runtimes' launch (msccl-executor-nccl c6f6b36d ``src/misc/msccl/msccl_setup.cc``
lines 457-468: one block of 544/640 threads per threadblock, an ordinary launch, lines 494-532;
``makefiles/common.mk`` line 70: ``-maxrregcount=96``) and the vendors' SM/CU counts, written out
by hand below rather than read from the module under test.
"""

from __future__ import annotations

import re

import pytest

from synth.formats.msccl.occupancy import (SMS, BLOCKS_PER_SM, gpu_of, gpu_of_topology_name, resident_threadblocks,
                                           sms_of)
from synth.formats.msccl.runtimes import MSCCL_EXECUTOR_NCCL, RCCL, check_xml
from synth.formats.msccl.writer import to_msccl_xml
from synth.pipeline.msccl_export import _runtime_export
from topo_probe import cluster, get_preset

V100, A100, H100 = "Tesla V100-SXM3-32GB", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3"

#: preset -> SMs (CUs) of its GPU: Volta / Ampere / Hopper white papers, AMD Instinct data sheets,
#: L40S 18,176 CUDA cores / 128, B200 as CUDA reports it
PRESET_SMS = {"dgx1-v100": 80, "dgx2": 80, "dgx-a100": 108, "pcie-8gpu-2socket": 108, "dgx-h100": 132,
              "hgx-h200": 132, "hgx-b200": 148, "gb200-nvl72": 148, "l40s-8gpu-pcie": 142,
              "mi300x": 304, "mi325x": 304, "mi355x": 256}
AMD = ("mi300x", "mi325x", "mi355x")


def _most_tbs(text: str) -> int:
    return max(seg.split("</gpu>")[0].count("<tb ") for seg in text.split("<gpu ")[1:])


# oneshot and executor_xml: tests/synth/formats/msccl/conftest.py (shared with test_msccl_runtimes)


@pytest.mark.parametrize("preset", sorted(PRESET_SMS))
def test_every_preset_gpu_has_its_sm_count(preset):
    assert sms_of(gpu_of(get_preset(preset))) == PRESET_SMS[preset]


def test_one_block_per_sm_is_all_that_is_sure_to_fit():
    """640 threads x 96 registers (-maxrregcount) = 61,440 of the 65,536 registers of a V100, A100
    or H100 SM: a second block may not fit, whatever the shared memory."""
    assert 65536 // (640 * 96) == 1 == BLOCKS_PER_SM


def test_an_unknown_gpu_gets_fewer_sms_than_every_gpu_the_table_knows():
    nvidia = [n for key, n in SMS if not key.startswith("MI")]
    amd = [n for key, n in SMS if key.startswith("MI")]
    assert resident_threadblocks(MSCCL_EXECUTOR_NCCL) == 32 < min(nvidia) == 40          # T4
    assert resident_threadblocks(RCCL) == RCCL.max_tbs_per_gpu == 64 < min(amd) == 104   # MI210
    assert min(PRESET_SMS[p] for p in AMD) == 256 and min(n for p, n in PRESET_SMS.items() if p not in AMD) == 80
    # RCCL's own cap (MSCCL_MAX_NUM_THREAD_BLOCKS 64) is below every CU count: the rule never binds there
    assert RCCL.max_tbs_per_gpu <= min(resident_threadblocks(RCCL, gpu_of(get_preset(p))) for p in AMD)


def test_preset_names_and_clusters_of_presets_name_their_gpu():
    assert gpu_of_topology_name("dgx2") == V100
    assert gpu_of_topology_name(cluster("dgx-a100", nodes=2).name) == A100
    assert gpu_of_topology_name("full:4") is None and gpu_of_topology_name("3xnothing") is None


@pytest.mark.parametrize("gpu, sms", [(V100, 80), (A100, 108), (H100, 132)])
def test_msccl_executor_export_keeps_threadblocks_resident(executor_xml, gpu, sms):
    """At most one threadblock per SM; on an H100 the int8_t depid cap (128) binds first."""
    text = executor_xml(gpu)
    assert _most_tbs(text) == min(136, 128, sms)
    assert max(int(d) for d in re.findall(r'depid="(-?[0-9]+)"', text)) < sms
    assert check_xml(text, MSCCL_EXECUTOR_NCCL, device=gpu, every_size=True)[1] == []


def test_the_schedules_preset_names_the_gpu_when_none_is_given(oneshot):
    assert _most_tbs(to_msccl_xml(oneshot, runtime="msccl-executor-nccl")) == 80          # dgx2: V100


def test_the_pipeline_passes_the_topologys_gpu(oneshot):
    """A schedule of a topology that is no preset: the GPU named by the run's topology, else 32 SMs (an unknown GPU)."""
    custom = oneshot.with_(topology_name="probed-host")
    ex, why = _runtime_export(custom, MSCCL_EXECUTOR_NCCL, H100)
    assert why is None and max(len(tbs) for tbs in ex.tbs) == 128
    ex, _ = _runtime_export(custom, MSCCL_EXECUTOR_NCCL)
    assert max(len(tbs) for tbs in ex.tbs) == 32


def test_smaller_gpus_are_named_before_the_names_that_contain_them():
    # data sheets: H800 PCIe 114 SMs (not the SXM part's 132), H20 78 (not H200's 132), A10 72 / A10G 80 (not
    # A100's 108), L4 58 (not L40's 142); a GPU the table does not know gets 32, below all of them
    from synth.formats.msccl.occupancy import sms_of
    assert [sms_of(g) for g in ("NVIDIA H800 PCIe", "NVIDIA H20", "NVIDIA A10", "NVIDIA A10G", "NVIDIA L4",
                                "NVIDIA L40", "NVIDIA GH200 480GB")] == [114, 78, 72, 80, 58, 142, 132]
    assert resident_threadblocks(MSCCL_EXECUTOR_NCCL, "NVIDIA Jetson Orin") == 32
    # a key is a whole word: the RTX A4000 (48 SMs) is not an A40 (84), the A1000 not an A100, the T400 (6) not a T4;
    # a laptop part of a listed name has far fewer SMs (RTX 4090 Laptop: 76) and is unknown; RTX 4090 D has 114
    assert [sms_of(g) for g in ("NVIDIA RTX A4000", "NVIDIA RTX A1000", "NVIDIA T400", "NVIDIA GeForce RTX 4090 Laptop GPU",
                                "NVIDIA GeForce RTX 4090 D", "AMD Instinct MI250", "AMD Instinct MI250X")] == [
        None, None, None, None, 114, 104, 110]


def test_the_checker_refuses_more_threadblocks_than_the_gpu_keeps_resident(executor_xml):
    text = executor_xml(H100)           # 128 per GPU
    for device in (V100, A100, None):
        bad = check_xml(text, MSCCL_EXECUTOR_NCCL, device=device)[1]
        cap = {V100: 80, A100: 108, None: 32}[device]
        assert len(bad) == 16 and all(f"128 threadblocks, more than the {cap} sure to be resident" in b for b in bad)
    assert check_xml(text, MSCCL_EXECUTOR_NCCL, device=H100)[1] == []

"""A ring channel's copy-only steps (synth/model/nccl/ring_steps.py), checked against the device code's step
calls and against the 2-, 4- and 8-GPU B200 tables of one source (mghpcc/aicr-benchmarks, NCCL 2.29.3)."""

from dataclasses import replace

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.env import NcclEnv
from synth.model.nccl.graphs import comm_graphs
from synth.model.nccl.params import DEFAULT_PARAMS
from synth.model.nccl.runtime import ring_capacity_gbs
from synth.model.nccl.ring_steps import ring_copy_steps, ring_direct_write, ring_send_share
from topo_probe import get_preset

#: the primitives one ring channel calls per chunk, copied by hand from NVIDIA/nccl v2.29.3-1 src/device/
#: all_gather.h lines 48-72 (out-of-place: directCopySend), reduce_scatter.h lines 37-53 and all_reduce.h
#: lines 42-81, with ``n`` ranks; a call whose name has "send" forwards the chunk, the others copy it locally
SOURCE_STEPS = {
    "allgather": lambda n: ["directCopySend"] + ["directRecvCopyDirectSend"] * (n - 2) + ["directRecv"],
    "reducescatter": lambda n: ["send"] + ["recvReduceSend"] * (n - 2) + ["recvReduceCopy"],
    "allreduce": lambda n: (["directSend"] + ["directRecvReduceDirectSend"] * (n - 2)
                            + ["directRecvReduceCopyDirectSend"] + ["directRecvCopyDirectSend"] * (n - 2)
                            + ["directRecv"]),
}


@pytest.mark.parametrize("coll", sorted(SOURCE_STEPS))
@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_step_counts_follow_the_device_code(coll, n):
    calls = SOURCE_STEPS[coll](n)
    sends = sum("send" in c.lower() for c in calls)
    copies = sum("send" not in c.lower() for c in calls) + (1 if coll == "allgather" else 0)   # + directCopySend's own copy
    assert ring_copy_steps(coll, n) == (sends, copies)


def test_chains_and_lone_ranks_lose_nothing():
    assert ring_send_share("broadcast", 8, 0.5) == ring_send_share("reduce", 2, 0.5) == 1.0
    assert ring_send_share("allgather", 1, 0.5) == 1.0


def _busbw(ranks, coll, nbytes, copy_gbs):
    m = NcclMachine.from_topology(get_preset("hgx-b200")).with_(ranks=ranks, cpu_vendor="amd")
    model = NcclModel(m, replace(DEFAULT_PARAMS, ring_copy_gbs=copy_gbs), version=(2, 29))
    c = model.choose(coll, nbytes)
    assert c.label.startswith("ring/Simple")
    factor = {"allgather": (ranks - 1) / ranks, "reducescatter": (ranks - 1) / ranks, "allreduce": 2 * (ranks - 1) / ranks,
              "broadcast": 1.0}[coll]
    return nbytes * factor / (1000.0 * c.time_us)


def test_two_gpu_all_gather_sends_one_step_of_three_by_hand():
    """2 x B200, 16 GiB, a CTA copying at 90 GB/s: a channel sends at 18 NVLinks x 50 GB/s x the NVLink efficiency
    over NCCL's 32 channels, so a copy step takes ``share`` = that / 90 of a send step, and the ring's bandwidth
    without copies is reached at 1 / (1 + 2 x share), by hand; broadcast (a chain) keeps it all."""
    eff = DEFAULT_PARAMS.link_efficiency("sm100", "nvlink")
    share = 18 * 50.0 * eff / 32 / 90.0
    base, slowed = _busbw(2, "allgather", 16 << 30, 1e12), _busbw(2, "allgather", 16 << 30, 90.0)
    assert slowed == pytest.approx(base / (1 + 2 * share), rel=0.01)
    assert _busbw(2, "broadcast", 16 << 30, 90.0) == pytest.approx(_busbw(2, "broadcast", 16 << 30, 1e12))


def test_ring_size_pattern_of_the_aicr_b200_tables():
    """The real out-of-place busbw at 16 GiB (aicr-benchmarks b0012 sweep and b0027 suite, NCCL 2.29.3): all_gather
    481 / 628 / 671 GB/s on 2 / 4 / 8 GPUs, reduce_scatter 665 / 694 on 4 / 8, all_reduce 638 on 2 (ring).  The
    model's ratios to 8 GPUs' all_gather, which a bandwidth without copy steps puts at 1.0, are within 6 %."""
    share = DEFAULT_PARAMS.ring_copy_gbs
    ag8 = _busbw(8, "allgather", 16 << 30, share)
    real = {(2, "allgather"): 481.4, (4, "allgather"): 628.0, (4, "reducescatter"): 665.4,
            (8, "reducescatter"): 694.5, (2, "allreduce"): 638.1}
    for (n, coll), bw in real.items():
        assert _busbw(n, coll, 16 << 30, share) / ag8 == pytest.approx(bw / 671.5, rel=0.06), (n, coll)


def test_every_architecture_has_a_clock_and_h100_sets_the_scale():
    from synth.model.nccl.machine import ARCH_FAMILY
    from synth.model.nccl.constants import SM_CLOCK_GHZ
    from synth.model.nccl.ring_steps import cta_copy_gbs

    assert set(SM_CLOCK_GHZ) == set(ARCH_FAMILY)
    p = replace(DEFAULT_PARAMS, ring_copy_gbs=120.0)
    assert cta_copy_gbs("sm90", p) == cta_copy_gbs("sm100", p) == 120.0      # 1.98 GHz both
    assert cta_copy_gbs("sm80", p) == pytest.approx(120.0 * 1410 / 1980)     # A100 SXM4's 1410 MHz
    assert cta_copy_gbs("sm70", p) == pytest.approx(120.0 * 1530 / 1980)     # V100 SXM2's 1530 MHz


#: (GPU name as nvidia-smi / nccl-tests print it, architecture, boost GHz by hand from the data sheet: FP32 TFLOPS over
#: SMs x FP32 lanes x 2, or NVIDIA's stated boost clock); names the table does not list take the architecture's
PART_CLOCKS = [("NVIDIA H100 PCIe", "sm90", 51.2e12 / (114 * 128 * 2) / 1e9),     # H100 PCIe: 51.2 TFLOPS, 114 SMs
               ("NVIDIA H100 80GB HBM3", "sm90", 1.98),                           # SXM5: the architecture's
               ("Tesla V100-PCIE-16GB", "sm70", 1.37),                            # V100 PCIe: 1380 MHz boost (14 TFLOPS)
               ("Tesla V100-SXM2-32GB", "sm70", 1.53),
               ("NVIDIA L4", "sm89", 30.3e12 / (58 * 128 * 2) / 1e9),            # L4: 30.3 TFLOPS, 58 SMs
               ("NVIDIA L40S", "sm89", 2.52),
               ("Tesla P40", "sm60", 11.76e12 / (30 * 128 * 2) / 1e9)]            # P40: 11.76 TFLOPS, 30 SMs


@pytest.mark.parametrize("name, arch, ghz", PART_CLOCKS)
def test_a_part_copies_at_its_own_clock(name, arch, ghz):
    from synth.model.nccl.ring_steps import cta_copy_gbs

    p = replace(DEFAULT_PARAMS, ring_copy_gbs=99.0)
    assert cta_copy_gbs(arch, p, name) == pytest.approx(99.0 * ghz / 1.98, rel=0.01)


def test_a_topology_carries_its_gpu_name_to_the_clock():
    from synth.model.nccl.constants import sm_clock_ghz

    m = NcclMachine.from_topology(get_preset("dgx-h100"))
    assert m.gpu_name and sm_clock_ghz(m.arch, m.gpu_name) == 1.98
    assert sm_clock_ghz("sm90", m.with_(gpu_name="NVIDIA H100 PCIe").gpu_name) == pytest.approx(1.755, rel=0.01)


def test_a100_ring_copies_at_its_clock_by_hand():
    """8 x A100, 16 GiB all_reduce ring: a channel sends at 12 NVLinks x 25 GB/s x the A100 NVLink efficiency over
    NCCL's 24 channels, and copies at 60 GB/s x 1.41 / 1.98 (the H100-clock rate times A100's boost clock over H100's),
    so the bandwidth without copies is reached at 14 / (14 + share), by hand."""
    m = NcclMachine.from_topology(get_preset("dgx-a100"))

    def busbw(copy_gbs):
        model = NcclModel(m, replace(DEFAULT_PARAMS, ring_copy_gbs=copy_gbs), version=(2, 28))
        c = model.choose("allreduce", 16 << 30)
        assert c.label == "ring/Simple/24"
        return c.busbw_gbps(8)
    share = 12 * 25.0 * DEFAULT_PARAMS.link_efficiency("sm80", "nvlink") / 24 / (60.0 * 1.41 / 1.98)
    assert busbw(60.0) == pytest.approx(busbw(1e12) * 14 / (14 + share), rel=0.002)


#: NVIDIA/nccl v2.22.3-1: the ring primitives' ``Direct`` template argument (all_gather.h line 26: 1,
#: reduce_scatter.h line 27: 0, all_reduce.h line 26: 1); with a direct write the last call (``directRecv``)
#: finds its source already in the output and copies nothing (prims_simple.h lines 139-140, genericOp's
#: "skip one copy"), so it drops out of the copy count; reduce_scatter's ``recvReduceCopy`` stays
DIRECT_RING = {"allgather": True, "reducescatter": False, "allreduce": True}


@pytest.mark.parametrize("coll", sorted(SOURCE_STEPS))
@pytest.mark.parametrize("n", [2, 8])
def test_direct_write_drops_the_final_receive_copy(coll, n):
    sends, copies = ring_copy_steps(coll, n)
    assert ring_copy_steps(coll, n, direct_write=True) == (sends, copies - DIRECT_RING[coll])


def _h100(**kw):
    return NcclMachine.from_topology(get_preset("dgx-h100"), **kw)


@pytest.mark.parametrize("machine, version, expect", [
    (lambda: _h100(gpus_per_process=8), (2, 22), True),     # one process, write mode, before 2.23
    (lambda: _h100(gpus_per_process=8), (2, 23), False),    # 2.23: direct mode needs a registered buffer
    (lambda: _h100(), (2, 22), False),                      # one process per GPU: IPC, no direct pointer
    (lambda: _h100(gpus_per_process=4), (2, 22), False),    # two processes: half the ring's hops are IPC
    (lambda: NcclMachine.from_topology(get_preset("dgx-a100"), gpus_per_process=8), (2, 22), False),  # read mode
    (lambda: NcclMachine.from_topology(get_preset("mi300x"), gpus_per_process=8), (2, 22), False),    # RCCL
])
def test_direct_write_conditions(machine, version, expect):
    assert ring_direct_write(machine(), version) is expect


def test_direct_write_speeds_an_old_single_process_ring_by_hand():
    """8 x H100 in one process, NCCL 2.22 against 2.23, 4 GiB all_reduce with a CTA copying at 20 GB/s: a channel
    sends at the ring's link bandwidth over its channels, a copy step takes ``share`` = that / 20 of a send; 2.23
    pays 14 sends + 1 copy per chunk, 2.22 only the 14 sends (both pick the Simple ring at this size)."""
    m = _h100(gpus_per_process=8)
    env = NcclEnv.from_environ({"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"})
    times = {}
    for version in ((2, 22), (2, 23)):
        c = NcclModel(m, replace(DEFAULT_PARAMS, ring_copy_gbs=20.0), env, version=version).choose("allreduce", 4 << 30)
        assert c.label.startswith("ring/Simple")
        times[version] = c.time_us
    g = comm_graphs(m, env, (2, 22))
    share = ring_capacity_gbs(m, g, DEFAULT_PARAMS) / g.n_channels / 20.0
    assert times[(2, 23)] / times[(2, 22)] == pytest.approx((14 + share) / 14, rel=0.02)

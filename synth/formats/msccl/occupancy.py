"""How many MSCCL threadblocks one GPU is sure to keep resident at once, so that none spins forever.

The MSCCL kernel's threadblocks wait on each other: a step with a ``depid`` spins on another
threadblock's flag (msccl-executor-nccl c6f6b36d ``src/device/msccl_kernel.cu`` lines 229-233,
RCCL 0cbce2a7 ``src/device/msccl_kernel_impl.h`` lines 274-278) and a receive spins on the peer
GPU's send.  A threadblock the GPU has not scheduled yet (no room on any SM/CU) never sets its
flag while the resident ones spin: a deadlock.  Neither runtime guards against it:

* msccl-executor-nccl ``src/misc/msccl/msccl_setup.cc`` ``mscclSetupKernel``: grid = ``nBlocks``
  (the file's threadblocks, line 457), block = ``NCCL_SIMPLE_MAX_NTHREADS + WARP_SIZE`` (544) for
  Simple, ``NCCL_MAX_NTHREADS`` (640) otherwise (lines 458-465, ``src/include/device.h`` lines
  64-69), dynamic shared memory ``ncclShmemDynamicSize`` (line 468: 41,280 B on sm70, 82,240 B
  from sm80 on, ``device.h`` lines 500-513) beside the static ``ncclShmem`` and ``mscclShmem``;
  an ordinary launch (``cudaLaunchKernelExC`` with at most a cluster of 8 and a memory-sync
  domain, lines 494-529, else ``cudaLaunchKernel``, line 532): no cooperative launch, no
  occupancy query, and the only cap is ``MSCCL_MAX_NUM_THREAD_BLOCKS`` = 32 x ``MAXCHANNELS`` =
  1,024 (``src/include/msccl/msccl_struct.h`` lines 17-18).  The kernels carry no
  ``__launch_bounds__`` (``msccl_kernel.cu`` lines 324-333) and are built with
  ``-maxrregcount=96`` (``makefiles/common.mk`` line 70): 640 threads x 96 registers = 61,440 of
  an SM's 65,536, so one block per SM is all that is sure to fit (three at most, by threads).
* RCCL ``msccl_setup.cc``: grid = ``nBlocks``, block = ``NCCL_MAX_NTHREADS`` (256), no dynamic
  shared memory, ``hipExtLaunchKernel`` (lines 423-425, 525), no cooperative launch either; but
  ``MSCCL_MAX_NUM_THREAD_BLOCKS`` is 64 (``msccl_struct.h`` line 18), under the CU count of
  our presets' AMD GPUs (256 to 304) and of MI200-series GPUs (104 or 110), so its cap binds first.

So an export keeps at most :data:`BLOCKS_PER_SM` x SMs (CUs) threadblocks per GPU
(:func:`resident_threadblocks`); NCCL's own kernels never meet this, their grid being at most
``MAXCHANNELS`` (32) blocks.  SM/CU counts (:data:`SMS`) are the vendors' data sheets and
white papers (CUDA's ``multiProcessorCount``); a GPU not in the table gets a count below every
GPU of the table (``RuntimeProfile.min_sms``: 32 for msccl-executor-nccl, the most blocks NCCL's
own kernels launched before 2.25; RCCL's cap of 64 for RCCL, whose shipped algorithms launch 64),
so that an export for a GPU we do not know stays small rather than hangs.
"""

from __future__ import annotations

import re
from functools import lru_cache

#: MSCCL threadblocks one SM (CU) is sure to hold (see the module docstring)
BLOCKS_PER_SM = 1

#: (GPU name as a whole word of the device name, SMs or CUs), the first match wins ("H100 PCIe" before "H100",
#: "RTX 4090 D" before "RTX 4090"); a key matches only where the name has no letter or digit just before or after
#: it, so "A40" is not read in "RTX A4000", nor "A100" in "A1000", nor "H200" in "GH200"
SMS = (
    ("V100", 80),          # NVIDIA Tesla V100 (Volta white paper)
    ("A100", 108), ("A800", 108),  # NVIDIA A100 (Ampere white paper), SXM4 and PCIe
    ("A10G", 80), ("A10", 72), ("A30", 56), ("A40", 84),  # NVIDIA A10G (AWS), A10, A30, A40 data sheets
    ("H100 PCIe", 114), ("H800 PCIe", 114),  # NVIDIA H100 PCIe (Hopper white paper); H800 PCIe: the same board
    ("H100", 132), ("H800", 132), ("H200", 132), ("GH200", 132),  # H100 SXM5 (Hopper white paper); H800/H200: GH100
    ("H20", 78),           # NVIDIA H20, as CUDA reports it
    ("B200", 148), ("GB200", 148),  # NVIDIA B200 and GB200's GPUs, as CUDA reports them
    ("L40S", 142), ("L40", 142), ("L4", 58),  # NVIDIA L40S / L40 (18,176 CUDA cores, 128 per SM), L4 (7,424)
    ("T4", 40),            # NVIDIA T4 (Turing, 2,560 CUDA cores, 64 per SM)
    ("RTX 4090 D", 114), ("RTX 4090", 128), ("RTX 5090", 170),  # GeForce RTX 4090 D / 4090 (AD102), 5090 (GB202)
    ("MI300X", 304), ("MI325X", 304), ("MI300A", 228), ("MI355X", 256), ("MI350X", 256),  # AMD Instinct data sheets
    ("MI250X", 110), ("MI250", 104), ("MI210", 104), ("MI100", 120),  # AMD Instinct: MI250(X) per GCD (one device)
)
#: words that make a name another part than the table's (a laptop GPU of the same name has far fewer SMs)
OTHER_PARTS = ("laptop", "mobile", "max-q")


def sms_of(gpu: str | None) -> int | None:
    """SMs (CUs) of the GPU called ``gpu`` (a device name, e.g. ``NVIDIA H100 80GB HBM3``), or
    None when it is not in :data:`SMS`.

    >>> sms_of("Tesla V100-SXM3-32GB"), sms_of("NVIDIA H100 PCIe"), sms_of("AMD Instinct MI300X"), sms_of("?")
    (80, 114, 304, None)
    >>> sms_of("NVIDIA H800 PCIe"), sms_of("NVIDIA H20"), sms_of("NVIDIA A10G"), sms_of("NVIDIA L4"), sms_of("Tesla T4")
    (114, 78, 80, 58, 40)
    >>> sms_of("NVIDIA RTX A4000"), sms_of("NVIDIA T400"), sms_of("NVIDIA GeForce RTX 4090 Laptop GPU")
    (None, None, None)
    """
    name = (gpu or "").lower()
    if not name or any(word in name for word in OTHER_PARTS):
        return None
    for key, n in SMS:
        if re.search(rf"(?<![a-z0-9]){re.escape(key.lower())}(?![a-z0-9])", name):
            return n
    return None


def gpu_of(topo) -> str | None:
    """The GPU name of a topology (its first GPU's ``name``), None when it has none."""
    try:
        return topo.graph.nodes[topo.gpu(0)].get("name") or None
    except (AttributeError, KeyError, IndexError, ValueError):
        return None


@lru_cache(maxsize=64)
def gpu_of_topology_name(name: str) -> str | None:
    """The GPU name of a preset topology named ``name`` (``dgx2``, or ``2xdgx-a100`` for a cluster
    of presets), None for any other name."""
    from topo_probe.machines.presets import PRESETS, get_preset
    head, sep, tail = name.partition("x")
    preset = tail if sep and head.isdigit() and tail in PRESETS else name
    return gpu_of(get_preset(preset)) if preset in PRESETS else None


def resident_threadblocks(profile, gpu: str | None = None) -> int:
    """Threadblocks per GPU the runtime of ``profile`` may launch on the GPU called ``gpu`` without
    one waiting on another that is never scheduled: its SMs (CUs), or ``profile.min_sms`` when the
    GPU is unknown, x :data:`BLOCKS_PER_SM`."""
    return (sms_of(gpu) or profile.min_sms) * BLOCKS_PER_SM


__all__ = ["BLOCKS_PER_SM", "SMS", "gpu_of", "gpu_of_topology_name", "resident_threadblocks", "sms_of"]

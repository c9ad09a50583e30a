"""The steps a ring channel runs per chunk, and the share of them that send nothing.

One CTA runs each channel of a ring and works through a chunk's steps one after another
(NVIDIA/nccl v2.29.3-1 ``src/device/all_gather.h`` lines 41-72, ``reduce_scatter.h`` lines 37-53,
``all_reduce.h`` lines 42-81: one ``Primitives`` object, one loop over the chunks, a call per step).
Every step but one forwards the chunk to the next GPU; the last, ``directRecv`` (all_gather,
all_reduce) or ``recvReduceCopy`` (reduce_scatter), only copies the chunk out of the receive FIFO
into the user's buffer, and while its CTA copies, the channel sends nothing.  An out-of-place
all_gather also writes its own chunk into its output in step 0 (``directCopySend`` instead of
``directSend``, all_gather.h lines 52-56), the same local copy on top of the send; nccl-tests'
out-of-place column, the one the model predicts, pays it.  A channel's ``sends`` steps then take
``sends + share x copies`` step times, ``share`` being a local copy's time relative to a send's: a
channel's send rate (the ring's GPU-link bandwidth over the communicator's channels) over the rate
its CTA copies inside the GPU (:func:`cta_copy_gbs`).  A ring's link bandwidth is reached at
``sends / (sends + share x copies)``.

Broadcast and reduce are chains: every GPU but the ends receives and forwards each chunk in one step, so
nothing idles the chain's slowest GPU.

A CTA copies with NCCL's ``reduceCopyPacks`` loop: each worker thread issues ``Unroll`` 16-byte volatile
loads before it uses any (NVIDIA/nccl v2.28.9-1 ``src/device/common_kernel.h`` lines 82-96 and 115), so a CTA
keeps ``workers x Unroll x 16`` bytes in flight and, by Little's law, copies that many bytes per read latency.
Its workers are the tuner's Simple thread count: a ring's CTA is launched with one sync warp on top of it
(``src/enqueue.cc`` line 1902, "Extra warp for sync") and ``Primitives`` takes that warp back out
(``nworkers = nthreads - WARP_SIZE``, ``src/device/prims_simple.h`` line 597; the same 256 / 512 workers at
v2.6.4-1 ``enqueue.cc`` line 270 with ``primitives.h`` line 202, and at v2.4.8-1 ``nThreads+1`` with
``blockDim.x - 1``).  The model knows neither the read latency nor, across GPUs, how it and ``Unroll`` (4 on
sm70, 8 on sm80-sm90, 6 on sm120: ``src/include/device.h`` line 504) combine, so it takes one fitted rate,
``ring_copy_gbs``, for a 512-thread CTA at H100 SXM5's boost clock, and scales it across GPUs by the boost clock
(:func:`.constants.at_sm_clock`: an assumption, the same bytes a clock on every GPU), and within one GPU by the
CTA's workers (:func:`simple_ring_threads`: at the same ``Unroll`` and latency the bytes in flight, and so the
rate, follow the workers: 256 of 512 copies at half the rate).  The workers ratio is a within-GPU term only:
across hosts the SHM per-channel rates do not follow bytes in flight (docs/nccl-model.md, ``shm65-tried``).
The in-sample logs pin the constant loosely: 8 x H100's rings want it high, 8 x A100's
all_reduce low, not for its copies but because the model puts its Simple rows at 32-512 MiB 6-14 % fast and
those at 1-4 GiB 4-5 % slow, so any Simple-only slowdown helps it.  By the clock, A100 copies at 71 % of H100's
rate, so that pull sets H100's value less (fitted without the one-host H100 class: 34 GB/s, 28 with one rate for
every GPU).

The loss shrinks with the ring: 2 GPUs' all_gather sends in 1 step of 3 (with the out-of-place
copy), 8 GPUs' in 7 of 9.  Units: steps; ``share`` a fraction of a step.

**Direct writes skip the final copy (NCCL < 2.23, every rank in one process).**  Two GPUs of one process
connect through a direct pointer (NVIDIA/nccl v2.22.3-1 ``src/transport/p2p.cc`` lines 362-364:
``P2P_SAME_PID`` and ``NCCL_P2P_DIRECT_DISABLE`` unset set ``NCCL_DIRECT_WRITE``, or ``NCCL_DIRECT_READ`` in
read mode; v2.8.4-1 lines 165-166 the same as ``NCCL_DIRECT_GPU``).  A ring all_gather / all_reduce runs its
primitives with ``Direct=1`` (v2.22.3-1 ``all_gather.h`` line 26, ``all_reduce.h`` line 26; reduce_scatter's
``Direct=0``, ``reduce_scatter.h`` line 27), and without a registered buffer a write-mode connection still
becomes ``DirectWrite`` ("direct read not allowed in non-register case", ``prims_simple.h`` lines 458-465):
the sender writes into the receiver's output and the receiver's last step, whose source is now its own
output (lines 143-144), copies nothing.  From 2.23 direct mode needs a registered buffer (v2.23.4-1
``prims_simple.h`` line 502, ``Direct && regFlag``), which nccl-tests does not give.  Read mode (Ampere over
NVLink, :func:`p2p_read_mode`), ranks in several processes (their connections go through IPC, not a direct
pointer) and rings that cross hosts (a GPU receiving from its NIC still copies, and the slowest GPU sets the
ring's pace) keep the copy.
"""

from __future__ import annotations

from synth.model.nccl.constants import MAX_NTHREADS, NCCL_VERSION, PCI_BW_BY_GEN, at_sm_clock
from synth.model.nccl.machine import NcclMachine

#: compute capability whose GPUs NCCL connects in P2P read mode over NVLink (src/graph/paths.cc
#: ``ncclTopoCheckP2p``, v2.22.3-1 line 342, v2.28.9-1 lines 368-372: "Enable P2P Read for Ampere/NVLink only")
P2P_READ_SM = 80
#: first NCCL version whose direct mode needs a registered buffer (v2.23.4-1 prims_simple.h line 502)
DIRECT_NEEDS_REGISTRATION_SINCE = (2, 23)
#: NCCL_SIMPLE_MAX_NTHREADS (NCCL_MAX_NTHREADS before 2.8): a Simple CTA's threads where the ring is not slow
SIMPLE_MAX_NTHREADS = MAX_NTHREADS["Simple"]
#: PCI_BW (PCI_WIDTH before 2.14: v2.13.4-1 src/graph/topo.h line 18; PCI_BW from v2.14.3-1 line 18): GB/s against
#: which NCCL's tuner compares the ring graph's bandwidth when it sets a Simple CTA's threads, Gen3 x16 at every
#: version (v2.28.9-1 src/graph/topo.h line 22)
PCI_BW_TUNING = PCI_BW_BY_GEN[3]


def nvlink_p2p(m: NcclMachine, p2p_disable: bool = False) -> bool:
    """Whether ``m``'s NVIDIA GPUs connect to each other by P2P over NVLink (NVSwitch or a mesh), P2P on."""
    return m.arch.startswith("sm") and m.intra in ("nvswitch", "nvlink") and m.p2p and not p2p_disable


def xgmi_p2p(m: NcclMachine, p2p_disable: bool = False) -> bool:
    """Whether ``m``'s AMD GPUs send to each other by P2P over an xGMI mesh, P2P on.  RCCL 2.26.6's p2p kernel
    (Ahalperin/amd-dev 0d4f8c1 rccl/src/device/sendrecv.h lines 19-135) sends a part one ``p2pChunkSize`` chunk at
    a time, the sending warps writing it into the receiver's FIFO and the receiving warps copying it out, as NCCL's
    does, but with ``Direct`` = 0 (lines 45 and 104: ``Primitives<T, RedOp, FanAsymmetric<0, 1>, 0, Proto, 1>``,
    ``FanAsymmetric<1, 0>`` to receive; NVIDIA's NCCL passes 1, v2.28.7-1 src/device/sendrecv.h lines 21 and 38),
    so it never writes straight into the output, whatever the process layout, and Simple on gfx950 as
    ``ProtoSimple<1,1,0,4>`` (lines 263 and 275), not NCCL's ``ProtoSimple<1,1>``.  The chunk is 512 KiB on one
    xGMI host (rccl/src/init.cc lines 1004-1008, ``P2P_NVL_CHUNKSIZE``; RCCL 2.26.6 logged ``P2P Chunksize set to
    524288`` on 2 MI355X), so a Simple part on one host pays :func:`p2p_simple_fill` as over NVLink.

    >>> from topo_probe import get_preset
    >>> [xgmi_p2p(NcclMachine.from_topology(get_preset(p))) for p in ("mi355x", "dgx-h100")]
    [True, False]
    """
    return m.amd and m.intra == "xgmi" and m.p2p and not p2p_disable


def p2p_read_mode(m: NcclMachine, p2p_disable: bool = False) -> bool:
    """Whether NCCL connects ``m``'s GPUs in P2P read mode: Ampere over NVLink, P2P on.

    >>> from topo_probe import get_preset
    >>> [p2p_read_mode(NcclMachine.from_topology(get_preset(p))) for p in ("dgx-a100", "dgx-h100")]
    [True, False]
    """
    return nvlink_p2p(m, p2p_disable) and m.sm == P2P_READ_SM


def ring_direct_write(m: NcclMachine, version: tuple = NCCL_VERSION, p2p_disable: bool = False) -> bool:
    """Whether a one-host ring writes straight into the next GPU's output (module docstring): NVIDIA's NCCL
    before 2.23, every rank driven by one process, P2P on in write mode.

    >>> from topo_probe import get_preset
    >>> h100 = NcclMachine.from_topology(get_preset("dgx-h100"), gpus_per_process=8)
    >>> ring_direct_write(h100, (2, 22)), ring_direct_write(h100, (2, 23))
    (True, False)
    >>> ring_direct_write(NcclMachine.from_topology(get_preset("dgx-h100")), (2, 22))
    False
    """
    return (not m.amd and m.nodes == 1 and m.ranks > 1 and m.gpus_per_process >= m.ranks and m.p2p
            and not p2p_disable and tuple(version) < DIRECT_NEEDS_REGISTRATION_SINCE
            and not p2p_read_mode(m, p2p_disable))


def ring_copy_steps(coll: str, ranks: int, direct_write: bool = False) -> tuple[int, int]:
    """``(sends, copies)``: steps of a ring channel per chunk that forward it to the next GPU, and local copies
    that send nothing (the final receive; an out-of-place all_gather's own chunk), per the device code
    cited in the module docstring.  Broadcast, reduce and one rank: ``(1, 0)``.  With ``direct_write``
    (:func:`ring_direct_write`) all_gather and all_reduce skip the final receive's copy.

    >>> [ring_copy_steps(c, 8) for c in ("allgather", "reducescatter", "allreduce", "broadcast")]
    [(7, 2), (7, 1), (14, 1), (1, 0)]
    >>> [ring_copy_steps(c, 8, True) for c in ("allgather", "reducescatter", "allreduce")]
    [(7, 1), (7, 1), (14, 0)]
    """
    if ranks < 2:
        return 1, 0
    skip = 1 if direct_write else 0
    if coll == "allgather":
        return ranks - 1, 2 - skip
    if coll == "reducescatter":
        return ranks - 1, 1
    if coll == "allreduce":
        return 2 * (ranks - 1), 1 - skip
    return 1, 0




def cta_copy_gbs(arch: str, params, gpu_name: str = "", threads: int = SIMPLE_MAX_NTHREADS) -> float:
    """GB/s one CTA of ``threads`` threads copies inside a GPU of ``arch`` (the part ``gpu_name``):
    ``params.ring_copy_gbs`` (the rate of a 512-thread CTA at H100 SXM5's clock) times the GPU's boost clock over
    H100's (:func:`.constants.sm_clock_ghz`) and the CTA's copy workers over a 512-thread CTA's.  The workers
    equal ``threads`` (the ring's CTA runs one sync warp more, v2.28.9-1 src/enqueue.cc line 1902, which
    ``nworkers = nthreads - WARP_SIZE`` removes, src/device/prims_simple.h line 597), and by Little's law a CTA
    keeping ``workers x Unroll x 16`` bytes in flight (src/device/common_kernel.h lines 82-96) copies in
    proportion to them at a fixed ``Unroll`` and read latency: ``threads`` over 512.

    >>> from synth.model.nccl.params import ModelParams
    >>> [round(cta_copy_gbs(a, ModelParams(ring_copy_gbs=99.0)), 1) for a in ("sm90", "sm100", "sm80", "sm70")]
    [99.0, 99.0, 70.5, 76.5]
    >>> round(cta_copy_gbs("sm70", ModelParams(ring_copy_gbs=99.0), threads=256), 2)
    38.25
    """
    return at_sm_clock(params.ring_copy_gbs, arch, gpu_name) * threads / SIMPLE_MAX_NTHREADS


def simple_ring_threads(m: NcclMachine, graphs, version: tuple = NCCL_VERSION) -> int:
    """Threads of a ring's Simple CTA as NCCL of ``version`` sets them by default (``graphs``: the
    communicator's :class:`.graphs.CommGraphs`).  NCCL 2.4: 256 after Kepler, 128 on Kepler (v2.4.8-1
    ``src/include/rings.h`` lines 10-13, ``getDefaultThreads``; ``src/init.cc`` lines 1023-1027).  2.5: 256 where
    the tree graph's ``speedIntra x nChannels <= 12``, else 512 (v2.5.6-1 ``src/graph/tuning.cc`` line 80); from
    2.6 the ring graph's (v2.6.4-1 line 80 ``<= PCI_WIDTH``, 12.0 in topo.h; v2.28.9-1 line 231 ``bwIntra x
    nChannels <= PCI_BW``, 12.0 in topo.h line 22).  Defaults only: ``NCCL_NTHREADS``, which replaces the
    default (v2.28.9-1 tuning.cc lines 232-233, ``getNthreads``), is not read.  AMD returns 512, the fitted rate
    unscaled, although RCCL applies the same rule capped at its ``NCCL_MAX_NTHREADS`` 256 (ROCm/rccl 0cbce2a7
    src/graph/tuning.cc lines 303-307, src/include/device.h line 68): a contradiction left in place, since
    :data:`.rccl_net.RCCL_NTHREADS` already says RCCL runs 256 threads while this function returns 512 for AMD.

    >>> from topo_probe import get_preset
    >>> from synth.model.nccl.graphs import comm_graphs
    >>> h100 = NcclMachine.from_topology(get_preset("dgx-h100"))
    >>> simple_ring_threads(h100, comm_graphs(h100)), simple_ring_threads(h100, comm_graphs(h100), (2, 4, 8))
    (512, 256)
    """
    if m.amd:
        return SIMPLE_MAX_NTHREADS
    if tuple(version) < (2, 5):
        return 128 if m.sm // 10 == 3 else 256
    g = graphs.tree if tuple(version) < (2, 6) else graphs.ring
    return 256 if g.bw_intra * g.n_channels <= PCI_BW_TUNING else SIMPLE_MAX_NTHREADS


#: NCCL's LL data bytes per thread and slice (``NCCL_LL_SLICE_LINES = NUM_LINES_PER_THREAD x NCCL_LL_MAX_NTHREADS``
#: lines of 8 data bytes; NVIDIA/nccl v2.4.8-1 src/include/devcomm.h lines 41-44: 8 x 256; v2.5.6-1 lines 41-42:
#: ``NCCL_LL_MAX_NTHREADS`` 512 from 2.5)
LL_SLICE_BYTES_PER_THREAD = 8 * 8
#: NCCL versions [from, to) that round an LL collective's last chunk up to ``nThreads x 8`` bytes (``ALIGN_SIZE
#: (lastChunkSize, nThreads*sizeof(uint64_t))``: v2.4.8-1 src/enqueue.cc line 337 .. v2.19.3-1 line 1382; v2.20.3-1
#: computes chunks without ``lastChunkSize``)
LL_CHUNK_ALIGN_VERSIONS = ((2, 4), (2, 20))


def ll_busiest_channel_factor(nbytes: int, channels: int, chunks: int, threads: int, version: tuple) -> float:
    """How many times the even share the busiest LL channel moves (>= 1).  A loop of an LL collective holds
    ``channels x chunks`` slices (``chunks`` = nchunksPerLoop: the ranks for a ring all_reduce / all_gather /
    reduce_scatter, else 1); the bytes left after the whole loops are cut into chunks rounded up to ``threads``
    x 8 bytes, so the first channels take whole rounded chunks and the last ones less or nothing (all_reduce.h
    ``nelem = min(chunkSize, size - offset)``, ``chunkOffset = gridOffset + bid x nranks x chunkSize``).

    >>> round(ll_busiest_channel_factor(1 << 20, 12, 8, 256, (2, 4)), 4)     # 10,923 B chunks -> 12,288
    1.125
    >>> ll_busiest_channel_factor(1 << 20, 8, 8, 512, (2, 8)), ll_busiest_channel_factor(1 << 20, 12, 8, 256, (2, 20))
    (1.0, 1.0)
    """
    if not LL_CHUNK_ALIGN_VERSIONS[0] <= tuple(version) < LL_CHUNK_ALIGN_VERSIONS[1] or nbytes <= 0:
        return 1.0
    slice_bytes = LL_SLICE_BYTES_PER_THREAD * (256 if tuple(version) < (2, 5) else 512)
    loop = channels * chunks * slice_bytes
    whole, rest = divmod(nbytes, loop)
    align = threads * 8
    last = -(-(-(-rest // (channels * chunks))) // align) * align
    busiest = whole * chunks * slice_bytes + sum(min(last, max(0, rest - j * last)) for j in range(chunks))
    return max(1.0, busiest * channels / nbytes)


def ll_chunk_factor(t, coll: str, algo: str, proto: str, channels: int, nbytes: int) -> float:
    """:func:`ll_busiest_channel_factor` of an LL ``coll`` on the table ``t`` (:class:`.tuning.TuneTable`: its
    version, and the threads NCCL gives LL at ``nbytes``); 1 for other protocols."""
    if proto != "LL":
        return 1.0
    # all_gather / reduce_scatter: nchunksPerLoop = nRanks on the total bytes (v2.4.8-1 enqueue.cc lines 256-257,
    # argcheck.cc line 52), the same as their device loop's one chunk on one rank's block (all_gather.h line 87)
    chunks = t.machine.ranks if algo == "ring" and coll in ("allreduce", "allgather", "reducescatter") else 1
    threads = t.channels(algo, proto, nbytes, coll)[1]
    return ll_busiest_channel_factor(nbytes, channels, chunks, threads, t.version)


def ring_send_share(coll: str, ranks: int, share: float, direct_write: bool = False) -> float:
    """Fraction of a ring channel's time spent sending: ``sends / (sends + share x copies)``
    (:func:`ring_copy_steps`); the ring's link bandwidth times it is what the channels move.

    >>> ring_send_share("allgather", 2, 0.25), ring_send_share("allreduce", 2, 0.25)
    (0.6666666666666666, 0.8888888888888888)
    >>> ring_send_share("allgather", 2, 0.25, direct_write=True), ring_send_share("allreduce", 2, 0.25, True)
    (0.8, 1.0)
    """
    sends, copies = ring_copy_steps(coll, ranks, direct_write)
    return sends / (sends + max(0.0, share) * copies)


def ring_simple_send_share(m: NcclMachine, coll: str, channel_gbs: float, params,
                           version: tuple = NCCL_VERSION, p2p_disable: bool = False,
                           threads: int = SIMPLE_MAX_NTHREADS) -> float:
    """:func:`ring_send_share` of a Simple ring on ``m`` whose channels each send at ``channel_gbs`` (GB/s): a copy
    step takes ``channel_gbs`` over the CTA's copy rate (:func:`cta_copy_gbs`) of a send step, and direct writes
    (:func:`ring_direct_write`) skip the final receive's copy.

    >>> from topo_probe import get_preset
    >>> from synth.model.nccl.params import ModelParams
    >>> h100 = NcclMachine.from_topology(get_preset("dgx-h100"), gpus_per_process=8)
    >>> p = ModelParams(ring_copy_gbs=20.0)
    >>> [round(ring_simple_send_share(h100, "allreduce", 5.0, p, v), 4) for v in ((2, 23), (2, 22))]   # 14 / 14.25
    [0.9825, 1.0]
    """
    share = channel_gbs / cta_copy_gbs(m.arch, params, m.gpu_name, threads)
    return ring_send_share(coll, m.ranks, share, ring_direct_write(m, version, p2p_disable))


def p2p_fifo_fill_factor(part_bytes: float, chunk_bytes: int, copy_share: float = 1.0, direct: bool = False) -> float:
    """Time of a Simple p2p part over NVLink relative to its streaming time (a ratio): ``1 + min(1, copy_share) / k``
    for a part of ``k`` chunks.  The sending warps write each chunk into the receiver's FIFO and the receiving warps
    copy it out into the user's buffer (NVIDIA/nccl v2.28.7-1 ``src/device/sendrecv.h`` lines 16-47: ``directSend`` /
    ``directRecv`` one ``chunkSize`` at a time, ``chunkSize`` = ``p2pChunkSize``, ``src/enqueue.cc`` lines 837-839);
    the copy of a chunk starts when its write has landed, so the two stages overlap but for one chunk's copy: ``k``
    writes and one copy, ``k a + b``.  ``copy_share`` is ``b / a``, a local copy's time over a chunk's write (the
    channel's send rate over the CTA's copy rate, as :func:`ring_send_share`'s ``share``); at most one write's time
    is charged (a copy slower than the write would set the pace, not modelled).  Only a direct pointer
    (:func:`ring_direct_write`: before 2.23 with every rank in one process; from 2.23 ``Direct && ipcReg``,
    v2.28.7-1 ``prims_simple.h`` line 744, a registered buffer nccl-tests does not give) writes straight into the
    output.

    >>> [p2p_fifo_fill_factor(b << 10, 512 << 10, 0.2) for b in (64, 512, 1024, 2048)]
    [1.2, 1.2, 1.1, 1.05]
    >>> p2p_fifo_fill_factor(1 << 20, 512 << 10), p2p_fifo_fill_factor(64 << 10, 512 << 10, 0.2, direct=True)
    (1.5, 1.0)
    """
    if direct or part_bytes <= 0:
        return 1.0
    k = max(1, -(-int(part_bytes) // max(1, int(chunk_bytes))))
    return 1.0 + min(1.0, max(0.0, copy_share)) / k


def p2p_simple_fill(m: NcclMachine, params, part_bytes: float, chunk_bytes: int, channel_gbs: float,
                    version: tuple = NCCL_VERSION, p2p_disable: bool = False) -> float:
    """:func:`p2p_fifo_fill_factor` of a Simple p2p part on ``m`` whose channel writes at ``channel_gbs`` (GB/s): the
    receiver's copy of one chunk at the CTA's copy rate (:func:`cta_copy_gbs`), none with a direct pointer.  The chunk
    is ``p2pChunkSize``, capped at NCCL_BUFFSIZE / NCCL_STEPS (v2.28.7-1 ``src/init.cc`` lines 720-721); the caller
    passes it.

    >>> from topo_probe import get_preset
    >>> from synth.model.nccl.params import ModelParams
    >>> h100 = NcclMachine.from_topology(get_preset("dgx-h100"), gpus_per_process=8)
    >>> p = ModelParams(ring_copy_gbs=80.0)                 # 2 chunks, a copy 20 / 80 of a write
    >>> [p2p_simple_fill(h100, p, 1 << 20, 512 << 10, 20.0, v) for v in ((2, 28), (2, 22))]
    [1.125, 1.0]
    """
    share = channel_gbs / cta_copy_gbs(m.arch, params, m.gpu_name)
    return p2p_fifo_fill_factor(part_bytes, chunk_bytes, share, ring_direct_write(m, version, p2p_disable))


__all__ = ["P2P_READ_SM", "cta_copy_gbs", "p2p_fifo_fill_factor", "p2p_simple_fill", "nvlink_p2p", "xgmi_p2p",
           "p2p_read_mode", "ring_copy_steps", "ring_direct_write", "ring_send_share", "ring_simple_send_share",
           "simple_ring_threads"]

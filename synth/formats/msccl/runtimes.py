"""What each MSCCL runtime loads, picks and launches, as data with its source, and a checker.

Every rule below is read from the runtime's own source (file and commit named per profile);
:func:`check_program` applies them to a parsed :class:`~.program.Program` and returns one line
per violation (an empty list: the runtime loads it, launches it, and picks it at every
power-of-two element count its ``[minBytes, maxBytes]`` range covers).

Load (``src/misc/msccl/msccl_parser.cc``, ``mscclGetAlgoFromXmlFile``, identical in both
runtimes apart from the constants): ``coll`` one of :data:`PARSER_COLLS` (anything else, e.g.
``reduce_scatter``, is ``MSCCL: unsupported collective``); ``proto`` ``Simple``/``LL``/``LL128``;
a step's ``s`` below ``MSCCL_MAX_NUM_STEPS`` ("too many steps are requested"); a threadblock
``id`` below ``MSCCL_MAX_NUM_THREAD_BLOCKS``; ``chan`` at most ``MAXCHANNELS``; ``cnt`` below
``MSCCL_MAX_COUNT``; at most ``MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL`` threadblocks sending
(and receiving) on one channel; after ``nop`` steps that carry dependencies the next step must
carry one itself ("when there is a chain of dependencies ..."); the XML reader keeps at most
``MAX_NODES`` (4096) elements for one rank (``<algo>``, every ``<gpu>``, that rank's ``<tb>``
and ``<step>``) and attribute values of at most ``MAX_STR_LEN`` (255) characters
(``src/include/msccl/msccl_parser.h``).  A step's ``depid`` is stored in an ``int8_t``
(``mscclThreadBlock.dependentBid``, ``src/include/msccl/msccl_struct.h`` line 58 in both runtimes)
and the kernel waits on ``mscclFlags + dependentBid`` (RCCL ``src/device/msccl_kernel_impl.h``
lines 274-278, msccl-executor-nccl ``src/device/msccl_kernel.cu`` lines 229-233): a ``depid``
above 127 wraps negative and waits on a flag outside the array, so at most 128 threadblocks can
be waited on (msccl-executor-nccl loads 1,024).  A step's ``srcoff`` and ``dstoff`` are stored
(``msccl_parser.cc`` lines 571-575) in ``int16_t`` fields (``mscclTransmission``, ``msccl_struct.h``
lines 44-45; the same struct in msccl-executor-nccl), and only the stored, wrapped value is
bounds-checked (``mscclCheckBufferBounds``, lines 270-288, called at 610-611: ``-1 <= offset <
chunks``, and not at all for the unchecked side of ``rcs``, ``rrs``, ``rrc``): 32,768-65,534 wrap
negative and the file is refused; 65,535 wraps to -1, which passes, and a larger offset wraps to
a small one that may pass, so the kernel (RCCL ``src/device/msccl_kernel_impl.h`` lines 292-293,
offset times chunk size) reads or writes another chunk than the file names.

Launch: RCCL from ROCm 6.1 (commit 0a53077c, "Improve MSCCL algorithms", 2024-01-03) builds
no "full ops" kernel: ``mscclSetupKernel`` (``src/misc/msccl/msccl_setup.cc``) returns
``ncclInternalError`` ("this version of MSCCL build doesn't support full Ops") for any
algorithm with ``rcs``, ``rrs``, ``rrc`` or ``rrcs``, at the first call that picks it.
``mscclSetupConnections`` needs ``nchannels`` channels on the communicator.  Both launch one
block per threadblock in an ordinary (not cooperative) launch, and a threadblock spins on others'
flags: more threadblocks on a GPU than it keeps resident can deadlock
(:mod:`~synth.formats.msccl.occupancy`: at most one per SM/CU is counted on).

Pick (``src/misc/msccl/msccl_lifecycle.cc``, ``mscclInternalSchedulerSelectAlgo``): a call of
``count`` elements runs the algorithm only when ``count * sizeMultiplier % nchunksperloop == 0``
and ``minBytes <= count * typeSize * sizeMultiplier <= maxBytes`` (``maxBytes`` 0: no limit),
``sizeMultiplier`` being ``ngpus`` for allgather, reducescatter and alltoall, 1 otherwise;
``ncclAvg`` is never picked.  A call with fewer elements than chunks is never picked either
(RCCL's own algorithms start at ``minBytes="0"`` all the same); our exports raise ``minBytes``
to the first power-of-two call they are picked at (``every_size``).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from synth.formats.msccl.layout import RUNTIME_MAX_COUNT, RUNTIME_MAX_STEPS_PER_TB, RUNTIME_MAX_TBS_PER_CHANNEL
from synth.formats.msccl.occupancy import resident_threadblocks
from synth.formats.msccl.parse import parse_program
from synth.formats.msccl.program import Program
from topo_probe.errors import InvalidArgument, ScheduleFormatError

#: ``coll`` values both parsers accept (``msccl_parser.cc``); topocoll writes the first eight
PARSER_COLLS = ("reduce", "broadcast", "allreduce", "reducescatter", "allgather", "send", "recv", "gather",
                "scatter", "alltoall", "alltoallv")
#: collectives whose ``sizeMultiplier`` is ``ngpus`` (``msccl_parser.cc``)
MULTIPLIED = ("allgather", "reducescatter", "alltoall")
#: step types that need RCCL's "full ops" kernel (``msccl_setup.cc``, ``fullOpMask``)
FULL_OPS = frozenset({"rcs", "rrs", "rrc", "rrcs"})
#: element sizes (bytes) of the data types a call may use (int8/fp8 ... int64/double)
TYPE_BYTES = (1, 2, 4, 8)
#: largest element count per rank the pick check looks at (2**33 elements)
PICK_TOP_COUNT = 2 ** 33


@dataclass(frozen=True)
class RuntimeProfile:
    """One runtime's load, launch and pick rules (see the module docstring)."""

    name: str
    title: str
    source: str
    step_types: frozenset
    max_steps_per_tb: int          # MSCCL_MAX_NUM_STEPS (a step's s must be below it)
    max_tbs_per_gpu: int           # MSCCL_MAX_NUM_THREAD_BLOCKS
    max_tbs_per_channel: int       # MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL (send and recv each)
    max_channels: int              # MAXCHANNELS (src/include/device.h)
    max_count: int                 # MSCCL_MAX_COUNT (cnt must be below it)
    colls: tuple = PARSER_COLLS
    protocols: tuple = ("Simple", "LL", "LL128")
    max_nodes: int = 4096          # msccl_parser.h MAX_NODES, per rank
    max_subs: int = 1024           # msccl_parser.h MAX_SUBS: children of one element
    max_attr_chars: int = 255      # msccl_parser.h MAX_STR_LEN
    max_depid: int = 127           # msccl_struct.h: int8_t dependentBid (a larger depid wraps negative)
    max_offset: int = 32767        # msccl_struct.h: int16_t srcOffset/dstOffset (a larger srcoff/dstoff wraps negative)
    min_sms: int = 32              # SMs (CUs) assumed for an unknown GPU: below every NVIDIA GPU of occupancy.SMS

    @property
    def full_ops(self) -> bool:
        """Whether the runtime launches ``rcs``/``rrs``/``rrc``/``rrcs``."""
        return FULL_OPS <= self.step_types


_BASIC = frozenset({"s", "r", "cpy", "re", "nop"})
_RCCL_SRC = ("ROCm/rccl 0cbce2a7 (2024-10-24, rocm-6.2.x): src/include/msccl/msccl_struct.h, "
             "src/include/msccl/msccl_parser.h, src/include/device.h (MAXCHANNELS 128), src/misc/msccl/msccl_parser.cc, "
             "msccl_setup.cc (mscclSetupKernel, mscclSetupConnections), msccl_lifecycle.cc")

#: the limits every runtime shares, stated once (:mod:`synth.formats.msccl.layout`, which the writer builds to)
_STEPS, _PER_CHANNEL, _COUNT = RUNTIME_MAX_STEPS_PER_TB, RUNTIME_MAX_TBS_PER_CHANNEL, RUNTIME_MAX_COUNT
#: RCCL from ROCm 6.1 on (full ops refused since 0a53077c; 64 threadblocks since 4c117e53, ROCm 6.0)
#: (an unknown GPU is given RCCL's own cap of 64 CUs: RCCL ships 64-threadblock algorithms for every gfx942 host, and
#: every Instinct GPU since the MI100, 120 CUs, has more; :data:`synth.formats.msccl.occupancy.SMS`)
RCCL = RuntimeProfile("rccl", "RCCL (ROCm 6.1 and later)", _RCCL_SRC, _BASIC, _STEPS, 64, _PER_CHANNEL, 128, _COUNT,
                      min_sms=64)
#: RCCL of ROCm 6.0.x: the same limits, full ops still launched (before 0a53077c)
RCCL_6_0 = RuntimeProfile("rccl-6.0", "RCCL (ROCm 6.0.x)", _RCCL_SRC + "; at rocm-6.0.0 (4c117e53)",
                          _BASIC | FULL_OPS, _STEPS, 64, _PER_CHANNEL, 128, _COUNT, min_sms=64)
#: Azure/msccl-executor-nccl (NCCL 2.19-based): every step type; 32 x MAXCHANNELS (32) threadblocks
MSCCL_EXECUTOR_NCCL = RuntimeProfile(
    "msccl-executor-nccl", "msccl-executor-nccl (Azure, NVIDIA GPUs)",
    "Azure/msccl-executor-nccl c6f6b36d (2024-12-13): src/include/msccl/msccl_struct.h "
    "(MSCCL_MAX_NUM_THREAD_BLOCKS = 32 * MAXCHANNELS), src/include/device.h (MAXCHANNELS 32), makefiles/common.mk "
    "(MSCCL_MAX_NUM_STEPS ?= 64), src/misc/msccl/msccl_parser.cc, msccl_lifecycle.cc",
    _BASIC | FULL_OPS, _STEPS, 32 * 32, _PER_CHANNEL, 32, _COUNT)

#: profiles by name (what ``synthesize --msccl-runtime`` takes: the first two)
PROFILES = {p.name: p for p in (RCCL, MSCCL_EXECUTOR_NCCL, RCCL_6_0)}
RUNTIME_CHOICES = ("rccl", "msccl-executor-nccl")


def profile_named(name: str) -> RuntimeProfile:
    """The profile called ``name``; one-line InvalidArgument otherwise."""
    if name not in PROFILES:
        raise InvalidArgument(f"MSCCL runtime must be one of {', '.join(PROFILES)}, got {name!r}")
    return PROFILES[name]


def size_multiplier(program: Program) -> int:
    """``sizeMultiplier`` of ``program`` as the parser sets it."""
    return program.ngpus if program.coll_spelling in MULTIPLIED else 1


def picked(program: Program, count: int, type_bytes: int = 4) -> bool:
    """Whether the scheduler picks ``program`` for a call of ``count`` elements per rank buffer
    (out of place or in place, whichever the file declares; not ``ncclAvg``)."""
    mult = size_multiplier(program)
    nbytes = count * type_bytes * mult
    return (count > 0 and (count * mult) % program.nchunksperloop == 0 and nbytes >= program.min_bytes
            and (program.max_bytes == 0 or nbytes <= program.max_bytes))


def picked_sizes(program: Program, type_bytes: int = 4) -> list[int]:
    """Call sizes (bytes, ``nBytes`` as the scheduler computes it) at power-of-two element counts
    where ``program`` is picked."""
    mult = size_multiplier(program)
    out, count = [], 1
    while count <= PICK_TOP_COUNT:
        if picked(program, count, type_bytes):
            out.append(count * type_bytes * mult)
        count *= 2
    return out


def smallest_picked_count(nchunksperloop: int, mult: int) -> int | None:
    """The smallest power-of-two element count whose every power-of-two multiple is picked
    (``count * mult % nchunksperloop == 0``), or None when no power of two ever is."""
    need = nchunksperloop // gcd(nchunksperloop, mult)
    return need if need & (need - 1) == 0 else None


def pick_violations(program: Program, *, every_size: bool = False, type_bytes: int = 4) -> list[str]:
    """Why the scheduler never picks ``program`` at a power-of-two element count: ``nchunksperloop``
    divides no such ``count * sizeMultiplier``, or none inside ``[minBytes, maxBytes]`` (for
    ``type_bytes``-byte elements).  With ``every_size``, also the power-of-two calls inside the
    range that are too small to be picked (fewer elements than chunks): RCCL's own algorithms
    leave those to the built-in algorithms, our exports narrow ``minBytes`` instead."""
    mult = size_multiplier(program)
    first = smallest_picked_count(program.nchunksperloop, mult)
    if first is None:
        return [f"nchunksperloop={program.nchunksperloop}: count * {mult} is never a multiple of it at a "
                f"power-of-two count, so the runtime never picks it there"]
    if not picked_sizes(program, type_bytes):
        return [f"no power-of-two call of {type_bytes}-byte elements in [minBytes={program.min_bytes}, "
                f"maxBytes={program.max_bytes}] is picked (nchunksperloop={program.nchunksperloop})"]
    lowest = first * mult * type_bytes
    if every_size and program.min_bytes < lowest and (program.max_bytes == 0 or program.max_bytes >= type_bytes * mult):
        return [f"nchunksperloop={program.nchunksperloop}: power-of-two calls below {lowest} bytes (fewer than "
                f"{first} elements per rank) are in [minBytes={program.min_bytes}, maxBytes={program.max_bytes}] "
                f"but not picked"]
    return []


def _load_violations(program: Program, profile: RuntimeProfile) -> list[str]:
    out = []
    if program.coll_spelling not in profile.colls:
        out.append(f"coll={program.coll_spelling!r} is not a collective the parser accepts "
                   f"({', '.join(profile.colls)})")
    if program.proto not in profile.protocols:
        out.append(f"proto={program.proto!r} is not one of {', '.join(profile.protocols)}")
    if program.missing:
        out.append(f"<algo> lacks {', '.join(program.missing)}, which the parser requires")
    if program.nchannels > profile.max_channels:
        out.append(f"nchannels={program.nchannels} is more than the {profile.max_channels} channels (MAXCHANNELS)")
    if len(program.name) > profile.max_attr_chars or program.ngpus > profile.max_subs:
        out.append(f"name longer than {profile.max_attr_chars} characters or more than {profile.max_subs} gpus")
    return out


def _gpu_violations(program: Program, profile: RuntimeProfile, gpu, device: str | None = None) -> list[str]:
    where, out = f"gpu {gpu.id}", []
    if len(gpu.tbs) > profile.max_tbs_per_gpu:
        out.append(f"{where}: {len(gpu.tbs)} threadblocks, more than {profile.max_tbs_per_gpu} "
                   f"(MSCCL_MAX_NUM_THREAD_BLOCKS)")
    resident = resident_threadblocks(profile, device)
    if len(gpu.tbs) > resident:
        on = device or f"an unnamed GPU ({profile.min_sms} SMs/CUs assumed)"
        out.append(f"{where}: {len(gpu.tbs)} threadblocks, more than the {resident} sure to be resident at once on "
                   f"{on} (one per SM/CU): a resident threadblock may wait forever on one never scheduled")
    nodes = 1 + program.ngpus + len(gpu.tbs) + sum(len(tb.steps) for tb in gpu.tbs)
    if nodes >= profile.max_nodes:
        out.append(f"{where}: {nodes} XML elements to keep, the parser keeps fewer than {profile.max_nodes}")
    per_chan: dict[tuple[int, str], int] = {}
    for tb in gpu.tbs:
        for what, peer in (("send", tb.send), ("recv", tb.recv)):
            if peer >= 0:
                per_chan[(tb.chan, what)] = per_chan.get((tb.chan, what), 0) + 1
        out.extend(_tb_violations(profile, f"{where} tb {tb.id}", tb))
    for (chan, what), n in sorted(per_chan.items()):
        if n > profile.max_tbs_per_channel:
            out.append(f"{where} channel {chan}: {n} threadblocks {what}, more than {profile.max_tbs_per_channel}")
    return out


def _tb_violations(profile: RuntimeProfile, where: str, tb) -> list[str]:
    out = []
    if tb.chan >= profile.max_channels:
        out.append(f"{where}: channel {tb.chan}, the runtime has {profile.max_channels}")
    if len(tb.steps) > profile.max_steps_per_tb:
        out.append(f"{where}: {len(tb.steps)} steps, more than {profile.max_steps_per_tb} (MSCCL_MAX_NUM_STEPS)")
    kinds = sorted({st.kind for st in tb.steps} - profile.step_types)
    if kinds:
        out.append(f"{where}: step types {', '.join(kinds)} ({profile.name} launches only "
                   f"{', '.join(sorted(profile.step_types))})")
    if any(st.cnt >= profile.max_count for st in tb.steps):
        out.append(f"{where}: a step with cnt >= {profile.max_count} (MSCCL_MAX_COUNT)")
    wraps = [st.index for st in tb.steps if st.depid > profile.max_depid]
    if wraps:
        out.append(f"{where} step {wraps[0]}: depid above {profile.max_depid} (the runtime keeps it in an int8_t "
                   f"and waits on another threadblock's flag)")
    far = [st.index for st in tb.steps if st.kind != "nop" and max(st.srcoff, st.dstoff) > profile.max_offset]
    if far:
        out.append(f"{where} step {far[0]}: chunk offset above {profile.max_offset} (the runtime keeps srcoff and "
                   f"dstoff in int16_t fields: it refuses the file or addresses another chunk)")
    pending = 0
    for st in tb.steps:         # msccl_parser.cc: "when there is a chain of dependencies ..."
        if st.kind == "nop":
            pending += st.depid >= 0
            continue
        if pending and st.depid < 0:
            out.append(f"{where} step {st.index}: follows nop steps with dependencies but has none itself")
            break
        pending = 0
    return out


def check_program(program: Program, profile: RuntimeProfile, *, every_size: bool = False,
                  device: str | None = None) -> list[str]:
    """One line per rule of ``profile`` that ``program`` breaks (load, launch, pick: see
    :func:`pick_violations` for ``every_size``); [] when it loads, launches and is picked.
    ``device``: the GPU's name, for the threadblocks it keeps resident (unknown: ``min_sms``)."""
    out = _load_violations(program, profile)
    for gpu in program.gpus:
        out.extend(_gpu_violations(program, profile, gpu, device))
    return out + pick_violations(program, every_size=every_size)


def check_xml(text: str, profile: RuntimeProfile, source: str = "<xml>", *, every_size: bool = False,
              device: str | None = None) -> tuple[Program | None, list[str]]:
    """Parse ``text`` (our parser refuses what the runtimes' parsers refuse) and check it against
    ``profile``; a parse failure is the one violation."""
    try:
        program = parse_program(text, source=source)
    except ScheduleFormatError as e:
        return None, [str(e)]
    return program, check_program(program, profile, every_size=every_size, device=device)


__all__ = ["FULL_OPS", "MSCCL_EXECUTOR_NCCL", "PARSER_COLLS", "PROFILES", "RCCL", "RCCL_6_0", "RUNTIME_CHOICES",
           "RuntimeProfile", "check_program", "check_xml", "pick_violations", "picked", "picked_sizes",
           "profile_named", "size_multiplier", "smallest_picked_count"]

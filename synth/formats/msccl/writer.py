"""Export a verified schedule as an MSCCL XML algorithm that RCCL (and msccl-executor-nccl) run.

::

    <algo name proto nchannels nchunksperloop ngpus coll inplace outofplace minBytes maxBytes>
      <gpu id i_chunks o_chunks s_chunks>
        <tb id send recv chan>
          <step s type srcbuf srcoff dstbuf dstoff cnt depid deps hasdep/>

Pipeline: :func:`~synth.formats.msccl.lower.lower` (transfers to ``s``/``r``/``rrc``/``cpy`` on
buffer places, scratch where a chunk has no output place, dependencies), fusion
(:mod:`~synth.formats.msccl.fuse`: ``rcs``, ``rrcs``, ``rrs`` where msccl-tools would fuse),
neighbouring messages of a connection merged into multi-chunk steps (:mod:`~synth.formats.msccl.merge`),
threadblocks and channels within the runtime limits (:mod:`~synth.formats.msccl.threadblocks`:
one send and one receive peer per threadblock, at most ``max_tbs_per_gpu`` per GPU), then the
XML in one of the dialects of :data:`~synth.formats.msccl.layout.COLL_NAMES` (all spell
``reducescatter``, the name both runtime parsers accept, and get every attribute RCCL's parser
requires).  With a ``runtime`` (:mod:`~synth.formats.msccl.runtimes`) the program is built for
it (no fusion and no ``rrc`` for RCCL, its threadblock cap, one per SM/CU of the GPU, connections spread over more
channels until no threadblock has more steps than it loads) and checked against its profile
before it is returned: InvalidArgument names the first rule it would break.

``min_bytes``/``max_bytes`` are written as the runtimes read them: RCCL runs an algorithm for a
call of ``nBytes`` (count x type size x ``ngpus`` for allgather, reducescatter and alltoall: the
nccl-tests size) when ``minBytes <= nBytes`` and (``maxBytes == 0`` or ``nBytes <= maxBytes``),
both inclusive (``msccl_lifecycle.cc``, ``mscclInternalSchedulerSelectAlgo``).  ``inplace``:
the program is always out-of-place correct; with ``"auto"`` it is also declared in-place when a
symbolic run with the runtime's in-place buffer aliasing verifies it (PyTorch's all_reduce calls
in place, so an out-of-place-only allreduce would never be picked).
"""

from __future__ import annotations

from synth.formats.msccl.fuse import fuse_rank, fused_counts
from synth.formats.msccl.layout import COLL_NAMES, DEFAULT_MAX_TBS_PER_GPU, PROTOCOLS, chunks_in
from synth.formats.msccl.lower import Op, lower, max_parallel
from synth.formats.msccl.merge import merge_messages
from synth.formats.msccl.occupancy import gpu_of_topology_name, resident_threadblocks
from synth.formats.msccl.runtimes import MULTIPLIED, check_program, profile_named, smallest_picked_count
from synth.formats.msccl.threadblocks import Threadblock, assign, number_steps
from synth.ir.schedule import Schedule
from topo_probe.errors import InvalidArgument, ScheduleFormatError, UnsupportedCollective

#: sizes (bytes, inclusive upper end of a range) up to which :func:`protocol_for` picks LL
LL_MAX_BYTES = 256 * 1024
#: most channels concurrent transfers on one GPU pair are spread over
MAX_CHANNELS = 4


def protocol_for(max_bytes: int | None) -> str:
    """MSCCL protocol for a size range ending at ``max_bytes`` (None = no end): ``LL`` (8-byte
    flag+data lines, lowest latency) up to :data:`LL_MAX_BYTES`, else ``Simple``.

    >>> protocol_for(65536), protocol_for(None)
    ('LL', 'Simple')
    """
    return "LL" if max_bytes is not None and 0 < max_bytes <= LL_MAX_BYTES else "Simple"


def most_steps_per_threadblock(xml: str) -> int:
    """Most ``<step>`` elements in one ``<tb>`` of MSCCL XML text written by :func:`to_msccl_xml`
    (RCCL loads at most :data:`~synth.formats.msccl.layout.RUNTIME_MAX_STEPS_PER_TB`).

    >>> most_steps_per_threadblock('<gpu id="0"><tb id="0"><step s="0"/><step s="1"/></tb><tb id="1"><step s="0"/></tb></gpu>')
    2
    """
    return max((seg.split("</tb>")[0].count("<step ") for seg in xml.split("<tb ")[1:]), default=0)


def local_steps_at_least(schedule: Schedule) -> int:
    """A lower bound on :meth:`Export.most_steps`, from the schedule alone in one pass over its
    transfers: ``m`` partials of one chunk reaching a rank in one step are received side by side
    and summed by ``m - 1`` ``re`` steps in the rank's one local threadblock
    (:func:`~synth.formats.msccl.lower.lower`), which fusion and merging never remove."""
    return max(_local_sums(schedule).values(), default=0)


def _local_sums(schedule: Schedule) -> dict[int, int]:
    """Rank -> partials it receives beside the first of the same chunk in the same step."""
    per_rank: dict[int, int] = {}
    for step in schedule.steps:
        fan_in: dict[tuple[int, int], int] = {}
        for t in step.transfers:
            if t.op == "reduce":
                key = (t.dst, t.chunk)
                if key in fan_in:
                    per_rank[t.dst] = per_rank.get(t.dst, 0) + 1
                fan_in[key] = 1
    return per_rank


def _attrs(pairs) -> str:
    return " ".join(f'{k}="{v}"' for k, v in pairs)


def _step_xml(op: Op) -> str:
    dep = op.deps[0] if op.deps else None
    src = op.src or ("i", -1)
    dst = op.dst or ("o", -1)
    return "      <step " + _attrs((
        ("s", op.index), ("type", op.kind), ("srcbuf", src[0]), ("srcoff", src[1]), ("dstbuf", dst[0]),
        ("dstoff", dst[1]), ("cnt", 0 if op.kind == "nop" else op.cnt), ("depid", dep.tb if dep else -1),
        ("deps", dep.index if dep else -1), ("hasdep", int(op.hasdep)))) + "/>"


def _emit(schedule: Schedule, head: dict, scratch: list[int], tbs: list[list[Threadblock]]) -> str:
    spec = schedule.spec
    i_chunks = chunks_in(spec, spec.input_blocks())
    o_chunks = chunks_in(spec, spec.output_blocks())
    lines = ["<algo " + _attrs(head.items()) + ">"]
    for r, rank_tbs in enumerate(tbs):
        lines.append("  <gpu " + _attrs((("id", r), ("i_chunks", i_chunks), ("o_chunks", o_chunks),
                                         ("s_chunks", scratch[r]))) + ">")
        for tid, t in enumerate(rank_tbs):
            lines.append("    <tb " + _attrs((("id", tid), ("send", t.send), ("recv", t.recv), ("chan", t.chan))) + ">")
            lines.extend(_step_xml(op) for op in t.ops)
            lines.append("    </tb>")
        lines.append("  </gpu>")
    lines.append("</algo>")
    return "\n".join(lines) + "\n"


#: most rebuilds :func:`build_program` tries to bring every threadblock under ``max_steps``
SPLIT_TRIES = 10


def build_program(schedule: Schedule, *, fuse: bool = True, max_tbs_per_gpu: int = DEFAULT_MAX_TBS_PER_GPU,
                  max_channels: int = MAX_CHANNELS, full_ops: bool = True, max_steps: int | None = None,
                  channel_cap: int | None = None) -> tuple[list[int], list[list[Threadblock]], dict]:
    """Scratch chunks per GPU, threadblocks per GPU and instruction counts of the export.

    Concurrent transfers on one GPU pair use up to ``max_channels`` channels, fewer when the
    threadblocks would not fit ``max_tbs_per_gpu``.  ``full_ops=False``: no ``rrc`` (see
    :func:`~synth.formats.msccl.lower.lower`).  ``max_steps``: each connection's messages and the
    local steps are cut into shorter runs, one channel (or local threadblock) each, until no
    threadblock has more steps (at most ``channel_cap`` channels); InvalidArgument when that fails.
    """
    if max_tbs_per_gpu < 1 or max_channels < 1:
        raise InvalidArgument(f"max_tbs_per_gpu and max_channels must be >= 1, got {max_tbs_per_gpu}, "
                              f"{max_channels}")
    k = min(max_channels, max_parallel(schedule))
    quota: list = [None, None]                     # messages per channel of a connection, local steps per tb
    for _ in range(SPLIT_TRIES):
        try:
            out = _build(schedule, fuse, max_tbs_per_gpu, k, full_ops, *quota)
        except InvalidArgument:
            if k == 1:
                raise
            k = max(1, k // 2)
            continue
        chans = 1 + max((t.chan for rank_tbs in out[1] for t in rank_tbs), default=0)
        if channel_cap is not None and chans > channel_cap:
            raise InvalidArgument(f"needs {chans} channels to keep threadblocks at {max_steps} steps, more than "
                                  f"the runtime's {channel_cap}")
        longest = [max((len(t.ops) for rank_tbs in out[1] for t in rank_tbs if (t.send < 0 and t.recv < 0) == local),
                       default=0) for local in (False, True)]
        if max_steps is None or max(longest) <= max_steps:
            return out
        over = [i for i in (0, 1) if longest[i] > max_steps and quota[i] != 1]
        if not over:
            break                                   # one message (local step) per threadblock run and still too long
        for i in over:
            quota[i] = max(1, int((quota[i] or longest[i]) * (max_steps - 2) / longest[i]))
        _fails_before_building(schedule, k, quota[0], max_steps, max_tbs_per_gpu, channel_cap)
    raise InvalidArgument(f"a threadblock still runs more than the {max_steps} steps the runtime loads "
                          f"(MSCCL_MAX_NUM_STEPS) with its connections spread over more channels")


def _fails_before_building(schedule: Schedule, k: int, quota: int | None, max_steps: int, max_tbs: int,
                           channel_cap: int | None) -> None:
    """InvalidArgument when runs of ``quota`` messages per channel provably need more channels or
    threadblocks than the runtime has (each run of a connection is a channel of its own, and a
    threadblock sends to one peer on one channel), before building the program again."""
    if not quota:
        return
    count: dict[tuple[int, int], int] = {}
    for step in schedule.steps:
        for t in step.transfers:
            count[(t.src, t.dst)] = count.get((t.src, t.dst), 0) + 1
    runs: dict[int, int] = {}
    for (src, _), m in count.items():
        runs[src] = runs.get(src, 0) + -(-m // quota)
    need = k * -(-max(count.values(), default=0) // (k * quota))
    if channel_cap is not None and need > channel_cap:
        raise InvalidArgument(f"needs about {need} channels to keep threadblocks at {max_steps} steps, more than "
                              f"the runtime's {channel_cap}")
    if max(runs.values(), default=0) > max_tbs:
        raise InvalidArgument(f"needs at least {max(runs.values())} threadblocks on one GPU to keep them at "
                              f"{max_steps} steps, more than the cap of {max_tbs}")


def _build(schedule: Schedule, fuse: bool, max_tbs_per_gpu: int, channels: int, full_ops: bool = True,
           quota: int | None = None, local_quota: int | None = None):
    states, ops = lower(schedule, channels, full_ops=full_ops, msgs_per_channel=quota)
    tbs = []
    for r, st in enumerate(states):
        pairs: set = set()
        if fuse:
            ops[r], pairs = fuse_rank(st, ops[r])
        tbs.append(assign(r, ops[r], pairs, max_tbs_per_gpu, local_quota))
    if fuse:
        merge_messages(tbs)
    for rank_tbs in tbs:
        number_steps(rank_tbs)
    counts = fused_counts([[op for t in rank_tbs for op in t.ops] for rank_tbs in tbs])
    return [len(st.scratch) for st in states], tbs, counts


def _check_head(style: str, proto: str, min_bytes: int, max_bytes: int | None) -> None:
    """One line for a bad ``<algo>`` attribute: style, protocol or size range."""
    if style not in COLL_NAMES:
        raise UnsupportedCollective(f"style must be one of {', '.join(COLL_NAMES)}, got {style!r}")
    if proto not in PROTOCOLS:
        raise InvalidArgument(f"proto must be one of {', '.join(PROTOCOLS)}, got {proto!r}")
    if min_bytes < 0 or (max_bytes or 0) < 0 or (max_bytes and max_bytes < min_bytes):
        raise InvalidArgument(f"bad size range min_bytes={min_bytes} max_bytes={max_bytes}")


class Export:
    """One schedule's export, built once (:func:`build_program`) and written for any number of size
    ranges: :meth:`xml` per range, :meth:`most_steps` and the in-place check once per schedule
    (the program does not depend on the range, protocol or name)."""

    def __init__(self, schedule: Schedule, *, fuse: bool = True, max_tbs_per_gpu: int = DEFAULT_MAX_TBS_PER_GPU,
                 max_channels: int = MAX_CHANNELS, runtime=None, gpu: str | None = None) -> None:
        if schedule.inplace:
            raise UnsupportedCollective("export the out-of-place form of the schedule (inplace=False); the "
                                        "export declares in-place use itself")
        self.schedule, self.gpu = schedule, gpu
        self.profile = _profile(runtime)
        limits = {}
        if self.profile is not None:
            fuse = fuse and self.profile.full_ops
            limits = {"full_ops": self.profile.full_ops, "max_steps": self.profile.max_steps_per_tb,
                      "channel_cap": self.profile.max_channels}
            # threadblock ids above max_depid cannot be waited on (int8_t dependentBid); no more than the GPU keeps
            # resident, or one may spin on one never scheduled (occupancy; GPU named, else the schedule's preset's)
            self.gpu = gpu or gpu_of_topology_name(schedule.topology_name)
            max_tbs_per_gpu = min(max_tbs_per_gpu, self.profile.max_tbs_per_gpu, self.profile.max_depid + 1,
                                  resident_threadblocks(self.profile, self.gpu))
        self.scratch, self.tbs, self.counts = build_program(schedule, fuse=fuse, max_tbs_per_gpu=max_tbs_per_gpu,
                                                            max_channels=max_channels, **limits)
        self._inplace: bool | None = None

    def first_picked_bytes(self, type_bytes: int = 4) -> int:
        """The smallest call (bytes, ``type_bytes``-byte elements) from which the runtime picks the
        file at every power-of-two element count; InvalidArgument when it never does."""
        spec = self.schedule.spec
        loop = max(chunks_in(spec, spec.input_blocks()), chunks_in(spec, spec.output_blocks()))
        mult = spec.ranks if spec.name in MULTIPLIED else 1
        first = smallest_picked_count(loop, mult)
        if first is None:
            raise InvalidArgument(f"nchunksperloop={loop}: the runtime never picks it at a power-of-two element "
                                  f"count (count * {mult} is never a multiple of it)")
        return first * mult * type_bytes

    def most_steps(self) -> int:
        """Most steps (``nop`` included) in one threadblock, as :func:`most_steps_per_threadblock`
        counts them in the XML."""
        return max((len(t.ops) for rank_tbs in self.tbs for t in rank_tbs), default=0)

    def head(self, *, style: str = "rccl", proto: str = "Simple", min_bytes: int = 0,
             max_bytes: int | None = None, name: str | None = None) -> dict:
        """The ``<algo>`` attributes (checked), declared in-place until :meth:`xml` checks it."""
        _check_head(style, proto, min_bytes, max_bytes)
        spec = self.schedule.spec
        return {"name": (name or self.schedule.name or f"topocoll-{spec.name}").replace('"', "'")[:200],
                "proto": proto, "nchannels": 1 + max((t.chan for rank_tbs in self.tbs for t in rank_tbs), default=0),
                "nchunksperloop": max(chunks_in(spec, spec.input_blocks()), chunks_in(spec, spec.output_blocks())),
                "ngpus": spec.ranks, "coll": COLL_NAMES[style][spec.name], "inplace": 1, "outofplace": 1,
                "minBytes": min_bytes, "maxBytes": max_bytes or 0}

    def runs_in_place(self, head: dict, text_chars: int) -> bool:
        """Whether the program is correct with the runtime's in-place aliasing: replayed once
        per schedule on the program itself (:mod:`~synth.formats.msccl.as_program`), never on
        text the parser would refuse for its size."""
        if self._inplace is None:
            from synth.formats.msccl.as_program import parser_refuses, program_of
            from synth.formats.msccl.replay import replay
            self._inplace = False
            if not parser_refuses(text_chars, self.tbs):
                try:
                    replay(program_of(self.schedule, head, self.scratch, self.tbs), self.schedule.spec,
                           inplace=True, source="export")
                    self._inplace = True
                except ScheduleFormatError:
                    pass
        return self._inplace

    def xml(self, *, inplace: bool | str = "auto", **range_and_style) -> str:
        """MSCCL XML for one size range (the keywords of :meth:`head`; ``inplace`` as in
        :func:`to_msccl_xml`)."""
        head = self.head(**range_and_style)
        if inplace not in (True, False, "auto"):
            raise InvalidArgument(f"inplace must be True, False or 'auto', got {inplace!r}")
        if self.profile is not None:
            head["minBytes"] = max(head["minBytes"], self.first_picked_bytes())
            if head["maxBytes"] and head["maxBytes"] < head["minBytes"]:
                raise InvalidArgument(f"{head['name']}: picked only from {head['minBytes']} bytes on, above the "
                                      f"range's end {head['maxBytes']}")
        text = _emit(self.schedule, head, self.scratch, self.tbs)
        if inplace is False or not self.runs_in_place(head, len(text)):
            if inplace is True:
                raise InvalidArgument(f"{head['name']}: the program is not correct when called in place")
            text = text.replace('inplace="1"', 'inplace="0"', 1)
            head["inplace"] = 0
        if self.profile is not None:
            self._check(head)
        return text

    def _check(self, head: dict) -> None:
        """InvalidArgument naming the first rule of the target runtime the program breaks."""
        from synth.formats.msccl.as_program import program_of
        bad = check_program(program_of(self.schedule, head, self.scratch, self.tbs), self.profile, every_size=True,
                            device=self.gpu)
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            raise InvalidArgument(f"{head['name']}: {self.profile.name} would refuse it: {bad[0]}{more}")


def to_msccl_xml(schedule: Schedule, *, style: str = "rccl", proto: str = "Simple", min_bytes: int = 0,
                 max_bytes: int | None = None, name: str | None = None, fuse: bool = True,
                 max_tbs_per_gpu: int = DEFAULT_MAX_TBS_PER_GPU, max_channels: int = MAX_CHANNELS,
                 inplace: bool | str = "auto", runtime=None, gpu: str | None = None) -> str:
    """MSCCL XML of a verified ``schedule`` (see the module docstring; :class:`Export` writes one
    schedule for several size ranges).

    Parameters
    ----------
    style : {"rccl", "azure", "msccl"}
        Dialect: RCCL, Azure's msccl-executor-nccl, or the original microsoft/msccl.
    proto : {"Simple", "LL", "LL128"}
        Protocol the runtime uses for it (see :func:`protocol_for`).
    min_bytes, max_bytes : int
        Sizes it is for, inclusive, as the runtime reads them; ``max_bytes`` None or 0 = no limit.
    fuse : bool
        Fuse receive+send pairs into ``rcs``/``rrcs``/``rrs`` (:mod:`~synth.formats.msccl.fuse`) and
        merge neighbouring messages into multi-chunk steps (:mod:`~synth.formats.msccl.merge`).
    max_tbs_per_gpu : int
        Threadblock cap per GPU (InvalidArgument when the schedule needs more).
    max_channels : int
        Channels concurrent transfers on one GPU pair may spread over (see :func:`build_program`).
    inplace : "auto", True or False
        Declare the algorithm in-place capable: when verified (``"auto"``), always (True: an
        error if it is not) or never.
    runtime : None, "rccl", "msccl-executor-nccl" or a RuntimeProfile
        Build the program for that runtime and check it against its profile
        (:mod:`~synth.formats.msccl.runtimes`); ``min_bytes`` is raised to the first size it is
        picked at.  None: the generic lowering, unchecked.
    gpu : str, optional
        The GPU's name (``NVIDIA H100 80GB HBM3``): with a ``runtime``, at most one threadblock per
        SM/CU (:mod:`~synth.formats.msccl.occupancy`; default: the preset the schedule was made for).
    """
    _check_head(style, proto, min_bytes, max_bytes)
    ex = Export(schedule, fuse=fuse, max_tbs_per_gpu=max_tbs_per_gpu, max_channels=max_channels, runtime=runtime,
                gpu=gpu)
    return ex.xml(inplace=inplace, style=style, proto=proto, min_bytes=min_bytes, max_bytes=max_bytes, name=name)


def _profile(runtime):
    """The RuntimeProfile ``runtime`` names (None stays None)."""
    if runtime is None or not isinstance(runtime, str):
        return runtime
    return profile_named(runtime)


def runs_in_place_by_text(text: str, spec) -> bool:
    """The in-place check as it was done before :class:`Export`: parse the XML text back and
    replay it (kept as the reference the tests compare :meth:`Export.runs_in_place` with)."""
    from synth.formats.msccl.parse import parse_program
    from synth.formats.msccl.replay import replay
    try:
        replay(parse_program(text, source="export"), spec, inplace=True, source="export")
    except ScheduleFormatError:
        return False
    return True


__all__ = ["Export", "build_program", "local_steps_at_least", "protocol_for", "to_msccl_xml"]

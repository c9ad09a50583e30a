"""The NCCL environment variables the tuner honours, read as NCCL reads them.

``NCCL_ALGO`` / ``NCCL_PROTO``: comma lists, ``^`` excludes (``^LL128`` = all but LL128), and
the per-collective form of NCCL 2.24+ (``allreduce:tree,ring;allgather:ring``); names are
case-insensitive.  ``NCCL_NVLS_ENABLE``, ``NCCL_COLLNET_ENABLE``, ``NCCL_P2P_DISABLE`` (0/1),
``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS`` (integers), ``NCCL_MIN_CTAS`` / ``NCCL_MAX_CTAS`` (the
communicator's CTA bounds: they clamp the ring/tree channels like the former and, unlike them, the
NVLS CTAs too: init.cc), ``NCCL_NCHANNELS_PER_NET_PEER`` (channels per peer on another host),
``NCCL_PAT_ENABLE`` (0/1/2 = auto), ``NCCL_NVLSTREE_MAX_CHUNKSIZE`` (bytes, default 128 KiB:
enqueue.cc).  Syntax as NCCL's ``parseList`` (src/graph/tuning.cc).

>>> env = NcclEnv.from_environ({"NCCL_ALGO": "^tree", "NCCL_PROTO": "Simple,LL128", "NCCL_MAX_NCHANNELS": "4"})
>>> env.algo_allowed("allreduce", "ring"), env.algo_allowed("allreduce", "tree"), env.proto_allowed("allreduce", "LL")
(True, False, False)
>>> env.max_channels
4
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

from synth.ir.collectives import canonical
from synth.model.nccl.constants import ALGO_NAMES, NCCL_BUFFSIZE_BYTES, NCCL_STEPS, PROTO_NAMES
from topo_probe.errors import InvalidArgument

VARIABLES = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_P2P_DISABLE",
             "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_PAT_ENABLE", "NCCL_NVLSTREE_MAX_CHUNKSIZE",
             "RCCL_MSCCL_ENABLE", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_NCHANNELS_PER_NET_PEER",
             "RCCL_MSCCL_ENABLE_SINGLE_PROCESS", "NCCL_TREE_THRESHOLD", "NCCL_BUFFSIZE")
#: NCCL_NVLSTREE_MAX_CHUNKSIZE default (bytes)
NVLSTREE_CHUNK = 131072


def _parse_list(text: str, names: dict[str, str], var: str) -> dict[str | None, tuple[bool, frozenset]]:
    """``{collective or None: (exclude, names)}`` of an NCCL_ALGO / NCCL_PROTO value."""
    out: dict[str | None, tuple[bool, frozenset]] = {}
    for k, part in enumerate(p for p in text.split(";") if p.strip()):
        coll, sep, items = part.partition(":")
        if not sep and k > 0:
            raise InvalidArgument(f"{var}={text!r}: every entry after the first needs a 'collective:' prefix")
        if not sep:
            coll, items = None, part
        elif k == 0 and not coll.strip():
            coll = None
        else:
            try:
                coll = canonical(coll.strip())
            except Exception:
                raise InvalidArgument(f"{var}={text!r}: unknown collective {coll.strip()!r}") from None
        items = items.strip()
        exclude = items.startswith("^")
        chosen = set()
        for tok in items.lstrip("^").split(","):
            key = tok.strip().lower()
            if not key:
                continue
            if key not in names:
                raise InvalidArgument(f"{var}={text!r}: unknown name {tok.strip()!r} (known: {', '.join(names)})")
            chosen.add(names[key])
        out[coll] = (exclude, frozenset(chosen))
    return out


def _flag(env, var: str) -> int | None:
    val = env.get(var)
    if val is None or str(val).strip() == "":
        return None
    try:
        return int(str(val).strip())
    except ValueError:
        raise InvalidArgument(f"{var}={val!r} is not an integer") from None


@dataclass(frozen=True)
class NcclEnv:
    """The tuner-relevant NCCL variables (None: not set)."""

    algo: dict = field(default_factory=dict)
    proto: dict = field(default_factory=dict)
    nvls_enable: int | None = None
    collnet_enable: int | None = None
    p2p_disable: int | None = None
    min_channels: int | None = None
    max_channels: int | None = None
    pat_enable: int | None = None
    nvlstree_chunk: int | None = None
    msccl_enable: int | None = None
    min_ctas: int | None = None
    max_ctas: int | None = None
    net_channels_per_peer: int | None = None
    msccl_single_process: int | None = None
    #: NCCL 2.4's all_reduce tree/ring switch (bytes; init.cc ``NCCL_PARAM(TreeThreshold, ...)``): trees up to it
    tree_threshold: int | None = None
    #: NCCL_BUFFSIZE (bytes): the Simple protocol's buffer, NCCL_STEPS slots of it (src/init.cc ``DEFAULT_BUFFSIZE``)
    buffsize: int | None = None

    @classmethod
    def from_environ(cls, environ=None) -> "NcclEnv":
        """Read the variables from ``environ`` (default ``os.environ``)."""
        env = os.environ if environ is None else environ
        algo = _parse_list(env["NCCL_ALGO"], ALGO_NAMES, "NCCL_ALGO") if env.get("NCCL_ALGO") else {}
        proto = _parse_list(env["NCCL_PROTO"], PROTO_NAMES, "NCCL_PROTO") if env.get("NCCL_PROTO") else {}
        lo, hi = _flag(env, "NCCL_MIN_NCHANNELS"), _flag(env, "NCCL_MAX_NCHANNELS")
        min_ctas, max_ctas = _flag(env, "NCCL_MIN_CTAS"), _flag(env, "NCCL_MAX_CTAS")
        per_peer = _flag(env, "NCCL_NCHANNELS_PER_NET_PEER")
        for var, v in (("NCCL_MIN_NCHANNELS", lo), ("NCCL_MAX_NCHANNELS", hi), ("NCCL_MIN_CTAS", min_ctas),
                       ("NCCL_MAX_CTAS", max_ctas), ("NCCL_NCHANNELS_PER_NET_PEER", per_peer)):
            if v is not None and not 1 <= v <= 128:              # RCCL's MAXCHANNELS (NCCL's is 64 from 2.25)
                raise InvalidArgument(f"{var}={v} must be 1 to 128")
        chunk = _flag(env, "NCCL_NVLSTREE_MAX_CHUNKSIZE")
        if chunk is not None and chunk < 1:
            raise InvalidArgument(f"NCCL_NVLSTREE_MAX_CHUNKSIZE={chunk} must be a positive number of bytes")
        tree_thr = _flag(env, "NCCL_TREE_THRESHOLD")
        if tree_thr is not None and tree_thr < 0:
            raise InvalidArgument(f"NCCL_TREE_THRESHOLD={tree_thr} must be a number of bytes >= 0")
        buffsize = _flag(env, "NCCL_BUFFSIZE")
        if buffsize is not None and buffsize < 8:
            raise InvalidArgument(f"NCCL_BUFFSIZE={buffsize} must be a number of bytes >= 8 (NCCL_STEPS slots)")
        return cls(algo, proto, _flag(env, "NCCL_NVLS_ENABLE"), _flag(env, "NCCL_COLLNET_ENABLE"),
                   _flag(env, "NCCL_P2P_DISABLE"), lo, hi, _flag(env, "NCCL_PAT_ENABLE"), chunk,
                   _flag(env, "RCCL_MSCCL_ENABLE"), min_ctas, max_ctas, per_peer,
                   _flag(env, "RCCL_MSCCL_ENABLE_SINGLE_PROCESS"), tree_thr, buffsize)

    def under(self, platform: dict) -> "NcclEnv":
        """This environment over a platform's own settings (``NcclMachine.platform_env``): the
        user's variables win, the platform fills what is unset.

        >>> NcclEnv().under({"NCCL_PROTO": "simple"}).proto_allowed("allreduce", "LL")
        False
        >>> NcclEnv.from_environ({"NCCL_PROTO": "LL"}).under({"NCCL_PROTO": "simple"}).proto_allowed("allreduce", "LL")
        True
        """
        base = NcclEnv.from_environ(platform)
        mine = {f.name: getattr(self, f.name) for f in fields(self)}
        return NcclEnv(**{k: (v if v not in (None, {}) else getattr(base, k)) for k, v in mine.items()})

    @property
    def p2p_off(self) -> bool:
        """NCCL_P2P_DISABLE is set to a non-zero value."""
        return bool(self.p2p_disable)

    @property
    def simple_step_bytes(self) -> int:
        """Bytes of one Simple step: NCCL_BUFFSIZE (default 4 MiB) over NCCL_STEPS.

        >>> NcclEnv().simple_step_bytes, NcclEnv.from_environ({"NCCL_BUFFSIZE": "8388608"}).simple_step_bytes
        (524288, 1048576)
        """
        return (self.buffsize or NCCL_BUFFSIZE_BYTES) // NCCL_STEPS

    @property
    def chunk_nvls_tree(self) -> int:
        """NVLSTree chunk size (bytes)."""
        return self.nvlstree_chunk or NVLSTREE_CHUNK

    @staticmethod
    def _allowed(table: dict, coll: str, name: str) -> bool:
        rule = table.get(coll, table.get(None))
        if rule is None:
            return True
        exclude, names = rule
        return (name not in names) if exclude else (name in names)

    def algo_allowed(self, coll: str, algo: str) -> bool:
        return self._allowed(self.algo, canonical(coll), algo)

    def proto_set(self, coll: str) -> bool:
        """Whether NCCL_PROTO says anything for ``coll`` (then it overrides NCCL's LL128 defaults)."""
        return self.proto.get(canonical(coll), self.proto.get(None)) is not None

    def proto_allowed(self, coll: str, proto: str) -> bool:
        return self._allowed(self.proto, canonical(coll), proto)

    def describe(self) -> str:
        """The variables that are set, as ``NAME=value`` words (empty: NCCL defaults)."""
        parts = []
        for var, tab in (("NCCL_ALGO", self.algo), ("NCCL_PROTO", self.proto)):
            if tab:
                parts.append(var + "=" + ";".join(
                    (f"{c}:" if c else "") + ("^" if ex else "") + ",".join(sorted(ns)) for c, (ex, ns) in tab.items()))
        for var, v in (("NCCL_NVLS_ENABLE", self.nvls_enable), ("NCCL_COLLNET_ENABLE", self.collnet_enable),
                       ("NCCL_P2P_DISABLE", self.p2p_disable), ("NCCL_MIN_NCHANNELS", self.min_channels),
                       ("NCCL_MAX_NCHANNELS", self.max_channels), ("NCCL_PAT_ENABLE", self.pat_enable),
                       ("NCCL_NVLSTREE_MAX_CHUNKSIZE", self.nvlstree_chunk),
                       ("RCCL_MSCCL_ENABLE", self.msccl_enable), ("NCCL_MIN_CTAS", self.min_ctas),
                       ("NCCL_MAX_CTAS", self.max_ctas), ("NCCL_NCHANNELS_PER_NET_PEER", self.net_channels_per_peer),
                       ("RCCL_MSCCL_ENABLE_SINGLE_PROCESS", self.msccl_single_process),
                       ("NCCL_TREE_THRESHOLD", self.tree_threshold), ("NCCL_BUFFSIZE", self.buffsize)):
            if v is not None:
                parts.append(f"{var}={v}")
        return " ".join(parts)


__all__ = ["NcclEnv", "VARIABLES"]

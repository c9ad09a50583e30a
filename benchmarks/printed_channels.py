"""The channel counts NCCL / RCCL printed in a fixture's NCCL INFO lines, against the counts the model's graphs
give for the same :class:`nccl_log_cases.Case` (init-time counts, not the CTAs one size launches).

What a log prints, by NCCL version (NVIDIA/nccl; line numbers of the tag named):

* the summary, ``comm->nChannels``, [``comm->collNetChannels``,] [``comm->nvlsChannels``,] ``comm->p2pnChannels``,
  ``comm->p2pnChannelsPerPeer``: ``N coll channels, P p2p channels, Q p2p channels per peer`` in 2.7-2.16
  (src/graph/paths.cc, v2.7.3-1 line 517); ``N coll channels, V nvls channels, P p2p ...`` in 2.17-2.19
  (src/init.cc, v2.17.1-1 line 940); ``N coll channels, C collnet channels, V nvls channels, P p2p ...`` from 2.20
  (src/init.cc, v2.20.3-1 line 1254).  None before 2.7.  RCCL prints the same line.
* ``Channel 00/24 :    0   1   2 ...`` (src/graph/rings.cc ``ncclBuildRings``, which ``ncclTopoPostset`` calls, 2.5
  on): one line per ring channel, the total after the slash.  ``Channel 00/0 : 0[0] -> 1[1] via ...`` (a
  connection; ``/0`` the connection index) is not one, and is ignored.
* ``Channel 00 :  0 1 ...`` (2.4, src/init.cc v2.4.8-1 line 541) and ``Ring 00 :  0 1 ...`` (2.3 and earlier,
  src/init.cu v2.3.7-1 line 344): one line per ring, numbered from 0, no total: read by one rule, the highest index
  + 1 of each run of lines numbered from 0.  Lines with ``->`` (a connection, or 2.11's ``Ring 00 : 3 -> 0 -> 1``)
  are not ring dumps.
* ``Trees [0] a/b/c->r->p [1] ...``: one ``[i]`` per tree channel (the same count as the rings).

Hostile input: a truncated line that does not match a pattern in full is skipped; a log with no INFO lines gives
no counts.  Where one log prints two different values of one count (two communicators, or ranks of two hosts
that disagree), :func:`parse` keeps the one printed most often and, on a tie, the larger, and records every value
seen in ``conflicts``: nccl-tests' own communicator is the one whose ranks print it most.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

KEYS = ("coll", "nvls", "p2p", "p2p_per_peer", "ring", "tree")

_SUMMARY = re.compile(r"NCCL INFO (\d+) coll channels, (?:(\d+) collnet channels, )?(?:(\d+) nvls channels, )?"
                      r"(\d+) p2p channels, (\d+) p2p channels per peer\s*$")
_RING = re.compile(r"NCCL INFO Channel (\d+)/(\d+) :((?:\s+\d+)+)\s*$")
_OLD_RING = re.compile(r"NCCL INFO (?:Ring|Channel) (\d+) :((?:\s+\d+)+)\s*$")     # 2.3's Ring, 2.4's Channel
_TREES = re.compile(r"NCCL INFO Trees((?:\s*\[\d+\]\s*[-\d/]+->\d+->-?\d+)+)\s*$")
_TREE_INDEX = re.compile(r"\[(\d+)\]")
#: a count the fixture's ``#`` header (or the case's ``why``) states from the run's own NCCL log, left out of the
#: table: "16 coll channels", "2 coll and 2 p2p channels printed"
_STATED = re.compile(r"\b(\d+) coll (?:channels|and \d+ p2p channels printed)")
#: fixtures whose machine description was read from the very count audited here, so their agreement is not
#: independent evidence: CCI-MOC's 2 x 1 H100 (GPU 0's SYS path to its NIC inferred from the 2 coll channels printed,
#: the log's "GDR 0" and the 4-GPU job's PXN relay; nccl_log_cases._MOC_MACHINE, docs/nccl-model.md)
INFERRED_FROM_COUNT = frozenset(f"h100_2gpu_2node_{coll}_roce_nogdr_moc_1gpn.txt"
                                for coll in ("all_reduce", "sendrecv"))


@dataclass
class Printed:
    """Counts one log printed (``None`` where it printed none) and every value seen per count."""

    counts: dict = field(default_factory=lambda: dict.fromkeys(KEYS))
    conflicts: dict = field(default_factory=dict)
    #: "info" where the counts come from NCCL INFO lines, "header" where only the ``#`` header or ``why`` states one
    source: str = "info"

    @property
    def any(self) -> bool:
        return any(v is not None for v in self.counts.values())


def _ring_total(lines: list[str]) -> list[int]:
    """The ring totals: from 2.5's ``Channel i/N :`` dump each line's N; from ``Ring i :`` (2.3) or ``Channel i :``
    (2.4) lines the highest index + 1 of each run of lines numbered from 0."""
    totals = []
    for ln in lines:
        m = _RING.search(ln)
        if m and int(m.group(1)) < int(m.group(2)):
            totals.append(int(m.group(2)))
    if totals:
        return totals
    run = None
    for ln in lines:
        m = _OLD_RING.search(ln)
        if not m:
            continue
        i = int(m.group(1))
        if i == 0:
            if run is not None:
                totals.append(run)
            run = 1
        elif run is not None:
            run = max(run, i + 1)
    if run is not None:
        totals.append(run)
    return totals


def _tree_totals(lines: list[str]) -> list[int]:
    out = []
    for ln in lines:
        m = _TREES.search(ln)
        if m:
            idx = [int(x) for x in _TREE_INDEX.findall(m.group(1))]
            if idx == list(range(len(idx))):
                out.append(len(idx))
    return out


def _pick(values: list[int]) -> int | None:
    """The value printed most often; on a tie the larger."""
    if not values:
        return None
    c = Counter(values)
    return max(c, key=lambda v: (c[v], v))


def parse(text: str, why: str = "") -> Printed:
    """The channel counts the INFO lines of ``text`` print (see the module text for the rules); where it prints
    none, the coll count its ``#`` header or ``why`` states (``source`` "header")."""
    lines = [ln for ln in text.splitlines() if "NCCL INFO" in ln and not ln.lstrip().startswith("#")]
    seen: dict[str, list[int]] = {k: [] for k in KEYS}
    for ln in lines:
        m = _SUMMARY.search(ln)
        if m:
            for key, g in (("coll", 1), ("nvls", 3), ("p2p", 4), ("p2p_per_peer", 5)):
                if m.group(g) is not None:
                    seen[key].append(int(m.group(g)))
    seen["ring"] = _ring_total(lines)
    seen["tree"] = _tree_totals(lines)
    out = Printed()
    for key, vals in seen.items():
        out.counts[key] = _pick(vals)
        if len(set(vals)) > 1:
            out.conflicts[key] = sorted(set(vals))
    if not out.any:
        header = " ".join(ln for ln in text.splitlines() if ln.lstrip().startswith("#"))
        stated = [int(x) for x in _STATED.findall(header + " " + why)]
        out.counts["coll"], out.source = _pick(stated), "header"
        if len(set(stated)) > 1:
            out.conflicts["coll"] = sorted(set(stated))
    return out


def modelled(graphs, machine) -> dict:
    """The same counts from the model's :class:`~synth.model.nccl.graphs.CommGraphs` of a machine: ring, tree and
    coll channels ``n_channels``; nvls its NVLS CTAs where it builds an NVLS graph, else 0; p2p
    :func:`~synth.model.nccl.graphs.p2p_total_channels`; per peer the bound p2p timing itself uses for a local
    peer (:func:`synth.model.nccl.p2p.local_channel_bounds`' upper one: NCCL's ``pow2Up`` of the fewest channels any
    peer gets, at most the p2p channels, NVIDIA/nccl v2.26.2-1 src/graph/paths.cc lines 760-829)."""
    from synth.model.nccl.graphs import p2p_total_channels
    from synth.model.nccl.p2p import local_channel_bounds

    n = graphs.n_channels
    p2p = p2p_total_channels(n, rccl=machine.amd)
    nvls = graphs.nvls_channels if graphs.nvls is not None else 0
    return dict(coll=n, ring=n, tree=n, nvls=nvls, p2p=p2p, p2p_per_peer=local_channel_bounds(machine, graphs)[1])


def audit(cases) -> list[dict]:
    """One row per fixture that prints a count: its case, NCCL version, printed and modelled counts, and the
    keys that differ.  A file of several cases (one per collective) is audited once, on its first case."""
    from pathlib import Path

    from validate_cost_model import LOGS, _Keyed, _log_and_machine

    from synth.model.nccl import NcclEnv, NcclModel

    rows, done = [], set()
    for case in cases:
        if case.file in done or case.skip_reason or "/" in case.file:
            continue
        done.add(case.file)
        printed = parse(Path(LOGS / case.file).read_text(errors="replace"), case.why)
        if not printed.any:
            continue
        _, _, machine = _log_and_machine(_Keyed(case))
        model = NcclModel(machine, env=NcclEnv.from_environ(case.env), version=case.version)
        mod = modelled(model.table.graphs, model.machine)
        diff = [k for k in KEYS if printed.counts[k] is not None and printed.counts[k] != mod[k]]
        rows.append(dict(case=case, source=printed.source, printed=printed.counts, conflicts=printed.conflicts,
                         modelled=mod, diff=diff, inferred=case.file in INFERRED_FROM_COUNT))
    return rows


def report(rows) -> str:
    """``rows`` of :func:`audit` as the markdown ``--out`` writes: one line per fixture, printed / modelled."""
    lines = ["# Channel counts the real logs print, against the model's", "",
             "Command: `python benchmarks/printed_channels.py --out results/model_validation`", "",
             "Init-time counts (not the CTAs one size launches); printed / modelled; `source` info: NCCL INFO lines, "
             "header: a count the fixture's header or Case states.", "",
             "| log | NCCL | source | " + " | ".join(KEYS) + " | conflicts | result |",
             "|---|---|---|" + "---|" * len(KEYS) + "---|---|"]
    for r in rows:
        cells = [f"{r['printed'][k]} / {r['modelled'][k]}" if r["printed"][k] is not None else "" for k in KEYS]
        result = "**differs: " + ", ".join(r["diff"]) + "**" if r["diff"] else "agrees"
        result += " (machine inferred from this count)" if r["inferred"] else ""
        version = ".".join(map(str, r["case"].version))
        lines.append(f"| {r['case'].file} | {version} | {r['source']} | " + " | ".join(cells)
                     + f" | {r['conflicts'] or ''} | {result} |")
    agree = sum(not r["diff"] for r in rows)
    inferred = sum(not r["diff"] and r["inferred"] for r in rows)
    lines += ["", f"{agree} of {len(rows)} fixtures that print or state a count agree with the model; {inferred} of "
              "them only as their machine was inferred from this count (not independent evidence)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    import argparse
    from pathlib import Path

    from nccl_log_cases import ALL_CASES

    from synth.ir.schedule import atomic_write_text

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write printed_channels.md into this folder (else print it)")
    args = p.parse_args(argv)
    text = report(audit(ALL_CASES))
    if args.out is None:
        print(text, end="")
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "printed_channels.md", text)
        print(f"wrote {args.out / 'printed_channels.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["KEYS", "INFERRED_FROM_COUNT", "Printed", "audit", "modelled", "parse", "report"]

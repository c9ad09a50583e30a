"""The loader fuzz campaign of issue 15: at least 10,000 mutated inputs per loader, each run in a
worker process with a time limit, counting what must never happen.

    python benchmarks/fuzz_loaders.py --cases 10000 --out results/robustness

Loaders (the entry points users reach; see ``tests/_mutations.py``): ``nvidia-smi topo -m`` and
``-p2p`` text, NCCL/RCCL topology XML, topology JSON, link-matrix JSON (all but -p2p through
``topo_probe.load.load_topology``), nccl-tests logs, schedule JSON (also ``.json.gz``; loaded with
``load_schedule`` and then verified, as ``simulate`` does), plan JSON, MSCCL XML (``load_schedule``),
plus the two XML parsers called directly (``*-direct``, for their owner).

Seeds: the real files under ``tests/fixtures`` (nvidia-smi outputs, NCCL/RCCL XML, nccl-tests logs,
MSCCL XML, link matrices), documents the project writes from its presets, and the schedules and
plans committed under ``results/``.  Case ``i`` of loader ``L`` mutates a seed with
``random.Random(f"{seed}:{L}:{i}")``, so every case can be regenerated from its id.

Outcomes per case: ``refused`` (a TopocollError: fine), ``accepted`` (fine unless nonsense),
``nonsense`` (accepted but breaks physics: ``tests/_mutations.nonsense``), ``generic`` (any other
exception), ``hang`` (over the time limit), ``crash`` (the worker died).  Each case also records its
time; a worker whose peak RSS grew more than 200 MB on one case is counted ``heavy`` and restarted.
Writes ``report.md`` and ``loaders.csv`` to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import multiprocessing as mp
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
import tracemalloc
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shown_paths import script_command, shown_path  # noqa: E402
from tests._mutations import LOADERS, billion_laughs, mutate, nonsense, seed_format, seeds  # noqa: E402

SLOW_S = 1.0
HEAVY_KB = 200 * 1024
ONE_MB = 1_100_000          # "a 1 MB input": the amplifying mutations aim at 1 MiB, plus the seed
TRACE_BYTES = 1 << 18       # inputs above this are run a second time under tracemalloc
FAILURES = ("generic", "hang", "crash", "nonsense")


# ----------------------------------------------------------------------------- worker side
def _run_one(loader: str, path: Path) -> tuple[str, str]:
    """(outcome, detail); the detail names the case's folder ``<tmp>`` (before it is cut short, so how
    much of a message a report shows does not hang on the temporary folder's name)."""
    from topo_probe.errors import TopocollError
    try:
        result = LOADERS[loader][1](path)
    except TopocollError as exc:
        msg = str(exc).replace(str(path.parent), "<tmp>")
        return ("generic", f"multi-line project error: {msg[:200]!r}") if "\n" in msg else ("refused", msg[:200])
    except Exception as exc:   # noqa: BLE001 - counting these is the point
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        msg = str(exc).replace(str(path.parent), "<tmp>")
        return "generic", f"{type(exc).__name__}: {msg[:160]} (at {shown_path(frame.filename)}:{frame.lineno})"
    bad = nonsense(result)
    return ("nonsense", bad.replace(str(path.parent), "<tmp>")) if bad else ("accepted", "")


def _worker(conn, mem_limit_bytes: int, tmp: Path) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (mem_limit_bytes, mem_limit_bytes))
    import topo_probe.load, synth.formats.schedule_file, synth.plan.size_plan  # noqa: E401,F401  (warm imports)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        loader, suffix, data = msg
        path = tmp / f"case{suffix}"
        path.write_bytes(data)
        before = _reset_peak_kib()
        start = time.perf_counter()
        outcome, detail = _run_one(loader, path)
        elapsed = time.perf_counter() - start
        grew = _peak_kib() - before
        if len(data) > TRACE_BYTES and elapsed < 2:   # again under tracemalloc: the peak the loader allocated
            tracemalloc.start()
            _run_one(loader, path)
            grew = max(grew, tracemalloc.get_traced_memory()[1] // 1024)
            tracemalloc.stop()
        conn.send((outcome, detail, elapsed, grew))


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as fh:
        return int(next(line.split()[1] for line in fh if line.startswith(key + ":")))


def _reset_peak_kib() -> int:
    """Reset the peak RSS (Linux: ``clear_refs`` 5) and return the current RSS, KiB; where that is
    not possible, the lifetime peak (then growth only counts new peaks)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return _status_kib("VmRSS")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _peak_kib() -> int:
    try:
        return _status_kib("VmHWM")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class Worker:
    """One worker process; restarted after a hang, a crash or a heavy case."""

    def __init__(self, mem_limit_bytes: int) -> None:
        self.mem = mem_limit_bytes
        self._start()

    def _start(self) -> None:
        self.conn, child = mp.Pipe()
        self.tmp = Path(tempfile.mkdtemp(prefix="fuzz-"))     # the parent removes it: a killed worker cannot
        self.proc = mp.get_context("fork").Process(target=_worker, args=(child, self.mem, self.tmp), daemon=True)
        self.proc.start()

    def restart(self) -> None:
        self.proc.kill()
        self.proc.join()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._start()

    def send(self, loader: str, suffix: str, data: bytes) -> None:
        self.conn.send((loader, suffix, data))

    def collect(self, timeout: float) -> tuple[str, str, float, int]:
        """(outcome, detail, seconds, peak RSS growth in KiB) of the case last sent."""
        if not self.conn.poll(timeout):
            self.restart()
            return "hang", f"no answer within {timeout:g} s", timeout, 0
        try:
            out = self.conn.recv()
        except EOFError:
            code = self.proc.exitcode
            self.restart()
            return "crash", f"worker died (exit code {code})", 0.0, 0
        if out[3] > HEAVY_KB:
            self.restart()
        return out

    def close(self) -> None:
        self.conn.send(None)
        self.proc.join(5)
        shutil.rmtree(self.tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- cases
def all_seeds() -> dict[str, list[tuple[str, bytes]]]:
    """tests/fixtures + project-written documents + the small schedules and plans under results/."""
    out = seeds(ROOT / "tests" / "fixtures")
    committed = sorted(p for p in (ROOT / "results").rglob("schedules/*.json") if p.stat().st_size < 60_000)
    rng = random.Random(0)
    for p in rng.sample(committed, min(8, len(committed))):
        out["schedule-json"].append((p.name, p.read_bytes()))
    out["schedule-json"].append(("dgx1-allreduce.json.gz", gzip.compress(out["schedule-json"][0][1], mtime=0)))
    plans = sorted((ROOT / "results").glob("*/plan.json"))
    out["plan-json"] += [(p.parent.name + "-plan.json", p.read_bytes()) for p in plans]
    return out


def crafted(loader: str, big: int) -> list[tuple[str, str, bytes]]:
    """Hand-made hostile inputs of about ``big`` bytes in the loader's own format: (name, suffix, bytes)."""
    fmt = LOADERS[loader][0]
    suffix = {"json": ".json", "xml": ".xml"}.get(fmt, ".txt")
    cases = [("1 MB of digits", b"9" * big), ("1 MB of blank lines", b"\n" * big), ("1 MB of spaces", b" " * big),
             ("1 MB of invalid UTF-8", b"\xff" * big), ("empty file", b"")]
    if fmt == "json":
        cases += [("1 MB of '['", b"[" * big), ("1 MB of '{\"a\":'", b'{"a":' * (big // 5)),
                  ("a 1 MB list of zeros", b"[" + b"0," * (big // 2) + b"0]"),
                  ("a 1 MB number in a field", b'{"format": "link-matrix", "links": [[0, 1], [1, 0]], '
                   b'"link_bandwidth_gbps": 1' + b"0" * big + b"}")]
    elif fmt == "xml":
        cases += [("1 MB of '<a>'", b"<a>" * (big // 3)),
                  ("1 MB of attributes", b"<system " + b" ".join(b'a%d="1"' % i for i in range(big // 10)) + b"/>"),
                  ("billion laughs", billion_laughs("system", "version").encode())]
    elif loader == "nccl-tests-log":
        cases += [("a 1 MB device line", b"#  Rank  0 Group  0 Pid 1 on host device  0 [0x07] A" + b" " * big + b"B\n"),
                  ("a 1 MB table row", b"# size count type redop root time algbw busbw #wrong\n" + b"8 " * (big // 2))]
    else:
        cases += [("a 1 MB header line", b"\tGPU0" + b"".join(b"\tGPU%d" % i for i in range(1, big // 8)) + b"\n"),
                  ("a 1 MB row", b"\tGPU0\tGPU1\nGPU0\t X " + b"\tNV1" * (big // 4) + b"\n")]
    out = [(name, suffix, data) for name, data in cases]
    if loader == "schedule-json":
        head = b'{"format": "topocoll.schedule", "version": 1, '
        out += [("gzip bomb (1 GB of spaces)", ".json.gz", gzip.compress(b" " * (1 << 30), compresslevel=9)),
                ("ranks: 3000 (435 bytes)", ".json", head + b'"collective": "alltoall", "ranks": 3000, '
                 b'"chunks_per_rank": 1, "chunks": [], "steps": []}'),
                ("chunks_per_rank: 1e30", ".json", head + b'"collective": "allgather", "ranks": 2, '
                 b'"chunks_per_rank": 1' + b"0" * 30 + b', "steps": []}'),
                ("allreduce on 1024 ranks, 1 transfer", ".json", head + b'"collective": "allreduce", "ranks": 1024, '
                 b'"chunks_per_rank": 1, "steps": [{"rounds": 1, "transfers": [{"chunk": 0, "src": 0, "dst": 1}]}]}')]
    return out


def case(loader: str, i: int, seed: int, pool: list[tuple[str, bytes]], big: int) -> tuple[str, str, str, bytes]:
    """(seed file name, mutation kinds, file suffix, bytes) of case ``i``."""
    rng = random.Random(f"{seed}:{loader}:{i}")
    name, data = rng.choice(pool)
    kinds, out = mutate(data, rng, seed_format(loader, data), big=big)
    suffix = ".json.gz" if name.endswith(".gz") else Path(name).suffix
    return name, kinds, suffix, out


# ----------------------------------------------------------------------------- campaign
class Tally:
    """Per-loader counts, the slowest case, and a few examples of each failure kind."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.examples: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        self.max_s: dict[str, tuple[float, str]] = defaultdict(lambda: (0.0, ""))
        self.max_s_1mb: dict[str, tuple[float, str]] = defaultdict(lambda: (0.0, ""))   # inputs <= ONE_MB
        self.crafted: list[tuple[str, str, str, float, str]] = []

    def add(self, loader: str, label: str, size: int, result: tuple[str, str, float, int]) -> None:
        outcome, detail, elapsed, grew = result
        c = self.counts[loader]
        c["cases"] += 1
        c[outcome] += 1
        c["slow"] += elapsed > SLOW_S
        c["heavy"] += grew > HEAVY_KB
        c["max_bytes"] = max(c["max_bytes"], size)
        c["max_rss_kib"] = max(c["max_rss_kib"], grew)
        if size <= ONE_MB:
            c["max_rss_kib_1mb"] = max(c["max_rss_kib_1mb"], grew)
        if elapsed > self.max_s[loader][0]:
            self.max_s[loader] = (elapsed, label)
        if size <= ONE_MB and elapsed > self.max_s_1mb[loader][0]:
            self.max_s_1mb[loader] = (elapsed, label)
        kind = outcome if outcome in FAILURES else "slow" if elapsed > SLOW_S else "heavy" if grew > HEAVY_KB else ""
        if kind:
            gist = detail.split(" (at")[0][:60]
            same = [e for e in self.examples[loader][kind] if e[1].split(" (at")[0][:60] == gist]
            if len(self.examples[loader][kind]) < 6 and not same:
                self.examples[loader][kind].append((label, detail, round(elapsed, 2), size))


def campaign(args) -> Tally:
    from rich.progress import Progress
    pools = all_seeds()
    tally = Tally()
    workers = [Worker(args.mem_gb << 30) for _ in range(max(1, args.workers))]
    loaders = args.loaders or list(LOADERS)
    with Progress() as progress:
        for loader in loaders:
            task = progress.add_task(loader, total=args.cases + len(crafted(loader, args.big)))
            for name, suffix, data in crafted(loader, args.big):
                workers[0].send(loader, suffix, data)
                res = workers[0].collect(args.timeout)
                tally.crafted.append((loader, name, res[0], round(res[2], 3), res[1][:120]))
                tally.add(loader, f"crafted: {name}", len(data), res)
                progress.advance(task)
            for start in range(0, args.cases, len(workers)):
                batch = [(i, case(loader, i, args.seed, pools[loader], args.big))
                         for i in range(start, min(start + len(workers), args.cases))]
                for w, (i, (name, kinds, suffix, data)) in zip(workers, batch):
                    w.send(loader, suffix, data)
                for w, (i, (name, kinds, suffix, data)) in zip(workers, batch):
                    res = w.collect(args.timeout)
                    tally.add(loader, f"case {i}: {kinds} of {name}", len(data), res)
                    progress.advance(task)
    for w in workers:
        w.close()
    return tally


# ----------------------------------------------------------------------------- report
COLUMNS = ("cases", "refused", "accepted", "generic", "hang", "crash", "nonsense", "slow", "heavy")
MINE = ("nvidia-smi", "nvidia-smi-p2p", "topology-json", "link-matrix", "nccl-tests-log", "schedule-json", "plan-json")


def write_report(tally: Tally, args, command: str, wall_s: float) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "loaders.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["loader", *COLUMNS, "max_seconds", "max_seconds_1mb", "max_rss_growth_mib", "max_input_bytes"])
        for loader, c in tally.counts.items():
            w.writerow([loader, *(c[k] for k in COLUMNS), round(tally.max_s[loader][0], 3),
                        round(tally.max_s_1mb[loader][0], 3), round(c["max_rss_kib"] / 1024, 1), c["max_bytes"]])
    made = Counter(row[0] for row in tally.crafted)
    lines = ["# Loader fuzz campaign (issue 15)", "",
             f"Command: `{command}`  ", f"Seed {args.seed}, {args.cases} mutated inputs per loader plus "
             f"{min(made.values(), default=0)} to {max(made.values(), default=0)} hand-made hostile ones (listed "
             f"below), time limit {args.timeout:g} s per case, worker memory limit {args.mem_gb} GB, "
             f"{args.workers} worker(s); {wall_s / 60:.1f} min on this machine.", "",
             "Outcomes: **refused** = a one-line TopocollError (what hostile input should get), **accepted** = a "
             "result that passes the physics check, **generic** = any other exception (a bug), **hang** = no "
             f"answer within {args.timeout:g} s, **crash** = the worker died, **nonsense** = accepted but breaks "
             f"physics (NaN/inf/negative numbers, no GPU, ...). **slow** = over {SLOW_S:g} s, **heavy** = peak "
             "RSS grew by more than 200 MB (both counted besides the outcome). Memory is the larger of the "
             "worker's peak RSS growth during the case (Linux `clear_refs` resets the peak before each case) "
             "and, for inputs over 256 KB, the tracemalloc peak of a second run. Loaders "
             "marked * are not the "
             "guard's (the XML parsers have their own owner); `*-direct` rows call the XML parsers without "
             "`load_topology`/`load_schedule` around them.", "",
             "| loader | " + " | ".join(COLUMNS) + " | slowest (s) | slowest on <= 1.1 MB (s) | most memory (MB) "
             "| most memory on <= 1.1 MB (MB) | largest input (bytes) |",
             "|---|" + "---:|" * (len(COLUMNS) + 5)]
    for loader, c in tally.counts.items():
        mark = "" if loader in MINE else " *"
        lines.append(f"| {loader}{mark} | " + " | ".join(str(c[k]) for k in COLUMNS)
                     + f" | {tally.max_s[loader][0]:.2f} | {tally.max_s_1mb[loader][0]:.2f} "
                     f"| {c['max_rss_kib'] / 1024:.0f} | {c['max_rss_kib_1mb'] / 1024:.0f} | {c['max_bytes']} |")
    mine = [tally.counts[k] for k in MINE if k in tally.counts]
    lines += ["", f"Guarded loaders together: {sum(c['cases'] for c in mine)} cases, "
              + ", ".join(f"{sum(c[k] for c in mine)} {k}" for k in FAILURES + ("slow", "heavy"))
              + ".", "", "## Hand-made hostile inputs", "", "| loader | input | outcome | seconds | detail |",
              "|---|---|---|---:|---|"]
    lines += [f"| {a} | {b} | {c} | {d} | {e.replace('|', '/')} |" for a, b, c, d, e in tally.crafted]
    lines += ["", "## Slowest case per loader", ""]
    lines += [f"- {loader}: {secs:.2f} s, {label}; on inputs <= 1.1 MB: {tally.max_s_1mb[loader][0]:.2f} s, "
              f"{tally.max_s_1mb[loader][1]}" for loader, (secs, label) in tally.max_s.items()]
    lines += ["", "## Examples of each failure kind", ""]
    for loader, kinds in tally.examples.items():
        for kind, items in kinds.items():
            lines.append(f"**{loader}: {kind}** ({tally.counts[loader][kind]} cases)")
            lines += [f"- {label} ({size} bytes, {secs} s): {detail.replace('|', '/')}"
                      for label, detail, secs, size in items]
            lines.append("")
    if not any(tally.examples.values()):
        lines.append("None.")
    (out / "report.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000, help="mutated inputs per loader")
    ap.add_argument("--loaders", nargs="*", choices=list(LOADERS), help="default: all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per case")
    ap.add_argument("--workers", type=int, default=1, help="worker processes (the machine has 2 shared cores)")
    ap.add_argument("--mem-gb", type=int, default=3, help="address-space limit of a worker (GB)")
    ap.add_argument("--big", type=int, default=1 << 20, help="size the amplifying mutations aim at (bytes)")
    ap.add_argument("--out", default=str(ROOT / "results" / "robustness"))
    args = ap.parse_args(argv)
    command = script_command(__file__, sys.argv[1:] if argv is None else argv)
    start = time.time()
    tally = campaign(args)
    write_report(tally, args, command.strip(), time.time() - start)
    print((Path(args.out) / "report.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

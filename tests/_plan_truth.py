"""Plan vs what ran (not a test module): every entry of a plan.json at sampled sizes through the
Communicator, on the host path (NumPy arrays) and on the GPU path with the CPU stand-in of CuPy
(tests/_fake_device.py under the op-by-op CuPy layer; NCCL a recording stand-in), each call's
``last_route`` compared with what plan.json says at that size (read here by a linear scan of
its entries, independently of the Communicator's bisect) and its result with NumPy.

Used by tests/kernels/comm/test_plan_truth.py and benchmarks/bench_plan_truth.py.
"""

from __future__ import annotations

import types
import warnings
from dataclasses import dataclass

import numpy as np
from _fake_device import FakeRuntime
from _other_machines import PLAN_TRUTH, selection
from _schedules import alloc_buffers, check_result, make_inputs

from kernels import Communicator
from kernels.backends.cupy_executor import CupyLayer
from synth.formats.schedule_file import load_schedule
from synth.ir.collectives import ROOTED, CollectiveSpec
from synth.plan.size_plan import Plan
from topo_probe.load import parse_gpu_list

#: the largest size (bytes) of a sampled call that runs through the executor; larger sampled
#: sizes check the route the same call would take (Communicator.route) without moving data
EXEC_BYTES = 1 << 16
#: the last range of a plan has no upper end: its sampled sizes stop here (4 GiB, PLAN_SIZES' end)
TOP_BYTES = 1 << 32


def planned_at(plan: Plan, collective: str, nbytes: int, root):
    """The plan entry covering the call, by a linear scan in file order (None: none)."""
    want_root = root if collective in ROOTED else None
    for e in plan.entries:
        if e.collective == collective and e.root == want_root and e.min_bytes <= nbytes and (
                e.max_bytes is None or nbytes < e.max_bytes):
            return e
    return None


def sampled_counts(entry, n: int, itemsize: int = 4) -> list[int]:
    """float32 element counts whose nccl-tests size falls in ``entry``'s range: its ends, its
    middle and every power-of-two size inside (sizes the collective's block layout can make)."""
    spec = CollectiveSpec(entry.collective, n, 1, entry.root if entry.collective in ROOTED else None)
    unit = max(spec.input_blocks(), spec.output_blocks()) * itemsize      # bytes per element of a block
    lo, hi = entry.min_bytes, entry.max_bytes if entry.max_bytes is not None else TOP_BYTES
    wanted = {max(lo, 1), hi - 1, (lo + hi) // 2} | {1 << k for k in range(64) if lo <= 1 << k < hi}
    counts = set()
    for nbytes in wanted:
        for count in (-(-nbytes // unit), nbytes // unit):           # the nearest sizes the layout makes
            if count >= 1 and lo <= count * unit < hi:
                counts.add(count)
    return sorted(counts)


@dataclass
class Sample:
    """One sampled call: what plan.json says and what ran on each path."""

    collective: str
    root: int | None
    nbytes: int
    planned: str
    host: str
    gpu: str
    executed: bool
    mismatch: str = ""


def _call(comm, coll: str, sends, recvs, root, op):
    if coll == "allreduce":
        return comm.all_reduce(sends, recvs, op=op)
    if coll == "allgather":
        return comm.all_gather(sends, recvs)
    if coll == "reducescatter":
        return comm.reduce_scatter(sends, recvs, op=op)
    if coll == "broadcast":
        for s, d in zip(sends, recvs):
            if s is not None:
                d[...] = s
        return comm.broadcast(recvs, root=root)
    if coll == "reduce":
        return comm.reduce(sends, recvs, root=root, op=op)
    if coll == "gather":
        return comm.gather(sends, recvs, root=root)
    if coll == "scatter":
        return comm.scatter(sends, recvs, root=root)
    return comm.all_to_all(sends, recvs)


def _want(entry, comm, coll: str, nbytes: int, root) -> tuple[str, str]:
    """(what ran must be, words its reason must hold) on a path where NCCL cannot run: the
    entry's schedule, or on an ``nccl`` entry its fallback (the fastest baseline for plans made
    before the ``fallback`` field)."""
    if entry is None:
        return "", "no plan entry"
    if entry.schedule != "nccl":
        return entry.schedule, ""
    if entry.fallback:
        return entry.fallback, "fallback"
    return "best:" + comm.selector.chooser.best(coll, root, nbytes)[1], "fallback"


class PlanTruth:
    """Runs samples of one plan on both paths (a host and a stand-in GPU Communicator)."""

    def __init__(self, plan_path, topology, op: str = "sum") -> None:
        self.plan = Plan.load(plan_path)
        self.n, self.op = topology.num_gpus, op
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.host = Communicator(self.n, topology=topology, plan=plan_path)
            self.rt = FakeRuntime(self.n)
            self.gpu = Communicator(self.n, topology=topology, plan=plan_path, backend=CupyLayer(runtime=self.rt))
        self.gpu.selector = self.host.selector      # one selector: schedules verified, baselines timed once
        self.nccl_calls: list[tuple] = []
        self.gpu._nccl = types.SimpleNamespace(run=lambda name, s, r, count, **kw: self.nccl_calls.append(
            (name, count, kw.get("op"), kw.get("root"))))

    def sample(self, entry, count: int, rng: np.random.Generator, execute: bool = True) -> Sample:
        coll, n, op = entry.collective, self.n, self.op if entry.collective in ("allreduce", "reducescatter",
                                                                                 "reduce") else "sum"
        root = entry.root if coll in ROOTED else None
        spec = CollectiveSpec(coll, n, 1, root)
        nbytes = max(spec.input_blocks(), spec.output_blocks()) * count * 4
        found = planned_at(self.plan, coll, nbytes, root)
        planned = found.schedule if found is not None else ""
        executed = execute and nbytes <= EXEC_BYTES
        bad = []
        if executed:
            host_route = self._run_host(coll, count, root, op, rng)
            self.nccl_calls.clear()
            gpu_route = self._run_gpu(coll, count, root, op, rng)
        else:
            host_route = self.host.route(coll, nbytes, root, np.float32, op, on_gpus=False, layer="host")
            gpu_route = self.gpu.route(coll, nbytes, root, np.float32, op, on_gpus=True, layer="cupy")
        want, words = _want(found, self.host, coll, nbytes, root)
        if (host_route.planned, host_route.ran) != (planned, want) or words not in host_route.reason:
            bad.append(f"host ran {host_route.ran} ({host_route.reason or 'as planned'}), plan says {planned}")
        gpu_want = "nccl" if planned == "nccl" and coll in ("allreduce", "allgather", "reducescatter", "broadcast",
                                                           "reduce") else want
        if (gpu_route.planned, gpu_route.ran) != (planned, gpu_want):
            bad.append(f"stand-in GPU ran {gpu_route.ran} ({gpu_route.reason or 'as planned'}), plan says {planned}")
        if executed and gpu_want == "nccl" and self.nccl_calls != [(coll, count, op, root or 0)]:
            bad.append(f"NCCL stand-in calls {self.nccl_calls}")
        for route, comm in ((host_route, self.host), (gpu_route, self.gpu)):
            if executed and route.ran not in ("nccl",) and not route.ran.startswith("best:"):
                ref = load_schedule(self.plan.base_dir / route.ran)
                if comm.last_schedule != ref:
                    bad.append(f"{route.layer}: ran a schedule other than {route.ran}")
        return Sample(coll, root, nbytes, planned, host_route.ran, gpu_route.ran, executed, "; ".join(bad))

    def _run_host(self, coll, count, root, op, rng):
        xs = make_inputs(coll, self.n, count, np.float32, op, root, rng)
        sends, recvs = alloc_buffers(coll, self.n, count, xs, np.float32, root, inplace=False, fill=-7)
        _call(self.host, coll, sends, recvs, root, op)
        check_result(coll, self.n, count, xs, recvs, op, root, np.float32)
        return self.host.last_route

    def _run_gpu(self, coll, count, root, op, rng):
        rt = self.rt
        xs = make_inputs(coll, self.n, count, np.float32, op, root, rng)
        hs, hr = alloc_buffers(coll, self.n, count, xs, np.float32, root, inplace=False, fill=-7)
        sends = [None if s is None else rt.to_device(r, s) for r, s in enumerate(hs)]
        recvs = [None if d is None else rt.to_device(r, d) for r, d in enumerate(hr)]
        _call(self.gpu, coll, sends, recvs, root, op)
        route = self.gpu.last_route
        if route.ran != "nccl":
            rt.synchronize()
            check_result(coll, self.n, count, xs, [None if d is None else rt.to_host(d) for d in recvs], op, root,
                         np.float32)
        return route

    def run(self, rng=None, exec_per_entry: int | None = None) -> list[Sample]:
        """Every entry at its sampled sizes; ``exec_per_entry``: at most that many of an entry's
        sizes up to :data:`EXEC_BYTES` run through the executors (its smallest and its largest
        such sizes first), the others check their route only (None: all of them run)."""
        rng = rng if rng is not None else np.random.default_rng(0)
        out = []
        for e in self.plan.entries:
            counts = sampled_counts(e, self.n)
            small = [c for c in counts if self._nbytes(e, c) <= EXEC_BYTES]
            chosen = small if exec_per_entry is None else (small[:1] + small[1:][-1:])[:exec_per_entry]
            out += [self.sample(e, c, rng, execute=c in chosen) for c in counts]
        return out

    def _nbytes(self, entry, count: int) -> int:
        spec = CollectiveSpec(entry.collective, self.n, 1, entry.root if entry.collective in ROOTED else None)
        return max(spec.input_blocks(), spec.output_blocks()) * count * 4


#: machines no preset has, as a user's files give them (tests/_other_machines.py's list, this helper's
#: selection: fixtures only, small rank counts): name -> (file under tests/fixtures, GPUs kept or None)
UNSEEN = {name: (m.fixture, parse_gpu_list(m.gpus) if m.gpus else None) for name, m in selection(PLAN_TRUTH).items()}


def unseen_plan(name: str, folder):
    """``synthesize --topology FILE [--gpus ...] --out folder`` for :data:`UNSEEN` ``name`` (the
    pipeline the command runs, 5 s budget, no SAT): ``(folder / "plan.json", topology)``."""
    from pathlib import Path

    from synth.pipeline import synthesize as synth_mod
    from topo_probe.load import load_topology
    file, gpus = UNSEEN[name]
    topo = load_topology(str(Path(__file__).parent / "fixtures" / file), gpus)
    opts = synth_mod.SynthesisOptions(time_limit_s=5, progress=False, max_sat_ranks=0, log=lambda s: None)
    synth_mod.run(topo, folder, opts, force=True)
    return Path(folder) / "plan.json", topo


__all__ = ["PlanTruth", "Sample", "planned_at", "sampled_counts", "unseen_plan", "EXEC_BYTES", "TOP_BYTES", "UNSEEN"]

"""MPICommunicator under ``mpirun -n 2/3/4``: every collective against NumPy on every rank.

One ``mpirun`` per process count runs every case of :func:`cases` inside (this file is the
worker: ``python tests/kernels/mpi/test_mpi_communicator.py worker OUT.json``); rank 0 writes per-case failures
(gathered from every rank through MPI itself, not our collectives) and the tests assert on
them per collective.  Skipped with a reason when mpirun or mpi4py is missing.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from _mpi import run_mpi

COLLS = ("allreduce", "reducescatter", "reduce", "allgather", "broadcast", "gather", "scatter", "alltoall")
COMBINING = {"allreduce", "reducescatter", "reduce"}
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
COUNTS = (1, 7, 1001)
RED_TYPES = (("float32", ("sum", "prod", "max", "min", "avg")), ("int32", ("sum", "max", "avg")),
             ("bfloat16", ("sum", "min", "avg")), ("float16", ("sum", "prod", "avg")), ("int8", ("sum", "avg")),
             ("float64", ("sum",)), ("uint8", ("max",)), ("uint32", ("sum",)), ("uint64", ("avg",)),
             ("float8_e4m3fn", ("max",)), ("float8_e5m2", ("min",)))
COPY_TYPES = ("float32", "int64", "bfloat16", "uint8", "float8_e5m2")


# ---------------------------------------------------------------------- cases and NumPy reference
def cases(n: int) -> list[dict]:
    out = []
    for coll in COLLS:
        roots = (0, n - 1) if coll in ROOTED else (None,)
        combos = ([(d, o) for d, ops in RED_TYPES for o in ops] if coll in COMBINING
                  else [(d, "sum") for d in COPY_TYPES])
        for dtype, op in combos:
            for count in COUNTS:
                for root in roots:
                    for inplace in (False, True):
                        cid = f"{coll}/{dtype}/{op}/c{count}/r{root}/{'in' if inplace else 'out'}"
                        out.append(dict(id=cid, coll=coll, dtype=dtype, op=op, count=count, root=root,
                                        inplace=inplace))
    return out


def np_dtype(name: str):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def make_input(case: dict, rank: int, n: int, salt: int = 0) -> np.ndarray:
    """Small integers exact in every dtype for every op (products of 1s and 2s)."""
    kin = n if case["coll"] in ("reducescatter", "scatter", "alltoall") else 1
    rng = np.random.default_rng([salt, rank, case["count"], len(case["id"])])
    size = kin * case["count"]
    op = case["op"]
    vals = (rng.integers(1, 3, size) if op == "prod" else n * rng.integers(0, 3, size) if op == "avg"
            else rng.integers(0, 4, size))
    return vals.astype(np_dtype(case["dtype"]))


def expected(case: dict, inputs: list[np.ndarray], rank: int, n: int):
    """What NumPy says rank ``rank``'s output must be (None: no output there)."""
    coll, c, root, dt = case["coll"], case["count"], case["root"], np_dtype(case["dtype"])
    if coll in COMBINING:
        st = np.stack([x.astype(np.float64) for x in inputs])
        op = case["op"]
        red = {"sum": st.sum(0), "prod": st.prod(0), "max": st.max(0), "min": st.min(0),
               "avg": np.floor(st.sum(0) / n)}[op].astype(dt)
        if coll == "allreduce":
            return red
        if coll == "reduce":
            return red if rank == root else None
        return red[rank * c:(rank + 1) * c]
    if coll == "allgather":
        return np.concatenate(inputs)
    if coll == "gather":
        return np.concatenate(inputs) if rank == root else None
    if coll == "broadcast":
        return inputs[root]
    if coll == "scatter":
        return inputs[root][rank * c:(rank + 1) * c]
    return np.concatenate([x[rank * c:(rank + 1) * c] for x in inputs])  # alltoall


def run_case(comm, case: dict, mine: np.ndarray, empty=np.empty):
    """Call the collective the way a user would; returns this rank's output (or None).
    Every buffer it makes comes from ``empty(n, dtype)``."""
    coll, c, root, n, r = case["coll"], case["count"], case["root"], comm.size, comm.rank

    def full(k, value):
        a = empty(k, mine.dtype)
        a[...] = value
        return a

    kout = n if coll in ("allgather", "gather", "alltoall") else 1
    if coll == "broadcast":
        buf = full(mine.size, mine)
        comm.broadcast(buf, root=root)
        return buf
    if case["inplace"]:
        if coll in ("allgather", "gather"):
            out = full(n * c, 0)
            out[r * c:(r + 1) * c] = mine
            if coll == "allgather":
                comm.all_gather(out[r * c:(r + 1) * c], out)
            else:
                comm.gather(out if r == root else mine, out if r == root else None, root=root)
            return out if coll == "allgather" or r == root else None
        buf = full(mine.size, mine)
        if coll == "reducescatter":
            comm.reduce_scatter(buf, buf, op=case["op"])
            return buf[r * c:(r + 1) * c]
        if coll == "scatter":
            out = buf if r == root else full(c, 0)
            comm.scatter(buf if r == root else None, out, root=root)
            return buf[r * c:(r + 1) * c] if r == root else out
        kw = ({"op": case["op"]} if coll != "alltoall" else {}) | ({"root": root} if coll == "reduce" else {})
        getattr(comm, {"allreduce": "all_reduce", "reduce": "reduce", "alltoall": "all_to_all"}[coll])(buf, buf, **kw)
        return buf if coll != "reduce" or r == root else None
    out = full(kout * c, 77)
    if coll == "allreduce":
        comm.all_reduce(mine, out, op=case["op"])
    elif coll == "reducescatter":
        comm.reduce_scatter(mine, out, op=case["op"])
    elif coll == "reduce":
        comm.reduce(mine, out if r == root else None, root=root, op=case["op"])
    elif coll == "allgather":
        comm.all_gather(mine, out)
    elif coll == "gather":
        comm.gather(mine, out if r == root else None, root=root)
    elif coll == "scatter":
        comm.scatter(mine if r == root else None, out, root=root)
    else:
        comm.all_to_all(mine, out)
    return out if coll not in ROOTED or r == root or coll == "scatter" else None


def extra_cases(comm, n: int):
    """(id, check) pairs beyond the plain collectives; check() returns an error text or ''."""
    from kernels.comm import compression as cz
    from kernels.comm.communicator import Communicator
    from kernels.mpi.communicator import MPICommunicator
    from kernels.mpi.wires import DeviceWire
    from synth.baselines import baseline
    from topo_probe.errors import UnsupportedCollective
    from synth.ir.fabric import build_fabric
    r = comm.rank
    fabric = build_fabric(comm.topology)
    rng = [np.random.default_rng([9, k]) for k in range(n)]
    xs = [g.integers(0, 5, 1001).astype(np.float32) for g in rng]
    total = np.sum(np.stack(xs), 0)
    checks = []

    def explicit(name, coll, chunks):
        def check():
            try:
                s = baseline(name, fabric, coll, chunks=chunks, root=0 if coll in ROOTED else None)
            except UnsupportedCollective:  # this baseline does not apply to n ranks (e.g. rhd on 3)
                return ""
            kin = n if coll in ("reducescatter", "scatter", "alltoall") else 1
            kout = n if coll in ("allgather", "gather", "alltoall") else 1
            case = dict(id=f"x{name}{coll}", coll=coll, dtype="int32", op="sum", count=13, root=0)
            ins = [make_input(case, k, n) for k in range(n)]
            out = np.zeros(kout * 13, np.int32)
            comm.run_schedule(s, ins[r][:kin * 13], out)
            want = expected(case, ins, r, n)
            return "" if want is None or np.array_equal(out[:want.size], want) else f"got {out} want {want}"
        return check
    for name, coll, chunks in (("ring", "allreduce", 3), ("tree", "allreduce", 2), ("direct", "alltoall", None),
                               ("rhd", "allreduce", None), ("bruck", "allgather", None), ("tree", "broadcast", 2),
                               ("ring", "reducescatter", 2), ("direct", "gather", None), ("tree", "scatter", None)):
        checks.append((f"schedule/{name}/{coll}", explicit(name, coll, chunks)))

    def fused(mode):
        def check():
            shapes = [(3, 4), (17,), (2, 2, 5), (1,)]
            ts = [np.full(s, float(r + k), np.float64) for k, s in enumerate(shapes)]
            kw = {"split_points": [2]} if mode == "index" else {"bucket_mb": 1e-4} if mode == "size" else {}
            buckets = comm.fused_all_reduce(ts, mode=mode, **kw)
            want = [np.full(s, float(sum(range(n)) + n * k)) for k, s in enumerate(shapes)]
            if any(not np.array_equal(t, w) for t, w in zip(ts, want)):
                return "fused results differ from NumPy"
            return "" if len(buckets) == {"auto": 1, "index": 2, "size": 4}[mode] else f"buckets {buckets}"
        return check
    for mode in ("auto", "size", "index"):
        checks.append((f"fused/{mode}", fused(mode)))

    def compressed(fmt, op):
        def check():
            vals = [np.random.default_rng([5, k]).standard_normal(1003).astype(np.float32) for k in range(n)]
            got = comm.compressed_all_reduce(vals[r], np.empty(1003, np.float32), compression=fmt, op=op)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                single = Communicator(n, plan=False)
            ref = cz.compressed_all_reduce(single, vals, [np.empty(1003, np.float32) for _ in range(n)],
                                           compression=fmt, op=op)[r]
            return "" if np.array_equal(got, ref) else f"max diff {np.abs(got - ref).max()} vs single-process"
        return check
    for fmt, op in (("fp16", "sum"), ("bf16", "avg"), ("fp8", "sum")):
        checks.append((f"compressed/{fmt}/{op}", compressed(fmt, op)))

    def p2p():
        got = np.zeros(5, np.int64)
        comm.send(np.full(5, r, np.int64), (r + 1) % n)
        comm.recv(got, (r - 1) % n)
        comm.wait_sends()
        return "" if (got == (r - 1) % n).all() else f"got {got}"
    checks.append(("p2p/ring", p2p))

    def fake(aware):
        def check():
            calls = []
            wire = DeviceWire(np, cuda_aware=aware, pinned_empty=np.empty, to_host=lambda h, d: np.copyto(h, d),
                              to_device=lambda d, h: np.copyto(d, h), synchronize=lambda: calls.append(1))
            dev = MPICommunicator(plan=False, wire=wire, abort_on_error=False)
            out = np.empty(1001, np.float32)
            dev.all_reduce(xs[r], out)
            if not np.array_equal(out, total):
                return "fake-device all_reduce differs from NumPy"
            moved = wire.staged["to_host"] + wire.staged["to_device"]
            if aware and moved:
                return f"CUDA-aware path staged {wire.staged}"
            plan = next(iter(dev._programs.values()))[3]   # the RankPlan
            if not aware and (wire.staged["to_host"], wire.staged["to_device"]) != (len(plan.sends), len(plan.recvs)):
                return f"staged path moved {wire.staged}; the rank sends {len(plan.sends)}, receives {len(plan.recvs)}"
            return "" if calls else "device never synchronised"
        return check
    checks += [("fake-device/staged", fake(False)), ("fake-device/cuda-aware", fake(True))]

    def ipc(coll, root, inplace, fallback=False):
        """Zero-copy protocol over the shared-memory twin of CUDA IPC: tokens over MPI, data
        pulled from the peers' mapped buffers; every receive is one pull, every send a token."""
        def check():
            from kernels.mpi.ipc import IpcWire, SharedMemoryIpc

            class OneRankCannot(SharedMemoryIpc):
                def can_map(self, peers):
                    return r != n - 1
            mem = OneRankCannot() if fallback else SharedMemoryIpc()
            wire = IpcWire(mem)
            dev = MPICommunicator(plan=False, wire=wire, abort_on_error=False, timeout_s=30)
            try:
                case = dict(id=f"ipc{coll}{inplace}", coll=coll, dtype="int32", op="sum", count=1001, root=root,
                            inplace=inplace)
                ins = [make_input(case, k, n) for k in range(n)]
                mine = mem.empty(ins[r].size, ins[r].dtype)
                mine[...] = ins[r]
                got = run_case(dev, case, mine, empty=mem.empty)
                want = expected(case, ins, r, n)
                if want is not None and not np.array_equal(got, want):
                    return f"{int(np.count_nonzero(got != want))} wrong elements"
                plan = next(iter(dev._programs.values()))[3]   # the RankPlan
                if fallback:    # the last rank cannot map: nobody may use the token protocol
                    return "" if (wire.enabled, wire.pulls, wire.tokens) == (False, 0, 0) else \
                        f"fallback: enabled={wire.enabled}, {wire.pulls} pulls, {wire.tokens} tokens"
                if (wire.pulls, wire.tokens) != (len(plan.recvs), len(plan.sends)):
                    return f"{wire.pulls} pulls / {wire.tokens} tokens for {len(plan.recvs)} receives / " \
                           f"{len(plan.sends)} sends"
                return ""
            finally:
                comm.barrier()          # peers are done reading this rank's blocks
                mem.close()
        return check
    for coll, root, inplace in (("allreduce", None, False), ("allreduce", None, True), ("reducescatter", None, True),
                                ("allgather", None, False), ("alltoall", None, True), ("broadcast", n - 1, True),
                                ("reduce", 0, False), ("gather", n - 1, False), ("scatter", 0, False)):
        checks.append((f"ipc/{coll}/{'in' if inplace else 'out'}", ipc(coll, root, inplace)))
    checks.append(("ipc/fallback/allreduce", ipc("allreduce", None, False, fallback=True)))

    def persistent(coll, dtype, op, inplace, root):
        """The same buffers in 4 calls, new data each time: from the second call on the
        communicator runs a binding of persistent requests (kernels.mpi.persistent)."""
        def check():
            case = dict(id=f"p{coll}{dtype}{op}{inplace}{root}", coll=coll, dtype=dtype, op=op, count=1001,
                        root=root, inplace=inplace)
            kin = n if coll in ("reducescatter", "scatter", "alltoall") else 1
            kout = n if coll in ("allgather", "gather", "alltoall") else 1
            mine = np.empty(kin * 1001, np_dtype(dtype))
            out = mine if inplace else np.empty(kout * 1001, mine.dtype)
            before, err = comm._runner.bound_calls, ""
            for call in range(4):    # every rank makes all 4 calls, whatever it finds
                ins = [make_input(case, k, n, salt=call) for k in range(n)]
                mine[...] = ins[r]
                kw = {"root": root} if root is not None else {}
                if coll in COMBINING:
                    kw["op"] = op
                name = {"allreduce": "all_reduce", "reducescatter": "reduce_scatter", "allgather": "all_gather",
                        "alltoall": "all_to_all"}.get(coll, coll)
                if coll == "broadcast":
                    getattr(comm, name)(mine, **kw)
                    got = mine
                else:
                    getattr(comm, name)(mine, out, **kw)
                    got = out[r * 1001:(r + 1) * 1001] if coll == "reducescatter" and inplace else out
                want = expected(case, ins, r, n)
                if want is not None and not np.array_equal(got[:want.size].astype(np.float64),
                                                           want.astype(np.float64)):
                    err = err or f"call {call}: {int(np.count_nonzero(got[:want.size] != want))} wrong elements"
            ran = comm._runner.bound_calls - before
            return err or ("" if ran == 3 else f"{ran} of the calls 2-4 ran bound (expected 3)")
        return check
    for args in (("allreduce", "float32", "sum", False, None), ("allreduce", "float16", "avg", True, None),
                 ("allreduce", "int32", "max", False, None), ("reducescatter", "bfloat16", "sum", True, None),
                 ("allgather", "int64", "sum", False, None), ("broadcast", "float32", "sum", True, n - 1),
                 ("reduce", "float64", "prod", False, 0), ("alltoall", "uint8", "sum", False, None)):
        checks.append((f"persistent/{'/'.join(map(str, args))}", persistent(*args)))

    def raises(call, kind, text):
        def check():   # every rank fails the same way before any message is sent
            try:
                call()
            except kind as e:
                return "" if text in str(e) else f"message {e!r} lacks {text!r}"
            return f"no {kind.__name__} raised"
        return check
    from topo_probe.errors import BufferLayoutError
    f4 = np.ones(4, np.float32)
    checks += [("errors/dtype", raises(lambda: comm.all_reduce(f4, np.ones(4)), BufferLayoutError, "dtype")),
               ("errors/root", raises(lambda: comm.reduce(f4, f4, root=n), ValueError, "is not a rank")),
               ("errors/short-out", raises(lambda: comm.all_gather(f4, np.ones(4, np.float32)), ValueError,
                                           "needs at least")),
               ("errors/op", raises(lambda: comm.all_reduce(f4, f4, op="mean"), Exception, "mean")),
               ("errors/alltoall-size", raises(lambda: comm.all_to_all(np.ones(n * 2 + 1), np.ones(n * 2 + 1)),
                                               ValueError, "not a multiple"))]
    return checks


# ---------------------------------------------------------------------- worker (under mpirun)
def worker(out_path: str) -> None:
    from kernels.mpi.communicator import MPICommunicator
    warnings.simplefilter("ignore")
    comm = MPICommunicator.from_mpi(plan=False, timeout_s=30)
    n, r = comm.size, comm.rank
    errors: dict[str, str] = {}
    todo = [(c["id"], c) for c in cases(n)] + extra_cases(comm, n)
    for cid, case in todo:
        try:
            if callable(case):
                err = case()
            else:
                ins = [make_input(case, k, n) for k in range(n)]
                got = run_case(comm, case, ins[r].copy())
                want = expected(case, ins, r, n)
                err = ""
                if want is not None and not np.array_equal(np.asarray(got).astype(np.float64),
                                                           want.astype(np.float64)):
                    bad = int(np.count_nonzero(np.asarray(got).astype(np.float64) != want.astype(np.float64)))
                    err = f"rank {r}: {bad} wrong elements"
        except Exception as exc:  # noqa: BLE001 - reported per case, then the run stops
            err = f"!rank {r}: {type(exc).__name__}: {exc}"
        every = comm.allgather_object(err)
        if any(every):
            errors[cid] = "; ".join(e for e in every if e)
            if any(e.startswith("!") for e in every):  # messages may be out of step: stop here
                errors["_stopped"] = cid
                break
    if r == 0:
        Path(out_path).write_text(json.dumps({"n": n, "errors": errors,
                                              "ran": [cid for cid, _ in todo]}))
    comm.barrier()


FAMILIES = COLLS + ("schedule", "fused", "compressed", "p2p", "fake-device", "ipc", "persistent", "errors")


@pytest.mark.parametrize("n", (2, 3, 4))
def test_collectives_match_numpy_on_every_rank(n, tmp_path):
    """One mpirun per process count (one test, so pytest-xdist never starts it twice); the
    message lists the failing cases per family (collective, schedule, fused, ...)."""
    out = tmp_path / "res.json"
    proc = run_mpi(n, [str(Path(__file__).resolve()), "worker", str(out)], timeout=150)
    assert proc.returncode == 0 and out.exists(), f"mpirun -n {n} worker failed (rc {proc.returncode}): " \
                                                   f"{proc.stderr[-3000:]}"
    res = json.loads(out.read_text())
    errors = res["errors"]
    assert "_stopped" not in errors, f"worker stopped at {errors.get('_stopped')}: {errors}"
    report = []
    for fam in FAMILIES:
        ran = [cid for cid in res["ran"] if cid.split("/")[0] == fam]
        bad = {cid: e for cid, e in errors.items() if cid.split("/")[0] == fam}
        if not ran:
            report.append(f"{fam}: no cases ran")
        elif bad:
            report.append(f"{fam}: {len(bad)} of {len(ran)} cases failed: {dict(list(bad.items())[:5])}")
    assert not report, f"{n} ranks: " + "; ".join(report)


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "worker":
    worker(sys.argv[2])


# ---------------------------------------------------------------------- sweep --backend mpi
def _two_types(cfg, coll):
    """float and int32; sum and avg for reducing collectives (the CLI takes one or all)."""
    cfg.dtypes = ("float", "int32")
    cfg.ops = ("sum", "avg") if coll in COMBINING else ("sum",)
    return cfg


def sweep_worker(coll: str, corrupt: bool, json_path: str) -> None:
    """``run_sweep_mpi`` as the sweep CLI calls it; ``corrupt`` breaks rank 1's reductions."""
    from kernels.mpi import transport as mt
    from kernels.mpi.communicator import MPICommunicator
    from kernels.sweep.mpi_backend import run_sweep_mpi
    warnings.simplefilter("ignore")

    class Corrupt(mt.HostWire):
        def combine(self, dst, acc, src, op):
            super().combine(dst, acc, src, op)
            dst += 1

    from mpi4py import MPI
    wire = Corrupt() if corrupt and MPI.COMM_WORLD.Get_rank() == 1 else None
    comm = MPICommunicator.from_mpi(plan=False, wire=wire, timeout_s=30)
    from kernels.sweep.cli import build_parser
    from synth.cli.nccl_options import make_config  # the exact hook the sweep CLI uses
    argv = [coll, "-b", "8", "-e", "8K", "-f", "4", "-n", "3", "-w", "1", "-c", "1", "-d", "float",
            "-o", "sum", "--backend", "mpi", "--algo", "ring", "-r", "1" if coll in ROOTED else "0"]
    args = build_parser().parse_args(argv)
    status = run_sweep_mpi(lambda n: _two_types(make_config(args, n), coll), args.topology, args.algo,
                           argv=["sweep", *argv], json_path=json_path or args.output_file, comm=comm)
    print(f"STATUS rank {comm.rank} {status}", flush=True)


@pytest.mark.parametrize("coll", ["allreduce", "gather"])
def test_sweep_backend_mpi_prints_one_table_from_rank0(coll, tmp_path):
    out = tmp_path / "sweep.json"
    proc = run_mpi(2, [str(Path(__file__).resolve()), "sweep", coll, "0", str(out)], timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert text.count("# Using devices") == 1 and text.count("# Out of bounds values : 0 OK") == 1
    rows = [ln.split() for ln in text.splitlines() if ln and not ln.startswith(("#", "STATUS"))]
    ops = 2 if coll == "allreduce" else 1
    assert len(rows) == 2 * ops * 6, text          # 2 dtypes x ops x sizes 8, 32, 128, 512, 2048, 8192
    assert all(r[8] == "0" and r[12] == "0" for r in rows), text   # #wrong out of place and in place
    assert sorted(ln for ln in text.splitlines() if ln.startswith("STATUS")) == ["STATUS rank 0 0", "STATUS rank 1 0"]
    doc = json.loads(out.read_text())
    assert doc["topocoll"]["backend"] == "mpi" and len(doc["results"]) == len(rows)
    # one rank per process: nccl-tests under mpirun -n 2 prints nThread 1 nGpus 1 (v2.19.6 util.cu:626-628, 645-646)
    assert "\n# nThread 1 nGpus 1 minBytes 8 " in text and (doc["config"]["nthreads"], doc["config"]["ngpus"]) == (1, 1)
    assert len(doc["config"]["devices"]) == 2


def test_sweep_backend_mpi_counts_wrong_results_on_every_rank(tmp_path):
    proc = run_mpi(2, [str(Path(__file__).resolve()), "sweep", "allreduce", "1", ""], timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln and not ln.startswith(("#", "STATUS"))]
    sums = [r for r in rows if r[3] == "sum"]   # only rank 1 is corrupted: only its checks can see it
    assert sums and all(int(r[8]) == int(r[1]) and int(r[12]) == int(r[1]) for r in sums), proc.stdout
    assert "FAILED" in proc.stdout
    assert sorted(ln for ln in proc.stdout.splitlines() if ln.startswith("STATUS")) == ["STATUS rank 0 1",
                                                                                      "STATUS rank 1 1"]


if __name__ == "__main__" and len(sys.argv) > 4 and sys.argv[1] == "sweep":
    sweep_worker(sys.argv[2], sys.argv[3] == "1", sys.argv[4])

"""A small native-executor case for compute-sanitizer (racecheck, synccheck, memcheck): 4 ranks
sharing GPU 0, ring and direct all_reduce and all_gather and the one-shot all_reduce, launched and replayed, checked
against NumPy; 64-byte tiles deal the ops to the 2 channels in turn, so the kernel's tile loop runs; then the same
under the LL protocol (LL lines between blocks, records of a block in one pass).

    compute-sanitizer --tool racecheck python benchmarks/native_small_case.py
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cupy as cp  # noqa: E402

from kernels.backends.executor import run_schedule  # noqa: E402
from kernels.native.layer import NativeLayer  # noqa: E402
from synth.baselines import baseline  # noqa: E402
from synth.ir.fabric import build_fabric  # noqa: E402
from topo_probe.machines.generators import fully_connected  # noqa: E402

fab = build_fabric(fully_connected(4))
for layer in (NativeLayer(channels=2, tile_bytes=64), NativeLayer(channels=2, protocol="ll")):
    for coll in ("allreduce", "allgather"):
        for base in ("ring", "direct") + (("oneshot",) if coll == "allreduce" else ()):
            sched = baseline(base, fab, coll)
            count = 1000 + 3
            ins = [cp.arange(count, dtype=cp.float32) + r for r in range(4)]
            outs = [cp.zeros(count * (4 if coll == "allgather" else 1), cp.float32) for _ in range(4)]
            for _ in range(3):
                run_schedule(sched, ins, outs, backend=layer)
            host = [cp.asnumpy(x) for x in ins]
            want = np.sum(host, axis=0) if coll == "allreduce" else np.concatenate(host)
            for r in range(4):
                assert np.allclose(cp.asnumpy(outs[r]), want), (layer.protocol, coll, base, r)
print("native small case: OK")

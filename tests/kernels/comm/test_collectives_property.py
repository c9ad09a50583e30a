"""Every Communicator collective against NumPy, drawn by hypothesis: (collective, dtype, count, in
place or not, root, ranks 1..8, topology) on the host path, and the same draws on the GPU route
(``Communicator([0] * n)`` with CuPy replaced by the CPU stand-in of
``tests/kernels/native/_fake_cupy.py``, whose kernel interprets what the native launcher hands
it).  Inputs in NCCL's in-place layouts (all_gather's input = block r of rank r's output,
reduce_scatter's output = block r of rank r's input, the same array otherwise; NCCL's
``ncclAllGather`` / ``ncclReduceScatter`` documentation); outputs off the root are None for
reduce and gather.  Results: :func:`_schedules.check_result` (exact for integers and data
movement, Higham's bound for float sums); every byte of a buffer outside the call's outputs
keeps its value."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from _campaign import examples
from _schedules import alloc_buffers, check_result, make_inputs, topology
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.comm.communicator import Communicator
from synth.ir.collectives import ROOTED

API = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
       "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
       "alltoall": "all_to_all"}
DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64")
TOPOLOGIES = {1: (None,), 2: ("full2",), 3: ("ring3",), 4: ("full4", "hub4", "line4"), 5: ("ring5",),
              6: ("torus2x3",), 8: ("dgx1-v100", "dgx-h100", "pcie-8gpu-2socket", "mi300x")}


def _draw(data) -> dict:
    coll = data.draw(st.sampled_from(sorted(API)), label="collective")
    n = data.draw(st.sampled_from(sorted(TOPOLOGIES)), label="ranks")
    return {"coll": coll, "n": n, "topo": data.draw(st.sampled_from(TOPOLOGIES[n]), label="topology"),
            "dtype": np.dtype(data.draw(st.sampled_from(DTYPES), label="dtype")),
            "count": data.draw(st.sampled_from([0, 1, 2, 3, 7, 33, 130]), label="count"),
            "op": data.draw(st.sampled_from(["sum", "prod", "max", "min", "avg"]), label="op"),
            "root": data.draw(st.integers(0, n - 1), label="root"),
            "inplace": "no" if coll == "alltoall" else data.draw(st.sampled_from(["no", "views", "same"]),
                                                                 label="in place")}


def _call(comm, d: dict, wrap) -> None:
    """Run the drawn call on ``comm`` (each array passed through ``wrap`` once) and check it.
    In place: ``views`` passes NCCL's alias views, ``same`` one array as input and output (the
    Communicator's one-buffer form: rank r's block of it is the view's)."""
    coll, n, count, root, dt = d["coll"], d["n"], d["count"], d["root"], d["dtype"]
    rooted = root if coll in ROOTED else None
    sends = make_inputs(coll, n, count, dt, d["op"], rooted, np.random.default_rng(count * 31 + n))
    sbufs, rbufs = alloc_buffers(coll, n, count, sends, dt, rooted, d["inplace"] != "no", fill=7)
    if coll == "broadcast":          # one buffer per rank: the root's holds the value
        rbufs = [s if s is not None else r for s, r in zip(sbufs, rbufs)]
        sbufs = rbufs
    ins, outs = list(sbufs), list(rbufs)
    if d["inplace"] == "same" and coll in ("allgather", "gather"):
        ins = [r if r is not None else s for s, r in zip(sbufs, rbufs)]
    elif d["inplace"] == "same" and coll in ("reducescatter", "scatter"):
        outs = [s if s is not None else r for s, r in zip(sbufs, rbufs)]
    wrapped = {id(a): wrap(a) for a in ins + outs + rbufs if a is not None}
    ins, outs = ([None if a is None else wrapped[id(a)] for a in arrays] for arrays in (ins, outs))
    checked = [None if a is None else wrapped[id(a)] for a in rbufs]
    untouched = [None if a is None else np.array(a) for a in ins]
    kw = {"op": d["op"]} if coll in ("allreduce", "reducescatter", "reduce") else {}
    kw.update({"root": root} if coll in ROOTED else {})
    kw.update({"count": count} if coll in ("allgather", "reducescatter") and d["inplace"] != "same" else {})
    fn = getattr(comm, API[coll])
    fn(ins, **kw) if coll == "broadcast" else fn(ins, outs, **kw)
    check_result(coll, n, count, [None if s is None else s.copy() for s in sends],
                 [None if o is None else np.asarray(o) for o in checked], d["op"], rooted, dt)
    if d["inplace"] == "no" and coll != "broadcast":
        for r, (a, before) in enumerate(zip(ins, untouched)):
            assert a is None or np.array_equal(np.asarray(a).view(np.uint8), before.view(np.uint8)), \
                f"rank {r}'s input changed"


_HOST: dict = {}


@settings(max_examples=examples(80, 2000))
@given(data=st.data())
def test_host_collectives_answer_numpy(data):
    d = _draw(data)
    key = (d["n"], d["topo"])
    if key not in _HOST:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _HOST[key] = Communicator(d["n"], topology=topology(d["topo"]) if d["topo"] else None, plan=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _call(_HOST[key], d, lambda a: a)


@pytest.fixture(scope="module")
def gpu_route():
    """Communicators whose ranks all sit on GPU 0, with CuPy and its runtime replaced by the
    stand-in (module docstring); yields (communicators by n, the array type)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
    from _fake_cupy import fake_cupy_route

    with pytest.MonkeyPatch.context() as mp:
        yield {}, fake_cupy_route(mp, seed=3)[1]


@settings(max_examples=examples(60, 1000))
@given(data=st.data())
def test_gpu_route_collectives_answer_numpy(gpu_route, data):
    comms, array_type = gpu_route
    d = _draw(data)
    key = (d["n"], d["topo"])
    if key not in comms:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            comms[key] = Communicator([0] * d["n"], topology=topology(d["topo"]) if d["topo"] else None,
                                      plan=False)
    comm = comms[key]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _call(comm, d, lambda a: a.view(array_type))
    if d["n"] > 1 and d["count"]:
        assert comm.last_route.layer == "native", comm.last_route

"""Every command on random connected link matrices of 2-16 GPUs of any diameter (issue 40).

Rings, lines, random trees and partial meshes with uneven multiplicities (1-4 links per pair),
written as link-matrix JSON files as a user would: ``topo-probe``, the synthesis that
``synthesize`` runs (all eight collectives; small solver budgets so the file stays fast),
``simulate --baseline nccl`` and ``sweep --backend sim`` (every collective) all succeed; every saved
schedule verifies; every bandwidth-optimal schedule's pipelined bandwidth term (the busiest
link's load per chunk, recomputed from its transfers by
:func:`synth.solve.bwopt.bandwidth_term.bandwidth_term`) is at least the cut bound and within
1.005 of it (allreduce: of the reduce-scatter then all-gather bound, as in ``test_exact_random``).
The host assumption's pair count is checked against a brute-force hop count (NCCL routes through
at most one intermediate GPU: src/graph/paths.cc).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import random
import tempfile
from pathlib import Path

import networkx as nx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.sweep.cli import main as sweep_main
from synth.cli.simulate import main as simulate_main
from synth.ir.collectives import COLLECTIVES
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule
from synth.ir.verifier import check
from synth.model.bounds import lower_bounds, phased_allreduce_bound
from synth.pipeline.synthesize import SynthesisOptions, run
from synth.solve.bwopt.bandwidth_term import bandwidth_term
from topo_probe.cli.main import main as topo_probe_main
from topo_probe.load import load_topology

#: largest accepted ratio of a bandwidth-optimal schedule's pipelined term to its bound
GOOD = 1.005
#: the collectives the bandwidth-optimal method covers on one host
BWOPT = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")
#: nccl-tests names of the eight collectives, for ``sweep``
SWEEP_NAMES = {"allgather": "all_gather", "reducescatter": "reduce_scatter", "allreduce": "all_reduce",
               "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
               "alltoall": "alltoall"}


def random_link_matrix(seed: int) -> tuple[str, list[list[int]]]:
    """A connected link matrix of 2-16 GPUs: a ring, a line, a random tree or a partial mesh
    (a random tree plus random extra pairs), each pair 1-4 links (uneven)."""
    rng = random.Random(seed)
    n = rng.randint(2, 16)
    shape = rng.choice(["ring", "line", "tree", "mesh"])
    order = list(range(n))
    rng.shuffle(order)
    if shape in ("ring", "line"):
        pairs = list(zip(order, order[1:])) + ([(order[-1], order[0])] if shape == "ring" and n > 2 else [])
    else:
        pairs = [(order[k], order[rng.randrange(k)]) for k in range(1, n)]
        if shape == "mesh":
            pairs += [p for p in itertools.combinations(range(n), 2) if rng.random() < 0.25]
    links = [[0] * n for _ in range(n)]
    for i, j in pairs:
        links[i][j] = links[j][i] = rng.randint(1, 4)
    return f"{shape}{n}-seed{seed}", links


def far_pairs(links) -> int:
    """GPU pairs more than two NVLink hops apart (brute force)."""
    n = len(links)
    g = nx.Graph([(i, j) for i in range(n) for j in range(n) if links[i][j]])
    g.add_nodes_from(range(n))
    return sum(1 for i, d in nx.all_pairs_shortest_path_length(g) for j, h in d.items() if i < j and h > 2)


def _quiet(fn, argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = fn(argv)
    return rc, out.getvalue()


def _check_bandwidth_optimal(out: Path, fabric, root: int) -> None:
    for name in BWOPT:
        s = Schedule.load(out / "schedules" / f"{name}-bwopt.json")
        check(s, fabric)
        achieved = bandwidth_term(s, fabric)
        cut = lower_bounds(fabric, name, root if name in ("broadcast", "reduce") else None).bandwidth_rounds_per_block
        assert achieved >= cut, f"{name}: {achieved} beats the cut bound {cut}"
        bound = phased_allreduce_bound(fabric) if name == "allreduce" else cut
        assert achieved <= GOOD * bound, f"{name}: {achieved} vs bound {bound} ({float(achieved / bound):.4f})"


def _every_command(name: str, links, folder: Path) -> None:
    src = folder / f"{name}.json"
    src.write_text(json.dumps({"format": "link-matrix", "name": name, "links": links, "link_bandwidth_gbps": 25.0}))
    n = len(links)
    rc, text = _quiet(topo_probe_main, ["--topology", str(src)])
    assert rc == 0, text
    assert f"applies to {far_pairs(links)} of {n * (n - 1) // 2} GPU pairs" in text, text[:600]

    topo = load_topology(str(src))
    out = folder / "out"
    opts = SynthesisOptions(time_limit_s=0.5, max_sat_steps=4, max_sat_chunks=2, progress=False, log=lambda s: None)
    summary = run(topo, out, opts)
    assert sorted(summary["collectives"]) == sorted(COLLECTIVES)
    assert "are PHB" in summary["host_assumption"]
    fabric = build_fabric(load_topology(str(out / "topology.json")))
    saved = sorted((out / "schedules").glob("*.json"))
    assert {f.name.split("-")[0] for f in saved} == set(COLLECTIVES)
    for f in saved:
        check(Schedule.load(f), fabric)
    if n > 2:                                  # on 2 GPUs every schedule is one transfer each way
        _check_bandwidth_optimal(out, fabric, opts.root)

    for coll in COLLECTIVES:
        rc, text = _quiet(simulate_main, ["--topology", str(src), "--collective", coll, "--baseline", "nccl",
                                          "-b", "1K", "-e", "1G", "-f", "1024"])
        assert rc == 0, f"simulate {coll}: {text[-400:]}"
        rc, text = _quiet(sweep_main, [SWEEP_NAMES[coll], "--backend", "sim", "--topology", str(src),
                                       "-b", "1K", "-e", "1M", "-f", "1024"])
        assert rc == 0 and "Out of bounds values : 0 OK" in text, f"sweep {coll}: {text[-400:]}"


@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32 - 1))
def test_every_command_succeeds_on_random_link_matrices(seed):
    name, links = random_link_matrix(seed)
    with tempfile.TemporaryDirectory() as folder:
        _every_command(name, links, Path(folder))


def test_the_generator_covers_every_shape_and_diameter():
    """The shapes the property draws from, on a fixed range of seeds: all four, 2 and 16 GPUs,
    diameters from 1 to at least 8, and GPUs more than two hops apart."""
    drawn = [random_link_matrix(s) for s in range(200)]
    shapes = {name.split("-")[0].rstrip("0123456789") for name, _ in drawn}
    sizes = {len(m) for _, m in drawn}
    diameters = {nx.diameter(nx.Graph([(i, j) for i in range(len(m)) for j in range(len(m)) if m[i][j]]))
                 for _, m in drawn}
    assert shapes == {"ring", "line", "tree", "mesh"}
    assert {2, 16} <= sizes and 1 in diameters and max(diameters) >= 8
    assert any(far_pairs(m) for _, m in drawn) and {v for _, m in drawn for r in m for v in r} == {0, 1, 2, 3, 4}

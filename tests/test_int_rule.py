"""One rule for "an integer" (topo_probe.number_rules.is_int) wherever a count, rank or version is checked.

The rule: an int, a NumPy integer or another numbers.Integral is an integer; True/False and 1.0
are not.  Each site below spelt it out by hand before (``isinstance(v, int) and not
isinstance(v, bool)``, or ``v != 1 or isinstance(v, bool)`` for versions), which refused
``numpy.int64(2)`` (a count taken from an array) and took a version of ``1.0`` for 1.  The
reference for "accepted" is the same call with the plain Python int: the result must be equal
and hold plain ints (it serialises to the same JSON).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from synth.baselines import baseline
from synth.ir.fabric import build_fabric
from synth.ir.schedule import Schedule
from synth.plan.size_plan import Plan
from synth.solve.cluster.alltoall import cluster_alltoall
from synth.solve.cluster.compose import hierarchical
from synth.solve.cluster.rooted import hierarchical_rooted
from topo_probe.errors import InvalidArgument, ScheduleFormatError, TopologyError, UnsupportedCollective
from topo_probe.machines.clusters import cluster
from topo_probe.machines.presets import get_preset
from topo_probe.parsers.link_matrix import parse_link_matrix
from topo_probe.topology.serialize import topology_from_dict, topology_to_dict

_CLUSTER: list = []


def cluster_fabric():
    if not _CLUSTER:
        _CLUSTER.append(build_fabric(cluster("dgx-a100", 2, rail_optimized=True)))
    return _CLUSTER[0]


def test_a_numpy_count_builds_the_same_cluster_schedules_and_a_bool_is_refused():
    f = cluster_fabric()
    pairs = [(lambda v: hierarchical(f, "allgather", chunks=v, carried=v)),
             (lambda v: hierarchical_rooted(f, "broadcast", v, pieces_per_gpu=v)),
             (lambda v: cluster_alltoall(f, max_chunks=v))]
    for make in pairs:
        got, want = make(np.int64(1)), make(1)
        assert got == want and got.with_(meta={}).to_json() == want.with_(meta={}).to_json()  # meta: solve time
    with pytest.raises(UnsupportedCollective, match="chunks must be an integer >= 1, got True"):
        hierarchical(f, "allgather", chunks=True)
    with pytest.raises(InvalidArgument, match="root must be a rank in 0..15, got True"):
        hierarchical_rooted(f, "broadcast", True)
    with pytest.raises(UnsupportedCollective, match="max_chunks must be an integer >= 1, got True"):
        cluster_alltoall(f, max_chunks=True)


def test_a_numpy_chunk_count_builds_the_same_baseline_and_a_bool_is_refused():
    f = build_fabric(get_preset("dgx-a100"))
    assert baseline("ring", f, "allgather", chunks=np.int32(2)).to_json() == \
        baseline("ring", f, "allgather", chunks=2).to_json()
    with pytest.raises(InvalidArgument, match="chunks must be an integer >= 1, got True"):
        baseline("ring", f, "allgather", chunks=True)


def test_a_schedule_with_numpy_fields_reads_as_the_plain_one_and_version_1_0_is_refused():
    s = baseline("ring", build_fabric(get_preset("dgx-a100")), "broadcast", root=3)
    doc = s.to_dict()
    numpy_doc = dict(doc, ranks=np.int64(doc["ranks"]), root=np.int16(3),
                     steps=[dict(st, rounds=np.int64(st["rounds"]),
                                 transfers=[{k: (np.int32(v) if isinstance(v, int) else v) for k, v in t.items()}
                                            for t in st["transfers"]]) for st in doc["steps"]])
    back = Schedule.from_dict(numpy_doc, "s.json")
    assert back == s and back.to_json() == s.to_json()
    for bad in (1.0, True):
        with pytest.raises(ScheduleFormatError, match=f"s.json: version {bad} is not supported"):
            Schedule.from_dict(dict(doc, version=bad), "s.json")


def test_a_plan_of_version_1_0_is_refused(tmp_path):
    p = tmp_path / "plan.json"
    p.write_text(json.dumps({"format": "topocoll.plan", "version": 1.0, "entries": []}))
    with pytest.raises(ScheduleFormatError, match=r"plan version 1\.0 is not supported"):
        Plan.load(p)


def test_a_topology_of_version_1_0_is_refused():
    doc = topology_to_dict(get_preset("dgx-a100"))
    assert topology_from_dict(doc) == get_preset("dgx-a100")
    with pytest.raises(TopologyError, match=r"t.json: version 1\.0 is not supported"):
        topology_from_dict(dict(doc, version=1.0), "t.json")


def test_a_numpy_link_matrix_reads_as_the_plain_one_and_a_bool_entry_is_named():
    links = [[0, 2, 1], [2, 0, 1], [1, 1, 0]]
    doc = {"format": "link-matrix", "name": "m", "links": links, "link_bandwidth_gbps": 25.0}
    plain = parse_link_matrix(doc)
    assert parse_link_matrix(dict(doc, links=[[np.int64(v) for v in row] for row in links])) == plain
    with pytest.raises(TopologyError, match=r"m.json: links\[0\]\[1\]: must be a non-negative integer, got True"):
        parse_link_matrix(dict(doc, links=[[0, True, 1], [2, 0, 1], [1, 1, 0]]), source="m.json")


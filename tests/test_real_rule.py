"""One rule for "a real number" (topo_probe.number_rules.is_real), beside the integer rule (is_int).

The rule: an int, a float, a NumPy integer or float, or another numbers.Real is a real number;
True/False, numpy.bool_, complex numbers, strings and None are not.  Each site below spelt it out
by hand before (``isinstance(v, bool) or not isinstance(v, (int, float))``), which refused
``numpy.float32(2.0)`` (a value taken from a float32 array) with a message saying it was out of
range.  The reference for "accepted" is the same call with the plain Python float: the result must
be equal.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.errors import InvalidArgument, TopologyError
from topo_probe.machines.clusters import cluster
from topo_probe.machines.generators import ring
from topo_probe.number_checks import check_float
from topo_probe.number_rules import is_real
from topo_probe.topology.serialize import topology_from_dict, topology_to_dict

ROOT = Path(__file__).resolve().parents[1]


def test_the_rule_by_hand():
    real = [0, -3, 2.5, float("nan"), float("inf"), np.int8(3), np.int64(-1), np.float32(2.0), np.float64(0.5),
            Fraction(1, 3), 10**400]
    other = [True, False, np.bool_(True), 1j, complex(1, 0), "1", b"1", None, Decimal("1"), [1], (1.0,)]
    assert [is_real(v) for v in real] == [True] * len(real)
    assert [is_real(v) for v in other] == [False] * len(other)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.one_of(st.integers(), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3), st.none(),
                 st.complex_numbers(max_magnitude=10)))
def test_the_rule_against_the_types_by_hand(v):
    want = type(v) in (int, float)          # what JSON and Python literals give: a bool is not a number
    assert is_real(v) is want


def test_check_float_takes_a_numpy_float32_as_its_float_and_refuses_a_bool():
    assert check_float(np.float32(2.5), "f", TopologyError, lo=0, hi=9) == check_float(2.5, "f", TopologyError, lo=0,
                                                                                         hi=9) == 2.5
    for bad, why in ((True, "f must be >= 0, got True"), (np.bool_(False), "f must be >= 0, got np.False_"),
                     ("2", "f must be >= 0, got '2'")):
        with pytest.raises(TopologyError, match=f"^{re.escape(why)}$"):
            check_float(bad, "f", TopologyError, lo=0, hi=9)


def test_a_numpy_spine_oversubscription_builds_the_same_cluster_and_a_bool_is_refused():
    want = cluster("dgx-h100", 4, spine_oversubscription=2.0, hosts_per_leaf=2)
    got = cluster("dgx-h100", 4, spine_oversubscription=np.float32(2.0), hosts_per_leaf=2)
    assert got == want and got.graph.edges["leaf0", "spine"]["bandwidth_gbps"] == 400.0     # 2 hosts x 8 x 50 / 2
    # the one number check's form (check_float), as every other number refusal words it; by hand:
    refusals = [(True, "must be >= 1, got True"), ("2", "must be >= 1, got '2'"), (float("nan"), "must be a finite "
                "number, got nan"), (float("inf"), "must be a finite number, got inf"), (0.5, "must be >= 1, got 0.5"),
                (np.float32(0.5), "must be >= 1, got np.float32(0.5)"), (2000, "must be at most 1024, got 2000")]
    for bad, why in refusals:
        with pytest.raises(TopologyError) as exc:
            cluster("dgx-h100", 4, spine_oversubscription=bad, hosts_per_leaf=2)
        assert str(exc.value) == f"cluster: spine_oversubscription {why}", str(exc.value)


@pytest.mark.parametrize("ratio", [3.0, 1.5, 7.0, 1000.0])
def test_a_numpy_float32_spine_oversubscription_divides_as_its_value(ratio):
    """``numpy.float32(3.0)`` is exactly 3: the leaf's uplink is 2 hosts x 8 NICs x 50 GB/s / 3 = 266.666...67 GB/s,
    as with the plain 3.0 (dividing by the float32 itself gave 266.6666564941406: float32 arithmetic)."""
    want = 2 * 8 * 50.0 / ratio                                              # by hand, in Python floats
    for r in (ratio, np.float32(ratio), np.float16(ratio), np.int64(ratio) if ratio.is_integer() else ratio):
        got = cluster("dgx-h100", 4, spine_oversubscription=r, hosts_per_leaf=2)
        assert got.graph.edges["leaf0", "spine"]["bandwidth_gbps"] == want, (type(r), want)
        assert got == cluster("dgx-h100", 4, spine_oversubscription=ratio, hosts_per_leaf=2)


def test_a_numpy_bandwidth_in_a_topology_document_reads_as_the_plain_one_and_a_bool_is_refused():
    doc = topology_to_dict(ring(3))
    plain = topology_from_dict(doc, "t.json")
    links = [dict(ln, bandwidth_gbps=np.float32(ln["bandwidth_gbps"])) for ln in doc["links"]]
    assert topology_from_dict(dict(doc, links=links), "t.json") == plain
    links[0]["bandwidth_gbps"] = True
    with pytest.raises(TopologyError, match=r"^t.json: links\[0\].bandwidth_gbps must be > 0, got True$"):
        topology_from_dict(dict(doc, links=links), "t.json")


def test_no_module_spells_the_rule_out_by_hand():
    """``isinstance(v, bool)`` beside an ``int``/``float`` check outside topo_probe/number_rules.py is the rule
    written again."""
    by_hand = re.compile(r"isinstance\([^()]*,\s*bool\)")
    numeric = re.compile(r"isinstance\([^()]*,\s*\(?\s*(?:int|float)\b")
    found = []
    for package in ("topo_probe", "synth", "kernels"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "topo_probe" / "number_rules.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if by_hand.search(line) and numeric.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}")
    assert found == [], found


@pytest.mark.parametrize("kind", [np.float32, np.float16, np.int32])
def test_a_numpy_nic_speed_in_a_topology_document_is_kept_as_a_plain_float_and_saves(kind, tmp_path):
    """A node's ``speed_gbps`` that passes the real-number rule is kept as the float it checked (as a link's
    ``bandwidth_gbps`` is): a NumPy scalar kept as it was made ``save_topology`` fail with "Object of type float32
    is not JSON serializable".  Reference: the same document with plain floats, written out."""
    from topo_probe.machines.presets import get_preset
    from topo_probe.topology.serialize import save_topology
    doc = topology_to_dict(get_preset("dgx-h100"))
    plain = topology_from_dict(doc, "t.json")
    nodes = [dict(nd, speed_gbps=kind(nd["speed_gbps"])) if nd.get("speed_gbps") is not None else nd
             for nd in doc["nodes"]]
    assert any(nd is not old for nd, old in zip(nodes, doc["nodes"]))     # the NICs carry a speed
    got = topology_from_dict(dict(doc, nodes=nodes), "t.json")
    assert {type(d["speed_gbps"]) for _, d in got.graph.nodes(data=True) if "speed_gbps" in d} == {float}
    save_topology(got, tmp_path / "got.json")
    save_topology(plain, tmp_path / "plain.json")
    assert (tmp_path / "got.json").read_text() == (tmp_path / "plain.json").read_text()
    for bad, shown in ((np.float16("inf"), "np.float16(inf)"), (np.bool_(True), "np.True_")):
        nodes = [dict(nd, speed_gbps=bad) if nd.get("speed_gbps") is not None else nd for nd in doc["nodes"]]
        with pytest.raises(TopologyError) as exc:
            topology_from_dict(dict(doc, nodes=nodes), "t.json")
        line = str(exc.value)
        assert "\n" not in line and line.startswith("t.json: nodes[") and line.endswith(f"got {shown}"), line


@pytest.mark.parametrize("bad, shown", [(True, "True"), (float("inf"), "inf"), ("62.4", "'62.4'"), (None, "None"),
                                        (np.bool_(True), "np.True_"), (0, "0")])
def test_the_upi_bandwidth_of_the_pcie_preset_is_a_real_number(bad, shown):
    """``upi_gbps`` was checked with ``> 0`` only: True and inf built a machine, a string raised a raw TypeError."""
    from topo_probe.machines.presets import pcie_8gpu_2socket
    with pytest.raises(TopologyError) as exc:
        pcie_8gpu_2socket(upi_gbps=bad)
    line = str(exc.value)
    assert "\n" not in line and line.startswith("upi_gbps must be") and line.endswith(f"got {shown}"), line
    want = pcie_8gpu_2socket(upi_gbps=40.0)
    got = pcie_8gpu_2socket(upi_gbps=np.float32(40.0))
    assert got == want and {type(d["bandwidth_gbps"]) for _, _, d in got.graph.edges(data=True)} == {float}


@pytest.mark.parametrize("speed, gen", [(2.5, 1), (8.0, 3), (16.0, 4), (32, 5)])
def test_a_numpy_pcie_link_speed_reads_as_its_value(speed, gen):
    """An np.float32 speed (a value from a NumPy array) was 'unknown' (None); the gens by hand: PCIe 1 is 2.5 GT/s,
    3 is 8, 4 is 16, 5 is 32."""
    from topo_probe.parsers.hardware import pcie_gen_from_speed
    for v in (speed, np.float32(speed), np.float64(speed), np.int64(speed) if float(speed).is_integer() else speed):
        assert pcie_gen_from_speed(v) == gen, (type(v), v)
    assert pcie_gen_from_speed(True) is None and pcie_gen_from_speed(np.bool_(True)) is None


def test_the_mpi_timeout_is_a_real_number_or_its_text():
    from kernels.mpi.waiter import checked_timeout
    from topo_probe.errors import InvalidArgument
    for ok, want in (("2.5", 2.5), (2.5, 2.5), (np.float32(2.5), 2.5), (Fraction(5, 2), 2.5), (3, 3.0)):
        assert checked_timeout(ok) == want and type(checked_timeout(ok)) is float, ok
    huge = 10**400
    for bad in (True, np.bool_(True), float("inf"), "nan", 0, -1.0, 1j, None, huge):
        with pytest.raises(InvalidArgument) as exc:
            checked_timeout(bad, "T")
        shown = "an integer of about 401 digits" if bad is huge else repr(bad)     # a huge one cut, by hand
        assert str(exc.value) == f"T={shown}: expected a finite number of seconds >= 0.001", str(exc.value)


@pytest.mark.parametrize("bad", [True, np.bool_(True), float("inf"), float("nan"), "6", 0, -1.0])
def test_the_bucket_capacity_is_a_finite_real_number(bad):
    """``bucket_mb`` was checked with ``> 0`` only: True planned 1 MiB buckets, inf one bucket."""
    from kernels.comm.fusion import MIB, plan_buckets
    from topo_probe.errors import InvalidArgument
    with pytest.raises(InvalidArgument) as exc:
        plan_buckets([MIB] * 4, "size", bucket_mb=bad)
    line = str(exc.value)
    assert "\n" not in line and line.startswith("plan_buckets: bucket_mb must be"), line
    # the reference: 3 MiB tensors into 6 MiB buckets, by hand two a bucket
    for mb in (6, 6.0, np.float32(6.0), np.int64(6)):
        assert plan_buckets([3 * MIB] * 3, "size", bucket_mb=mb) == [range(0, 2), range(2, 3)]


def test_pipeline_slices_follow_the_integer_rule():
    from synth.model.physics import CostParams
    from topo_probe.errors import InvalidArgument
    got = CostParams(pipeline_slices=(np.int64(1), np.int32(4)))
    assert got == CostParams(pipeline_slices=(1, 4)) and {type(k) for k in got.pipeline_slices} == {int}
    for bad in ((1, True), (1, np.bool_(True)), (1, 2.0), (1, np.float32(2)), (1, 0), (2, 4), (1, "2")):
        with pytest.raises(InvalidArgument) as exc:
            CostParams(pipeline_slices=bad)
        assert str(exc.value).startswith("CostParams.pipeline_slices must be positive integers including 1"), bad


def test_nic_shares_follow_the_real_rule():
    from synth.model.nccl.machine import NcclMachine
    from topo_probe.errors import InvalidArgument
    base = NcclMachine("l40s", "sm89", 8, 2, "pcie", 0, nic_shares=(((7.875, "pcie"),),))
    assert NcclMachine("l40s", "sm89", 8, 2, "pcie", 0, nic_shares=(((np.float32(7.875), "pcie"),),)).nic_shares \
        == base.nic_shares
    for bad in (True, np.bool_(True), float("inf"), float("nan"), -1.0):
        with pytest.raises(InvalidArgument) as exc:
            NcclMachine("l40s", "sm89", 8, 2, "pcie", 0, nic_shares=(((bad, "pcie"),),))
        line = str(exc.value)
        assert "\n" not in line and line.startswith("nic_shares") and "must be" in line, line


@pytest.mark.parametrize("kind", [np.float32, np.float16])
def test_a_numpy_nic_share_models_as_its_plain_float(kind):
    """A NumPy share is kept as the plain float it holds: kept as NumPy, ``share * efficiency`` stays float32 under
    NumPy 2 (NEP 50), so the PCIe-to-NIC rate was float32-rounded, would not save as JSON, and the machine equalled
    its plain twin but hashed differently.  (7.875 above is exact in float32, so the test above cannot see it.)
    Reference: the same machine with the plain Python float."""
    from synth.model.nccl import DEFAULT_PARAMS, NcclMachine
    from synth.model.nccl.pcie_path import pcie_rate_gbs

    def machine(share):
        return NcclMachine("l40s", "sm89", 8, 2, "pcie", 0, pcie_gen=4, pcie_path_gbs=7.875,
                           nic_shares=(((share, "pcie"),),) * 4)

    plain, got = machine(float(kind(3.9))), machine(kind(3.9))
    want = pcie_rate_gbs(plain, DEFAULT_PARAMS, to_nic=True)
    rate = pcie_rate_gbs(got, DEFAULT_PARAMS, to_nic=True)
    assert type(rate) is float and rate == want, (rate, want)
    json.dumps(rate)
    assert {type(s) for run in got.nic_shares for s, _ in run} == {float}
    assert hash(got) == hash(plain)


#: every float field of NcclMachine, at values float32 rounds (so float32 arithmetic downstream shows)
FLOAT_FIELDS = {"nic_gbps": 24.3, "link_gbs": 23.7, "nic_dma_gbs": 21.1, "plugin_latency_us": 150.3,
                "p2p_write_gbs": 19.9, "pcie_path_gbs": 13.3}


@pytest.mark.parametrize("preset", ["dgx-a100", "l40s-8gpu-pcie"])
def test_numpy_float_machine_fields_model_as_their_plain_floats(preset):
    """A NumPy scalar in any float field of NcclMachine is kept as the plain float it holds, as nic_shares are:
    kept as NumPy, float32 * float stays float32 under NumPy 2 (NEP 50), so the model's times were float32-rounded
    and the machine would not save as JSON.  Reference: the same machine with the plain Python floats."""
    from dataclasses import asdict, fields, replace
    from synth.model.nccl import NcclMachine, NcclModel
    assert {f.name for f in fields(NcclMachine) if f.type == "float"} == set(FLOAT_FIELDS)
    base = NcclMachine.from_topology(cluster(preset, nodes=2))
    plain = replace(base, **{k: float(np.float32(v)) for k, v in FLOAT_FIELDS.items()})
    got = replace(base, **{k: np.float32(v) for k, v in FLOAT_FIELDS.items()})
    assert {type(getattr(got, k)) for k in FLOAT_FIELDS} == {float} and got == plain and hash(got) == hash(plain)
    json.dumps(asdict(got))
    for coll in ("allreduce", "allgather", "reducescatter", "broadcast"):
        for size in (1024, 2**20, 2**28):
            want, have = NcclModel(plain).choose(coll, size), NcclModel(got).choose(coll, size)
            assert have == want and type(have.time_us) is float, (coll, size, have, want)


@pytest.mark.parametrize("field", ["nvlink_efficiency", "pcie_efficiency", "cpu_efficiency", "network_efficiency",
                                   "infinity_fabric_efficiency", "launch_us", "step_overhead_us",
                                   "slice_overhead_us", "network_latency_us"])
def test_cost_params_floats_follow_the_real_rule(field):
    """CostParams' efficiencies and µs are real numbers (is_real / check_float): True, numpy.bool_, a string,
    nan and inf are refused in one line naming the field; a NumPy float is kept as the plain float it holds."""
    from synth.model.physics import CostParams
    from topo_probe.errors import InvalidArgument
    got = CostParams(**{field: np.float32(0.5)})
    assert getattr(got, field) == 0.5 and type(getattr(got, field)) is float and got == CostParams(**{field: 0.5})
    for bad in (True, np.bool_(True), "0.5", None, float("nan"), float("inf"), -0.25):
        with pytest.raises(InvalidArgument) as exc:
            CostParams(**{field: bad})
        line = str(exc.value)
        assert "\n" not in line and line.startswith(f"CostParams.{field} must be"), (bad, line)


@pytest.mark.parametrize("field", ["link_gbs", "nic_gbps", "plugin_latency_us", "pcie_path_gbs"])
@pytest.mark.parametrize("value", ["150", None, True, np.bool_(True), 1j])
def test_a_machine_float_field_that_is_not_a_real_number_is_refused_in_one_line(field, value):
    """A string such as "150" was turned into 150.0 without a word (plugin_latency_us has no other check), True into
    1.0: each float field of NcclMachine must be a real number by the one rule, refused in one line naming it."""
    from synth.model.nccl.machine import NcclMachine
    with pytest.raises(InvalidArgument) as err:
        NcclMachine("m", "sm80", 8, 1, "nvswitch", 12, **{field: value})
    assert field in str(err.value) and "\n" not in str(err.value)

"""topo_probe.machines.specs and the machine-shape flags: generator specs, NICs per node, clusters
from the command line (hand-computed link counts and bandwidths)."""

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topo_probe.cli.options import add_machine_arguments, apply_machine_arguments
from topo_probe.errors import TopologyError
from topo_probe.limits import MAX_GPUS
from topo_probe.load import load_topology
from topo_probe.machines.clusters import with_nics
from topo_probe.machines.presets import get_preset
from topo_probe.machines.specs import parse_generator_spec


@pytest.mark.parametrize("spec,gpus,per_gpu_gbps,direct_pairs", [
    ("ring:8", 8, 50.0, 8),            # 2 neighbours x 25
    ("line:4", 4, 25.0, 3),            # end GPU: one neighbour
    ("full:16", 16, 375.0, 120),       # 15 x 25
    ("full:8@64/2", 8, 896.0, 28),     # 7 x 2 x 64
    ("xgmi:8", 8, 448.0, 28),          # MI300X: 7 x 64
    ("torus:4x4", 16, 100.0, 32),      # 4 neighbours x 25; 2 x 16 edges
])
def test_specs_build_the_hand_counted_machine(spec, gpus, per_gpu_gbps, direct_pairs):
    t = load_topology(spec)
    assert t.num_gpus == gpus and t.gpu_bandwidth_gbps(0) == per_gpu_gbps
    pairs = sum(1 for i in range(gpus) for j in range(i + 1, gpus) if t.nvlink_count(i, j))
    assert pairs == direct_pairs
    assert len(t.nodes_of_kind("nic")) == gpus       # one NIC per GPU, so --nodes works


def test_pcie_box_has_no_direct_links_and_crosses_sockets():
    t = load_topology("pcie:8")
    assert all(t.nvlink_count(i, j) == 0 for i in range(8) for j in range(8))
    assert t.smi_label(0, 3) == "PIX" and t.smi_label(0, 4) == "SYS"


@pytest.mark.parametrize("bad", ["ring:1", "full:x", "torus:4", "ring:4x4", "blob:8", "full:8@0", "full:99999"])
def test_bad_specs_are_one_line_topology_errors(bad):
    with pytest.raises(TopologyError) as e:
        load_topology(bad)
    assert "\n" not in str(e.value)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ringfulxtoshbpce:0123456789@./", max_size=14))
def test_any_spec_text_is_a_machine_or_a_topology_error(text):
    try:
        t = parse_generator_spec(text)
    except TopologyError:
        return
    assert 2 <= t.num_gpus <= MAX_GPUS


def _args(*argv):
    p = argparse.ArgumentParser()
    add_machine_arguments(p)
    return p.parse_args(list(argv))


def test_nics_per_node_spreads_nics_over_gpus():
    t = with_nics(get_preset("dgx-h100"), 32, 12.5)          # AWS p5: 32 x 100 Gb/s EFA
    nics = t.nodes_of_kind("nic")
    assert len(nics) == 32 and {t.graph.nodes[n]["speed_gbps"] for n in nics} == {12.5}
    assert sum(t.graph.nodes[n]["speed_gbps"] for n in nics) == 400.0


def test_cluster_from_flags_counts_hosts_nics_and_switches():
    t = apply_machine_arguments(get_preset("dgx-a100"), _args("--nodes", "3", "--nics-per-node", "4",
                                                              "--nic-gbps", "25", "--rail-optimized"))
    assert t.num_gpus == 24 and len(t.nodes_of_kind("nic")) == 12
    assert len(t.nodes_of_kind("net_switch")) == 4             # one per rail
    assert t.path_class(0, 8) == "NET" and t.path_class(8, 9) == "NVL"


def test_flags_without_nodes_leave_the_host_or_change_only_its_nics():
    base = get_preset("dgx-a100")
    assert apply_machine_arguments(base, _args()) is base
    t = apply_machine_arguments(base, _args("--nic-gbps", "50"))
    assert t.num_gpus == 8 and {t.graph.nodes[n]["speed_gbps"] for n in t.nodes_of_kind("nic")} == {50.0}


@pytest.mark.parametrize("argv,msg", [(("--nodes", "0"), "--nodes"), (("--nic-gbps", "-1"), "--nic-gbps"),
                                      (("--nics-per-node", "0"), "--nics-per-node"),
                                      (("--rail-optimized",), "--rail-optimized")])
def test_bad_machine_flags_name_the_flag(argv, msg):
    with pytest.raises(TopologyError, match=msg):
        apply_machine_arguments(get_preset("dgx-a100"), _args(*argv))


def test_net_names_the_transport_of_every_nic_and_the_nccl_model_reads_it():
    from synth.model.nccl.machine import NcclMachine
    from topo_probe.topology.serialize import topology_from_dict, topology_to_dict
    base = get_preset("dgx-h100")
    t = apply_machine_arguments(base, _args("--nodes", "2", "--nics-per-node", "32", "--nic-gbps", "12.5",
                                            "--net", "efa2"))
    assert {t.graph.nodes[n].get("transport") for n in t.nodes_of_kind("nic")} == {"efa2"}
    assert {base.graph.nodes[n].get("transport") for n in base.nodes_of_kind("nic")} == {None}   # a copy
    assert NcclMachine.from_topology(t).net_kind == "efa2"
    assert NcclMachine.from_topology(base).net_kind == "ib"                 # no transport: InfiniBand
    assert NcclMachine.from_topology(t, net_kind="roce").net_kind == "roce"  # an explicit kind wins
    back = topology_from_dict(topology_to_dict(t))                           # saved with the topology
    assert NcclMachine.from_topology(back).net_kind == "efa2"
    doc = topology_to_dict(t)
    nic = next(nd for nd in doc["nodes"] if nd["kind"] == "nic")
    nic["transport"] = "carrier-pigeon"
    with pytest.raises(TopologyError, match=r"nodes\[\d+\]\.transport 'carrier-pigeon' is not one of ib, roce"):
        topology_from_dict(doc, "t.json")


def test_net_needs_nics_and_a_known_kind():
    bare = get_preset("dgx-a100").copy()
    bare.graph.remove_nodes_from(bare.nodes_of_kind("nic"))
    with pytest.raises(TopologyError, match="--net efa: topology 'dgx-a100' has no NICs"):
        apply_machine_arguments(bare, _args("--net", "efa"))
    with pytest.raises(SystemExit):
        _args("--net", "infiniband")


def test_the_nccl_baseline_of_a_sweep_changes_with_the_network(capsys):
    from synth.cli.simulate import main
    base = ["--topology", "dgx-h100", "--nodes", "2", "--nics-per-node", "32", "--nic-gbps", "12.5",
            "--baseline", "nccl", "--collective", "allreduce", "-b", "64K", "-e", "64K"]

    def time_us(extra):
        assert main(base + extra) == 0
        out = capsys.readouterr().out
        row = next(ln.split() for ln in out.splitlines() if ln.strip().startswith("65536"))
        return float(row[5]), out
    ib, out_ib = time_us([])
    efa2, out_efa = time_us(["--net", "efa2"])
    assert "network ib (default)" in out_ib and "network efa2 (--net)" in out_efa
    # EFA v2's per-hop cost (the fitted LL hop latency of the p5 log, about 25 us more than
    # InfiniBand's, on each of the tree's hops) makes a 64 KiB all_reduce tens of µs slower
    assert efa2 > ib + 20, (ib, efa2)


def test_the_fingerprint_tells_transports_apart_and_is_unchanged_without_one():
    base = get_preset("dgx-h100")
    before = base.fingerprint()
    efa = apply_machine_arguments(base, _args("--net", "efa2"))
    ib = apply_machine_arguments(base, _args("--net", "ib"))
    assert len({before, efa.fingerprint(), ib.fingerprint()}) == 3
    assert get_preset("dgx-h100").fingerprint() == before


def test_plans_compare_with_nccl_on_the_same_network_footing_as_our_schedules():
    """synthesize's plan-vs-NCCL times NCCL with InfiniBand's network constants whatever --net
    says (the schedules' cost model has no transport costs, so EFA's would flatter our schedules);
    simulate/sweep, which predict NCCL alone, use the transport."""
    from synth.model.nccl import NcclEnv, NcclMachine, NcclModel
    from synth.plan.versus_nccl import nccl_curve
    shape = ("--nodes", "2", "--nics-per-node", "4", "--nic-gbps", "12.5")
    ib = apply_machine_arguments(get_preset("dgx-a100"), _args(*shape))
    efa = apply_machine_arguments(get_preset("dgx-a100"), _args(*shape, "--net", "efa"))
    sizes = [1024, 1 << 20]
    assert nccl_curve(efa, "allreduce", sizes)["times"] == nccl_curve(ib, "allreduce", sizes)["times"]
    alone = [NcclModel(NcclMachine.from_topology(t), env=NcclEnv()).choose("allreduce", 1024).time_us
             for t in (ib, efa)]
    assert alone[1] > alone[0] + 50


@pytest.mark.parametrize("spec", ["ring:1025", "full:10000", "torus:40x40", "pcie:2000"])
def test_a_spec_past_the_loaders_gpu_limit_is_refused_with_that_limit(spec):
    """Audit 65: specs said "need 2 to 4096 GPUs", then the loader refused 1,025 ("the limits are
    1024").  The spec parser's limit is the loader's (topo_probe.limits.MAX_GPUS)."""
    with pytest.raises(TopologyError) as e:
        load_topology(spec)
    assert f"need 2 to {MAX_GPUS} GPUs" in str(e.value) and "\n" not in str(e.value)
    assert load_topology(f"ring:{MAX_GPUS}").num_gpus == MAX_GPUS      # the largest spec loads

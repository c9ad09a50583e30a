"""cluster() and with_nics() (topo_probe/machines/clusters.py): one NIC limit for the library and the command line,
and a leaf's host count worked out once per cluster.

Before, three NIC limits disagreed: with_nics() and ``--nics-per-node`` took at most 64 NICs a host while cluster()
joined hosts of up to 128 (``MAX_NICS_PER_HOST``), so ``cluster("gb200-nvl72", 2)`` joined its 72 NICs a host but
``--nics-per-node 72`` on the same preset was refused.  A host of the most NICs must build and load back through
load_topology; one more is refused in one line (exit 2 from the CLI).
"""

from __future__ import annotations

import contextlib
import io

import pytest

from topo_probe.cli.main import main
from topo_probe.errors import TopologyError
from topo_probe.limits import MAX_NICS_PER_HOST
from topo_probe.load import load_topology
from topo_probe.machines import clusters
from topo_probe.machines.clusters import cluster, with_nics
from topo_probe.machines.presets import get_preset
from topo_probe.topology.serialize import save_topology


def _cli(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    return rc, err.getvalue()


def test_the_nic_limit_is_a_host_matrix_of_columns():
    """128: as many NICs as a host's ``nvidia-smi topo -m`` matrix has columns (the GB200 NVL72 preset has 72)."""
    assert MAX_NICS_PER_HOST == 128
    assert len(get_preset("gb200-nvl72").nodes_of_kind("nic")) == 72


def test_a_cluster_of_hosts_of_the_most_nics_loads_back_and_one_more_is_refused(tmp_path):
    t = cluster("dgx-a100", 2, 25.0, nics_per_node=128)
    assert len(t.nodes_of_kind("nic")) == 2 * 128           # by hand: 2 hosts x 128 NICs
    save_topology(t, tmp_path / "t.json")
    assert load_topology(str(tmp_path / "t.json")) == t
    one = with_nics(get_preset("dgx-a100"), 128, 25.0)
    save_topology(one, tmp_path / "one.json")
    assert load_topology(str(tmp_path / "one.json")) == one
    for make in (lambda: cluster("dgx-a100", 2, 25.0, nics_per_node=129),
                 lambda: with_nics(get_preset("dgx-a100"), 129, 25.0)):
        with pytest.raises(TopologyError) as exc:
            make()
        # the form of the CLI's refusal ('--nics-per-node must be at most 128 NICs, got 129'): one rule, check_int
        assert str(exc.value) == "NICs per node must be at most 128 NICs, got 129"


@pytest.mark.parametrize("nodes", ["1", "2"])
def test_the_cli_builds_hosts_of_the_most_nics_and_refuses_one_more(tmp_path, nodes):
    path = tmp_path / "c.json"
    shape = ["--topology", "dgx-a100", "--nodes", nodes, "--nic-gbps", "25"]
    rc, err = _cli(shape + ["--nics-per-node", "128", "--json", str(path), "--format", "json"])
    assert rc == 0, err
    want = cluster("dgx-a100", 2, 25.0, nics_per_node=128) if nodes == "2" else with_nics(get_preset("dgx-a100"),
                                                                                           128, 25.0)
    assert load_topology(str(path)).fingerprint() == want.fingerprint()
    rc, err = _cli(shape + ["--nics-per-node", "129", "--json", str(tmp_path / "d.json"), "--format", "json"])
    assert (rc, err) == (2, "topo-probe: error: --nics-per-node must be at most 128 NICs, got 129\n")
    assert not (tmp_path / "d.json").exists()


def test_the_cli_takes_as_many_nics_as_a_preset_has(tmp_path):
    """gb200-nvl72 has 72 NICs a host: ``--nics-per-node 72`` is its own shape, not a refusal."""
    path = tmp_path / "c.json"
    rc, err = _cli(["--topology", "gb200-nvl72", "--nodes", "2", "--nics-per-node", "72", "--json", str(path),
                    "--format", "json"])
    assert rc == 0, err
    back = load_topology(str(path))
    assert back.num_gpus == 144 and len(back.nodes_of_kind("nic")) == 144      # by hand: 2 hosts x 72
    assert back.fingerprint() == cluster("gb200-nvl72", 2).fingerprint()       # its own NICs: the same cluster


def test_hosts_per_leaf_is_worked_out_once_per_cluster(monkeypatch):
    """cluster() checked the leaf size before building (the loader's size limits) and again while building."""
    calls = []
    real = clusters._hosts_per_leaf
    monkeypatch.setattr(clusters, "_hosts_per_leaf", lambda *a: calls.append(a) or real(*a))
    t = cluster("dgx-h100", 5, spine_oversubscription=2.0, hosts_per_leaf=2)
    assert calls == [(2, 8)]                    # 2 hosts a leaf, 8 NICs a host (one shared leaf per group)
    assert sorted(n for n in t.graph if n.startswith("leaf")) == ["leaf0", "leaf1", "leaf2"]   # by hand: 5 / 2 up


def _rule(make) -> str:
    """The part of a refusal after the name of what was refused (``... must be at most 100000 GB/s, got 2e5``)."""
    with pytest.raises(TopologyError) as exc:
        make()
    text = str(exc.value)
    assert "\n" not in text and " must be " in text, text
    return text.split(" must be ", 1)[1]


@pytest.mark.parametrize("flag,value,make", [
    ("--nic-gbps", "0.0005", lambda v: cluster("dgx-a100", 2, v)),          # under MIN_BANDWIDTH_GBPS (1e-3)
    ("--nic-gbps", "100000.5", lambda v: cluster("dgx-a100", 2, v)),        # over MAX_BANDWIDTH_GBPS (1e5)
    ("--nic-gbps", "500000", lambda v: cluster("dgx-a100", 2, v)),          # taken by the CLI's own '< 1e6' before
    ("--nic-gbps", "inf", lambda v: cluster("dgx-a100", 2, v)),
    ("--spine-oversubscription", "0.5", lambda v: cluster("dgx-a100", 2, spine_oversubscription=v)),
    ("--spine-oversubscription", "1024.5", lambda v: cluster("dgx-a100", 2, spine_oversubscription=v)),
    ("--spine-oversubscription", "nan", lambda v: cluster("dgx-a100", 2, spine_oversubscription=v)),
    ("--spine-oversubscription", "inf", lambda v: cluster("dgx-a100", 2, spine_oversubscription=v)),
])
def test_the_cli_and_cluster_refuse_a_number_by_the_same_rule(flag, value, make):
    """``--nic-gbps`` and ``--spine-oversubscription`` are refused by the one number rule (check_float with the limits
    constants), as cluster() refuses the same value: exit 2, one line naming the flag, the rest of the message as
    cluster()'s.  Before, the CLI let 1e5 < G < 1e6 GB/s through to cluster() (whose message named no flag) and
    wrote its own 'must be 1 to 1024 (R:1)' for R."""
    rc, err = _cli(["--topology", "dgx-a100", "--nodes", "2", flag, value])
    assert rc == 2 and err.count("\n") == 1, err
    assert err == f"topo-probe: error: {flag} must be {_rule(lambda: make(float(value)))}\n"


@pytest.mark.parametrize("flag,value", [("--nic-gbps", "0.001"), ("--nic-gbps", "100000"),
                                        ("--spine-oversubscription", "1"), ("--spine-oversubscription", "1024")])
def test_the_cli_takes_the_limits_themselves(flag, value):
    rc, err = _cli(["--topology", "dgx-a100", "--nodes", "2", flag, value])
    assert rc == 0, err


@pytest.mark.parametrize("speed,rule", [(0.0, "must be >= 0.001 GB/s, got 0.0"),
                                        (-1.0, "must be >= 0.001 GB/s, got -1.0"),
                                        (float("nan"), "must be a finite number, got nan"),
                                        ("25", "must be >= 0.001, got '25'"), (1j, "must be >= 0.001, got 1j")])
def test_a_given_nic_speed_is_refused_for_what_it_is(speed, rule):
    """A NIC speed the caller gives is checked as given: before, 0, -1 and nan were refused as 'has no NIC speed
    to copy' / 'has no speed_gbps (nvidia-smi shows none); pass nic_gbps' (it was passed), and a str or complex
    speed raised a bare TypeError from '<=' / '>'."""
    with pytest.raises(TopologyError) as exc:
        cluster("dgx-a100", 2, speed)
    assert str(exc.value) == f"cluster: NIC 'nic0' speed {rule}"
    with pytest.raises(TopologyError) as exc:
        with_nics(get_preset("dgx-a100"), 4, speed)
    assert str(exc.value) == f"NIC speed {rule}"


def test_a_nic_without_a_speed_still_asks_for_one():
    base = get_preset("dgx-a100")
    bare = base.copy()
    for n in bare.nodes_of_kind("nic"):
        del bare.graph.nodes[n]["speed_gbps"]
    with pytest.raises(TopologyError, match=r"^'dgx-a100' has no NIC speed to copy; give the NIC speed"):
        with_nics(bare, 4)
    with pytest.raises(TopologyError, match=r"^cluster: NIC 'nic0' has no speed_gbps \(nvidia-smi shows none\)"):
        cluster(bare, 2)


@pytest.mark.parametrize("hosts", [2, 16])
@pytest.mark.parametrize("flags,named", [(["--nic-gbps", "50"], "--nic-gbps"),
                                         (["--nics-per-node", "4"], "--nics-per-node"),
                                         (["--nics-per-node", "4", "--nic-gbps", "50"], "--nics-per-node")])
def test_nic_flags_without_nodes_refuse_a_saved_multi_host_topology(tmp_path, hosts, flags, named):
    """``--nic-gbps`` / ``--nics-per-node`` without ``--nodes`` reshape one host's NICs (with_nics()).  On a saved
    cluster, with_nics() removed every NIC of every host and hung the new ones on host 0 with no network edge, and
    the CLI wrote a file the loader refuses ('GPUs [8, ...] are cut off'); now exit 2, one line naming the flag,
    nothing written."""
    save_topology(cluster("dgx-h100", hosts), tmp_path / "c.json")
    out = tmp_path / "o.json"
    rc, err = _cli(["--topology", str(tmp_path / "c.json"), *flags, "--json", str(out), "--format", "json"])
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"topo-probe: error: {named} ") and "already spans several hosts" in err, err
    assert not out.exists()


def test_with_nics_refuses_a_multi_host_topology_as_cluster_does():
    two = cluster("dgx-h100", 2)
    for make in (lambda: with_nics(two, 8, 50.0), lambda: with_nics(two, 8), lambda: cluster(two, 2)):
        with pytest.raises(TopologyError, match=r"^(with_nics|cluster): '2xdgx-h100' already spans several hosts$"):
            make()

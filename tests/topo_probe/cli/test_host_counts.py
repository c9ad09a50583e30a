"""Every flag that gives a host count (--nodes, --hosts-per-leaf) is bounded by options.MAX_NODES (4,096 hosts),
refused in one line with exit status 2 before any topology is read, in each command that takes the flags.

Before, only --hosts-per-leaf was bounded; --nodes 4097 was refused only by the GPUs it gives, after the topology
had been loaded (or this machine probed), so a bad file or a slow probe came first.
"""

from __future__ import annotations

import contextlib
import io

import pytest

from kernels.sweep.cli import main as sweep
from synth.cli.simulate import main as simulate
from synth.cli.synthesize import main as synthesize
from topo_probe.cli.main import main as topo_probe
from topo_probe.cli.options import HOST_COUNT_FLAGS, MAX_NODES

COMMANDS = [("topo-probe", topo_probe, "topo-probe: error: "), ("synthesize", synthesize, "synthesize: "),
            ("simulate", simulate, "simulate: error: "), ("sweep", sweep, "sweep: error: ")]
SHAPE = ["--spine-oversubscription", "2"]


def run(main, argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    return rc, err.getvalue()


def test_the_flags_are_the_host_counts_and_the_bound_is_4096():
    assert MAX_NODES == 4096 and [f for f, _ in HOST_COUNT_FLAGS] == ["--nodes", "--hosts-per-leaf"]


@pytest.mark.parametrize("name,main,prefix", COMMANDS, ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize("flag", ["--nodes", "--hosts-per-leaf"])
@pytest.mark.parametrize("value", ["4097", "99999999999999999999"])
def test_a_host_count_past_max_nodes_is_one_line_exit_2_before_the_topology_is_read(name, main, prefix, flag,
                                                                                      value, tmp_path):
    missing = str(tmp_path / "no-such-topology.json")         # read after the flags: its error must not come first
    rc, err = run(main, ["--topology", missing, "--nodes", "2", *SHAPE, flag, value])
    assert rc == 2 and err.splitlines() == [f"{prefix}{flag} must be at most 4096 hosts, got {value}"], err


@pytest.mark.parametrize("flag", ["--nodes", "--hosts-per-leaf"])
def test_a_host_count_below_one_names_its_flag(flag, tmp_path):
    rc, err = run(topo_probe, ["--topology", str(tmp_path / "none.json"), "--nodes", "2", *SHAPE, flag, "0"])
    assert rc == 2 and err == f"topo-probe: error: {flag} must be an integer >= 1, got 0\n"


def test_max_nodes_hosts_per_leaf_is_taken():
    rc, err = run(topo_probe, ["--topology", "dgx-a100", "--nodes", "2", *SHAPE, "--hosts-per-leaf", "4096"])
    assert rc == 0 and err == ""


RUNS = [(topo_probe, ["--topology", "dgx-a100"], 0),
        (sweep, ["all_reduce", "-b", "8", "-e", "8", "--backend", "sim", "--topology", "dgx-a100"], 0),
        (simulate, ["--topology", "dgx-a100", "--collective", "allreduce", "-b", "1M", "-e", "1M"], 0),
        # a folder for the tuner file is refused after the machine is built, before any synthesis: exit 2
        (synthesize, ["--topology", "dgx-a100", "--nccl-tuner-conf", "{tmp}"], 2)]


@pytest.mark.parametrize("main,argv,status", RUNS, ids=[next(n for n, m, _ in COMMANDS if m is r[0]) for r in RUNS])
def test_each_host_count_is_checked_once_per_run(main, argv, status, tmp_path, monkeypatch):
    """The commands checked --nodes and --hosts-per-leaf before reading the topology, and apply_machine_arguments
    checked them again after: one check, the early one (counted at the integer check each host count goes
    through)."""
    import topo_probe.cli.options as options
    seen: list[str] = []
    real = options.check_int

    def counted(value, where, *a, **k):
        seen.append(where)
        return real(value, where, *a, **k)
    monkeypatch.setattr(options, "check_int", counted)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    rc, err = run(main, [*argv, "--nodes", "2", *SHAPE, "--hosts-per-leaf", "1"])
    assert rc == status, err
    assert sorted(seen) == ["--hosts-per-leaf", "--nodes"], seen

"""The "no plan" warning names a ``synthesize`` command that works for the topology it is about.

Before: every warning said ``make one with synthesize --topology ...`` after the topology's name, and the name of a
generated machine is no spec (``synthesize --topology full2`` exits 2; ``full:2`` is the spec).  The reference is
``synthesize`` itself: its own loader (``load_topology`` with ``--gpus``) must rebuild the machine the warning is
about (fingerprint), and once end to end the command run as written makes the plan the next communicator finds."""

from __future__ import annotations

import re
import shlex
import warnings

import numpy as np
import pytest

from kernels.comm.communicator import Communicator
from topo_probe.load import load_topology
from topo_probe.machines.generators import fully_connected
from topo_probe.machines.specs import parse_generator_spec
from topo_probe.topology.serialize import save_topology


def _no_plan_warning(topology, typed=None) -> str:
    """The warning of a communicator's first call without a plan (``topology``: a Topology, or what is typed)."""
    given = typed if typed is not None else topology
    comm = Communicator(topology.num_gpus, topology=given, plan=False)
    x = [np.ones(4, np.float32) for _ in range(topology.num_gpus)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comm.all_reduce(x, [np.empty_like(a) for a in x])
    said = [str(w.message) for w in caught if "no plan for" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]
    return said[0]


def _command(text: str) -> list[str]:
    found = re.search(r"make one with `(synthesize [^`]+)`", text)
    assert found, text
    return shlex.split(found[1])


@pytest.mark.parametrize("made", [
    lambda: load_topology("dgx-a100"),                       # a preset: its name
    lambda: parse_generator_spec("full:2"),                  # a spec: full:2, not the name full2
    lambda: parse_generator_spec("ring:4@50/2"),             # ring4-50gbps-2links
    lambda: parse_generator_spec("torus:2x2"),
    lambda: load_topology("dgx1-v100").subset([0, 1, 4]),    # dgx1-v100[0,1,4]: --gpus 0,1,4
])
def test_the_command_named_loads_the_same_machine_in_synthesize(made):
    topology = made()
    argv = _command(_no_plan_warning(topology))
    assert argv[:2] == ["synthesize", "--topology"] and len(argv) in (3, 5), argv
    gpus = [int(g) for g in argv[4].split(",")] if len(argv) == 5 and argv[3] == "--gpus" else None
    assert load_topology(argv[2], gpus=gpus).fingerprint() == topology.fingerprint(), argv


def test_a_topology_file_is_named_by_its_path(tmp_path):
    path = tmp_path / "my machine.json"                     # a space: quoted as a shell takes it
    save_topology(load_topology("dgx1-v100").subset([0, 1]), path)
    argv = _command(_no_plan_warning(load_topology(str(path)), typed=str(path)))
    assert argv == ["synthesize", "--topology", str(path)]


def test_a_machine_no_command_rebuilds_is_said_to_be_one():
    """``fully_connected(2)`` (what a communicator assumes with no topology) is not ``full:2``, which adds a
    PCIe switch and NICs: the fingerprints differ, so naming ``synthesize --topology full:2`` would make a plan
    the communicator skips."""
    topology = fully_connected(2)
    assert parse_generator_spec("full:2").fingerprint() != topology.fingerprint()
    text = _no_plan_warning(topology)
    assert "no synthesize command rebuilds 'full2'" in text and "make one with" not in text, text
    assert "a spec such as full:2" in text, text


def test_the_command_as_written_makes_the_plan_the_next_communicator_uses(tmp_path, monkeypatch):
    from synth.cli.synthesize import main
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOPOCOLL_RESULTS", raising=False)   # discovery in ./results, where synthesize writes
    topology = parse_generator_spec("full:2")
    argv = _command(_no_plan_warning(topology))
    assert main(argv[1:] + ["--collectives", "allreduce"]) == 0
    comm = Communicator(2, topology=topology, plan="auto")
    assert comm.plan is not None and comm.plan.topology_fingerprint == topology.fingerprint()


@pytest.mark.parametrize("name", ["-m.json", "--gpus", "it's a \"machine\".json"])
def test_a_file_named_like_an_option_or_with_quotes_is_named_so_synthesize_parses_it(tmp_path, monkeypatch, name):
    """A file the user gave by a relative path that starts with ``-`` (``synthesize --topology -m.json`` exits 2:
    argparse reads ``-m.json`` as an option) or holds quotes: the command named, split as a shell does, must parse
    in ``synthesize``'s own argument parser to that file and load the same machine."""
    from synth.cli.synthesize import _parser
    monkeypatch.chdir(tmp_path)
    topology = load_topology("dgx1-v100").subset([0, 1])
    save_topology(topology, tmp_path / name)
    argv = _command(_no_plan_warning(load_topology(name), typed=name))
    args = _parser().parse_args(argv[1:])                   # SystemExit(2) where synthesize refuses the command
    assert args.topology == name and load_topology(args.topology).fingerprint() == topology.fingerprint(), argv

"""sweep flags that did nothing and said nothing: the machine-shape flags (``--nodes``, ``--net``, ...: "applied to
--topology", the help says) without a ``--topology`` ran the fully connected ``-g`` ranks unchanged, status 0; and
``--algo`` beside ``--compare`` was dropped (only the compared algorithms ran).  Each is now one line, status 2,
naming the flag, before any table."""

import pytest

from kernels.sweep.cli import main

SMALL = ["all_reduce", "-b", "8", "-e", "8", "-g", "4", "-n", "1", "-w", "0"]


@pytest.mark.parametrize("extra", [["--nodes", "2"], ["--net", "roce"], ["--nic-gbps", "50"], ["--rail-optimized"],
                                   ["--host-path-class", "SYS"]])
def test_machine_shape_without_a_topology_is_refused(capsys, extra):
    rc = main(SMALL + extra)
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert extra[0] in err and "--topology" in err


def test_machine_shape_with_a_topology_still_applies(capsys):
    """--nodes 2 on dgx-a100 is 16 ranks (the sim backend: nothing runs)."""
    rc = main(["all_reduce", "-b", "8", "-e", "8", "--backend", "sim", "--topology", "dgx-a100", "--nodes", "2"])
    out, _ = capsys.readouterr()
    assert rc == 0 and out.count("#  Rank ") == 16


def test_algo_beside_compare_is_refused(capsys):
    rc = main(SMALL + ["--algo", "tree", "--compare", "ring,direct"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1 and "--algo" in err and "--compare" in err
    assert main(SMALL + ["--algo", "ring", "--compare", "ring,direct"]) == 0       # named in the list: it runs

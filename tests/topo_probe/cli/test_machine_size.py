"""--nodes N joins N hosts: the product with the host's GPUs may not pass MAX_GPUS (1,024,
topo_probe/limits.py). Refused in one line before the cluster is built (4,096 DGX hosts took 38 s
to build, then the 32,768 GPUs were refused downstream; topo-probe then hung drawing them)."""

import contextlib
import io

import pytest

from topo_probe.cli.main import main
from topo_probe.errors import TopologyError
from topo_probe.machines.clusters import cluster


@pytest.mark.parametrize("nodes", ["129", "4096"])
def test_nodes_past_max_gpus_is_one_line_exit_2(nodes):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["--topology", "dgx-a100", "--nodes", nodes])
    n = int(nodes)
    assert rc == 2
    assert err.getvalue() == (f"topo-probe: error: --nodes {n}: {n} hosts of 8 GPUs is {8 * n} GPUs, more than the "
                              f"1024 a topology may have\n")


def test_cluster_refuses_past_max_gpus_and_takes_exactly_max():
    with pytest.raises(TopologyError, match="cluster: nodes 129: 129 hosts of 8 GPUs is 1032 GPUs, more than the 1024"):
        cluster("dgx-a100", 129)
    with pytest.raises(TopologyError, match="cluster: nodes 65: 65 hosts of 16 GPUs is 1040 GPUs"):
        cluster(_host_with_nic(16), 65)
    assert cluster("dgx-a100", 128).num_gpus == 1024


def _host_with_nic(gpus: int):
    from topo_probe.machines.clusters import with_nics
    from topo_probe.machines.specs import parse_generator_spec
    return with_nics(parse_generator_spec(f"pcie:{gpus}"), 1, 25.0)


@pytest.mark.parametrize("nodes", ["0", "-3"])
def test_nodes_below_one_is_one_line_exit_2(nodes):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["--topology", "dgx-a100", "--nodes", nodes])
    assert rc == 2 and err.getvalue() == f"topo-probe: error: --nodes must be an integer >= 1, got {nodes}\n"


@pytest.mark.parametrize("nodes", [0, True, 2.0, "2", None])
def test_cluster_takes_a_whole_host_count_in_the_flags_wording(nodes):
    """The one host-count rule of --nodes (check_hosts): 0 is not "at least 1 GPUs", True is not 1 host and 2.0 or
    "2" not 2 (before: 0 named GPUs, True and 2.0 built clusters, "2" raised ValueError)."""
    with pytest.raises(TopologyError) as e:
        cluster("dgx-a100", nodes)
    assert str(e.value) == f"cluster: nodes must be an integer >= 1, got {nodes!r}"

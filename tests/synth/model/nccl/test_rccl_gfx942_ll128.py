"""When RCCL runs LL128 on gfx942 (MI300X).  The mirrored RCCL 2.21.5 (ROCm/rccl 0cbce2a7 src/graph/tuning.cc:511-514)
enables LL128 by default on gfx90a only; RCCL 2.26.6 (Ahalperin/amd-dev 0d4f8c1 rccl/src/graph/tuning.cc:707-712)
on gfx90a, gfx942 and gfx950, but only where ``topo->ll128Enabled``, which init.cc:1200 clears and only a matched rome
model sets: for gfx942 ``rome_model_81`` (rome_models.cc:577-578, 817: 8 GPUs, 8 NICs, 7 links).  One host matches
model 79 (no NIC: NCCL trims the NICs of a one-host communicator), which leaves LL128 off.  RCCL 2.26.6's CHANGELOG.md
(lines 36-40) dates gfx942 LL128 to RCCL 2.22.3; 2.22-2.25's gate is taken as 2.26.6's (an assumption).  Across hosts RCCL 2.26.6's
``rcclUpdateCollectiveProtocol`` (rccl_wrap.cc:45-63) runs model 5's LL128 band, allreduce above 1048576 B up to
9437184 B, as LL128 there; with LL128 off the same size keeps the "Keep it simple" Simple."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.rccl import gfx942_ll128_enabled, rccl_choose
from topo_probe import cluster, get_preset

TWO_HOSTS = NcclMachine.from_topology(cluster("mi300x", nodes=2))
ONE_HOST_G8 = NcclMachine.from_topology(get_preset("mi300x"), gpus_per_process=8)


def _proto(m: NcclMachine, nbytes: int, version: tuple) -> str:
    return rccl_choose(NcclModel(m, version=version).table, "allreduce", nbytes)[1]


@pytest.mark.parametrize("version, expected", [((2, 21), "Simple"), ((2, 22), "LL128"), ((2, 26), "LL128"),
                                               ((2, 27), "LL128")])
def test_two_mi300x_hosts_ll128_band_by_version(version, expected):
    """4 MiB lies in model 5's LL128 band (1048576, 9437184]: LL128 where ll128Enabled (2.22 on, model 81)."""
    assert _proto(TWO_HOSTS, 4 << 20, version) == expected


def test_band_edges_across_hosts_2_26():
    """(llMin, llMax] = (0, 1048576] is LL, (1048576, 9437184] LL128, above it Simple (rccl_wrap.cc:48-63)."""
    sizes = (1048576, 1048576 + 64, 9437184, 9437184 + 64)
    assert [_proto(TWO_HOSTS, n, (2, 26)) for n in sizes] == ["LL", "LL128", "LL128", "Simple"]


def test_one_host_never_ll128():
    """One host matches model 79 (``nNics = 0``, no ``ll128Enabled``): no LL128 at any RCCL version."""
    assert not gfx942_ll128_enabled(ONE_HOST_G8, (2, 28))
    assert {_proto(ONE_HOST_G8, n, v) for n in (2 << 20, 8 << 20) for v in ((2, 22), (2, 28))} == {"Simple"}


def test_model_81_needs_eight_nics():
    """A host with 4 NICs matches no ll128Enabled model: LL128 stays off even on 2.26."""
    four = NcclMachine.from_topology(cluster("mi300x", nodes=2, nics_per_node=4))
    assert four.visible_nics()[0] == 4 and not gfx942_ll128_enabled(four, (2, 26))


def test_model_81_needs_exactly_eight_nics():
    """A 16-NIC host matches model 84 (rome_models.cc:892-902, no ll128Enabled), not model 81 (nNics == 8)."""
    sixteen = NcclMachine.from_topology(cluster("mi300x", nodes=2, nics_per_node=16))
    assert sixteen.nics_per_node == 16 and not gfx942_ll128_enabled(sixteen, (2, 26))

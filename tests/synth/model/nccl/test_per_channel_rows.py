"""The row choices of NCCL's tuner, against the source lines (NVIDIA/nccl src/graph/tuning.cc): the graph's bus cap
of v2.17.1-1 (lines 153-154: ``compCapIndex == AMPERE`` -> 235, ``== HOPPER`` -> 370, with ``compCapIndex =
minCompCap >= 90 ? HOPPER : minCompCap >= 80 ? AMPERE : VOLTA``, line 115; v2.16.5-1 line 145: exactly 8.0 only, no
Hopper cap; v2.18.1-1: neither), and ``llMaxBws``' row across hosts (v2.24.3-1 lines 213-214: AMD or a mix of CPU
vendors -> 1, else 0; v2.23.4-1 line 151: the rank's own host's vendor)."""

from __future__ import annotations

import pytest

from synth.model.nccl import NcclMachine
from synth.model.nccl.per_channel import graph_bus_gbs, ll_max_bws_row
from topo_probe import cluster


@pytest.mark.parametrize("sm, version, want", [(86, (2, 16, 5), 400.0), (86, (2, 17, 1), 235.0),
                                               (89, (2, 17, 1), 235.0), (90, (2, 16, 5), 400.0),
                                               (90, (2, 17, 1), 370.0), (100, (2, 17, 1), 370.0),
                                               (80, (2, 16, 5), 235.0), (90, (2, 18, 1), 400.0),
                                               (80, (2, 7, 3), 368.0), (86, (2, 7, 3), 400.0)])
def test_graph_bus_cap_by_row(sm, version, want):
    """400 GB/s of graph: 2.17 caps every 8.x at 235 and 9.0 and later at 370; 2.16 only exactly 8.0 (235);
    2.7.3 takes 92 % on exactly 8.0.  The old model capped sm80 alone, never at 370, and left 2.7.3 alone."""
    assert graph_bus_gbs(400.0, sm, version) == pytest.approx(want)


def test_ll_row_across_hosts_mixed_vendor():
    """Across hosts the row is the CPU vendor's: Intel 0, AMD 1, and from 2.24 a mix of vendors 1; before 2.24 a
    mix has no one row (each rank reads its own host's), which the function refuses rather than guess."""
    m = NcclMachine.from_topology(cluster("dgx-h100", nodes=2))
    assert [ll_max_bws_row(m, (2, 24, 3), v) for v in ("intel", "amd", "mixed")] == [0, 1, 1]
    assert ll_max_bws_row(m.with_(nodes=1), (2, 24, 3), "amd") == 2          # one host: the GPU generation's row
    with pytest.raises(ValueError, match="mixed"):
        ll_max_bws_row(m, (2, 23, 4), "mixed")

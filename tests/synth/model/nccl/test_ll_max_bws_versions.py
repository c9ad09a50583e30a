"""NCCL's ``llMaxBws`` rows and its one-host row index change by release (NVIDIA/nccl src/graph/tuning.cc):

- v2.8.3-1 .. v2.14.3-1: two rows (Volta 39, Ampere 87.7), row ``compCap80`` (min == max == 80, v2.8.3-1 lines 75,
  93, 98): sm86 / sm89, Hopper and Blackwell take the Volta row;
- v2.15.1-1 .. v2.16.5-1: a Hopper row equal to Ampere's (87.7, lines 82-86), row 1 for exactly 80, 2 for exactly 90,
  else 0 (line 111);
- v2.17.1-1 .. v2.20.5-1: ``minCompCap >= 90 / >= 80`` (v2.17.1-1 line 115), Hopper still 87.7;
- v2.21.5-1 .. v2.24.3-1: Hopper 141 (v2.21.5-1 lines 86-90), Blackwell (>= 90) on it;
- v2.25.1-1 on: a Blackwell row, 2 x 141 (lines 151-156, line 215).

And Ampere's 235 GB/s graph cap (``if (compCap80) busBw = std::min(busBw, 235.0f)``) is in v2.7.5-1 (line 112) and
v2.7.8-1, not v2.7.3-1.  Ring LL's bus bandwidth is ``min(llMaxBw, busBw x 1/4 all_reduce, 1/3 broadcast on one
node)`` until 2.20, ``x .5`` from 2.21; all_reduce's algorithm bandwidth is bus x 8 / 14, broadcast's bus.
Graph figures below (rings x GB/s) are the model's graph search, checked in each test."""

from __future__ import annotations

import dataclasses

import pytest

from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.channel_caps import ring_channel_cap_gbs
from synth.model.nccl.constants import ll_max_bw_gbs, ll_row_index
from topo_probe import get_preset

H100 = NcclMachine.from_topology(get_preset("dgx-h100"))
B200 = NcclMachine.from_topology(get_preset("hgx-b200"))
A100 = NcclMachine.from_topology(get_preset("dgx-a100"))


def _ring_ll(m: NcclMachine, coll: str, version: tuple) -> tuple[float, float]:
    t = NcclModel(m, version=version).table
    return t.bandwidth[(coll, "ring", "LL")], t.graphs.ring.n_channels * t.graphs.ring.bw_intra


@pytest.mark.parametrize("version, cap", [((2, 12), 39.0), ((2, 16), 87.7), ((2, 18), 87.7), ((2, 22), 141.0)])
def test_hopper_one_host_ring_ll_row_by_version(version, cap):
    """DGX H100: 12 rings x 30 GB/s = 360 GB/s; broadcast LL min(cap, 360 / 3 = 120) until 2.20, min(cap, 180)
    after: 2.12 the Volta row (39: sm90 is not compCap80), 2.15-2.20 the Hopper row at Ampere's 87.7, 2.21 141
    (the old model: 141 at every version).  The execution model's LL cap on its 24 channels is the same figure."""
    bw, graph_bus = _ring_ll(H100, "broadcast", version)
    assert graph_bus == pytest.approx(360.0)
    assert bw == pytest.approx(cap)
    g = NcclModel(H100, version=version).table.graphs
    assert ring_channel_cap_gbs(H100, "LL", g.n_channels, g, "broadcast", version) == pytest.approx(cap)


@pytest.mark.parametrize("version, cap", [((2, 12), 39.0), ((2, 16), 39.0), ((2, 18), 87.7), ((2, 22), 141.0),
                                          ((2, 25), 282.0)])
def test_blackwell_one_host_ring_ll_row_by_version(version, cap):
    """HGX B200 (sm100): broadcast LL is min(cap, graph / 3 or / 2), the graph at least 8 x 90 = 720 GB/s, so the
    row binds: Volta's 39 to 2.16 (not exactly 80 or 90), Hopper's 87.7 / 141 in 2.17-2.24 (>= 90), 282 only from
    2.25 (the old model: 282 at every version)."""
    bw, graph_bus = _ring_ll(B200, "broadcast", version)
    assert graph_bus >= 720.0
    assert bw == pytest.approx(cap)


def test_sm86_takes_the_volta_row_before_2_17():
    """An sm86 GPU on DGX A100's NVSwitch (8 rings x 18 GB/s = 144 GB/s in the model's search; no 235 cap, which
    is for exactly 80): broadcast LL min(row, 144 / 3 = 48) is 39 on 2.12 and 2.16 (Volta row), 48 on 2.18
    (>= 80: Ampere's 87.7 does not bind); the old model gave 48 throughout."""
    sm86 = dataclasses.replace(A100, arch="sm86")
    for version, want in (((2, 12), 39.0), ((2, 16), 39.0), ((2, 18), 48.0)):
        bw, graph_bus = _ring_ll(sm86, "broadcast", version)
        assert graph_bus == pytest.approx(144.0)
        assert bw == pytest.approx(want)


def test_row_index_and_rows_against_the_source():
    """The index rule and the rows as the tags read, case by case."""
    assert [ll_row_index(sm, (2, 8, 4)) for sm in (60, 70, 80, 86, 89, 90, 100)] == [0, 0, 1, 0, 0, 0, 0]
    assert [ll_row_index(sm, (2, 15, 1)) for sm in (70, 80, 86, 90, 100)] == [0, 1, 0, 2, 0]
    assert [ll_row_index(sm, (2, 17, 1)) for sm in (70, 80, 86, 90, 100)] == [0, 1, 1, 2, 2]
    assert [ll_row_index(sm, (2, 25, 1)) for sm in (70, 89, 90, 100)] == [0, 1, 2, 3]
    assert [ll_max_bw_gbs(2, n, (2, 20, 5)) for n in range(3)] == [87.7, 22.5, 19.0]
    assert [ll_max_bw_gbs(2, n, (2, 24, 3)) for n in range(3)] == [141.0, 45.0, 35.0]
    assert [ll_max_bw_gbs(3, n, (2, 25, 1)) for n in range(3)] == [282.0, 90.0, 70.0]
    with pytest.raises(IndexError):
        ll_max_bw_gbs(2, 0, (2, 14, 3))         # two rows only


@pytest.mark.parametrize("version, bus", [((2, 7, 3), 240.0 * 0.92), ((2, 7, 5), 235.0), ((2, 7, 8), 235.0)])
def test_ampere_235_cap_from_2_7_5(version, bus):
    """DGX A100: 12 rings x 20 GB/s = 240 GB/s; 2.7.5 and 2.7.8 cap it at 235 (line 112), 2.7.3 takes 92 % of it
    (v2.7.3-1 line 110 ``if (compCap80) busBw *= 0.92``).  Broadcast LL (no llMaxBws before 2.8): bus / 3; the old
    model left 2.7.5 and 2.7.8 at 80, and (before model71) 2.7.3 at 240 / 3."""
    bw, graph_bus = _ring_ll(A100, "broadcast", version)
    assert graph_bus == pytest.approx(240.0)
    assert bw == pytest.approx(bus / 3)

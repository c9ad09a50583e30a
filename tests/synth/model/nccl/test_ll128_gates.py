"""NCCL's version gates of LL128 (src/graph/tuning.cc ``ncclTopoTuneModel``, NVIDIA/nccl v2.5.6-1 ..
v2.29.3-1): on by default for Volta from 2.5, Ampere from 2.7, Hopper from 2.15, Blackwell from 2.25,
every GPU of compute capability >= 7.0 from 2.27; across nodes through a PXN path only on Hopper and
later, from 2.17.  Each case is the tuning.cc condition of that version read by hand."""

from __future__ import annotations

import pytest

from _paths import ROOT  # noqa: F401  (puts the repository on sys.path)
from synth.model.nccl import NcclMachine, NcclModel
from synth.model.nccl.versions import ll128_default_on
from topo_probe import get_preset


def _ll128(preset: str, version: tuple) -> bool:
    model = NcclModel(NcclMachine.from_topology(get_preset(preset)), version=version)
    return ("ring", "LL128") in model.candidates("allreduce")


@pytest.mark.parametrize("preset, off, on", [
    ("dgx1-v100", (2, 4), (2, 5)),      # v2.5.6-1: ``minCompCap == 70 && maxCompCap == 70``
    ("dgx-a100", (2, 6), (2, 7)),       # v2.7.3-1 adds ``minCompCap == 80 && maxCompCap == 80``
    ("dgx-h100", (2, 14), (2, 15)),     # v2.15.1-1 adds ``minCompCap == 90``
    ("hgx-b200", (2, 24), (2, 25)),     # v2.25.1-1 adds ``case 100`` / ``case 120``
])
def test_ll128_turns_on_at_the_version_that_names_the_gpu(preset, off, on):
    assert not _ll128(preset, off)
    assert _ll128(preset, on)


def test_any_volta_or_later_gpu_from_2_27_and_pxn_only_for_hopper_from_2_17():
    # v2.18.1-1 .. v2.26: ``switch (minCompCap)`` knows 70/80/90(/100/120) only, so Ada (8.9) is off;
    # v2.27.3-1: ``!(minCompCap < 70 || ...)``
    assert not ll128_default_on(89, "PXB", (2, 26)) and ll128_default_on(89, "PXB", (2, 27))
    # ``typeInter <= PATH_PXB || (minCompCap >= 90 && typeInter <= PATH_PXN)`` from v2.17.1-1
    assert [ll128_default_on(90, "PXN", v) for v in ((2, 16), (2, 17))] == [False, True]
    assert not ll128_default_on(80, "PXN", (2, 28))

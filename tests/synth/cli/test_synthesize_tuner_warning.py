"""`synthesize --nccl-tuner-conf` says on stdout, in one line, when the file holds WARNING lines (a smaller
communicator's line more than 2 % slower than NCCL's own modelled pick on some GPU subset: a DGX-1's 2-6 GPU
subsets cross from LL to Simple at different sizes), not only in the file's comments; a file without any says
nothing of it."""

from __future__ import annotations

import re

from _paths import ROOT
from synth.cli.synthesize import _write_tuner_conf
from synth.model.nccl.constants import PROTO_NAMES
from synth.model.nccl.tuner_config import SHAPE_TOLERANCE, _probes, tuner_models
from topo_probe.load import load_topology

P100 = str(ROOT / "tests/fixtures/family/nvsmi_p100x4_driver384_soc.txt")


def _warned(text: str) -> dict:
    """``nRanks -> [(line, ratio, gpus)]`` from the file's own WARNING comments (the line after them)."""
    out: dict = {}
    notes: list[str] = []
    for raw in text.splitlines():
        if raw.startswith("#"):
            notes.append(raw[2:])
            continue
        note = " ".join(notes)
        notes = []
        for m in re.finditer(r"WARNING.*?up to (\d+\.\d+)x slower than NCCL's own on GPUs ([\d,]+)\.", note):
            out.setdefault(int(raw.split(",")[7]), []).append((raw, float(m[1]), m[2]))
    return out


def test_a_dgx1_file_with_warning_lines_says_so_on_stdout(tmp_path, capsys):
    topo, conf = load_topology("dgx1-v100"), tmp_path / "t.conf"
    _write_tuner_conf(topo, conf)
    out = capsys.readouterr().out.strip().splitlines()
    text = conf.read_text()
    warned = _warned(text)
    assert warned, "a DGX-1 file has WARNING lines (docs/nccl-model.md, Help NCCL today)"
    said = [l for l in out if "slower than NCCL's own" in l]
    assert len(said) == 1, out
    worst, gpus = max(((r, g) for v in warned.values() for _, r, g in v), key=lambda x: x[0])
    ranks = ", ".join(map(str, sorted(warned)))
    assert f"{sum(map(len, warned.values()))} lines" in said[0] and f"for {ranks} GPUs of one host" in said[0], said[0]
    assert f"up to {worst:.2f}x" in said[0] and f"--gpus {gpus} " in said[0], said[0]
    # the worst ratio re-timed on that subset's own model at the probe sizes of its warned lines
    subset = tuple(map(int, gpus.split(",")))
    model, _ = tuner_models(topo.subset(subset))
    ratio = 1.0
    for raw, _, _ in warned[len(subset)]:
        coll, lo, hi, algo, proto = raw.split(",")[:5]
        for s in {int(lo), *(p for p in _probes() if int(lo) <= p <= int(hi))}:
            ratio = max(ratio, model.forced(coll, algo, PROTO_NAMES[proto], s).time_us / model.choose(coll, s).time_us)
    assert ratio > 1 + SHAPE_TOLERANCE and round(ratio, 2) == worst, (ratio, worst)


def test_a_file_without_warning_lines_says_nothing_of_them(tmp_path, capsys):
    conf = tmp_path / "t.conf"
    _write_tuner_conf(load_topology(P100), conf)
    out = capsys.readouterr().out
    assert not _warned(conf.read_text()) and "slower than NCCL's own" not in out and out.startswith("wrote "), out

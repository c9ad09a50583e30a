"""`synthesize --nccl-tuner-conf` says on stdout, in one line, when the file holds WARNING lines (a smaller
communicator's line more than 2 % slower than NCCL's own modelled pick on some GPU subset: a DGX-1's 2-6 GPU
subsets cross from LL to Simple at different sizes), not only in the file's comments; a file without any says
nothing of it.  The command it names writes a file for the worst GPUs as a user types it: the machine's own GPU
numbers (``--gpus`` renumbers from 0), its ``--topology`` and ``--nccl-version``."""

from __future__ import annotations

import dataclasses
import re
import shlex

from _paths import ROOT
from synth.cli.synthesize import _parser, _remedy, _topology, _write_tuner_conf
from synth.model.nccl import NcclMachine
from synth.model.nccl.constants import PROTO_NAMES
from synth.model.nccl.tuner_config import SHAPE_TOLERANCE, _probes, tuner_models
from topo_probe.load import load_topology

P100 = str(ROOT / "tests/fixtures/family/nvsmi_p100x4_driver384_soc.txt")


def _warned(text: str) -> dict:
    """``nRanks -> [(line, ratio, gpus, topology name)]`` from the file's own WARNING comments (the line after
    them): GPUs of the file's topology, whose name the comment gives (``of this file's topology (NAME)``)."""
    out: dict = {}
    notes: list[str] = []
    for raw in text.splitlines():
        if raw.startswith("#"):
            notes.append(raw[2:])
            continue
        note = " ".join(notes)
        notes = []
        for m in re.finditer(r"WARNING.*?up to (\d+\.\d+)x slower than NCCL's own on GPUs ([\d,]+) of this "
                             r"file's topology \((.*?)\)\.", note):
            out.setdefault(int(raw.split(",")[7]), []).append((raw, float(m[1]), m[2], m[3]))
    return out


def _written(argv: list[str], conf, capsys) -> tuple:
    """``(topology, file text, stdout lines)`` of the tuner step as ``synthesize argv --nccl-tuner-conf conf``
    runs it (its own parser, topology, NCCL version and machine as typed)."""
    from synth.model.nccl.installed import resolve_nccl_version
    args = _parser().parse_args([*argv, "--nccl-tuner-conf", str(conf)])
    topo, typed = _topology(args)
    _write_tuner_conf(topo, conf, resolve_nccl_version(args.nccl_version, probed=typed.probed)[0], typed)
    return topo, conf.read_text(), capsys.readouterr().out.strip().splitlines()


def _command_machine(line: str) -> tuple:
    """``(args, NCCL machine without its name)`` of the command a warning line ends with, as synthesize parses it."""
    m = re.search(r"write a file for them: (synthesize .*)$", line)
    assert m, line
    args = _parser().parse_args(shlex.split(m[1])[1:])
    return args, dataclasses.replace(NcclMachine.from_topology(_topology(args)[0]), name="")


def _subset_machine(topo, gpus: str):
    return dataclasses.replace(NcclMachine.from_topology(topo.subset(map(int, gpus.split(",")))), name="")


def test_a_dgx1_file_with_warning_lines_says_so_on_stdout(tmp_path, capsys):
    topo, text, out = _written(["--topology", "dgx1-v100"], tmp_path / "t.conf", capsys)
    warned = _warned(text)
    assert warned, "a DGX-1 file has WARNING lines (docs/nccl-model.md, Help NCCL today)"
    said = [l for l in out if "slower than NCCL's own" in l]
    assert len(said) == 1, out
    worst, gpus = max(((r, g) for v in warned.values() for _, r, g, _ in v), key=lambda x: x[0])
    ranks = ", ".join(map(str, sorted(warned)))
    assert f"{sum(map(len, warned.values()))} lines" in said[0] and f"for {ranks} GPUs of one host" in said[0], said[0]
    assert f"up to {worst:.2f}x" in said[0] and f"--gpus {gpus} " in said[0], said[0]
    assert {name for v in warned.values() for *_, name in v} == {"dgx1-v100"}
    # without --gpus the command's GPUs are the file's: it writes the file for the very subset warned about
    args, machine = _command_machine(said[0])
    assert args.topology == "dgx1-v100" and args.nccl_version is None and machine == _subset_machine(topo, gpus)
    # the worst ratio re-timed on that subset's own model at the probe sizes of its warned lines
    subset = tuple(map(int, gpus.split(",")))
    model, _ = tuner_models(topo.subset(subset))
    ratio = 1.0
    for raw, *_ in warned[len(subset)]:
        coll, lo, hi, algo, proto = raw.split(",")[:5]
        for s in {int(lo), *(p for p in _probes() if int(lo) <= p <= int(hi))}:
            ratio = max(ratio, model.forced(coll, algo, PROTO_NAMES[proto], s).time_us / model.choose(coll, s).time_us)
    assert ratio > 1 + SHAPE_TOLERANCE and round(ratio, 2) == worst, (ratio, worst)


def test_the_command_names_the_machines_gpus_its_topology_and_nccl_version(tmp_path, capsys):
    """``--gpus 2-7`` renumbers GPUs 2..7 as 0..5: the file's worst subset 0-based there is the machine's GPUs
    2 higher, and the command must load the same GPUs of the same topology under the same NCCL."""
    topo, text, out = _written(["--topology", "dgx1-v100", "--gpus", "2-7", "--nccl-version", "2.30.3"],
                               tmp_path / "t.conf", capsys)
    warned = _warned(text)
    worst, gpus, name = max(((r, g, n) for v in warned.values() for _, r, g, n in v), key=lambda x: x[0])
    assert name == topo.name == "dgx1-v100[2,3,4,5,6,7]"          # the file's GPU numbers say whose they are
    said = [l for l in out if "slower than NCCL's own" in l]
    mine = ",".join(str(int(g) + 2) for g in gpus.split(","))       # by hand: --gpus 2-7 shifts every GPU by 2
    assert len(said) == 1 and f"worst on GPUs {mine}:" in said[0], (gpus, said)
    args, machine = _command_machine(said[0])
    assert (args.topology, args.gpus, args.nccl_version) == ("dgx1-v100", mine, "2.30.3"), said[0]
    assert machine == _subset_machine(topo, gpus), said[0]
    assert machine != _subset_machine(load_topology("dgx1-v100"), gpus)    # the GPU numbers as the file has them differ
    header = text.split("# collective_type", 1)[0]
    assert said[0].split("write a file for them: ")[1] in header, header


def test_the_command_names_the_default_topology_a_machine_without_gpus_used(monkeypatch):
    """Probing found no GPU: synthesize used the embedded default, so the command names it (without it, the
    command would probe whatever machine it runs on); a probed machine is named by no --topology."""
    import topo_probe.probes
    monkeypatch.setattr(topo_probe.probes, "probe_machine", lambda: (None, ["no nvidia-smi"]))
    args = _parser().parse_args(["--gpus", "1,3"])
    topo, typed = _topology(args)
    assert (topo.num_gpus, typed.probed) == (2, False)
    assert _remedy((1,), typed) == ("synthesize --topology dgx1-v100 --gpus 3 --nccl-tuner-conf FILE", "3")
    monkeypatch.setattr(topo_probe.probes, "probe_machine", lambda: (load_topology("dgx-a100"), []))
    topo, typed = _topology(args)
    assert typed.probed and _remedy((0, 1), typed)[0] == "synthesize --gpus 1,3 --nccl-tuner-conf FILE"


def test_a_file_without_warning_lines_says_nothing_of_them(tmp_path, capsys):
    conf = tmp_path / "t.conf"
    _write_tuner_conf(load_topology(P100), conf)
    out = capsys.readouterr().out
    assert not _warned(conf.read_text()) and "slower than NCCL's own" not in out and out.startswith("wrote "), out


def test_the_summary_counts_every_line_that_changes_nccls_choice(tmp_path, capsys):
    """Help lines change NCCL's modelled choice and so do shared ones (a pair for GPU subsets whose own picks
    differ); the summary once counted the help lines only.  Counted here from the file's comments."""
    _, text, out = _written(["--topology", "dgx1-v100", "--gpus", "0-4"], tmp_path / "t.conf", capsys)
    kinds, notes = [], []
    for raw in text.split("# collective_type", 1)[1].splitlines()[1:]:
        if raw.startswith("#"):
            notes.append(raw[2:])
            continue
        found = set(re.findall(r"\b(help|keep|shared|WARNING)(?: with NVLS| if NVLS is unavailable)?, \d",
                               " ".join(notes)))
        kinds.append("help" if "help" in found else "shared" if found & {"shared", "WARNING"} else "other")
        notes = []
    helps, shared = kinds.count("help"), kinds.count("shared")
    assert helps and shared, kinds
    assert f"changed by {helps} help lines, faster, and {shared} shared," in out[0], (helps, shared, out[0])


def test_a_run_loads_the_topology_and_reads_gpus_once_and_names_the_machines_gpus(tmp_path, monkeypatch, capsys):
    """The tuner step's machine as typed came from --topology and --gpus read a second time (``_as_typed``):
    a run now reads them once, at the topology's loading, and hands the result on.  The command the warning
    names is as before: the machine's own GPU numbers (``--gpus 2-7`` adds 2 to the file's, by hand)."""
    import topo_probe.load
    from synth.cli.synthesize import main
    calls: dict = {"load_topology": 0, "parse_gpu_list": 0}
    for name in calls:
        real = getattr(topo_probe.load, name)

        def counted(*a, _real=real, _name=name, **k):
            calls[_name] += 1
            return _real(*a, **k)
        monkeypatch.setattr(topo_probe.load, name, counted)
    conf = tmp_path / "t.conf"
    assert main(["--topology", "dgx1-v100", "--gpus", "2-7", "--collectives", "allgather", "--time-limit", "2",
                 "--out", str(tmp_path / "o"), "--no-progress", "--nccl-tuner-conf", str(conf)]) == 0
    assert calls == {"load_topology": 1, "parse_gpu_list": 1}, calls
    said = [line for line in capsys.readouterr().out.splitlines() if "slower than NCCL's own" in line]
    warned = _warned(conf.read_text())
    worst, gpus = max(((r, g) for v in warned.values() for _, r, g, _ in v), key=lambda x: x[0])
    mine = ",".join(str(int(g) + 2) for g in gpus.split(","))
    assert len(said) == 1 and said[0].endswith(f"synthesize --topology dgx1-v100 --gpus {mine} --nccl-tuner-conf FILE")

"""The ``synthesize`` command that makes a plan for a topology, as the "no plan" warning names it.

The command must work for the topology the warning is about: a preset by its name (``synthesize --topology
dgx-a100``), a generated machine by its spec (``full:2``: its name ``full2`` is no spec), a file by its path.
The topology as the user typed it (``typed``: a preset, spec or file given to a communicator) is used where known;
else the name is read back as a preset or a spec, kept only where that rebuilds the same machine (fingerprint).
Where nothing does (a machine built in Python, such as the ``fully_connected(n)`` a communicator assumes when
given no topology, which lacks the PCIe switch and NICs ``full:n`` adds), the text says so and names what to pass
instead.

>>> from topo_probe.machines.generators import fully_connected
>>> from topo_probe.machines.specs import parse_generator_spec
>>> plan_command(parse_generator_spec("ring:4@50/2"))
'make one with `synthesize --topology ring:4@50/2`'
>>> plan_command(parse_generator_spec("full:8").subset([0, 1]))
'make one with `synthesize --topology full:8 --gpus 0,1`'
>>> plan_command(fully_connected(2))  # doctest: +NORMALIZE_WHITESPACE
"no synthesize command rebuilds 'full2', a topology made in Python: pass a preset, a spec such as full:2 or a
 topology file as the topology, and run `synthesize --topology` with the same"
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from topo_probe.errors import TopocollError
from topo_probe.topology.model import Topology

#: a generated machine's name (``full2``, ``torus4x4``, ``ring4-50gbps-2links``): its spec's parts
_NAME = re.compile(r"(?P<kind>[a-z]+?)(?P<n>\d+)(?:x(?P<m>\d+))?(?:-(?P<gbps>\d+(?:\.\d+)?)gbps)?"
                   r"(?:-(?P<links>\d+)links)?")
#: a machine cut to some GPUs (:meth:`Topology.subset`: ``dgx-a100[0,1]``): ``--gpus``
_CUT = re.compile(r"(?P<base>[\w.-]+)\[(?P<gpus>\d+(?:,\d+)*)\]")


def spec_of_name(name: str) -> str | None:
    """The generator spec a generated machine's name reads as (``full2`` -> ``full:2``), else None.

    >>> spec_of_name("full2"), spec_of_name("ring4-50gbps-2links"), spec_of_name("torus4x4"), spec_of_name("dgx1")
    ('full:2', 'ring:4@50/2', 'torus:4x4', None)
    """
    from topo_probe.machines.specs import KINDS
    m = _NAME.fullmatch(name)
    if m is None or m["kind"] not in KINDS:
        return None
    return (f"{m['kind']}:{m['n']}" + (f"x{m['m']}" if m["m"] else "") + (f"@{m['gbps']}" if m["gbps"] else "")
            + (f"/{m['links']}" if m["links"] else ""))


def _rebuilds(spec: str, topology: Topology, gpus: str | None = None) -> bool:
    """Whether ``synthesize --topology spec [--gpus gpus]`` loads the same machine as ``topology`` (fingerprint)."""
    from topo_probe.load import load_topology
    try:
        cut = None if gpus is None else [int(g) for g in gpus.split(",")]
        return load_topology(spec, gpus=cut).fingerprint() == topology.fingerprint()
    except TopocollError:
        return False


def plan_command(topology: Topology, typed: str | None = None) -> str:
    """What the "no plan" warning says to run: ``make one with `synthesize --topology X```, or where no command
    rebuilds ``topology``, that and what to pass instead (module docstring).  ``typed``: the topology as the user
    gave it (a preset name, spec or file path), where known."""
    from topo_probe.machines.presets import PRESETS
    from topo_probe.machines.specs import is_generator_spec
    if typed is not None and (typed in PRESETS or is_generator_spec(typed) or Path(typed).is_file()):
        # a path starting with '-' joined by '=' (argparse reads ``--topology -m.json`` as a missing value)
        given = f"--topology={shlex.quote(typed)}" if typed.startswith("-") else f"--topology {shlex.quote(typed)}"
        return f"make one with `synthesize {given}`"
    spec, cut = spec_of_name(topology.name), _CUT.fullmatch(topology.name)
    for candidate in (topology.name, spec):
        if candidate is not None and (candidate in PRESETS or candidate == spec) and _rebuilds(candidate, topology):
            return f"make one with `synthesize --topology {candidate}`"
    base = None if cut is None else cut["base"] if cut["base"] in PRESETS else spec_of_name(cut["base"])
    if base is not None and _rebuilds(base, topology, cut["gpus"]):
        return f"make one with `synthesize --topology {base} --gpus {cut['gpus']}`"
    return (f"no synthesize command rebuilds {topology.name!r}, a topology made in Python: pass a preset, a spec "
            f"such as {spec or f'full:{topology.num_gpus}'} or a topology file as the topology, and run "
            f"`synthesize --topology` with the same")


__all__ = ["plan_command", "spec_of_name"]

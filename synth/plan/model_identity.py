"""Which models made a result: the one identity ``summary.json`` (``options.model``) and ``plan.json``
(``model``) record, and that earlier results must match to be reused (:mod:`synth.pipeline.synthesize`).

The identity is one line, ``results 3, cost model bb99449d8dd8, NCCL model 2.28, code 6b3457645bf6``: the
results version (:data:`RESULTS_VERSION`), the cost model's constants (:func:`synth.model.physics.model_version`),
the NCCL release the NCCL model follows by default and a digest of the models' code (:func:`model_code_digest`).
A plan whose identity differs from :func:`installed_model_version` was made by other models: its decisions between
our schedules and NCCL may be stale (:func:`stale_plan_note`, said once per plan file by the selector).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

#: raise when a change of the solvers, the plan rules or the files written changes what a run
#: produces for the same topology and options: earlier results are then not reused
RESULTS_VERSION = 3

#: the cost model and the NCCL model (``synth/model/``): a plan depends on their code, not only on their constants
MODEL_DIR = Path(__file__).resolve().parent.parent / "model"

#: the longest identity a plan may record (characters; the installed one is about 70)
MAX_MODEL_CHARS = 256


def model_code_digest(model_dir: Path = MODEL_DIR) -> str:
    """12 hex digits of the models' source: every ``*.py`` under ``model_dir`` and the NCCL model's fitted
    constants, each with its path, so results made by another version of the models' code are not reused."""
    h = hashlib.sha256()
    for path in sorted([*model_dir.rglob("*.py"), model_dir / "nccl" / "fitted_params.json"]):
        if path.is_file():
            h.update(path.relative_to(model_dir).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def model_version(digest: str | None = None) -> str:
    """What results depend on besides topology and options: the results version, the cost model's constants, the
    NCCL the model follows by default (NCCL's defaults, never ``NCCL_*``) and the models' code (``digest``, else
    :func:`model_code_digest`, computed afresh: a few ms, it reads ``synth/model/``)."""
    from synth.model.nccl.tuning import NCCL_VERSION
    from synth.model.physics import model_version as cost
    nccl = ".".join(map(str, NCCL_VERSION))
    digest = model_code_digest() if digest is None else digest
    return f"results {RESULTS_VERSION}, cost model {cost()}, NCCL model {nccl}, code {digest}"


def installed_model_version() -> str:
    """:func:`model_version` of the installed code, the models' code digest read once per process (the first time a
    plan recording one is read), so comparing a plan with it costs microseconds per call.  The rest is read on every
    call and the digest is cached per digest function: a test that replaces either (``monkeypatch``) never sees
    another test's value, in any order."""
    return model_version(_digest_once(model_code_digest))


@lru_cache(maxsize=4)
def _digest_once(digest) -> str:
    """``digest()`` (:func:`model_code_digest`, or what replaces it), once per function."""
    return digest()


def stale_plan_note(plan) -> str | None:
    """One line where ``plan`` (a :class:`~synth.plan.size_plan.Plan`) records an identity other than the
    installed one: the file, both identities and the fix; None for a current plan or one recording none
    (hand-written, or made before plans recorded it)."""
    if plan.model is None or plan.model == installed_model_version():
        return None
    from topo_probe.machines.presets import PRESETS
    where = plan.path or "the plan given"
    folder = f" --out {plan.path.parent}" if plan.path is not None else ""
    name = plan.topology_name       # a preset's name is --topology's value; a cluster's (2xdgx-a100), kept
    machine = (name if name in PRESETS     # GPUs' (dgx1-v100[0,1,2]) or a user file's (its stem) is not
               else f"<the file or preset that made {name!r}, with its --gpus/--nodes/--net>" if name else "<machine>")
    return (f"{where}: plan made by other models ({plan.model}; installed: {installed_model_version()}): its "
            f"choices between our schedules and NCCL may be stale; every schedule still runs verified; rerun "
            f"synthesize --topology {machine}{folder} to plan with the installed models")


__all__ = ["RESULTS_VERSION", "MODEL_DIR", "MAX_MODEL_CHARS", "model_code_digest", "model_version",
           "installed_model_version", "stale_plan_note"]

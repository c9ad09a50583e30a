"""kernels.pytorch: the ``topocoll`` torch.distributed backend and a DDP communication hook.

``import kernels.pytorch`` registers the backend for CPU and CUDA devices; then
``torch.distributed.init_process_group("topocoll")`` (or ``"cpu:gloo,cuda:topocoll"``, or
``"cpu:topocoll,cuda:topocoll"``) runs every collective on the plan's schedules, under
``torchrun`` or ``mpirun`` (:mod:`kernels.pytorch.launch`).  This is the only
package of topocoll that imports torch (the ``topocoll[torch]`` extra).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from kernels.pytorch.errors import BadTensor, CollectiveMismatch, TorchBackendError, UnsupportedCall
from kernels.pytorch.launch import env_from_mpi
from kernels.pytorch.process_group import BACKEND_NAME, TopocollProcessGroup, create
from synth.plan.user_warning import skip_frames_under


def register() -> None:
    """Register the ``topocoll`` backend with torch.distributed (done on import; idempotent)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, create, devices=["cpu", "cuda"])


register()
skip_frames_under(os.path.dirname(torch.__file__))   # a plan warning points past torch.distributed, at the user
env_from_mpi()                   # under mpirun: torch's env:// variables from the launcher's

__all__ = ["register", "TopocollProcessGroup", "BACKEND_NAME", "TorchBackendError", "BadTensor",
           "CollectiveMismatch", "UnsupportedCall", "env_from_mpi"]

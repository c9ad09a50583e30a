"""The rank job of test_user_warning's torch test (``_torch_dist.run_job``): a ``topocoll`` process group
without a plan, ``dist.all_reduce`` from this file; each rank returns its recorded warnings and the line of
its own call, read from its frame (``inspect``)."""

from __future__ import annotations

import inspect
import warnings
from datetime import timedelta


def no_plan_job(rank: int, n: int, init: str) -> dict:
    import torch
    import torch.distributed as dist

    import kernels.pytorch  # noqa: F401 - registers the backend
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.init_process_group("topocoll", init_method=init, rank=rank, world_size=n, timeout=timedelta(seconds=60))
        t = torch.ones(8)
        line = inspect.currentframe().f_lineno + 1
        dist.all_reduce(t)
    dist.destroy_process_group()
    return {"want": [__file__, line], "got": [[w.filename, w.lineno, str(w.message)] for w in caught]}

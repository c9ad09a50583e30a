"""pytest from the repository root: the doctests of kernels/pytorch/ need torch (the
``topocoll[torch]`` extra); where it is missing they are not collected (the tests under
tests/kernels/pytorch/ skip with the reason)."""

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["kernels/pytorch/*"]

"""The ``# runs`` lines a sweep prints before its table: which schedule each run of sizes runs, per set of
roots that run the same (what ``algo plan`` alone does not say: a plan's entry, or without one the fastest
baseline at its size by the cost model; ``Row.algorithm`` names the same per row)."""

from __future__ import annotations


def runs_lines(cfg, source, algo: str) -> list[str]:
    """``#`` lines naming the schedule each run of sizes runs (sizes as swept, both ends included:
    ``runs (algo plan): 8 B-32 KiB best:oneshot, 256 KiB-1 MiB best:ring (no plan: ...)``), for the first type;
    one line per set of roots that run the same (``runs (algo plan, roots 1-7): ...``); none for a single local
    rank."""
    from synth.formats.nccl_tests.conventions import DTYPE_BYTES, nccl_dtype
    if source is None:
        return []
    itemsize, by_text = DTYPE_BYTES[nccl_dtype(cfg.dtypes[0])], {}
    for root in cfg.roots():
        by_text.setdefault(_runs_text(cfg, source, root, itemsize), []).append(root)
    return [f"runs (algo {algo}{_roots_text(roots)}): {text}" for text, roots in by_text.items()]


def _runs_text(cfg, source, root: int, itemsize: int) -> str:
    """What :func:`runs_lines` says of one root (-1: unrooted)."""
    from synth.formats.nccl_tests.sizes import size_label
    from synth.sweep.driver import schedule_at
    parts: list[list] = []
    for size in cfg.sizes():
        nbytes = cfg.entry.counts(size, itemsize, cfg.nranks).size
        label = schedule_at(source, cfg.collective, root, nbytes)[1]
        if parts and parts[-1][2] == label:
            parts[-1][1] = nbytes
        else:
            parts.append([nbytes, nbytes, label])
    text = ", ".join(size_label(lo, exact=True) + ("" if hi == lo else f"-{size_label(hi, exact=True)}")
                     + f" {label}" for lo, hi, label in parts)
    why = ""
    if any(label.startswith("best:") for *_, label in parts):
        why = f" ({'no plan' if source.plan is None else 'no plan entry'}: best:X is the fastest baseline at its " \
              f"size by the cost model)"
    return text + why


def _roots_text(roots: list[int]) -> str:
    """``''`` (unrooted), ``, root 3``, ``, roots 1-7`` or ``, roots 0, 2-3``: runs of consecutive roots."""
    if roots == [-1]:
        return ""
    runs: list[list[int]] = []
    for r in roots:
        if runs and runs[-1][1] == r - 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
    return f", root{'s' if len(roots) > 1 else ''} {text}"


__all__ = ["runs_lines"]

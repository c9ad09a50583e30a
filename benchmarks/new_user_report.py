"""The report of ``benchmarks/new_user_pass.py``: a table row per command it ran (exit status against the
expected one, seconds, traceback, files touched outside the command's target), a section on regenerating the
committed results, the commands skipped and why, and ``git status --porcelain`` of the clone afterwards.
Its outcomes are :class:`new_user_pass.Outcome`; a table cell escapes ``|``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from new_user_pass import Outcome

__all__ = ["render", "totals"]


def totals(outcomes: list[Outcome]) -> str:
    ran = [o for o in outcomes if not o.cmd.skip]
    return (f"{len(ran)} commands, {sum(o.failed for o in ran)} failures, {sum(o.traceback for o in ran)} tracebacks, "
            f"{sum(len(o.touched) for o in ran)} files touched outside their target")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(outcomes: list[Outcome], argv: str, head: str, git_status: str, seconds: float, blas: str = "") -> str:
    lines = ["# New-user pass", "", f"Made by `{argv}` on {head}; {seconds:.0f} s in all.", "",
             f"**{totals(outcomes)}**", "",
             "Each command ran under bash in a fresh clone with nothing installed (the four tools are shims that run "
             "this interpreter on the clone); `{out}` is the command's own temporary folder, where the documented "
             "outputs were redirected. Expected exit: 0, or 2 for bad input (one line, no traceback).", "",
             "| command | where | expected | exit | seconds | traceback? | touched outside target | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        if o.cmd.skip or o.cmd.regen:
            continue
        note = "; ".join([x for x in (o.cmd.note, *o.problems) if x])
        lines.append(f"| `{_cell(o.cmd.shell)}` | {o.cmd.label} | {'/'.join(map(str, o.cmd.expect))} | "
                     f"{'-' if o.rc is None else o.rc}{'' if not o.failed else ' **FAIL**'} | {o.seconds:.1f} | "
                     f"{'yes' if o.traceback else 'no'} | {_cell(', '.join(o.touched)) or '0'} | {_cell(note)} |")
    lines += _regen_lines([o for o in outcomes if o.cmd.regen], blas)
    lines += ["", "## Skipped", ""]
    lines += [f"- `{o.cmd.shell}` ({o.cmd.label}): {o.cmd.skip}" for o in outcomes if o.cmd.skip] or ["- none"]
    lines += ["", "## `git status --porcelain` of the clone afterwards", "",
              "```", git_status.rstrip() or "(empty)", "```", ""]
    return "\n".join(lines)


def _regen_lines(outcomes: list[Outcome], blas: str = "") -> list[str]:
    """The section on regenerating the committed results."""
    ran = [o for o in outcomes if not o.cmd.skip]
    clean = sum(not any(p.startswith("git status") for p in o.problems) for o in ran)
    lines = ["", "## Regenerating the committed results", "",
             f"**{len(ran)} of {len(outcomes)} committed results regenerated, {clean} with `git status` of their "
             f"folder clean, {sum(o.failed for o in ran)} failures**", "",
             "Each `results/<name>/` holding a `summary.json` of `synthesize`, regenerated in the clone with "
             "`--force` and the topology, collectives, root and time limit its summary records. Expected: exit 0, "
             "`git status --porcelain` of the folder empty, and no file written but its `nccl_tuner.conf`."
             + (f" BLAS in the clone's environment: {blas}." if blas else ""), "",
             "| folder | command | exit | seconds | files written | problems |", "|---|---|---|---|---|---|"]
    for o in ran:
        lines.append(f"| `{o.cmd.regen}/` | `{_cell(o.cmd.shell)}` | {'-' if o.rc is None else o.rc}"
                     f"{' **FAIL**' if o.failed else ''} | {o.seconds:.1f} | {_cell(', '.join(o.written)) or '0'} | "
                     f"{_cell('; '.join(o.problems)) or '-'} |")
    return lines

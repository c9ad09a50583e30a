"""Paths as committed results show them: never this machine's own folders.

A results file is read from a clone, so a command line or a log it records names the repository's
files by their path in the repository, the temporary folder as ``<tmp>``, the repository itself (where
a tool prints it whole) as ``<repo>``, the Python environment as ``<venv>`` and the home folder as ``~``.

* ``shown_path(path)``: one path, shown that way;
* ``shown_command(prefix, argv)``: a benchmark's command line (``--out /tmp/x`` -> ``--out <tmp>/x``);
* ``script_command(__file__, argv)``: the line a benchmark records for its own run, the script by its path in the
  repository (``python benchmarks/bench_p2p.py --out <tmp>/x``); ``mpirun_python(ranks, cores)`` its prefix
  under mpirun;
* ``scrub(text)``: every such prefix inside free text (logs, tracebacks);
* ``python benchmarks/shown_paths.py``: ``scrub`` as a line filter, for the GPU shell scripts' logs
  (``cmd 2>&1 | python3 benchmarks/shown_paths.py | tee "$OUT/log.txt"``).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["ROOT", "mpirun_python", "script_command", "scrub", "shown_command", "shown_path"]


#: A system interpreter's prefix holds every other tool of the machine too (/usr/local/cuda, /usr/bin/nvidia-smi):
#: there only its Python library folders (``lib/python3...``) stand for the environment.
SYSTEM_PREFIXES = ("/usr", "/usr/local")
_PYTHON_LIB = r"/lib/python3[\w.]*(?![\w.-])"


def _home() -> Path | None:
    """The home folder, or None where there is none to find (no HOME and no password entry: a container's bare id)."""
    try:
        return Path.home()
    except (RuntimeError, KeyError):
        return None


def _prefixes() -> list[tuple[str, str, str]]:
    """(machine prefix, placeholder, what must follow the prefix: a regular expression, '' for anything), longest
    first, each both as given and resolved (symlinks)."""
    env = (Path(sys.prefix), "<venv>", _PYTHON_LIB if os.path.realpath(sys.prefix) in SYSTEM_PREFIXES
           or sys.prefix in SYSTEM_PREFIXES else "")
    named = [(ROOT, "<repo>", ""), env, (Path(tempfile.gettempdir()), "<tmp>", ""), (Path("/tmp"), "<tmp>", "")]
    home = _home()
    named += [(home, "~", "")] if home is not None else []
    out: dict[str, tuple[str, str]] = {}
    for path, placeholder, follow in named:
        for form in (str(path), os.path.realpath(path)):
            if len(form) > 1 and form not in out:          # never "/" itself
                out[form] = (placeholder, follow)
    return sorted(((k, *v) for k, v in out.items()), key=lambda kv: -len(kv[0]))


def shown_path(path: str | os.PathLike) -> str:
    """``path`` as a results file shows it: relative inside the repository, else with its machine prefix
    replaced by ``<tmp>``, ``<venv>`` or ``~``; a relative path or one under no such prefix as given."""
    text = os.fspath(path)
    if not os.path.isabs(text):
        return text
    for prefix, placeholder, follow in _prefixes():
        if follow and not re.match(re.escape(prefix) + follow, text):
            continue
        if text == prefix or text.startswith(prefix + os.sep):
            rest = text[len(prefix):].lstrip(os.sep)
            if placeholder == "<repo>":
                return rest or "."
            return placeholder + ("/" + rest if rest else "")
    return text


def _shown_arg(arg: str) -> str:
    name, eq, value = arg.partition("=")
    if eq and name.startswith("-") and os.path.isabs(value):       # --out=/tmp/x
        return f"{name}={shown_path(value)}"
    return shown_path(arg) if os.path.isabs(arg) else arg


def shown_command(prefix: str, argv: list[str]) -> str:
    """``prefix`` and ``argv`` joined by spaces, every absolute path in ``argv`` through ``shown_path``."""
    return " ".join([prefix, *(_shown_arg(a) for a in argv)]).strip()


def script_command(script_file: str | os.PathLike, argv: list[str], prefix: str = "python") -> str:
    """The command line a benchmark records for its own run: ``prefix``, the script ``script_file`` (its
    ``__file__``) by its path in the repository, then ``argv`` through ``shown_command``."""
    return shown_command(f"{prefix} {shown_path(os.path.realpath(script_file))}", argv)


def mpirun_python(ranks: int, cores: int) -> str:
    """``script_command``'s prefix for a run of ``ranks`` ranks on a machine of ``cores`` cores:
    ``mpirun -n 2 python``, with ``--oversubscribe`` where the ranks outnumber the cores."""
    over = " --oversubscribe" if ranks > cores else ""
    return f"mpirun{over} -n {ranks} python"


def _patterns() -> list[tuple[re.Pattern, str]]:
    return [(re.compile(r"(?<![\w./-])" + re.escape(prefix) + (f"(?={follow})" if follow else r"(?![\w.-])")),
             placeholder) for prefix, placeholder, follow in _prefixes()]


def _scrubbed(text: str, patterns: list[tuple[re.Pattern, str]]) -> str:
    for pattern, placeholder in patterns:
        text = pattern.sub(placeholder, text)
    return text


def scrub(text: str) -> str:
    """``text`` with every machine prefix (repository, environment, temporary and home folder) replaced
    by its placeholder; a path inside the repository keeps ``<repo>/`` so a traceback still reads as one."""
    return _scrubbed(text, _patterns())


def main() -> int:
    """The filter, line by line as they come.  Everything that could fail (the prefixes) is settled before the
    first byte is read, so the GPU scripts' fallback (``|| cat``) still gets the whole log."""
    sys.stdin.reconfigure(errors="surrogateescape")        # a log's stray bytes pass through as they came
    sys.stdout.reconfigure(errors="surrogateescape")
    patterns = _patterns()
    for line in sys.stdin:
        sys.stdout.write(_scrubbed(line, patterns))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

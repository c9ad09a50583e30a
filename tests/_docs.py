"""Reading the documents people follow (not a test module): their Python examples and their shell
commands, as ``tests/test_docs.py`` checks them and ``benchmarks/new_user_pass.py`` runs them.

Shell commands are the lines of ```bash / ```console / ```sh fences and of indented (4-space)
blocks, a ``$ `` prompt removed, lines ending in ``\\`` joined with the next; blank lines and
lines that are only a comment are not commands.

>>> shell_commands("Run:\\n\\n    sweep a -b 8 \\\\\\n          -e 64   # note\\n    # a comment\\n\\ntext")
[(3, 'sweep a -b 8 -e 64   # note')]
>>> python_snippets("```python\\nprint(1)\\n```")
['print(1)\\n']
"""

from __future__ import annotations

import re

SHELL_FENCES = ("bash", "console", "sh", "shell")
_FENCE = re.compile(r"^```(\w*)\s*$")


def python_snippets(text: str) -> list[str]:
    """The bodies of the ```python fences, in order."""
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _shell_lines(text: str) -> list[tuple[int, str]]:
    out, fence, prev_blank, in_block = [], None, True, False
    for no, line in enumerate(text.splitlines(), 1):
        if fence is None and _FENCE.match(line):
            fence = _FENCE.match(line).group(1) or "text"
        elif fence is not None:
            if line.startswith("```"):
                fence = None
            elif fence in SHELL_FENCES:
                out.append((no, line))
        elif line.startswith("    ") and line.strip() and (prev_blank or in_block):
            in_block = True
            out.append((no, line[4:]))
        elif line.strip():
            in_block = False
        prev_blank = not line.strip()
    return out


def shell_commands(text: str) -> list[tuple[int, str]]:
    """``(line number, command)`` for every shell command of the document (module docstring)."""
    out, pending = [], None
    for no, line in _shell_lines(text):
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        if pending is not None:
            start, head = pending
            line, no = f"{head} {line}", start
        if line.endswith("\\"):
            pending = (no, line[:-1].rstrip())
            continue
        pending = None
        if line and not line.startswith("#"):
            out.append((no, line))
    return out

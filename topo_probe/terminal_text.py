r"""Pasted terminal text as a terminal shows it: colour sequences taken out, positions named in the user's file.

``nvidia-smi`` writes ECMA-48 colour sequences (CSI: ``ESC [ ... m``) into its output, even into a file (drivers
590 to 610 underline the header row).  :func:`shown_text` takes them out; any other control character is an error
naming its place.  A place is the line of the file (``\r\n`` and ``\r`` ends count as one line end, as editors
count them) and the column in the text as shown: a colour sequence takes no column on a terminal and a tab
reaches the next multiple of 8 columns (:func:`shown_column`), so on a line that held a colour sequence the column
is not the character's offset in the file, and :meth:`ShownText.where` says so (other lines: the character's
offset, as editors count).

>>> shown = shown_text("\x1b[4mGPU0\x1b[0m\tGPU1\r\nGPU0\tGPU1", "t.txt", ValueError)
>>> shown.lines, shown.where(1, 6), shown.where(2, 6)
(['GPU0\tGPU1', 'GPU0\tGPU1'], 'line 1 column 9 (in the text as shown, colour codes not counted)', 'line 2 column 6')
>>> shown_text("GPU0\n \x1b[1mGPU\x071", "t", ValueError)
Traceback (most recent call last):
...
ValueError: t: line 2 column 5 (in the text as shown, colour codes not counted): control character U+0007 is not text
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: an ECMA-48 control sequence (CSI: ESC [, bytes 0x30-0x3F, then 0x20-0x2F, a final 0x40-0x7E): colours, underlines
CSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
#: C0 controls but tab and the line ends, DEL and C1 controls: none is in text a tool printed for a reader
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
#: what a place on a line that held colour sequences adds after its column
SHOWN_COLUMN = " (in the text as shown, colour codes not counted)"


def shown_column(text: str, column: int) -> int:
    r"""The terminal column (1-based) of character ``column`` (1-based) of ``text``: tabs to the next multiple of 8
    columns, as a terminal shows them (and as :mod:`~topo_probe.parsers.nvsmi_matrix` reads rows by position).

    >>> shown_column("GPU0\tGPU1", 6), shown_column("\tX", 2), shown_column("abc", 2)
    (9, 9, 2)
    """
    return len(text[:column - 1].expandtabs(8)) + 1


def place(line: int, column: int, coloured: bool) -> str:
    """``line L column C``, with :data:`SHOWN_COLUMN` when the line held colour sequences."""
    return f"line {line} column {column}" + (SHOWN_COLUMN if coloured else "")


@dataclass(frozen=True)
class ShownText:
    """The lines of a text as a terminal shows them and the (1-based) numbers of those that held colour sequences."""

    lines: list[str]
    coloured: frozenset[int] = frozenset()

    def where(self, line: int, column: int) -> str:
        """:func:`place` of ``column`` (1-based, in :attr:`lines`) on file line ``line`` (1-based); on a line that
        held colour sequences the column a terminal shows (:func:`shown_column`)."""
        if line in self.coloured and 0 < line <= len(self.lines):
            return place(line, shown_column(self.lines[line - 1], column), True)
        return place(line, column, False)


def editor_lines(text: str) -> list[str]:
    r"""``text`` split into lines as an editor numbers them: a line ends at ``\n``, ``\r\n`` or ``\r`` and nowhere
    else (a form feed or U+2028, where :meth:`str.splitlines` also breaks, stays inside its line).

    >>> editor_lines("a\r\nb\x0cc\rd")
    ['a', 'b\x0cc', 'd']
    """
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def shown_text(text: str, source: str, error: type[Exception]) -> ShownText:
    """The :class:`ShownText` of ``text``; any control character other than a colour sequence, tab or line end is
    ``error`` naming ``source`` and its place (:meth:`ShownText.where`)."""
    lines = editor_lines(text)
    coloured = set()
    for n, line in enumerate(lines):
        if _CONTROL.search(line):
            shown = CSI.sub("", line)
            bad = _CONTROL.search(shown)
            if bad:
                col = shown_column(shown, bad.start() + 1) if shown != line else bad.start() + 1
                raise error(f"{source}: {place(n + 1, col, shown != line)}: control character "
                            f"U+{ord(bad.group()):04X} is not text")
            lines[n] = shown
            coloured.add(n + 1)
    return ShownText(lines, frozenset(coloured))


__all__ = ["CSI", "SHOWN_COLUMN", "ShownText", "editor_lines", "place", "shown_column", "shown_text"]

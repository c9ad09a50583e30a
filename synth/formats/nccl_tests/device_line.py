"""One nccl-tests device line, ``#  Rank  0 Group  0 Pid  1234 on host device  0 [0000:07:00] NVIDIA A100``.

nccl-tests prints one per rank (v2.19.6 src/util.cu line 687: ``#  Rank %2d Group %2d Pid %6d on %10s device %2d
[%04x:%02x:%02x] %s``) and reads it back in the same shape (line 428).  Older builds leave out ``Group`` and
``Pid``; the text between the brackets is whatever the build printed (``0x07``, ``0000:07:00``, our own ``cpu``).
:class:`Device` is that line, for both sides: the sweep's backends make one per rank and the writer prints it
(:meth:`Device.line`); the log reader parses it (:func:`parse_device_line`).

A line that begins as a device line (``#  Rank R [Group G] [Pid P] on ``) but does not end as one (no device
number, no closing bracket, a number of more than 9 digits) is an error naming the line: it would otherwise be
skipped and the run's rank count taken from the parameter line instead.  Lines that only look alike (``#  Rank  0
.. Rank  7 on host``, a summary some logs print; a line without ``on HOST``) are not device lines.

nccl-tests itself cuts one process's device lines at ``MAX_LINE`` (2,048 bytes) and ends the cut one with ``...``
(v2.19.6 src/util.cu lines 668-694), so a process driving some 24 GPUs or more prints a cut last line:
:func:`is_cut_device_line` tells that line apart, and the reader skips it with a note (the ranks after the cut are
not listed) rather than refusing the log.  Any other broken device line is still an error.

>>> d = parse_device_line("#  Rank  1 Group  0 Pid  77 on dgx1 device  1 [0x08] Tesla V100-SXM2-32GB", "log: line 9")
>>> d.rank, d.group, d.pid, d.host, d.device, d.bus_id, d.name
(1, 0, 77, 'dgx1', 1, '0x08', 'Tesla V100-SXM2-32GB')
>>> parse_device_line(d.line(), "x") == d, parse_device_line("# nThread 1 nGpus 8", "x")
(True, None)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from topo_probe.errors import NcclTestsLogError, show

#: the start that makes a line a device line; linear on long runs of blanks (each alternative fails at once)
_START = re.compile(r"#\s*Rank\s+\d+\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s")
_DEVICE = re.compile(r"#\s*Rank\s+(\d{1,9})\s+(?:Group\s+(\d{1,9})\s+)?(?:Pid\s+(\d{1,9})\s+)?on\s+(\S+)\s+device\s+"
                     r"(\d{1,9})\s+\[([^\]]*)\]\s*((?:\S+(?:\s+\S+)*)?)\s*$")   # not (.*?)\s*$: quadratic on blanks
_CUT_START = re.compile(r"#\s*Rank\s+\d")
#: how nccl-tests ends a device list cut at MAX_LINE bytes (v2.19.6 src/util.cu line 693: ``"...\\n"``)
CUT_MARK = "..."
SHAPE = "#  Rank R [Group G] [Pid P] on HOST device D [BUS] NAME (numbers of at most 9 digits)"


@dataclass(frozen=True)
class Device:
    """One rank's device line: ``rank``, the process ``pid``, ``host``, CUDA ``device`` number, ``bus_id`` (the
    text between the brackets) and the GPU's ``name``; ``group`` / ``pid`` None where the build did not print
    them.  The order is the one the sweep's backends pass (``group`` last, 0 unless given)."""

    rank: int
    pid: int | None
    host: str
    device: int
    bus_id: str
    name: str
    group: int | None = 0

    def line(self) -> str:
        """The line as nccl-tests prints it (v2.19.6 src/util.cu line 687), ``Group`` / ``Pid`` left out when None."""
        group = "" if self.group is None else "Group %2d " % self.group
        pid = "" if self.pid is None else "Pid %6d " % self.pid
        return "#  Rank %2d %s%son %10s device %2d [%s] %s" % (self.rank, group, pid, self.host, self.device,
                                                              self.bus_id, self.name)


def is_cut_device_line(line: str) -> bool:
    """True for the device line nccl-tests cut at 2,048 bytes: ``#  Rank R`` ... ending ``...`` (blanks ignored).

    >>> is_cut_device_line("#  Rank 22 Group  0 Pid 584419 on  dkh device 22 [0000:2a...")
    True
    >>> is_cut_device_line("#  Rank  1 on dgx1 device  1 [0x08] V100"), is_cut_device_line("# Using devices ...")
    (False, False)
    """
    s = line.strip()
    return s.endswith(CUT_MARK) and _CUT_START.match(s) is not None


def parse_device_line(line: str, where: str) -> Device | None:
    """The :class:`Device` of ``line`` (leading/trailing blanks ignored), None when it is not a device line
    or is the line nccl-tests cut (:func:`is_cut_device_line`, which the caller notes).

    Raises
    ------
    NcclTestsLogError
        ``"<where>: a device line must read ..."`` for a line that begins as a device line but is not one.
    """
    s = line.strip()
    if not _START.match(s) or is_cut_device_line(s):
        return None
    m = _DEVICE.match(s)
    if m is None:
        raise NcclTestsLogError(f"{where}: a device line must read '{SHAPE}', got {show(s)}")
    r, g, pid, host, dev, bus, name = m.groups()
    return Device(int(r), None if pid is None else int(pid), host, int(dev), bus, name,
                  None if g is None else int(g))


__all__ = ["CUT_MARK", "Device", "SHAPE", "is_cut_device_line", "parse_device_line"]

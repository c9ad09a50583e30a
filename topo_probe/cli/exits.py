"""How the command-line tools end: a usage error in one line (exit 2), quiet when the reader of
stdout goes away (``topo-probe | head``), and Ctrl-C / SIGTERM turned into ``KeyboardInterrupt``.

>>> p = OneLineParser(prog="demo")
>>> _ = p.add_argument("--n", type=int)
>>> try:
...     p.parse_args(["--n", "x"])
... except UsageError as e:
...     print(e)
argument --n: invalid int value: 'x'
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from typing import Iterator

from topo_probe.errors import UsageError


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`UsageError` (one line) instead of printing
    the usage block and exiting."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise UsageError(message)


def stdout_gone() -> int:
    """Call on ``BrokenPipeError``: point stdout at /dev/null so that the interpreter's last flush
    says nothing, and return 0 (the reader took what it wanted, as with ``| head``)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (tests): nothing to flush
        pass
    return 0


#: set by :func:`end_with_signals_ignored`: the outermost :func:`signals_interrupt` leaves SIGINT
#: and SIGTERM ignored instead of restoring them (the process ends next); and its nesting depth
_ENDING = {"ignore": False, "depth": 0}


def end_with_signals_ignored() -> None:
    """For a process that ends when its command returns (the console scripts): from the moment
    the command's outermost :func:`signals_interrupt` is left, SIGINT and SIGTERM are ignored, so a
    signal while the command prints its last line or returns its status cannot end it by signal
    (-15) or a second interrupt; what the command reported stays true."""
    _ENDING["ignore"] = True


@contextlib.contextmanager
def signals_interrupt() -> Iterator[dict]:
    """While inside: SIGINT and SIGTERM raise ``KeyboardInterrupt`` in the main thread once;
    more signals while the program unwinds are ignored, so its clean-up runs to the end.
    The previous handlers come back on exit.  Outside the main thread it does nothing.

    Yields a dict whose ``"raised"`` is True once a signal arrived: a ``KeyboardInterrupt``
    raised where Python cannot pass it on (a ``__del__``, a garbage-collector or weakref
    callback) is swallowed by the interpreter, so a caller whose body returned normally checks
    it and still ends as interrupted.  Such a swallowed interrupt prints no traceback."""
    state = {"raised": False}
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum, frame):
        if not state["raised"]:
            state["raised"] = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    def unraisable(info, _previous=sys.unraisablehook):
        if not issubclass(info.exc_type, KeyboardInterrupt):     # ours, swallowed in a callback: quiet
            _previous(info)

    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    previous_hook = sys.unraisablehook
    for s in previous:
        signal.signal(s, handler)
    sys.unraisablehook = unraisable
    _ENDING["depth"] += 1
    try:
        yield state
    finally:
        _ENDING["depth"] -= 1
        ending = _ENDING["ignore"] and _ENDING["depth"] == 0
        sys.unraisablehook = previous_hook
        for s, h in previous.items():
            signal.signal(s, signal.SIG_IGN if ending else h if h is not None else signal.SIG_DFL)


class _PipeTolerantStream:
    """A text stream that forwards to ``stream`` until its reader goes away, then drops output
    (the file descriptor is pointed at /dev/null, so nothing complains at exit either)."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self._stream.write(text)
                self._stream.flush()
            except BrokenPipeError:
                self.broken = True
                stdout_gone()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self.broken = True
                stdout_gone()

    def __getattr__(self, name: str):  # isatty, fileno, encoding, ... as the real stream
        return getattr(self._stream, name)


@contextlib.contextmanager
def stdout_may_close() -> Iterator[None]:
    """While inside, a closed stdout (``synthesize | head -1``) silences the output instead of
    stopping the program: for commands whose product is files, not what they print."""
    real = sys.stdout
    sys.stdout = _PipeTolerantStream(real)
    try:
        yield
    finally:
        sys.stdout = real

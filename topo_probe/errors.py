"""Every error the toolkit raises on purpose, in one place.

The classes say what went wrong for the user (a bad topology file, a schedule that does
not implement its collective, a solver that proved infeasibility or gave up), so callers
can catch them by situation.  Messages carry the offending value and the rule it broke.
"Infeasible" and "gave up" are different classes: never ``None`` for both.

All package layers (topo_probe, synth, kernels) import their errors from here so that
imports keep pointing one way (kernels -> synth -> topo_probe).  :func:`show` is how every
message quotes the offending value: in one line, huge numbers and long strings cut.

>>> show(10**40), show("x" * 100)[-5:], show("x" * 10)
('an integer of about 41 digits', 'xx...', "'xxxxxxxxxx'")
"""

from __future__ import annotations

from typing import Any

from topo_probe.number_rules import is_int


class TopocollError(Exception):
    """Base class of every error raised on purpose by this toolkit."""


class InvalidArgument(TopocollError, ValueError):
    """An argument or option has a value this toolkit cannot take (a count, a dtype, a backend
    or algorithm name, a limit); the message names the argument, the value and what is allowed."""


class UsageError(InvalidArgument):
    """A command line is wrong (unknown flag value, missing file, flags that do not go together);
    the command-line tools print it as one line and exit with status 2."""


class TopologyError(TopocollError, ValueError):
    """A topology (file, preset name, parsed text or graph) is malformed or unusable.

    The message names the source (file, line/column or JSON field) and the rule broken.
    """


class ProbeError(TopocollError):
    """Probing the local machine failed in a way that cannot be recorded as a soft reason."""


class ScheduleInvalid(TopocollError, ValueError):
    """A schedule does not implement its collective, or breaks a capacity rule.

    Attributes ``step``, ``transfer``, ``rank`` and ``chunk`` locate the first violation
    (``None`` where not applicable); ``rule`` is a short machine-readable rule name.
    """

    def __init__(self, message: str, *, rule: str = "invalid", step: int | None = None,
                 transfer: int | None = None, rank: int | None = None,
                 chunk: int | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.step = step
        self.transfer = transfer
        self.rank = rank
        self.chunk = chunk


class ScheduleFormatError(TopocollError, ValueError):
    """A schedule document (JSON or XML) is malformed: a field is missing or has a bad value."""


class SynthesisInfeasible(TopocollError):
    """The solver proved that no schedule exists for the requested instance."""


class SynthesisTimeout(TopocollError):
    """The solver hit its time limit without finding a schedule (and without proving none exists)."""


class SolverError(TopocollError, RuntimeError):
    """A solver failed in a way that is neither "infeasible" nor "gave up" (e.g. CP-SAT reports
    ``MODEL_INVALID``): a bug in the model we built, reported with the solver's own status."""


class UnsupportedCollective(TopocollError, ValueError):
    """The collective / topology / option combination is not supported."""


class DeviceUnavailable(TopocollError, RuntimeError):
    """A GPU backend was asked for but no usable GPU (or CUDA library) is present."""


class ExecutionTimeout(TopocollError, RuntimeError):
    """A native-executor call waited longer than its timeout for a peer (names rank and record)."""


class BufferLayoutError(TopocollError, ValueError):
    """Buffers passed to an executor do not match the collective's layout (count, dtype,
    size, contiguity or NCCL in-place aliasing); the message names the rank and the rule."""


class NcclTestsLogError(TopocollError, ValueError):
    """Text given as nccl-tests output has no column header, or a table row breaks the header."""


class PeerFailed(TopocollError, RuntimeError):
    """A multi-process (MPI) rank failed, died or stopped answering; ``rank`` names it (None if
    unknown) and ``reporter`` is the rank that noticed.  Raised instead of hanging."""

    def __init__(self, message: str, *, rank: int | None = None, reporter: int | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.reporter = reporter


class ProcessGroupMismatch(TopocollError, ValueError):
    """MPI ranks disagree at start-up on the topology fingerprint, the plan or the rank count;
    every rank raises it with the same message."""


def show(value: Any) -> str:
    """A short repr for messages, in one line (huge numbers and long strings are cut; a repr's line breaks become
    spaces, its own spaces are kept)."""
    if is_int(value) and abs(value) >= 10**30:
        return f"an integer of about {int(int(value).bit_length() * 0.30103) + 1} digits"
    text = " ".join(repr(value).splitlines())
    return text if len(text) <= 60 else text[:57] + "..."

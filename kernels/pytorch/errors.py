"""The errors a ``topocoll`` process group raises: :class:`~topo_probe.errors.TopocollError`
subclasses that are also ``RuntimeError`` (what torch.distributed's own backends raise), so code
that catches either keeps working.

>>> issubclass(CollectiveMismatch, RuntimeError), issubclass(CollectiveMismatch, TopocollError)
(True, True)
"""

from __future__ import annotations

from topo_probe.errors import TopocollError


class TorchBackendError(TopocollError, RuntimeError):
    """A call of the ``topocoll`` torch.distributed backend failed (base of the classes below)."""


class BadTensor(TorchBackendError):
    """A rank passed a tensor the call cannot take (not contiguous in any memory format, in another
    memory layout than the call's other tensors, on another device, wrong size or dtype for this
    call on this rank); raised on every rank of the call."""


class CollectiveMismatch(TorchBackendError):
    """Ranks disagree on the call (collective, dtype, element count, root, op, shapes, memory layout
    or split sizes);
    raised on every rank, before any data moves, with the same message."""


class PeerGone(TorchBackendError):
    """A peer closed its connection, stopped answering within the group's timeout, or sent a
    message out of step; ends the call on the ranks that were waiting for it."""


class P2PMismatch(TorchBackendError):
    """A received message's element count or dtype differs from the receiving tensor's; raised on
    the receiving rank only, after the message was read into scratch memory and discarded, so the
    sender's send completes and the next message between the two arrives in order."""


class UnsupportedCall(TorchBackendError):
    """A call the backend does not run (e.g. a bitwise reduce op), named on every rank."""


__all__ = ["TorchBackendError", "BadTensor", "CollectiveMismatch", "PeerGone", "P2PMismatch", "UnsupportedCall"]

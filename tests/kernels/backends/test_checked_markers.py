"""The "checked once" markers (CheckedOp, CheckedP2PMode, CheckedAlgo) can only hold a value their rule accepts:
each marker's constructor applies the rule itself, so a marker made by hand with a refused value is the rule's one-line
refusal, never a value later code takes without a second look (a KeyError traceback, a refusal naming no one)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.backends.device import CheckedP2PMode, check_p2p
from synth.baselines import BASELINES
from synth.ir.collectives import CheckedOp, check_reduce_op
from synth.plan.arguments import CheckedAlgo, check_algo_arg
from topo_probe.errors import InvalidArgument

OPS = ("sum", "prod", "max", "min", "avg")
MODES = ("auto", "never")
ALGO_TAIL = "not 'plan', 'nccl', a baseline (ring, tree, direct, rhd, bruck, oneshot) or an existing schedule file"


class _Liar(str):
    """A hostile ``str``: equal to everything, so ``x in REDUCE_OPS`` is True whatever it holds."""

    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


class _Shouter(str):
    """A hostile ``str`` whose ``str()`` claims an accepted value whatever it holds."""

    def __str__(self):
        return "sum"


VALUES = st.one_of(st.sampled_from(OPS + MODES + ("plan", "nccl", "ring", "bogus", "", " sum", "SUM")),
                   st.text(alphabet=st.characters(codec="ascii"), max_size=10))
# ASCII text: its repr (at most 42 characters) is quoted whole; a longer one is cut to 60 by errors.show, whose own
# tests cover that (non-ASCII code points repr as 10-character escapes: 6 of them already pass the cut)


def _refusal(make) -> str:
    with pytest.raises(InvalidArgument) as info:
        make()
    line = str(info.value)
    assert "\n" not in line, line
    return line


@settings(max_examples=80, deadline=None)
@given(text=VALUES, kind=st.sampled_from([str, _Liar, _Shouter]))
def test_a_marker_made_by_hand_holds_only_a_value_its_rule_accepts(text, kind):
    """Reference: plain membership of the plain string in the hand-written lists (the baselines for algo, no file
    by these names here).  Old (kern74r): ``CheckedOp("bogus")`` etc. were made without a look, holding 'bogus'."""
    value = kind(text)
    for marker, allowed, tail in ((CheckedOp, OPS, f"op must be one of sum, prod, max, min, avg; got {text!r}"),
                                  (CheckedP2PMode, MODES, f"p2p must be one of auto, never, got {text!r}")):
        if text in allowed:
            made = marker(value)
            assert type(made) is marker and str.__str__(made) == text
        else:
            assert _refusal(lambda: marker(value)) == tail
    algos = ("plan", "nccl", *BASELINES)
    if text in algos:
        assert str.__str__(CheckedAlgo(value)) == text
    elif text and not __import__("os").path.isfile(text):
        assert _refusal(lambda: CheckedAlgo(value, "sweep")) == f"sweep: algorithm {text!r}: {ALGO_TAIL}"


def test_each_check_returns_its_marker_as_it_is_and_the_markers_name_their_owner():
    """A marker passed again is the same object (the rule is not run twice); the constructor names the owner as
    the check does.  Reference: the lines by hand."""
    op, mode, algo = CheckedOp("max"), CheckedP2PMode("never"), CheckedAlgo("ring")
    assert check_reduce_op(op) is op and check_p2p(mode, "Communicator") is mode and check_algo_arg(algo) is algo
    assert type(check_reduce_op("avg")) is CheckedOp and type(check_p2p("auto", "x")) is CheckedP2PMode
    assert _refusal(lambda: CheckedOp("mean", "all_reduce")) == \
        "all_reduce: op must be one of sum, prod, max, min, avg; got 'mean'"
    assert _refusal(lambda: CheckedP2PMode("always", "CupyLayer")) == \
        "CupyLayer: p2p must be one of auto, never, got 'always'"
    assert _refusal(lambda: CheckedAlgo("bogus")) == f"ScheduleSelector: algorithm 'bogus': {ALGO_TAIL}"


def test_a_subclass_of_a_marker_is_checked_again():
    """A subclass of a marker that lies about equality is not the marker: the check makes a real one (or refuses).
    Reference: the plain values."""
    class Sub(CheckedOp):
        def __eq__(self, other):
            return True
        __hash__ = str.__hash__
    made = check_reduce_op(Sub("min"))
    assert type(made) is CheckedOp and str.__str__(made) == "min"


@pytest.mark.filterwarnings("ignore:Communicator. no plan")
def test_the_forged_markers_of_the_review_are_one_line_refusals():
    """The review's three cases.  Reference: the lines by hand.  Old: ``op=CheckedOp("bogus")`` ended in KeyError
    'bogus' (host layer's BINARY_OP), ``algo=CheckedAlgo("bogus")`` in a ScheduleFormatError naming no owner, and
    a p2p mode marker made with "bogus" (then named CheckedP2P) was taken by CupyLayer as its mode."""
    from kernels import Communicator
    from kernels.backends.cupy_executor import CupyLayer
    from synth.plan.selector import ScheduleSelector
    from topo_probe import get_preset
    comm = Communicator(2, plan=False, backend="host")
    xs = [np.ones(4, np.float32) for _ in range(2)]
    assert _refusal(lambda: comm.all_reduce(xs, [np.empty(4, np.float32) for _ in range(2)],
                                            op=CheckedOp("bogus"))) == \
        "op must be one of sum, prod, max, min, avg; got 'bogus'"
    assert _refusal(lambda: ScheduleSelector(get_preset("dgx1-v100"), plan=False, algo=CheckedAlgo("bogus"))) == \
        f"ScheduleSelector: algorithm 'bogus': {ALGO_TAIL}"
    assert _refusal(lambda: CupyLayer(CheckedP2PMode("bogus"))) == "p2p must be one of auto, never, got 'bogus'"

"""A Ctrl-C / SIGTERM that lands in a clean-up callback (a ``__del__``, a garbage-collector
callback), where Python swallows the KeyboardInterrupt, still ends the command as interrupted:
exit 130, one line, no traceback (4 of 104 signals near the end of ``synthesize`` did that)."""

from __future__ import annotations

import gc
import os
import signal

import pytest

from topo_probe.cli.exits import signals_interrupt


class _SignalledOnCollection:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):     # the handler runs between bytecodes of this frame
            pass


def test_swallowed_interrupt_is_remembered_and_quiet(capsys):
    with signals_interrupt() as signalled:
        _SignalledOnCollection()          # collected at once: __del__ sends the signal
        gc.collect()
    assert signalled["raised"] is True
    assert "Traceback" not in capsys.readouterr().err and "KeyboardInterrupt" not in capsys.readouterr().err


@pytest.mark.parametrize("module", ["simulate", "sweep"])
def test_commands_end_as_interrupted_when_it_was_swallowed(monkeypatch, capsys, module):
    if module == "simulate":
        from synth.cli import simulate as mod

        def body(args):
            _SignalledOnCollection()
            return ["# a table"]
        monkeypatch.setattr(mod, "run", body)
        rc = mod.main(["--topology", "dgx-a100", "--collective", "allreduce"])
    else:
        from kernels.sweep import cli as mod

        def body(args, argv):
            _SignalledOnCollection()
            return 0
        monkeypatch.setattr(mod, "_main", body)
        rc = mod.main(["all_reduce", "-b", "8", "-e", "8"])
    err = capsys.readouterr().err
    assert rc == 130 and err.strip() == f"{module}: interrupted", err


def test_synthesize_ends_as_interrupted_when_it_was_swallowed(monkeypatch, capsys):
    from synth.cli import synthesize as mod

    def body(argv, where=None):
        _SignalledOnCollection()
        return 0
    monkeypatch.setattr(mod, "_main", body)
    assert mod.main([]) == 130
    assert capsys.readouterr().err.strip() == "synthesize: interrupted; nothing written"

"""``synth.ir.schedule.atomic_write_bytes`` gives the new file the mode a plain ``open`` would
(0o666 minus the umask) without ever setting the process-wide umask to 0 (another thread's file
made meanwhile would come out world-writable)."""

from __future__ import annotations

import os
import stat

import pytest

from synth.ir import schedule as schedule_mod


@pytest.mark.parametrize("umask", [0o027, 0o022, 0o077])
def test_mode_follows_the_umask_and_the_umask_is_never_zeroed(tmp_path, monkeypatch, umask):
    old = os.umask(umask)
    try:
        calls: list[int] = []
        real_umask = os.umask

        def recording_umask(mask):
            calls.append(mask)
            return real_umask(mask)
        monkeypatch.setattr(os, "umask", recording_umask)
        target = tmp_path / "sub" / "out.json"                     # the folder is made too
        schedule_mod.atomic_write_bytes(target, b"{}")
        monkeypatch.undo()
        assert 0 not in calls, f"os.umask was set to 0 during the write: {calls}"
        assert target.read_bytes() == b"{}"
        assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask   # what open() would give
        assert [p.name for p in target.parent.iterdir()] == ["out.json"]   # no temporary file left
    finally:
        os.umask(old)

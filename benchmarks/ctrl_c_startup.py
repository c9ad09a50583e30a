"""Ctrl-C while a command starts: each console script is started and sent SIGINT after a delay
(ms); the table gives the exit code and whether stderr held a traceback.  Writes
``OUT/ctrl_c_startup.md`` with the command at the top.

    python benchmarks/ctrl_c_startup.py --out results/robustness
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from shown_paths import script_command  # noqa: E402

COMMANDS = {
    "simulate": ["--topology", "dgx-a100", "--collective", "allreduce", "--baseline", "ring", "-b", "8", "-e", "4G",
                 "-f", "2"],
    "sweep": ["all_reduce", "-b", "8", "-e", "64K", "-f", "2", "-g", "4"],
    "synthesize": ["--topology", "full:4", "--collectives", "allgather", "--out", "{tmp}/s", "--force"],
    "topo-probe": ["--topology", "dgx1-v100"],
}
DELAYS_MS = (20, 50, 100, 200, 400, 800)


def trial(script: str, args: list, delay_ms: int, tmp: str) -> tuple[int, bool]:
    """(exit code, traceback on stderr) of ``script`` interrupted ``delay_ms`` after its start."""
    exe = str(Path(sys.executable).parent / script)
    p = subprocess.Popen([exe, *(a.format(tmp=tmp) for a in args)], cwd=tmp, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(delay_ms / 1000)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    return p.returncode, "Traceback" in err


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import tempfile
    from synth.ir.schedule import atomic_write_text
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for script, cargs in COMMANDS.items():
            rows.append((script, [trial(script, cargs, d, tmp) for d in DELAYS_MS]))
    head = "| command | " + " | ".join(f"{d} ms" for d in DELAYS_MS) + " |"
    lines = ["# Ctrl-C while a command starts", "", "    " + script_command(__file__, argv or sys.argv[1:]),
             "", f"Each console script of this checkout's interpreter ({Path(sys.executable).parent.name}/), started in a "
             f"temporary folder and sent SIGINT that many ms after its start; a cell is the exit code, with "
             f"`TRACEBACK` where stderr held one (130: the command's one line `<command>: interrupted`; 0: it "
             f"finished before the signal; -2: the signal itself ended it (a shell shows 130), after the command had "
             f"put Python's own handler back at its end; a traceback at 20 ms comes from the interpreter's own start "
             f"(its `site` module), before any project code runs). Load average at the start: {os.getloadavg()[0]:.1f}.", "",
             head, "|---" * (len(DELAYS_MS) + 1) + "|"]
    for script, cells in rows:
        lines.append(f"| `{script}` | " + " | ".join(f"{rc}{' TRACEBACK' if tb else ''}" for rc, tb in cells) + " |")
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "ctrl_c_startup.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The bad inputs and abuses of issue 38 (a new user's pass and a fault campaign) for
``benchmarks/new_user_pass.py``: pipes closed early, impossible flag combinations, a timeout that
would disable itself, ``synthesize`` runs that could drop or delete results or a user's files,
``sweep`` output paths that do not exist or belong to the user.  Each is one command of the pass
(a dict of :class:`new_user_pass.Cmd` fields): refused in one line (exit 2) or handled (exit 0),
never a traceback, never a file of the clone touched outside its declared output.
"""

from __future__ import annotations

import re
from pathlib import Path

LOG = "tests/fixtures/nccl_tests_allreduce_a100x8_single_process.txt"
SMALL = "sweep all_reduce -b 8 -e 64 -f 2 -g 2"
FULL4 = "synthesize --topology full:4 --collectives allreduce --time-limit 2 --no-progress"
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+\s", re.MULTILINE)


def _exists(*names: str):
    return lambda out, _: next((f"{n} is gone" for n in names if not (out / n).exists()), None)


def _absent(*names: str):
    return lambda out, _: next((f"{n} was created" for n in names if (out / n).exists()), None)


def _no_rows(out: Path, text: str) -> str | None:
    return "rows printed before the refusal" if ROW.search(text) else None


def _two_folders(out: Path, text: str) -> str | None:
    names = sorted(p.name for p in (out / "results").iterdir()) if (out / "results").is_dir() else []
    return None if len(names) == 2 else f"ring:4 and ring:4@50/2 share a folder: {names}"


def _header_holds_rows(out: Path, text: str) -> str | None:
    m = re.search(r"minBytes (\d+) maxBytes (\d+)", text)
    sizes = [int(r.split()[0]) for r in ROW.findall(text)]
    if m is None or not sizes:
        return "no header or no rows"
    lo, hi = map(int, m.groups())
    return None if lo <= min(sizes) and max(sizes) <= hi else f"header {lo}..{hi}, rows {min(sizes)}..{max(sizes)}"


def _user_csv(out: Path) -> None:
    (out / "mine.csv").write_text("size,mine\n1,2\n")


def _sibling(out: Path) -> None:
    (out / ".res.old-999999").mkdir()
    (out / ".res.old-999999" / "user.txt").write_text("mine\n")


def bad_inputs_issue38() -> list[dict]:
    """The commands (label, shell, expect, setup, check, targets), in the pass's order."""
    pipe = "set -o pipefail; "
    return [
        dict(label="simulate | head -2", shell=pipe + "simulate --topology dgx-a100 --collective allreduce | head -2"),
        dict(label="sweep | head -1", shell=pipe + "sweep all_reduce -b 8 -e 1M -f 2 -g 2 | head -1"),
        dict(label="--compare ring,nosuch", shell=f"{SMALL} --compare ring,nosuch", expect=(2,), check=_no_rows),
        dict(label="simulate --gpus ''", shell="simulate --topology dgx-a100 --collective allreduce --gpus ''",
             expect=(2,)),
        dict(label="sweep --import LOG -g 4 -b 1M -o max", shell=f"sweep --import {LOG} -g 4 -b 1M -o max",
             expect=(2,)),
        dict(label="sweep --backend sim --import, another rank count",
             shell=f"sweep all_reduce --backend sim --topology full:4 --import {LOG} --plot {{out}}/p.png",
             expect=(2,), check=_absent("p.png", "p.csv")),
        dict(label="sweep -d f8e4m3 --backend sim", shell="sweep all_reduce -b 8 -e 64 -f 2 -g 4 -d f8e4m3 "
             "--backend sim"),
        dict(label="simulate -d f8e4m3", shell="simulate --topology dgx-a100 --collective allreduce -b 64 -e 64 -d f8e4m3"),
        dict(label="sweep -J into a missing folder", shell=f"{SMALL} -J {{out}}/typo_dir/sub/x.json", expect=(2,),
             check=_absent("typo_dir")),
        dict(label="sweep -J into a folder no file can be made in", shell=f"{SMALL} -J /proc/x.json", expect=(2,),
             check=_no_rows),
        dict(label="simulate --import: the header's range is the log's rows'", check=_header_holds_rows,
             shell=f"simulate --topology dgx-a100 --import {LOG}"),
        dict(label="sweep past its memory under ulimit -v (sim backend, 1,024 ranks)", expect=(2,), quick=False,
             shell="ulimit -v 1500000; sweep all_reduce -b 8 -e 8 -g 1024 --backend sim"),
        dict(label="--csv over a user's CSV", shell=f"{SMALL} --backend sim --csv {{out}}/mine.csv", expect=(2,),
             setup=_user_csv, check=lambda out, _: None if (out / "mine.csv").read_text() == "size,mine\n1,2\n"
             else "mine.csv was replaced"),
        *[dict(label=f"TOPOCOLL_MPI_TIMEOUT={v}", shell=f"TOPOCOLL_MPI_TIMEOUT={v} sweep all_reduce --backend mpi "
               "-b 8 -e 8 -g 1", expect=(2,)) for v in ("nan", "inf", "-5")],
        dict(label="broadcast --root 3 over committed results", expect=(2,),
             shell="synthesize --topology dgx1-v100 --collectives broadcast --root 3 --time-limit 2 --no-progress"),
        dict(label="--out at another topology's results", shell=f"{FULL4} --out results/dgx-a100", expect=(2,)),
        dict(label="ring:4 and ring:4@50/2 folders", check=_two_folders,
             shell=f"cd {{out}} && {FULL4.replace('full:4', 'ring:4')} && {FULL4.replace('full:4', 'ring:4@50/2')}"),
        dict(label="--force keeps a user's files in schedules/ and msccl/",
             shell=f"{FULL4} --out {{out}}/res && echo '{{}}' > {{out}}/res/schedules/mine.json && echo '<x/>' > "
                   f"{{out}}/res/msccl/mine.xml && {FULL4} --out {{out}}/res --force",
             check=_exists("res/schedules/mine.json", "res/msccl/mine.xml")),
        dict(label="a sibling .OUT.old-* folder of the user's", setup=_sibling,
             shell=f"{FULL4} --out {{out}}/res && {FULL4} --out {{out}}/res --force",
             check=_exists(".res.old-999999/user.txt")),
    ]


__all__ = ["bad_inputs_issue38"]

"""The bad inputs and abuses users have tried, for ``benchmarks/new_user_pass.py``: issue 24's (``--plot``
beside a user's CSV or over a folder, ``-f 0``, ``--root 3`` into a root-0 folder, 32 NICs per node, a
missing topology file, a malformed schedule) and issue 38's (a new user's pass and a fault campaign): pipes
closed early, impossible flag combinations, a timeout that would disable itself, ``synthesize`` runs that
could drop or delete results or a user's files, ``sweep`` output paths that do not exist or belong to the
user.  Each is one command of the pass (a dict of :class:`new_user_pass.Cmd` fields): refused in one line
(exit 2) or handled (exit 0), never a traceback, never a file of the clone touched outside its declared output.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

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


def _cmd(label: str, shell: str, expect: tuple[int, ...] = (0,), **fields) -> dict:
    """One command as :class:`new_user_pass.Cmd` takes it."""
    return dict(label=label, shell=shell, expect=expect, **fields)


def _file(name: str, text: str) -> Callable[[Path], None]:
    return lambda out: (out / name).write_text(text)


def _unchanged(name: str, text: str) -> Callable[[Path, str], str | None]:
    return lambda out, _: None if (out / name).read_text() == text else f"{name} was overwritten"


def _not_written(*names: str) -> Callable[[Path, str], str | None]:
    return lambda out, _: next((f"{n} was written" for n in names if (out / n).exists()), None)


def _probe_table(out: Path, text: str) -> str | None:
    """Lines <= 200 characters; NIC columns in natural order (NIC2 before NIC10)."""
    long = [x for x in text.splitlines() if len(x) > 200]
    if long:
        return f"{len(long)} lines over 200 characters (longest {max(map(len, long))})"
    for line in text.splitlines():
        nics = [int(m) for m in re.findall(r"\bNIC(\d+)\b", line)]
        if len(nics) > 2 and nics != sorted(nics):
            return f"NIC columns out of order: {' '.join(f'NIC{n}' for n in nics[:12])} ..."
    return None


def _one_rank_row(out: Path, text: str) -> str | None:
    rows = [x.split() for x in text.splitlines() if re.match(r"\s+\d+\s+\d+\s+float", x)]
    times = [float(r[9]) for r in rows] if rows else []
    return "no rows" if not rows else (f"in-place time {min(times)} us: a no-op timed" if min(times) < 1 else None)


def _safe_folder(out: Path, text: str) -> str | None:
    names = [p.name for p in (out / "results").iterdir()] if (out / "results").is_dir() else []
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9._-]+", n)]
    return f"default folder {bad[0]!r} needs shell quoting" if bad or not names else None


def bad_inputs_issue24() -> list[dict]:
    """The inputs of issue 24, each refused in one line (exit 2) or handled (exit 0)."""
    small = "sweep all_reduce -b 8 -e 1K -f 2 -g 2"
    csv = "size,mine\n1,2\n"
    h100 = "synthesize --topology dgx-h100 --collectives broadcast --time-limit 2 --no-progress --out {out}/res"
    schedule = '{"format": "topocoll.schedule", "version": 1, "collective": "allgather", "steps": [{"rounds": 1,'
    return [
        _cmd("root 3 after a root-0 run", f"{h100} && {h100} --root 3", (2,),
             check=lambda out, text: None if "would drop; add --force" in text else "root 0's results dropped silently",
             note="--collectives broadcast --time-limit 2: the full run takes minutes"),
        _cmd("root 3 after a root-0 run, --force", f"{h100} && {h100} --root 3 --force",
             check=lambda out, text: "reused the root-0 results" if "reusing" in text else None),
        _cmd("--plot beside a user's CSV", f"{small} --plot {{out}}/mydata.png", (2,), setup=_file("mydata.csv", csv),
             check=_unchanged("mydata.csv", csv)),
        _cmd("--plot notes.txt", f"{small} --plot {{out}}/notes.txt", (2,), check=_not_written("notes.txt")),
        _cmd("--plot p.jpg", f"{small} --plot {{out}}/p.jpg", (2,), check=_not_written("p.jpg")),
        _cmd("--csv without --plot", f"{small} --csv {{out}}/only.csv",
             check=lambda out, _: "no sweep CSV" if not (out / "only.csv").read_text().startswith("series,") else
             _not_written("only.png")(out, _)),
        _cmd("a folder as --plot", f"{small} --plot {{out}}/dir.png", (2,),
             setup=lambda out: (out / "dir.png").mkdir()),
        _cmd("a folder as --csv", f"{small} --csv {{out}}/dir.csv", (2,), setup=lambda out: (out / "dir.csv").mkdir()),
        _cmd("--nccl-tuner-conf a folder", "synthesize --topology dgx-h100 --nccl-tuner-conf {out}", (2,),
             targets=("results/dgx-h100/",)),
        _cmd("sweep -f 0", "sweep all_reduce -b 8 -e 1K -f 0 -g 2", (2,)),
        _cmd("sweep -f -2", "sweep all_reduce -b 8 -e 1K -f -2 -g 2", (2,)),
        _cmd("sweep --algo foo, one rank", "sweep all_reduce -b 8 -e 1K -g 1 --algo foo", (2,)),
        _cmd("one rank in place", "sweep all_reduce -b 32M -e 32M -g 1", check=_one_rank_row),
        _cmd("32 NICs per node", "topo-probe --topology dgx-h100 --nodes 2 --nics-per-node 32", check=_probe_table),
        _cmd("default folder of --gpus 0-4",
             "cd {out} && synthesize --topology dgx1-v100 --gpus 0-4 --collectives allgather --time-limit 2",
             check=_safe_folder),
        _cmd("a topology file that does not exist", "topo-probe --topology {out}/nonexistent.json", (2,)),
        _cmd("the same, simulate", "simulate --topology {out}/nonexistent.json --collective allreduce", (2,)),
        _cmd("a malformed JSON schedule",
             "simulate --topology dgx1-v100 --collective allgather --schedule {out}/bad.json",
             (2,), setup=_file("bad.json", schedule)),
        _cmd("the same, sweep --algo", "sweep all_gather --backend sim --topology dgx1-v100 --algo {out}/bad.json",
             (2,), setup=_file("bad.json", schedule)),
    ]


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


__all__ = ["bad_inputs_issue24", "bad_inputs_issue38"]

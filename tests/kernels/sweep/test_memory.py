"""kernels.sweep.memory: a sweep whose largest size cannot fit is refused in one line, before its
header, with need and available memory; the estimate counts buffers, check copies and the
schedule's scratch (hand-computed here)."""

import kernels.sweep.memory as memory
from kernels.sweep.cli import main
from synth.ir.schedule import Schedule, Step, Transfer
from synth.sweep.entries import entry


def test_a_sweep_that_cannot_fit_is_refused_before_its_header(capsys, monkeypatch):
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 1 << 30)
    rc = main(["all_reduce", "--backend", "host", "-b", "512M", "-e", "1G", "-f", "2", "-g", "4", "-n", "1", "-w", "0"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert "all_reduce of 1 GiB (float) on 4 ranks needs about 17.5 GiB of host memory" in err
    assert "; 1 GiB available" in err


def test_a_sweep_that_fits_runs(capsys, monkeypatch):
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 1 << 30)
    assert main(["all_reduce", "-b", "8", "-e", "64K", "-f", "8", "-g", "4", "-n", "1", "-w", "0"]) == 0
    assert "Avg bus bandwidth" in capsys.readouterr().out


def test_the_estimate_by_hand():
    """all_reduce, 4 ranks, 1 GiB float: buffers 4 x (1 + 1) GiB, check: 4 x 1 GiB expected + one
    2 GiB float64 temporary = 14 GiB, x 1.25 = 17.5 GiB."""
    assert memory.sweep_need_bytes(entry("allreduce"), 4, 1 << 30, "float", None) == int(1.25 * 14 * (1 << 30))


def test_a_relay_chains_scratch_is_counted():
    """A gather to rank 0 that relays rank 3's block through ranks 2 and 1 and rank 2's through
    rank 1: rank 2 keeps block 3 in scratch, rank 1 blocks 2 and 3 (no output off the root)."""
    steps = [Step(1, (Transfer(3, 3, 2),)), Step(1, (Transfer(3, 2, 1), Transfer(2, 2, 1))),
             Step(1, (Transfer(3, 1, 0), Transfer(2, 1, 0), Transfer(1, 1, 0)))]
    relay = Schedule("gather", 4, 1, tuple(steps), root=0)
    count = 1000
    # scratch: rank 2 holds block 3 (1 x count), rank 1 holds blocks 2 and 3 (2 x count)
    assert memory.scratch_bytes(relay, count, "float") == 3 * count * 4
    plain = memory.sweep_need_bytes(entry("gather"), 4, 4 * count * 4, "float", None)
    with_relay = memory.sweep_need_bytes(entry("gather"), 4, 4 * count * 4, "float", relay)
    assert abs(with_relay - plain - 1.25 * 3 * count * 4) <= 1


def test_available_memory_is_read():
    avail = memory.available_host_bytes()
    assert avail is None or avail > 0


def test_rooted_collectives_count_the_roots_buffers_once():
    """gather, 64 ranks, 512 MiB: inputs 64 x 8 MiB, the root's output 512 MiB (the other ranks'
    are never written), the check's expected 512 MiB plus a float64 temporary of 1 GiB:
    2.5 GiB x 1.25 = 3.125 GiB, hand-computed."""
    assert memory.sweep_need_bytes(entry("gather"), 64, 512 << 20, "float", None) == int(1.25 * 2.5 * (1 << 30))


def test_an_address_space_limit_counts_the_buffers_no_rank_touches(capsys, monkeypatch):
    """Issue 38's ulimit -v: a gather touches only the root's output, so the machine commits one,
    but every rank's output is mapped and RLIMIT_AS counts mappings.  gather of 128 MiB on 8 ranks:
    8 x 16 MiB inputs + 8 x 128 MiB outputs + the check's 128 MiB expected and 256 MiB float64
    temporary = 1,536 MiB, x 1.25 = 1,920 MiB of address space; under a 1 GiB room it is refused
    before the header (it ran out of memory after 8 s), with plenty of physical memory it runs."""
    argv = ["gather", "-b", "128M", "-e", "128M", "-g", "8", "-n", "1", "-w", "0", "-c", "0"]
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 64 << 30)
    monkeypatch.setattr(memory, "address_space_room", lambda: 1 << 30)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "needs about 1.9 GiB of address space (ulimit -v); 1 GiB left" in err
    e = entry("gather")
    assert memory.sweep_need_bytes(e, 8, 128 << 20, "float", None, untouched=True) == int(1.25 * (1536 << 20))
    assert memory.sweep_need_bytes(e, 8, 128 << 20, "float", None) == int(1.25 * ((16 << 23) + (512 << 20)))


def _sweep_under_cap(cap_mib: int, *args: str):
    """``sweep ARGS`` in a process whose address space is capped at ``cap_mib`` MiB (ulimit -v)."""
    import resource
    import subprocess
    import sys
    import time
    from pathlib import Path
    cap = cap_mib << 20
    t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kernels.sweep.cli", *args], capture_output=True, text=True, check=False,
                       cwd=Path(__file__).resolve().parents[3], timeout=120,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return p, t1.ru_utime + t1.ru_stime - t0.ru_utime - t0.ru_stime, time.monotonic() - start


def test_a_sim_sweep_past_its_address_space_is_refused_before_building():
    """1,024 ranks need about 3.2 GiB for their schedules (sim_need_bytes): under a 700 MiB cap the
    refusal comes before the fabric and the schedules are built (it took 15-45 s to come after)."""
    p, cpu_s, wall_s = _sweep_under_cap(700, "all_reduce", "-b", "8", "-e", "8", "-g", "1024", "--backend", "sim")
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("sweep: error: the sim backend on 1024 ranks needs about 3.2 GiB of address space")
    assert cpu_s < 3 and wall_s < 10


def test_a_sim_sweep_that_fits_is_admitted_and_runs_under_the_same_cap():
    """32 ranks: estimate 171 MiB (160 + 3 KiB x 32^2 + 256 B x 32^3), measured peak 20 MiB over the
    imports; it runs under the cap that refuses 1,024 ranks."""
    assert memory.sim_need_bytes(32) == (160 << 20) + (3 << 10) * 32 ** 2 + 256 * 32 ** 3
    p, _, _ = _sweep_under_cap(700, "all_reduce", "-b", "8", "-e", "8", "-g", "32", "--backend", "sim")
    assert p.returncode == 0 and "Avg bus bandwidth" in p.stdout, p.stderr


def test_compare_counts_each_algorithm_it_keeps(capsys, monkeypatch):
    """--compare keeps every algorithm's schedules: the estimate is per algorithm (here 3 x 236 MiB
    for 64 ranks against 500 MiB)."""
    monkeypatch.setattr(memory, "address_space_room", lambda: 500 << 20)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: None)
    assert main(["all_reduce", "-b", "8", "-e", "8", "-g", "64", "--backend", "sim", "--compare", "ring,tree,direct"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "needs about 708 MiB of address space" in err and "(3 algorithm(s))" in err

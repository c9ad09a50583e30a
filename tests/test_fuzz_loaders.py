"""Fuzzing every guarded loader with the mutation kinds of issue 15 (tests/_mutations.py): byte
flips, truncation, deleted/duplicated/swapped lines, invalid UTF-8, unicode look-alikes, hostile
numbers (NaN, inf, negative, 1e-320, 2**63, 5000 digits, '²'), deep nesting, 256 KB amplification,
JSON type swaps and deleted/duplicated fields, gzip.

Each case must end, within a time limit, either refused with a one-line TopocollError naming the
file, or accepted with a result that passes the physics check (``_mutations.nonsense``, written
without the loaders' own checks).  Seeded and derandomized; the full campaign (10,000 cases per loader,
a worker process per case) is ``benchmarks/fuzz_loaders.py``.
"""

import random
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _paths import FIXTURES
from _mutations import LOADERS, mutate, nonsense, seed_format, seeds
from topo_probe.errors import TopocollError

SEEDS = seeds(FIXTURES)
GUARDED = ("nvidia-smi", "nvidia-smi-p2p", "topology-json", "link-matrix", "nccl-tests-log", "schedule-json",
           "plan-json")
CASES = 400
LIMIT_S = 10


class Hang(Exception):
    """A case ran past its time limit."""


@contextmanager
def time_limit(seconds: int):
    def stop(signum, frame):
        raise Hang(f"no answer within {seconds} s")
    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_case(loader: str, case_seed: int, tmp: Path) -> tuple[str, str]:
    """Mutate a seed of ``loader`` with ``random.Random(case_seed)`` and load it: ('refused' or
    'accepted', detail); anything else fails the test with the case's kinds and seed file."""
    rng = random.Random(case_seed)
    name, data = rng.choice(SEEDS[loader])
    kinds, mutated = mutate(data, rng, seed_format(loader, data), big=1 << 18)
    path = tmp / ("case.json.gz" if name.endswith(".gz") else "case" + Path(name).suffix)
    path.write_bytes(mutated)
    where = f"{loader} case {case_seed} ({kinds} of {name})"
    try:
        with time_limit(LIMIT_S):
            result = LOADERS[loader][1](path)
    except TopocollError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc), f"{where}: error not one line naming the file: {exc!r}"
        return "refused", str(exc)
    except Hang:
        pytest.fail(f"{where}: no answer within {LIMIT_S} s")
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"{where}: generic {type(exc).__name__}: {exc!s:.300}")
    bad = nonsense(result)
    assert bad is None, f"{where}: accepted nonsense: {bad}"
    return "accepted", ""


@pytest.mark.parametrize("loader", GUARDED)
def test_seeds_load_unmutated(loader, tmp_path):
    """The seeds themselves are accepted (the fuzz cases start from valid inputs); logs with
    launcher prefixes (``srun -l``, ``mpirun --tag-output``) may be refused by readers that
    predate them, with a project error."""
    loaded = prefixed = 0
    for name, data in SEEDS[loader]:
        path = tmp_path / ("s.json.gz" if name.endswith(".gz") else "s" + Path(name).suffix)
        path.write_bytes(data)
        launcher = loader == "nccl-tests-log" and (b"<stdout>:" in data or b"\n0: " in data)
        prefixed += launcher
        try:
            result = LOADERS[loader][1](path)
        except TopocollError:
            if not launcher:
                raise
            continue
        assert nonsense(result) is None, name
        loaded += 1
    assert loaded >= len(SEEDS[loader]) - prefixed and loaded > len(SEEDS[loader]) // 2


@pytest.mark.parametrize("loader", GUARDED)
def test_mutated_inputs_are_refused_or_sound(loader, tmp_path):
    outcomes = []

    @settings(derandomize=True, max_examples=CASES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(st.integers(0, 2**32 - 1))
    def check(case_seed):
        outcomes.append(run_case(loader, case_seed, tmp_path)[0])

    check()
    # the mutations reach past the first check: some inputs still load, many are refused (a quarter:
    # a plain nccl-tests log survives about two thirds of its mutations as another valid log, since a
    # run cut mid-row, a byte-order mark and blank out-of-place bodies are read as nccl-tests writes them)
    assert outcomes.count("refused") > len(outcomes) // 4 and "accepted" in outcomes, outcomes.count("accepted")


def test_the_physics_check_catches_what_the_guard_refuses():
    """nonsense() is an independent check: it flags the results the guard exists to refuse."""
    from synth.ir.schedule import Schedule, Step, Transfer
    from topo_probe.machines.generators import ring
    t = ring(3)
    assert nonsense(t) is None
    t.graph.edges["gpu0", "gpu1"]["bandwidth_gbps"] = float("nan")
    assert "bandwidth nan" in nonsense(t)
    t = ring(3)
    t.graph.edges["gpu0", "gpu1"]["links"] = 10**23
    assert "links" in nonsense(t)
    empty = ring(2)
    empty.graph.remove_nodes_from(["gpu0", "gpu1"])
    assert nonsense(empty) == "no GPU"
    s = Schedule("allgather", 2, 1, (Step(1, (Transfer(0, 0, 1), Transfer(1, 1, 0))),))
    assert nonsense(s) is None and "rounds" in nonsense(s.with_(steps=(Step(0, ()),)))

"""The leaving numbers docs/mpi.md quotes are those of the committed run, results/mpi/leaving.md (its table,
read here from the file, formatted as the text formats them); before, they came from informal runs."""

from __future__ import annotations

import pytest
from _paths import ROOT


@pytest.fixture(scope="module")
def table() -> dict[tuple[str, str, int], tuple[int, str, str, str]]:
    """(metric, scenario, ranks) -> (count, median, min, max) as the report prints them."""
    lines = (ROOT / "results" / "mpi" / "leaving.md").read_text().splitlines()
    head = lines.index("| metric | scenario | ranks | count | median | min | max |")
    out = {}
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        metric, scenario, ranks, count, med, lo, hi = (c.strip() for c in line.strip("|").split("|"))
        out[(metric, scenario, int(ranks))] = (int(count), med, lo, hi)
    return out


@pytest.fixture(scope="module")
def doc() -> str:
    return " ".join((ROOT / "docs" / "mpi.md").read_text().split())


def test_the_report_has_every_quoted_row(table):
    want = {("seen_s", "notices on", 2), ("seen_s", "notices on", 4), ("recv_s", "notices on", 2),
            ("recv_s", "notices on", 4), ("leave_ms", "notices on", 2), ("leave_ms", "notices on", 4),
            ("exit_s", "notices on", 4), ("exit_s", "notices off", 4), ("deadline_seen_s", "notices off", 2)}
    assert want <= set(table), sorted(want - set(table))


def test_how_soon_peers_learn_is_the_committed_run(table, doc):
    s2, s4, dl = (table[k] for k in (("seen_s", "notices on", 2), ("seen_s", "notices on", 4),
                                      ("deadline_seen_s", "notices off", 2)))
    assert (f"median {s2[1]} s ({s2[2]}-{s2[3]} s, {s2[0]} peers) on 2 ranks, {s4[1]} s ({s4[2]}-{s4[3]} s, "
            f"{s4[0]} peers) on 4 oversubscribed ranks") in doc
    assert f"with the notices off only the deadline sees it: {dl[1]} s with a 2 s deadline" in doc


def test_recv_grace_leaving_cost_and_job_exit_are_the_committed_run(table, doc):
    r2, r4 = table[("recv_s", "notices on", 2)], table[("recv_s", "notices on", 4)]
    lo = min(float(r2[2]), float(r4[2]))
    hi = max(float(r2[3]), float(r4[3]))
    assert f"(measured {lo:.2f}-{hi:.2f} s; 31 s before)" in doc
    c2, c4 = table[("leave_ms", "notices on", 2)], table[("leave_ms", "notices on", 4)]
    cost_lo, cost_hi = min(float(c2[2]), float(c4[2])), max(float(c2[3]), float(c4[3]))
    assert (f"Leaving costs a rank {cost_lo:.2f}-{cost_hi:.2f} ms (medians {c2[1]} ms on 2 ranks, {c4[1]} ms on 4)"
            in doc)
    on, off = table[("exit_s", "notices on", 4)], table[("exit_s", "notices off", 4)]
    assert on[0] == off[0]
    assert (f"{on[0]} interleaved runs each) took a median {on[1]} s with the notices and {off[1]} s with them "
            f"switched off ({on[2]}-{on[3]} s and {off[2]}-{off[3]} s") in doc

"""Fault schedules: the generator is seeded, valid, and replays exactly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zabd.sim import SimConfig, format_faults, parse_faults, random_faults
from zabd.sim.faults import Crash, Restart
from zabd.sim.run import run_scenario


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), nodes=st.integers(1, 9), rounds=st.integers(0, 10_000),
       count=st.integers(0, 40))
def test_generated_schedules_parse_back_identically(seed: int, nodes: int, rounds: int, count: int) -> None:
    events = random_faults(seed, nodes, rounds, count)
    text = format_faults(events)
    assert parse_faults(text, nodes) == events
    assert random_faults(seed, nodes, rounds, count) == events  # deterministic


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32), nodes=st.integers(3, 7), count=st.integers(1, 30))
def test_generated_schedules_keep_a_majority_up(seed: int, nodes: int, count: int) -> None:
    events = random_faults(seed, nodes, 5000, count)
    down: set[int] = set()
    limit = (nodes - 1) // 2
    for e in sorted((e for e in events if isinstance(e, (Crash, Restart))), key=lambda e: e.at):
        if isinstance(e, Crash):
            down.add(e.node)
        else:
            down.discard(e.node)
        assert len(down) <= limit


def test_replaying_a_generated_schedule_gives_the_same_digest() -> None:
    events = tuple(random_faults(77, 5, 3000, 10))
    assert events
    a = run_scenario(SimConfig(77, 5, 3000, 40, frozenset(), events))
    b = run_scenario(SimConfig(77, 5, 3000, 40, frozenset(), tuple(parse_faults(format_faults(list(events)), 5))))
    assert a.digest == b.digest and a.violation is None
    assert a.reproducer == b.reproducer and "--faults" in a.reproducer

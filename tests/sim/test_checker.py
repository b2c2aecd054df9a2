"""The safety checker: it finds hand-made violations, and none in real runs."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zabd.protocol import Txn
from zabd.protocol import zxid as zx
from zabd.protocol.options import CANONICAL, SERVER, Options
from zabd.sim import SimConfig, random_faults
from zabd.sim.checker import SafetyChecker
from zabd.sim.run import run_scenario


def txn(e: int, c: int, payload: bytes | None = None) -> Txn:
    return Txn(zx.make(e, c), payload if payload is not None else b"p%d.%d" % (e, c))


def proposed(checker: SafetyChecker, history: list[Txn]) -> None:
    for t in history:
        checker.record_proposal(0, 9, t)


def test_lost_commit_at_a_later_leader_is_reported() -> None:
    checker = SafetyChecker("zabd sim --seed 1 ...")
    h = [txn(1, 1), txn(1, 2)]
    proposed(checker, h)
    checker.record_history(5, 1, h, replaced=True)
    checker.record_commit(6, 1, zx.make(1, 2), h)
    assert checker.ok
    checker.record_established(9, 2, 2, [txn(1, 1)])  # forgot (1,2)
    assert checker.violation is not None
    assert (checker.violation.kind, checker.violation.tick, checker.violation.node) == ("lost-commit", 9, 2)
    assert "1:2" in checker.violation.detail
    assert checker.violation.reproducer == "zabd sim --seed 1 ..."


def test_late_commit_missing_from_an_established_later_leader_is_reported() -> None:
    checker = SafetyChecker()
    h = [txn(1, 1)]
    proposed(checker, h)
    checker.record_history(1, 2, [], replaced=True)
    checker.record_established(2, 2, 2, [])
    checker.record_history(3, 1, h, replaced=True)
    checker.record_commit(3, 1, zx.make(1, 1), h)
    assert checker.violation is not None and checker.violation.kind == "lost-commit"


def test_disagreeing_committed_prefixes_are_reported() -> None:
    checker = SafetyChecker()
    a = [txn(1, 1), txn(1, 2, b"x")]
    b = [txn(1, 1), txn(1, 2, b"y")]
    checker.record_proposal(0, 1, a[0])
    checker.record_proposal(0, 1, a[1])
    checker.record_commit(1, 1, zx.make(1, 2), a)
    checker.record_commit(2, 2, zx.make(1, 2), b)
    assert checker.violation is not None and checker.violation.kind == "agreement"


def test_history_gaps_and_disorder_are_reported() -> None:
    for bad in ([txn(1, 1), txn(1, 3)], [txn(2, 1), txn(1, 1)], [txn(1, 2)], [txn(1, 1), txn(1, 1)]):
        checker = SafetyChecker()
        checker.record_history(1, 1, bad, replaced=True)
        assert checker.violation is not None and checker.violation.kind == "history-order", bad


def test_two_leaders_in_one_epoch_are_reported() -> None:
    checker = SafetyChecker()
    checker.record_established(1, 1, 3, [])
    checker.record_established(2, 2, 3, [])
    assert checker.violation is not None and checker.violation.kind == "two-leaders"


def test_commit_outside_the_history_and_unproposed_commits_are_reported() -> None:
    checker = SafetyChecker()
    checker.record_commit(1, 1, zx.make(1, 5), [txn(1, 1)])
    assert checker.violation is not None and checker.violation.kind == "commit-missing"
    checker = SafetyChecker()
    checker.record_commit(1, 1, zx.make(1, 1), [txn(1, 1)])
    assert checker.violation is not None and checker.violation.kind == "integrity"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**64 - 1),
    nodes=st.integers(1, 7),
    rounds=st.integers(0, 3000),
    proposals=st.integers(0, 60),
    fault_count=st.integers(0, 12),
    partition=st.lists(st.tuples(st.integers(1, 7), st.integers(1, 7)), max_size=3),
    options=st.sampled_from([CANONICAL, SERVER]),
)
def test_random_configurations_and_fault_schedules_are_safe(
    seed: int,
    nodes: int,
    rounds: int,
    proposals: int,
    fault_count: int,
    partition: list[tuple[int, int]],
    options: Options,
) -> None:
    pairs = frozenset((s, d) for s, d in partition if s != d and s <= nodes and d <= nodes)
    faults = tuple(random_faults(seed, nodes, rounds, fault_count))
    config = SimConfig(seed, nodes, rounds, proposals, pairs, faults, options)
    result = run_scenario(config)
    assert result.violation is None, f"{result.violation.describe()}\n{result.reproducer}"


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    nodes=st.sampled_from([3, 5]),
    fault_count=st.integers(4, 20),
    options=st.sampled_from([CANONICAL, SERVER]),
)
def test_heavy_crash_schedules_allowing_majority_loss_are_safe(
    seed: int, nodes: int, fault_count: int, options: Options
) -> None:
    # max_down = nodes: every node may be down at once; safety must still hold
    faults = tuple(random_faults(seed, nodes, 4000, fault_count, max_down=nodes))
    result = run_scenario(SimConfig(seed, nodes, 4000, 80, frozenset(), faults, options))
    assert result.violation is None, f"{result.violation.describe()}\n{result.reproducer}"

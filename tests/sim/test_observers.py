"""Observers in the core (``Node(..., observers=...)``), through the simulator:
members that follow and hold every txn but never vote, never count toward a
quorum and never lead. Not canonical: the spec has no observers, and a run
without them is the spec's run (``test_vectors`` keeps that)."""

from __future__ import annotations

import random

import pytest

from zabd.protocol.effects import PHASE_SYNC, RoleChanged
from zabd.protocol.membership import Membership
from zabd.protocol.node import FOLLOWING, LEADING, Node
from zabd.protocol.options import CANONICAL, SERVER
from zabd.sim import SimConfig, Simulator, parse_faults, random_faults
from zabd.sim.checker import SafetyChecker
from zabd.sim.cli import UsageError, parse_args
from zabd.sim.run import committed_length, run_scenario


def final(config: SimConfig) -> tuple[list[Node], Simulator]:
    sim = Simulator(config)
    return sim.run(), sim


@pytest.mark.parametrize("options", [CANONICAL, SERVER], ids=["canonical", "server"])
@pytest.mark.parametrize(("nodes", "observers"), [(2, 1), (4, 1), (5, 2), (7, 2), (7, 4)])
def test_observers_hold_every_committed_txn_and_never_lead(nodes: int, observers: int, options: object) -> None:
    config = SimConfig(3, nodes, 3000, 100, options=options, observers=observers)  # type: ignore[arg-type]
    result = run_scenario(config)
    assert result.violation is None, result.violation.describe()
    sim = Simulator(config)
    done = sim.run()
    history_of = (lambda n: sim.disks.logs[n.id]) if sim.disks is not None else (lambda n: n.history)
    leaders = [n for n in done if n.role == LEADING]
    assert len(leaders) == 1 and not leaders[0].observing
    assert committed_length(leaders[0], history_of(leaders[0])) == 100
    for n in done:
        if n.observing:
            assert n.role == FOLLOWING and n.leader == leaders[0].id
            assert committed_length(n, history_of(n)) == 100
            assert list(history_of(n)) == list(history_of(leaders[0]))


def test_observers_do_not_make_a_quorum() -> None:
    """3 voters and 2 observers: with 2 voters down, 3 of 5 members are up,
    yet nothing more commits (observers do not count); 5 voters with the same
    2 down go on committing."""
    faults = tuple(parse_faults("crash:1@1000,crash:2@1000", 5))
    with_observers, _ = final(SimConfig(9, 5, 6000, 200, faults=faults, observers=2))
    all_voters, _ = final(SimConfig(9, 5, 6000, 200, faults=faults))
    stalled = max(committed_length(n) for n in with_observers)
    assert 0 < stalled < 200
    assert max(committed_length(n) for n in all_voters) == 200
    # nobody leads among the survivors: one voter cannot be a quorum of three
    assert not [n for n in with_observers[2:] if n.role == LEADING]


def test_observers_acks_never_commit() -> None:
    """A leader with one voter peer down and every observer up commits nothing
    new: only voters' acks count (here 2 of 3 voters are needed)."""
    faults = tuple(parse_faults("crash:2@1500", 4))
    # voters 1 and 2 (a quorum is both), observers 3 and 4: with node 2 down
    # nothing commits after tick 1500, though 3 of 4 members are up
    nodes, _ = final(SimConfig(5, 4, 5000, 100, faults=faults, observers=2))
    assert 0 < max(committed_length(n) for n in nodes) < 100


@pytest.mark.parametrize("seed", range(30))
def test_random_fault_schedules_with_observers_are_safe(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([3, 4, 5, 7])
    observers = rng.randint(1, n - 1)
    rounds = rng.randint(500, 4000)
    faults = tuple(random_faults(rng.getrandbits(64), n, rounds, rng.randint(0, 20), max_down=rng.choice([n // 2, n])))
    options = rng.choice([CANONICAL, SERVER])
    config = SimConfig(rng.getrandbits(64), n, rounds, rng.randint(10, 300), frozenset(), faults, options,
                       observers=observers)  # fmt: skip
    result = run_scenario(config)
    assert result.violation is None, f"{result.violation.describe()}\n{result.reproducer}"


def test_a_reproducer_names_the_observers() -> None:
    config = SimConfig(1, 5, 1000, 10, observers=2)
    assert config.command().endswith("--observers 2")
    args = parse_args(config.command().split()[2:])
    assert args.observers == 2
    with pytest.raises(UsageError, match="leave nobody to vote"):
        parse_args(["--seed", "1", "--nodes", "3", "--rounds", "9", "--proposals", "1", "--observers", "3"])


def test_the_checker_reports_an_observer_that_leads() -> None:
    checker = SafetyChecker("repro", initial=Membership(frozenset({1, 2}), frozenset({3})))
    node = Node(3, [1, 2], 0)
    checker.observe(7, node, [RoleChanged(LEADING, 3, 1, PHASE_SYNC)])
    assert checker.violation is not None and checker.violation.kind == "non-voter-led"


def test_a_core_refuses_an_ensemble_of_observers_only() -> None:
    with pytest.raises(ValueError, match="nobody can vote"):
        Node(1, [2], 0, observers=[1, 2])
    with pytest.raises(ValueError, match="not members"):
        Node(1, [2], 0, observers=[9])

"""Options.keep_removed: a leader keeps the followers its membership changes
remove as guests (ZooKeeper keeps a removed server as a non-voting learner).
They get every proposal and commit, count in no quorum, are taken back in on
their LookForLeader, and are members again once a change adds them back. The
canonical variant forgets a removed member at once."""

from __future__ import annotations

import pytest

from tests.protocol.helpers import synced_leader
from zabd.protocol.effects import Broadcast, CommitTo, Send
from zabd.protocol.membership import Membership
from zabd.protocol.messages import Ack, LookForLeader, ReadPong
from zabd.protocol.node import FOLLOWING, LEADING, Node
from zabd.protocol.options import CANONICAL, SERVER, Options
from zabd.sim import SimConfig, Simulator, parse_faults
from zabd.sim.run import committed_length, run_scenario

VARIANTS = pytest.mark.parametrize("options", [CANONICAL, SERVER], ids=["canonical", "server"])


def m(voters: set[int], observers: frozenset[int] = frozenset()) -> Membership:
    return Membership(frozenset(voters), observers)


def run(spec: str, options: Options) -> tuple[list[Node], list[int]]:
    config = SimConfig(5, 4, 6000, 200, faults=tuple(parse_faults(spec, 4)), options=options)
    result = run_scenario(config)
    assert result.violation is None, f"{result.violation.describe()}\n{result.reproducer}"
    sim = Simulator(config)
    nodes = sim.run()
    held = [committed_length(n, sim.disks.logs[n.id] if sim.disks is not None else None) for n in nodes]
    return nodes, held


@VARIANTS
def test_a_removed_follower_gets_the_commits_only_under_the_server_variant(options: Options) -> None:
    nodes, held = run("remove:1@1000", options)
    leader = next(n for n in nodes if n.role == LEADING)
    assert leader.id != 1 and all(n.membership == m({2, 3, 4}) for n in nodes)
    if options.keep_removed:
        # it follows on, never votes, and holds all 200 proposals and the change
        assert nodes[0].role == FOLLOWING and nodes[0].leader == leader.id and nodes[0].observing
        assert held[0] == held[leader.id - 1] == 201
    else:
        assert nodes[0].role != FOLLOWING and held[0] < 201


@VARIANTS
def test_a_removed_follower_is_added_back(options: Options) -> None:
    nodes, held = run("remove:1@1000,add:1@3000", options)
    assert all(n.membership == m({1, 2, 3, 4}) for n in nodes)
    assert held == [202] * 4 and nodes[0].voting


@VARIANTS
def test_the_leader_sends_a_guest_what_it_sends_an_observer_and_counts_it_nowhere(options: Options) -> None:
    node = synced_leader(options)  # 3 leads {1, 2, 3}
    z = node.propose_membership(m({2, 3}), 10)
    node.take_effects()
    node.on_message(2, Ack(z), 11)
    assert node.last_committed == z
    node.take_effects()
    kept = options.keep_removed
    assert node.peers == ((1, 2) if kept else (2,)) and node.guests == ({1} if kept else set())
    z2 = node.propose(b"after", 12)
    node.take_effects()
    node.on_message(1, Ack(z2), 13)  # a guest's ack (it sends none) never counts
    assert node.last_committed == z
    node.on_message(2, Ack(z2), 14)
    assert CommitTo(z2) in node.take_effects() and node.peers == ((1, 2) if kept else (2,))
    node.read_barrier(5, 15)
    node.take_effects()
    node.on_message(1, ReadPong(1), 16)  # nor a read pong
    assert node.barriers
    # its LookForLeader (its link broke, say) is answered as an observer's
    node.on_message(1, LookForLeader(1, z2, 1), 17)
    answered = [e for e in node.take_effects() if not isinstance(e, Broadcast)]
    assert bool(answered) == kept
    # added back: a member again, not a guest
    z3 = node.propose_membership(m({1, 2, 3}), 18)
    assert node.guests == set() and node.peers == (1, 2)
    effects = node.take_effects()
    # the removal's own Propose reaches a guest by the broadcast, not twice
    assert [e for e in effects if isinstance(e, Send) and e.dst == 1] == []
    node.on_message(2, Ack(z3), 19)
    assert node.last_committed == z3


def test_a_new_leadership_forgets_the_guests() -> None:
    node = synced_leader(SERVER)
    z = node.propose_membership(m({2, 3}), 10)
    node.on_message(2, Ack(z), 11)
    assert node.guests == {1}
    node.start_election(12, "test")
    assert node.guests == set() and node.peers == (2,)
    node.take_effects()
    node.on_message(1, LookForLeader(1, z, 1), 13)  # not a voter, not a guest: unanswered
    assert [e for e in node.take_effects() if isinstance(e, Send) and e.dst == 1] == []

"""``Options.cumulative_acks``: a follower's Ack(z) counts for every proposal
up to z (the server sends only the last Ack of a flush); the spec's leader
counts it for z alone."""

from __future__ import annotations

import pytest

from zabd.protocol.effects import CommitTo
from zabd.protocol.messages import Ack, AckEpoch, AckLeader, Vote
from zabd.protocol.node import LEADING, Node
from zabd.protocol.options import CANONICAL, SERVER, Options, for_server

CUMULATIVE = Options(cumulative_acks=True)


def leader_of_five(options: Options) -> Node:
    """Node 5 leads epoch 1 of five nodes (quorum 3), nodes 1 and 2 synced."""
    node = Node(5, [1, 2, 3, 4], 7, options)
    node.start_election(0)
    for f in (1, 2):
        node.on_message(f, Vote(0, 0, 0, 5), 1)
    for f in (1, 2):
        node.on_message(f, AckEpoch(1, 0, 0), 2)
    for f in (1, 2):
        node.on_message(f, AckLeader(1), 3)
    assert node.role == LEADING and node.synced
    node.take_effects()
    return node


def commits(node: Node) -> list[int]:
    return [e.zxid for e in node.take_effects() if isinstance(e, CommitTo)]


@pytest.mark.parametrize("options", [CUMULATIVE, SERVER], ids=["cumulative", "server-variant"])
def test_an_ack_counts_for_every_proposal_up_to_it(options: Options) -> None:
    node = leader_of_five(options)
    _z1, z2, z3 = (node.propose(b"p%d" % k, 10) for k in range(3))
    node.take_effects()
    node.on_message(1, Ack(z3), 11)  # node 1 holds z1..z3: its earlier Acks were not sent
    assert commits(node) == []  # two of five
    node.on_message(2, Ack(z2), 12)
    assert commits(node) == [z2] and node.last_committed == z2  # z1 and z2: leader, 1 and 2
    node.on_message(2, Ack(z3), 13)
    assert commits(node) == [z3]


def test_the_spec_counts_an_ack_for_its_own_proposal_only() -> None:
    node = leader_of_five(CANONICAL)
    _z1, z2, z3 = (node.propose(b"p%d" % k, 10) for k in range(3))
    node.take_effects()
    node.on_message(1, Ack(z3), 11)
    node.on_message(2, Ack(z2), 12)
    assert commits(node) == [] and node.last_committed == 0  # z2: leader and 2; z3: leader and 1


def test_an_observers_ack_counts_for_nothing() -> None:
    assert for_server(100, 100, 100).cumulative_acks  # what the server runs
    node = leader_of_five(CUMULATIVE)
    z1 = node.propose(b"p", 10)
    node.take_effects()
    node.on_message(1, Ack(z1), 11)
    node.on_message(9, Ack(z1), 12)  # not a voter of this ensemble
    assert commits(node) == []

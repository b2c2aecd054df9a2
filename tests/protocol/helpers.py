"""Cores put in a known state for tests."""

from __future__ import annotations

from zabd.protocol.messages import AckEpoch, AckLeader, Vote
from zabd.protocol.node import LEADING, Node
from zabd.protocol.options import Options


def synced_leader(options: Options) -> Node:
    """Node 3 of three leads epoch 1 with node 1 synced; its effects taken."""
    node = Node(3, [1, 2], 7, options)
    node.start_election(0)
    node.on_message(1, Vote(0, 0, 0, 3), 1)
    node.on_message(1, AckEpoch(1, 0, 0), 2)
    node.on_message(1, AckLeader(1), 3)
    assert node.role == LEADING and node.synced
    node.take_effects()
    return node

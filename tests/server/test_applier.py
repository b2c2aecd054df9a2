"""The applier applies every committed txn exactly once, in order, even when
one commit covers more than the core's window (cumulative acks commit a whole
batch at once, and the core trims what is committed before it is applied)."""

from __future__ import annotations

from zabd.machine import NullMachine
from zabd.protocol.effects import AppendTxn, CommitTo
from zabd.protocol.messages import Ack, AckEpoch, AckLeader, SyncInfo, Txn, Vote
from zabd.protocol.node import LEADING, Node
from zabd.protocol.options import Options
from zabd.protocol.window import window_ends
from zabd.server.applier import Applier
from zabd.storage.base import MemoryStorage

WINDOW = Options(vote_on_follow=True, windowed=True, cumulative_acks=True, window=4, diff_limit=10, sync_retry=100)


class Recording(NullMachine):
    def __init__(self) -> None:
        super().__init__()
        self.applied: list[int] = []

    def apply(self, txn: Txn) -> object:
        self.applied.append(txn.zxid)
        return super().apply(txn)


def test_a_commit_wider_than_the_window_applies_what_left_memory_from_the_log() -> None:
    node = Node(3, [1, 2], 7, WINDOW)
    node.start_election(0)
    node.on_message(1, Vote(0, 0, 0, 3), 1)
    node.on_message(1, SyncInfo(node.base, window_ends(node.history)), 2)
    node.on_message(1, AckEpoch(1, 0, 0), 2)
    node.on_message(1, AckLeader(1), 3)
    assert node.role == LEADING and node.synced
    node.take_effects()
    storage, machine = MemoryStorage(), Recording()
    applier = Applier(node, storage, machine, 0, 1 << 20)
    zs = [node.propose(b"p%d" % k, 10) for k in range(20)]
    for e in node.take_effects():
        if isinstance(e, AppendTxn):
            storage.append(e.txn)
    node.on_message(1, Ack(zs[-1]), 11)  # one Ack commits all twenty
    commits = [e.zxid for e in node.take_effects() if isinstance(e, CommitTo)]
    assert commits == [zs[-1]]
    assert node.base > 0 and len(node.history) < len(zs)  # trimmed before the applier ran
    applied = applier.commit_to(zs[-1])
    assert [t.zxid for t in applied] == zs == machine.applied
    assert applier.commit_to(zs[-1]) == []  # once

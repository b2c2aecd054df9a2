"""The simulator's stand-in for each node's disk, for the windowed variant.

The canonical simulator needs no disk: a node's history is all in memory.
In the server's variant (``Options.windowed``) the core keeps only a window,
so the simulator keeps what a server keeps on disk, built from the node's
persist effects: its whole log, and the snapshots it took. It serves the
leader's log reads and snapshots for sync plans, and purges the log below
the older of the last two snapshots, telling the core (``log_start``), so
that followers which fall behind must be sent a snapshot.

For checking, the log is never really cut below a purge: a node's disk log
is its full logical history, which the safety checker reads in place of the
in-memory window. ``check_window`` verifies that the window is exactly the
log's tail after ``base``.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Final, NamedTuple

from zabd.protocol.effects import (
    AppendTxn,
    CommitTo,
    Effect,
    InstallSnapshot,
    ReplaceHistory,
    SendSync,
    TruncateAppend,
)
from zabd.protocol.messages import SNAP, Message, Sync, Txn
from zabd.protocol.node import Node

# A snapshot every this many commit steps of a node, the log purged below
# the older of the last two (ZooKeeper's snapCount and autopurge, scaled down).
SNAP_EVERY: Final = 8


class SnapshotTransfer(NamedTuple):
    """A Sync that carries a snapshot: the state up to ``sync.point``, which
    in the simulator is the committed prefix of the leader's log."""

    sync: Sync
    prefix: tuple[Txn, ...]


def _zxid(txn: Txn) -> int:
    return txn.zxid


class SimDisks:
    def __init__(self, nodes: int) -> None:
        self.logs: list[list[Txn]] = [[] for _ in range(nodes + 1)]
        self.snapshots: list[list[int]] = [[] for _ in range(nodes + 1)]
        self.commits = [0] * (nodes + 1)
        self.received: list[tuple[Txn, ...] | None] = [None] * (nodes + 1)
        self.syncs_sent = {"DIFF": 0, "TRUNC": 0, "SNAP": 0}
        # purges of the batch being carried out: told to the core after its
        # sends, since a server reads a sync plan's txns in effect order,
        # before a later effect's snapshot lets the log be purged
        self.purged_to = [0] * (nodes + 1)

    def persist(self, node: Node, effects: list[Effect], commits: bool = True) -> None:
        """``commits``: False when a pipeline releases CommitTo later (the
        pipeline variant calls ``committed`` then): a snapshot is taken of
        what is applied, and nothing is applied before it is durable."""
        log = self.logs[node.id]
        for e in effects:
            if isinstance(e, AppendTxn):
                log.append(e.txn)
            elif isinstance(e, TruncateAppend):
                del log[bisect_right(log, e.after, key=_zxid) :]
                log.extend(e.txns)
            elif isinstance(e, InstallSnapshot):
                prefix = self.received[node.id]
                assert prefix is not None and (not prefix or prefix[-1].zxid == e.zxid), "snapshot not received"
                log[:] = prefix
                self.received[node.id] = None
                self._snapshot(node, e.zxid)
            elif isinstance(e, ReplaceHistory):
                log[:] = e.history
            elif commits and isinstance(e, CommitTo):
                self.committed(node, e.zxid)

    def committed(self, node: Node, zxid: int) -> None:
        """``node`` applied everything up to ``zxid``."""
        self.commits[node.id] += 1
        if self.commits[node.id] % SNAP_EVERY == 0:
            self._snapshot(node, zxid)

    def recovered(self, node: int, log: list[Txn], last_committed: int) -> None:
        """The pipeline variant: ``node`` crashed and its disk holds ``log``
        (what was flushed, and maybe some of what was not). A snapshot above
        the commit point recovery found was of state the disk lost; the core
        may read the log again from the older snapshot that is left."""
        self.logs[node][:] = log
        self.received[node] = None
        snaps = self.snapshots[node]
        snaps[:] = [z for z in snaps if z <= last_committed]
        self.purged_to[node] = min(self.purged_to[node], snaps[0] if snaps else 0)

    def _snapshot(self, node: Node, zxid: int) -> None:
        snaps = self.snapshots[node.id]
        snaps.append(zxid)
        if len(snaps) > 2:
            del snaps[0]
        # purge: the log is kept for the checker, but the core may no longer read below this
        self.purged_to[node.id] = max(self.purged_to[node.id], snaps[0])

    def purged(self, node: Node) -> None:
        """The batch's effects are carried out: the core learns of its purges."""
        node.log_start = max(node.log_start, self.purged_to[node.id])

    def sync_message(self, node: Node, e: SendSync, strict: bool = True) -> Sync | SnapshotTransfer:
        """The Sync a SendSync effect stands for, with the log reads done.
        ``strict``: the plan was made in this batch, against this purge point."""
        assert not strict or e.read_after >= node.log_start, f"node {node.id} reads below its purged log"
        log = self.logs[node.id]
        txns = e.txns
        if e.read_upto > e.read_after:
            i = bisect_right(log, e.read_after, key=_zxid)
            j = bisect_right(log, e.read_upto, key=_zxid)
            txns = tuple(log[i:j]) + txns
        self.syncs_sent[("DIFF", "TRUNC", "SNAP")[e.mode]] += 1
        sync = Sync(e.epoch, e.mode, e.point, txns, e.membership, e.membership_zxid)
        if e.mode == SNAP:
            return SnapshotTransfer(sync, tuple(log[: bisect_right(log, e.point, key=_zxid)]))
        return sync

    def deliver(self, dst: int, msg: Message | SnapshotTransfer) -> Message:
        """Unwrap a snapshot transfer at its destination."""
        if isinstance(msg, SnapshotTransfer):
            self.received[dst] = msg.prefix
            return msg.sync
        return msg

    def check_window(self, node: Node) -> str | None:
        """None if the node's window is its log's tail after ``base``."""
        log = self.logs[node.id]
        i = bisect_right(log, node.base, key=_zxid)
        if node.base and (i == 0 or log[i - 1].zxid != node.base):
            return f"base {node.base:#x} is not in the log"
        if log[i:] != node.history:
            return f"the window ({len(node.history)} txns) is not the log's tail after base {node.base:#x}"
        if node.base > node.last_committed:
            return f"base {node.base:#x} is above the commit point"
        return None

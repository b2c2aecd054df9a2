"""The storage interface the server driver writes the core's persist effects to.

Calls are buffered in order; ``flush()`` makes everything buffered so far
durable and returns when it is (one fdatasync for the whole batch in the disk
implementation: group commit). The server awaits ``flush()`` before releasing
any Send that the core emitted after a persist effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from zabd.protocol.messages import Txn


@dataclass(slots=True)
class PersistentState:
    current_epoch: int = 0
    accepted_epoch: int = 0
    epoch_leader: int = 0
    history: list[Txn] = field(default_factory=list)
    last_committed: int = 0
    # Durable storage only (MemoryStorage leaves the defaults): ``history``
    # holds the retained log, which starts right after ``log_base`` (0: from
    # the beginning). ``snapshot`` is the state machine's snapshot covering
    # every txn up to ``snapshot_zxid`` (>= log_base); restore it, then apply
    # the history's txns above snapshot_zxid up to last_committed.
    log_base: int = 0
    snapshot_zxid: int = 0
    snapshot: bytes | None = None


@dataclass(slots=True)
class StorageStats:
    flushes: int = 0  # flush() calls that had something to make durable
    syncs: int = 0  # fsync/fdatasync calls issued
    records_synced: int = 0  # txn records made durable


class Storage(Protocol):
    stats: StorageStats

    def load(self) -> PersistentState:
        """Recover the persistent state (called once, before anything else)."""
        ...

    def persist_epochs(self, accepted_epoch: int, epoch_leader: int, current_epoch: int) -> None: ...

    def append(self, txn: Txn) -> None: ...

    def replace_history(self, history: Sequence[Txn]) -> None: ...

    def commit_to(self, zxid: int) -> None:
        """Record the commit point. Not a barrier: recovery may find an older
        one, which is safe (commits are re-learned from the leader)."""
        ...

    @property
    def dirty(self) -> bool:
        """True if a flush() would have anything to make durable."""
        ...

    async def flush(self) -> None: ...

    def close(self) -> None: ...


class MemoryStorage:
    """Keeps nothing across restarts: a restarted node rejoins empty and the
    leader syncs it. For tests and the in-memory benchmark mode."""

    def __init__(self) -> None:
        self.state = PersistentState()
        self.stats = StorageStats()
        self._pending = 0

    def load(self) -> PersistentState:
        return PersistentState(
            self.state.current_epoch,
            self.state.accepted_epoch,
            self.state.epoch_leader,
            list(self.state.history),
            self.state.last_committed,
        )

    def persist_epochs(self, accepted_epoch: int, epoch_leader: int, current_epoch: int) -> None:
        self.state.accepted_epoch = accepted_epoch
        self.state.epoch_leader = epoch_leader
        self.state.current_epoch = current_epoch
        self._pending += 1

    def append(self, txn: Txn) -> None:
        self.state.history.append(txn)
        self._pending += 1

    def replace_history(self, history: Sequence[Txn]) -> None:
        self.state.history = list(history)
        self._pending += 1

    def commit_to(self, zxid: int) -> None:
        self.state.last_committed = zxid

    @property
    def dirty(self) -> bool:
        return self._pending > 0

    async def flush(self) -> None:
        if self._pending:
            self.stats.flushes += 1
            self.stats.records_synced += self._pending
            self._pending = 0

    def close(self) -> None:
        pass

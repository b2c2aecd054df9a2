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
    # ``history`` may hold only the newest part of the retained log (a window:
    # DiskStorage(window=N)); it starts right after ``window_base``, and
    # ``below_ends`` has the last zxid of each epoch of the log below it.
    window_base: int = 0
    below_ends: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class StorageStats:
    flushes: int = 0  # flush() calls that had something to make durable
    syncs: int = 0  # fsync/fdatasync calls issued
    records_synced: int = 0  # txn records made durable


class SnapshotSink(Protocol):
    """Where a snapshot received from a leader goes while it arrives, before
    ``install_snapshot`` makes it the state (``DiskStorage``: a temp file)."""

    def write(self, data: bytes | memoryview) -> None: ...

    def abort(self) -> None:
        """The transfer broke off: nothing of it is kept."""
        ...


class DiscardedSnapshot:
    """The sink of a storage that keeps no snapshot (the state is the caller's)."""

    def write(self, data: bytes | memoryview) -> None:
        pass

    def abort(self) -> None:
        pass


class Storage(Protocol):
    stats: StorageStats

    def load(self) -> PersistentState:
        """Recover the persistent state (called once, before anything else)."""
        ...

    def persist_epochs(self, accepted_epoch: int, epoch_leader: int, current_epoch: int) -> None: ...

    def append(self, txn: Txn) -> None: ...

    def replace_history(self, history: Sequence[Txn]) -> None: ...

    def truncate_append(self, after: int, txns: Sequence[Txn]) -> None:
        """Keep the records up to ``after``, drop the rest, append ``txns``."""
        ...

    def receive_snapshot(self, zxid: int) -> SnapshotSink:
        """A sink for the snapshot at ``zxid`` a leader is sending, piece by piece."""
        ...

    def install_snapshot(self, zxid: int, data: bytes | SnapshotSink, log_base: int | None = None) -> None:
        """A snapshot received from a leader (its bytes, or the sink they
        went to) replaces the state; the log
        restarts after ``log_base`` (default ``zxid``). The commit point
        becomes ``zxid``, even below the one recorded: the leader's txns after
        the snapshot follow in the same sync and are committed again."""
        ...

    def read_range(self, after: int, upto: int, max_bytes: int = 0) -> list[Txn]:
        """Retained txns in ``(after, upto]``, in order; with ``max_bytes``, at
        most about that many payload bytes (at least one txn). Raises
        ``PurgedError`` if txns after ``after`` are no longer held."""
        ...

    @property
    def log_start(self) -> int:
        """The log holds every txn after this zxid (older ones were purged)."""
        ...

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


class PurgedError(Exception):
    """Txns that were asked for are gone: a snapshot covers them and the log
    that held them was purged. ``oldest`` is the newest zxid no longer held."""

    def __init__(self, after: int, oldest: int) -> None:
        super().__init__(f"txns after {after >> 32}:{after & 0xFFFF_FFFF} were purged; the log holds only txns "
                         f"after {oldest >> 32}:{oldest & 0xFFFF_FFFF}")
        self.after = after
        self.oldest = oldest


def read_from(history: Sequence[Txn], after: int, upto: int, max_bytes: int) -> list[Txn]:
    """``read_range`` over an in-memory list of txns."""
    lo, hi = 0, len(history)
    while lo < hi:
        mid = (lo + hi) // 2
        if history[mid].zxid <= after:
            lo = mid + 1
        else:
            hi = mid
    out: list[Txn] = []
    size = 0
    for t in history[lo:]:
        if t.zxid > upto or (max_bytes and out and size + len(t.payload) > max_bytes):
            break
        out.append(t)
        size += len(t.payload)
    return out


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
            log_base=self.state.log_base,
            window_base=self.state.log_base,
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

    def truncate_append(self, after: int, txns: Sequence[Txn]) -> None:
        h = self.state.history
        keep = len(read_from(h, 0, after, 0)) if h and h[0].zxid <= after else 0
        del h[keep:]
        h.extend(txns)
        self._pending += 1

    def receive_snapshot(self, zxid: int) -> SnapshotSink:
        return DiscardedSnapshot()

    def install_snapshot(self, zxid: int, data: bytes | SnapshotSink, log_base: int | None = None) -> None:
        # Memory keeps no snapshot: the log restarts after it, the state is the caller's
        self.state.history = []
        self.state.log_base = self.state.snapshot_zxid = zxid if log_base is None else log_base
        self.state.last_committed = zxid
        self._pending += 1

    def read_range(self, after: int, upto: int, max_bytes: int = 0) -> list[Txn]:
        if after < self.state.log_base:
            raise PurgedError(after, self.state.log_base)
        return read_from(self.state.history, after, upto, max_bytes)

    @property
    def log_start(self) -> int:
        return self.state.log_base

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

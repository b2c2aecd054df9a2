"""When a server snapshots its state machine, and the purge that follows.

A snapshot is taken every ~``snap_count`` applied txns without stopping
commits: the state machine hands out a cheap immutable view on the event
loop's thread (``snapshot_view``), a background thread encodes and writes it
piece by piece,
then purges snapshots beyond ``retain`` and the log segments the oldest
retained snapshot covers. The file format is ``zabd.storage.snapshot``'s.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from zabd.config import SnapshotOptions
from zabd.machine import StateMachine
from zabd.protocol import zxid as zx
from zabd.storage.txnlog import StorageError

log = logging.getLogger("zabd.storage")
SNAPSHOT_PIECE = 1 << 20  # ~2 ms of a compiled encode at 1M znodes: the event loop's longest wait on the snapshotter


class SnapshotStore(Protocol):
    """What the snapshotter needs of a storage (``DiskStorage`` has it)."""

    def write_snapshot(self, zxid: int, data: bytes | Iterable[bytes]) -> object: ...

    def purge(self, retain: int) -> tuple[int, int]: ...



def snap_threshold(snap_count: int, rng: random.Random) -> int:
    """ZooKeeper's randomized roll: snapCount/2 + rand(snapCount/2), so the
    nodes of a cluster do not all snapshot at the same txn."""
    half = max(snap_count // 2, 1)
    return half + rng.randrange(half + 1)


@dataclass(slots=True)
class SnapshotStats:
    taken: int = 0
    last_zxid: int = 0
    segments_purged: int = 0
    snapshots_purged: int = 0


class Snapshotter:
    """Takes a snapshot every ~``snap_count`` applied txns without stopping
    commits: the state machine hands out a cheap immutable view on the
    caller's thread (``snapshot_view``), a background thread encodes and
    writes it, then purges snapshots beyond ``retain`` and the log segments
    the oldest retained snapshot covers.

    Call :meth:`applied` after each txn (or batch) the state machine applied.
    """

    @classmethod
    def for_server(
        cls,
        options: SnapshotOptions,
        store: SnapshotStore,
        machine: StateMachine,
        on_error: Callable[[BaseException], None],
        on_purge: Callable[[int, int], None] | None = None,
        on_taken: Callable[[float], None] | None = None,
    ) -> Snapshotter:
        """A server's snapshotter, as ``ServerConfig.snapshot_options()`` says."""
        return cls(store, machine, snap_count=options.snap_count, retain=options.retain, seed=options.seed,
                   on_error=on_error, on_purge=on_purge, on_taken=on_taken)

    def __init__(
        self,
        storage: SnapshotStore,
        machine: StateMachine,
        *,
        snap_count: int = 100_000,
        retain: int = 3,
        seed: int | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        on_purge: Callable[[int, int], None] | None = None,
        on_taken: Callable[[float], None] | None = None,
    ) -> None:
        """``retain`` 0: never purge (autopurge off). ``on_taken``: told, from
        the snapshot thread, the seconds each snapshot took to encode and write."""
        if snap_count < 2:
            raise ValueError(f"snap_count {snap_count} is below 2")
        if retain < 0:
            raise ValueError(f"snapshot retention {retain} is below 0")
        self.storage = storage
        self.machine = machine
        self.snap_count = snap_count
        self.retain = retain
        self._rng = random.Random(seed)
        self._threshold = snap_threshold(snap_count, self._rng)
        self._since = 0
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self._on_error = on_error
        self._on_purge = on_purge
        self._on_taken = on_taken
        self.stats = SnapshotStats()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def applied(self, zxid: int, count: int = 1) -> bool:
        """Record ``count`` applied txns ending at ``zxid``; returns True if a
        background snapshot was started."""
        self._since += count
        if self._since < self._threshold or self.busy:
            return False
        self._since = 0
        self._threshold = snap_threshold(self.snap_count, self._rng)
        self.start(zxid)
        return True

    def start(self, zxid: int) -> None:
        if self.error is not None:
            raise StorageError(f"an earlier snapshot failed: {self.error}")
        view = self.machine.snapshot_view()
        self._thread = threading.Thread(target=self._run, args=(zxid, view), name="zabd-snapshot", daemon=True)
        self._thread.start()

    def _run(self, zxid: int, view: object) -> None:
        try:
            t0 = time.monotonic()
            # piece by piece: each file write lets go of the interpreter, so the
            # event loop runs between pieces even when the encoder is compiled
            # code that would hold it for the whole state
            self.storage.write_snapshot(zxid, self.machine.encode_chunks(view, SNAPSHOT_PIECE))
            if self._on_taken is not None:
                self._on_taken(time.monotonic() - t0)
            self.stats.taken += 1
            self.stats.last_zxid = zxid
            snaps = segs = 0
            if self.retain:
                snaps, segs = self.storage.purge(self.retain)
                if self._on_purge is not None:
                    self._on_purge(snaps, segs)
            self.stats.snapshots_purged += snaps
            self.stats.segments_purged += segs
        except BaseException as exc:  # reported, never swallowed
            self.error = exc
            log.error("snapshot at %s failed: %s", zx.fmt(zxid), exc)
            if self._on_error is not None:
                self._on_error(exc)

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        if self.error is not None:
            raise StorageError(f"snapshot failed: {self.error}")

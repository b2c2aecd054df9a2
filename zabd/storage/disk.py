"""``DiskStorage``: the durable :class:`~zabd.storage.base.Storage`.

Data directory::

    DATA/epochs          accepted_epoch, epoch_leader, current_epoch (atomic replace)
    DATA/commit          last commit point (lazy, advisory)
    DATA/log/NNNNNNNN.log transaction log segments (zabd.storage.txnlog)
    DATA/snap/snap.<zxid> state-machine snapshots (zabd.storage.snapshot)

Threading: the event loop calls ``append``/``replace_history``/
``persist_epochs``/``commit_to``, which only encode and buffer. ``flush()``
hands everything buffered to one writer thread and awaits the batch's sync.
While the writer syncs, later flushes queue up and are written and synced
together (group commit: one fdatasync for everything that arrived meanwhile).

Order inside a batch is the order of the calls, with one rule: an epoch-file
write is a barrier. The log writes before it are synced first, and the epoch
file is durable before the log writes after it, so a crash at any point
leaves a state the node really went through (history before epochs,
ZOOKEEPER-4643).

Replace-history never rewrites what it keeps: the log is cut after the last
zxid the old and new histories share (unlinking later segments first, then a
truncate, synced) and the new suffix appended. Every crash point leaves a
prefix of the old history that contains the shared prefix, or a prefix of the
new one: memory is never behind on disk in a way that loses an acknowledged
txn, and the log never has a hole (ZOOKEEPER-5094, -4394).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import logging
import os
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn
from zabd.storage.base import PersistentState, PurgedError, SnapshotSink, Storage, StorageStats
from zabd.storage.epochs import CommitFile, Epochs, read_commit, read_epochs, write_epochs
from zabd.storage.snapshot import (
    SnapshotWriter,
    drop_snapshots_above,
    list_snapshots,
    purge_snapshots,
    read_snapshot,
    write_snapshot,
)
from zabd.storage.txnlog import (
    PURGE_PAUSE_S,
    REC_HEADER,
    REC_HEADER_SIZE,
    PhysicalLog,
    StorageError,
    decode_records,
    delete_segments,
    follows,
    fsync_dir,
    order_problem,
    record_head,
    recover_log,
)

log = logging.getLogger("zabd.storage")

MiB = 1 << 20

# writer ops (tuples: cheap to build on the loop)
_APPEND = 0  # (_APPEND, blob, zxids, sizes)
_TRUNCATE = 1  # (_TRUNCATE, keep_zxid)
_EPOCHS = 2  # (_EPOCHS, Epochs)
_INSTALL = 3  # (_INSTALL, zxid, data, log_base)
_PURGE = 4  # (_PURGE, retain, result holder)

Op = tuple[Any, ...]


class DiskStorage:
    """Durable storage in ``data_dir``. Construct, ``load()`` once, then use.

    ``fsync=False`` skips every fsync/fdatasync (benchmarks only: a crash can
    lose acknowledged data). ``segment_bytes``: roll to a new segment once the
    current one holds this much. ``prealloc_bytes``: zero-filled chunk a
    segment is created with and extended by.
    """

    def __init__(
        self,
        data_dir: str,
        *,
        fsync: bool = True,
        segment_bytes: int = 64 * MiB,
        prealloc_bytes: int = 16 * MiB,
        window: int = 0,
    ) -> None:
        if segment_bytes < 4096:
            raise ValueError(f"segment_bytes {segment_bytes} is below 4096")
        if prealloc_bytes < 4096:
            raise ValueError(f"prealloc_bytes {prealloc_bytes} is below 4096")
        self.data_dir = os.path.abspath(data_dir)
        self.log_dir = os.path.join(self.data_dir, "log")
        self.snap_dir = os.path.join(self.data_dir, "snap")
        self.epoch_path = os.path.join(self.data_dir, "epochs")
        self.commit_path = os.path.join(self.data_dir, "commit")
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.prealloc_bytes = prealloc_bytes
        # load() reads at most this many committed txns into memory (0: all);
        # older ones are read from the segment files when asked for
        self.window = window
        self.stats = StorageStats()
        self.warnings: list[str] = []
        # loop side: the logical log after every buffered call
        self._zxids: array[int] = array("Q")  # retained records, ascending
        self._base = 0  # zxid before the first retained record
        self._commit = 0
        self._ops: list[Op] = []
        self._buf: list[bytes] = []  # heads and payloads of the records not yet sealed
        self._buf_zxids: list[int] = []
        self._buf_sizes: list[int] = []
        self._loaded = False
        self._closed = False
        # writer side
        self._plog: PhysicalLog | None = None
        self._cond = threading.Condition()
        self._queue: list[Op] = []
        self._submitted = 0  # generation of the last submitted batch
        self._done = 0  # generation of the last durable batch
        self._durable_zxid = 0
        self._error: BaseException | None = None
        self._stop = False
        self._writer_thread: threading.Thread | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._commit_file = CommitFile(self.commit_path)
        self._commit_written = -1
        self._handoff_scheduled = False
        self._lock_fd = -1
        self._purged_base = 0  # set by the writer thread after a purge
        # log segments a purge took out of the log and nobody deleted yet; the
        # lock is held while they are deleted (see _delete_detached)
        self._detached: list[str] = []
        self._detach_lock = threading.Lock()

    # ----------------------------------------------------------------- load

    def load(self) -> PersistentState:
        if self._loaded:
            raise RuntimeError("DiskStorage.load() may be called only once")
        for d in (self.data_dir, self.log_dir, self.snap_dir):
            os.makedirs(d, exist_ok=True)
        # One process per data directory: two writers would interleave records.
        lock_path = os.path.join(self.data_dir, "lock")
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise StorageError(f"{lock_path}: the data directory is in use by another process") from None
        self._remove_temp_files()
        epochs = read_epochs(self.epoch_path) or Epochs(0, 0, 0)
        snaps = list_snapshots(self.snap_dir)
        snap = read_snapshot(snaps[-1][1]) if snaps else None
        # 1M new tuples would trigger many cyclic-GC passes over a growing
        # heap; they hold no cycles, so collection is paused for the scan.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            rec = recover_log(self.log_dir, load_txns=False)
        finally:
            if gc_was_enabled:
                gc.enable()
        self.warnings.extend(rec.warnings)
        base = rec.base_zxid
        segments = rec.segments
        all_zxids: array[int] = array("Q")
        for seg in segments:  # already built by the scan: no pass over the records
            all_zxids.extend(seg.zxids)
        last = all_zxids[-1] if all_zxids else base
        snap_zxid = snap.zxid if snap is not None else 0
        discarded = False
        if snap is not None:
            i = bisect_left(all_zxids, snap_zxid)
            in_log = snap_zxid == base or (i < len(all_zxids) and all_zxids[i] == snap_zxid)
            if not segments and snap_zxid > 0 and not snap.received:
                raise StorageError(f"{self.log_dir}: no log segments, but snapshot {snap.path} needs the log after it")
            if segments and not in_log:
                # a received snapshot the log does not hold (above it, or below
                # its base: the install dropped the snapshots the old log was
                # purged up to) is only ever the crash state of an install
                # that had not yet reset the log
                if snap.received:
                    msg = (
                        f"{snap.path}: installed snapshot {zx.fmt(snap_zxid)} is not in the log "
                        f"({zx.fmt(base)}..{zx.fmt(last)}): the log is left over from an interrupted install, discarded"
                    )
                    log.warning(msg)
                    self.warnings.append(msg)
                    for seg in reversed(segments):
                        os.unlink(seg.path)
                    fsync_dir(self.log_dir)
                    segments = []
                    all_zxids = array("Q")
                    base = last = snap_zxid
                    discarded = True
                elif snap_zxid > last:
                    raise StorageError(
                        f"{snap.path}: snapshot covers up to {zx.fmt(snap_zxid)} but the log ends at "
                        f"{zx.fmt(last)} ({segments[-1].path}): log records are missing"
                    )
                else:
                    raise StorageError(
                        f"{snap.path}: snapshot zxid {zx.fmt(snap_zxid)} is not a txn of the log "
                        f"({segments[0].path}..{segments[-1].path}): log and snapshot disagree"
                    )
            if base > snap_zxid:
                raise StorageError(
                    f"{segments[0].path}: log starts after zxid {zx.fmt(base)} but the newest snapshot covers only "
                    f"up to {zx.fmt(snap_zxid)}: txns in between are missing"
                )
            if not segments:
                base = last = snap_zxid
        elif base != 0:
            raise StorageError(
                f"{segments[0].path}: log starts after zxid {zx.fmt(base)} but there is no snapshot in "
                f"{self.snap_dir}: txns up to it are missing"
            )
        commit = read_commit(self.commit_path)
        if discarded:  # a point in the discarded log; the snapshot's is what holds now
            commit = min(commit, snap_zxid)
        if commit > last:
            raise StorageError(
                f"{self.commit_path}: commit point {zx.fmt(commit)} was recorded but the log ends at {zx.fmt(last)}: "
                "log records are missing at the end"
            )
        if all_zxids and commit > base:
            i = bisect_right(all_zxids, commit)
            commit = all_zxids[i - 1] if i > 0 else base
        last_committed = max(commit, snap_zxid)
        self._zxids = all_zxids
        self._base = base
        self._commit = last_committed
        self._durable_zxid = last
        self._plog = PhysicalLog(
            self.log_dir,
            segments,
            segment_bytes=self.segment_bytes,
            prealloc_bytes=self.prealloc_bytes,
            fsync=self.fsync,
            base_zxid=base,
        )
        self._loaded = True
        self._writer_thread = threading.Thread(target=self._writer, name="zabd-log-writer", daemon=True)
        self._writer_thread.start()
        # the window: every uncommitted txn, and the newest committed ones
        first = 0
        if self.window:
            committed_n = bisect_right(all_zxids, last_committed)
            first = max(0, min(committed_n, len(all_zxids) - self.window))
        window_base = all_zxids[first - 1] if first else base
        below_ends: dict[int, int] = {}
        for z in all_zxids[:first]:
            below_ends[z >> 32] = z
        history = self.read_range(window_base, last) if all_zxids else []
        return PersistentState(
            current_epoch=epochs.current_epoch,
            accepted_epoch=epochs.accepted_epoch,
            epoch_leader=epochs.epoch_leader,
            history=history,
            last_committed=last_committed,
            log_base=base,
            snapshot_zxid=snap_zxid,
            snapshot=snap.data if snap is not None else None,
            window_base=window_base,
            below_ends=below_ends,
        )

    def _remove_temp_files(self) -> None:
        for d in (self.data_dir, self.log_dir, self.snap_dir):
            for name in os.listdir(d):
                if name.startswith(".tmp-") or name.endswith(".tmp"):
                    os.unlink(os.path.join(d, name))

    # ------------------------------------------------------------ loop side

    def _check_open(self) -> None:
        if not self._loaded:
            raise RuntimeError("DiskStorage.load() must be called first")
        if self._closed:
            raise RuntimeError("DiskStorage is closed")

    @property
    def last_zxid(self) -> int:
        return self._zxids[-1] if self._zxids else self._base

    @property
    def log_start(self) -> int:
        """The log holds every txn after this zxid (older ones were purged)."""
        self._forget_purged()
        return self._base

    def _forget_purged(self) -> None:
        # The writer purged segments: drop their zxids from the loop's index
        # (8 bytes a txn would otherwise grow with every write ever made).
        purged = self._purged_base
        if purged > self._base:
            zs = self._zxids
            del zs[: bisect_right(zs, purged)]
            self._base = purged

    def truncate_append(self, after: int, txns: Sequence[Txn]) -> None:
        """Keep the records up to ``after``, drop the rest (durably, before
        anything new is written), append ``txns`` (a sync plan)."""
        self._check_open()
        if after < self._base:
            raise ValueError(f"truncate_append: {zx.fmt(after)} is below the log base {zx.fmt(self._base)}")
        zs = self._zxids
        k = bisect_right(zs, after)
        if k and zs[k - 1] != after:
            raise ValueError(f"truncate_append: {zx.fmt(after)} is not a txn of the log")
        if k < len(zs):
            if self._commit > after:
                raise ValueError(f"truncate_append would drop committed txn {zx.fmt(self._commit)}")
            self._seal()
            self._ops.append((_TRUNCATE, after))
            del zs[k:]
        for t in txns:
            self.append(t)

    def read_range(self, after: int, upto: int, max_bytes: int = 0) -> list[Txn]:
        """Durable txns in ``(after, upto]`` from the segment files, in order;
        with ``max_bytes``, about that many payload bytes (at least one txn).
        Any thread; a range that was purged raises PurgedError."""
        base = max(self._base, self._purged_base)
        if after < base:
            raise PurgedError(after, base)
        upto = min(upto, self._durable_zxid)  # the writer may be mid-batch above it
        out: list[Txn] = []
        size = 0
        plog = self._plog
        segments = list(plog.segments) if plog is not None else []
        for seg in segments:
            zs = seg.zxids
            if not zs or zs[-1] <= after:
                continue
            if zs[0] > upto:
                break
            i = bisect_right(zs, after)
            j = bisect_right(zs, upto)
            if j <= i:
                continue
            cut = False
            if max_bytes:
                # read only the records the rest of the budget covers (their offsets say
                # where they end), not the rest of the segment for every page
                offs = seg.offsets
                k = bisect_left(offs, offs[i] + max_bytes - size, i + 1, j)
                if k < j:
                    j, cut = k, True
            try:
                with open(seg.path, "rb") as f:
                    fd = f.fileno()
                    last = seg.offsets[j - 1]
                    _, n, _ = REC_HEADER.unpack(os.pread(fd, REC_HEADER_SIZE, last))
                    start = seg.offsets[i]
                    data = os.pread(fd, last + REC_HEADER_SIZE + n - start, start)
            except FileNotFoundError:
                raise PurgedError(after, max(self._base, self._purged_base)) from None
            for txn in decode_records(seg.path, data, start):
                out.append(txn)
                size += len(txn.payload)
                if max_bytes and size >= max_bytes:
                    return out
            if cut:
                return out
        return out

    def persist_epochs(self, accepted_epoch: int, epoch_leader: int, current_epoch: int) -> None:
        self._check_open()
        if accepted_epoch < current_epoch:
            raise ValueError(f"accepted_epoch {accepted_epoch} is below current_epoch {current_epoch}")
        self._seal()
        self._ops.append((_EPOCHS, Epochs(accepted_epoch, epoch_leader, current_epoch)))

    def append(self, txn: Txn) -> None:
        self._check_open()
        if self._purged_base > self._base:
            self._forget_purged()
        z = txn.zxid
        prev = self._zxids[-1] if self._zxids else self._base
        if not follows(prev, z):
            raise ValueError(f"append: {order_problem(prev, z)}")
        payload = txn.payload
        buf = self._buf
        buf.append(record_head(z, payload))
        buf.append(payload)
        self._buf_sizes.append(REC_HEADER_SIZE + len(payload))
        self._buf_zxids.append(z)
        self._zxids.append(z)

    def _seal(self) -> None:
        if self._buf_zxids:
            self._ops.append((_APPEND, b"".join(self._buf), self._buf_zxids, self._buf_sizes))
            self._buf = []
            self._buf_zxids = []
            self._buf_sizes = []

    def replace_history(self, history: Sequence[Txn]) -> None:
        """Make the log equal ``history`` (a full history, or one that starts
        at or after this log's base: what a sync plan leaves). Records up to
        the last shared zxid are kept, the rest cut, the new suffix appended."""
        self._check_open()
        base = self._base
        hz = [t.zxid for t in history]
        for i in range(1, len(hz)):
            if not follows(hz[i - 1], hz[i]):
                raise ValueError(f"replace_history: {order_problem(hz[i - 1], hz[i])}")
        j = bisect_right(hz, base)
        if j > 0 and hz[j - 1] != base:
            raise ValueError(
                f"replace_history: the new history does not contain {zx.fmt(base)}, "
                "which this node's snapshot covers (committed)"
            )
        if j == 0 and hz and not follows(base, hz[0]):
            raise ValueError(f"replace_history: {order_problem(base, hz[0])}")
        zs = self._zxids
        k = _common_prefix(zs, hz, j)
        keep = zs[k - 1] if k > 0 else base
        if k < len(zs):
            if self._commit > keep:
                raise ValueError(
                    f"replace_history would drop committed txn {zx.fmt(self._commit)} (keeps up to {zx.fmt(keep)})"
                )
            self._seal()
            self._ops.append((_TRUNCATE, keep))
            del zs[k:]
        for t in history[j + k :]:
            self.append(t)

    def receive_snapshot(self, zxid: int) -> SnapshotSink:
        """A temp file in the snapshot directory, written as the pieces come
        (on the caller's thread: page-cache writes); ``install_snapshot``
        makes it durable on the writer thread. A crash before leaves a temp
        file, which the next ``load`` removes."""
        self._check_open()
        return SnapshotWriter(self.snap_dir, zxid, received=True)

    def install_snapshot(self, zxid: int, data: bytes | SnapshotSink, log_base: int | None = None) -> None:
        """SNAP sync: the leader's snapshot at ``zxid`` replaces this node's
        state and log, and the log restarts after ``log_base`` (default
        ``zxid``; a SyncPlan's ``log_base``). Follow with
        ``replace_history(plan.txns)``. The snapshot is durable before the old
        log is dropped.

        The commit point becomes ``zxid``, even when it was higher: a leader
        that recovered an older commit point (the commit file is not a
        barrier) snapshots at its own, and the txns above it, which hold every
        one committed here, follow in the same sync and are committed again.
        Snapshots above ``zxid`` are deleted with the old log: recovery starts
        from the newest one, which must be this."""
        self._check_open()
        base = zxid if log_base is None else log_base
        if base > zxid:
            raise ValueError(f"install_snapshot: log_base {zx.fmt(base)} is above the snapshot {zx.fmt(zxid)}")
        self._seal()
        self._ops.append((_INSTALL, zxid, data, base))
        self._zxids = array("Q")
        self._base = base
        self._commit = zxid

    def commit_to(self, zxid: int) -> None:
        if zxid > self._commit:
            self._commit = zxid

    @property
    def last_committed(self) -> int:
        return self._commit

    @property
    def dirty(self) -> bool:
        return bool(self._ops or self._buf_zxids)

    def _submit_pending(self) -> int:
        self._seal()
        if self._ops:
            ops = self._ops
            self._ops = []
            self.stats.flushes += 1
            return self._submit(ops)
        return self._submitted

    async def flush(self) -> None:
        """Return when every call made before it is durable.

        The hand-off to the writer is deferred to a callback of the event
        loop (``call_soon``), so every append and flush issued by any task in
        the same loop iteration goes out as one batch with one fdatasync."""
        self._check_open()
        loop = asyncio.get_running_loop()
        if self.dirty and not self._handoff_scheduled:
            self._handoff_scheduled = True
            loop.call_soon(self._handoff)
        gen = self._submitted + 1 if self._handoff_scheduled else self._submitted
        if self._done >= gen:
            if self._error is not None:
                raise StorageError(f"log writer failed: {self._error}") from self._error
            return
        fut: asyncio.Future[None] = loop.create_future()
        with self._cond:
            if self._done >= gen or self._error is not None:
                fut.set_result(None)
            else:
                self._waiters.append((gen, fut))
        await fut
        if self._error is not None:
            raise StorageError(f"log writer failed: {self._error}") from self._error

    def _handoff(self) -> None:
        # Always submits (possibly an empty batch): flushes waiting for
        # generation submitted + 1 must see it complete.
        self._handoff_scheduled = False
        self._seal()
        ops = self._ops
        self._ops = []
        if ops:
            self.stats.flushes += 1
        with contextlib.suppress(RuntimeError):  # closed meanwhile: close() wrote everything
            self._submit(ops)

    def flush_sync(self, timeout: float | None = None) -> None:
        """Blocking flush for code outside an event loop (tools, tests, benchmarks)."""
        self._check_open()
        gen = self._submit_pending()
        self._wait_gen(gen, timeout)

    def _wait_gen(self, gen: int, timeout: float | None) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._done >= gen or self._error is not None, timeout):
                raise TimeoutError(f"flush not durable within {timeout} s")
        if self._error is not None:
            raise StorageError(f"log writer failed: {self._error}") from self._error

    def close(self) -> None:
        """Write and sync what was buffered, stop the writer."""
        if self._closed or not self._loaded:
            self._closed = True
            if self._lock_fd >= 0:  # a load() that failed
                os.close(self._lock_fd)
                self._lock_fd = -1
            return
        try:
            gen = self._submit_pending()
            if self._commit != self._commit_written and self._error is None:
                gen = self._submit([])  # record the latest commit point on a clean stop
            self._wait_gen(gen, None)
        finally:
            self._closed = True
            with self._cond:
                self._stop = True
                self._cond.notify_all()
            if self._writer_thread is not None:
                self._writer_thread.join()
            if self._plog is not None:
                self._plog.close()
            self._commit_file.close()
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    # -------------------------------------------------------- other threads

    def write_snapshot(self, zxid: int, data: bytes | Iterable[bytes], timeout: float = 60.0) -> str:
        """Write a local snapshot at ``zxid`` (any thread; blocking). Waits
        until the log is durable up to ``zxid`` so the snapshot is never ahead
        of the log it is based on."""
        with self._cond:
            ok = self._cond.wait_for(lambda: self._durable_zxid >= zxid or self._error is not None, timeout)
        if self._error is not None:
            raise StorageError(f"log writer failed: {self._error}") from self._error
        if not ok:
            raise TimeoutError(f"log not durable up to {zx.fmt(zxid)} within {timeout} s")
        return write_snapshot(self.snap_dir, zxid, data, fsync=self.fsync)

    def purge(self, retain: int) -> tuple[int, int]:
        """Delete snapshots beyond the newest ``retain`` and the log segments
        the oldest retained one covers (any thread but the loop's; blocking).
        Runs on the writer thread, so it is ordered with truncations and
        snapshot installs. Returns (snapshots deleted, segments deleted)."""
        if retain < 1:
            raise ValueError(f"snapshot retention {retain} is below 1")
        holder: list[tuple[int, int]] = []
        gen = self._submit([(_PURGE, retain, holder)])
        self._wait_gen(gen, None)
        self._delete_detached()
        return holder[0] if holder else (0, 0)

    def _delete_detached(self, pause: float = PURGE_PAUSE_S) -> None:
        """Delete the segments purges took out of the log, paced (see
        ``delete_segments``). Not on the writer thread: unlinking 64 MiB files
        and syncing the directory there held up every flush behind it (p99.9
        +5-10 ms under load). A snapshot install on the writer thread calls
        this first, unpaced, and so waits for a deletion in progress: a log
        reset while old segments are half deleted could leave a gap in the
        segments' numbers for a crash to find."""
        with self._detach_lock:
            paths, self._detached = self._detached, []
            delete_segments(paths, self.fsync, pause)

    # --------------------------------------------------------------- writer

    def _submit(self, ops: list[Op]) -> int:
        with self._cond:
            if self._stop:
                raise RuntimeError("DiskStorage is closed")
            self._queue.extend(ops)
            self._submitted += 1
            gen = self._submitted
            self._cond.notify_all()
        return gen

    def _writer(self) -> None:
        plog = self._plog
        assert plog is not None
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._submitted > self._done or self._stop)
                if self._submitted == self._done and self._stop:
                    return
                ops = self._queue
                self._queue = []
                gen = self._submitted
            records = 0
            try:
                if self._error is None:
                    records = self._execute(plog, ops)
            except BaseException as exc:  # fsync failure etc.: fatal, reported to every waiter
                log.error("log writer failed: %s", exc)
                self._error = exc
            with self._cond:
                self._done = gen
                self._durable_zxid = plog.last_zxid
                self.stats.records_synced += records
                ready = [f for g, f in self._waiters if g <= gen]
                self._waiters = [(g, f) for g, f in self._waiters if g > gen]
                self._cond.notify_all()
            # one wake-up per event loop (normally one), not per waiter
            by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
            for f in ready:
                by_loop.setdefault(f.get_loop(), []).append(f)
            for loop, futures in by_loop.items():
                # a closed loop: nobody is waiting any more
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_resolve, futures)

    def _execute(self, plog: PhysicalLog, ops: list[Op]) -> int:
        records = 0
        syncs_before = plog.syncs
        extra_syncs = 0
        n = len(ops)
        for i, op in enumerate(ops):
            kind = op[0]
            if kind == _APPEND:
                plog.append(op[1], op[2], op[3])
                records += len(op[2])
            elif kind == _TRUNCATE:
                plog.truncate_after(op[1])
            elif kind == _EPOCHS:
                # consecutive epoch writes: only the last one matters
                if i + 1 < n and ops[i + 1][0] == _EPOCHS:
                    continue
                plog.sync()  # history before epochs
                extra_syncs += write_epochs(self.epoch_path, op[1], self.fsync)
            elif kind == _INSTALL:
                self._delete_detached(pause=0.0)
                plog.sync()
                if isinstance(op[2], SnapshotWriter):
                    op[2].finish(fsync=self.fsync)
                else:
                    write_snapshot(self.snap_dir, op[1], op[2], received=True, fsync=self.fsync)
                extra_syncs += 2 if self.fsync else 0
                extra_syncs += self._install_below(op[1])
                plog.reset(op[3])
            elif kind == _PURGE:
                snaps, oldest = purge_snapshots(self.snap_dir, op[1])
                detached = plog.detach_upto(oldest) if oldest else []
                with self._detach_lock:
                    self._detached += detached
                op[2].append((snaps, len(detached)))
                self._purged_base = plog.base_zxid
        plog.sync()
        # never ahead of the durable log: a later batch may hold the commit's txn
        commit = min(self._commit, plog.last_zxid)
        if commit != self._commit_written:
            self._commit_file.write(commit)
            self._commit_written = commit
        self.stats.syncs += plog.syncs - syncs_before + extra_syncs
        return records

    def _install_below(self, zxid: int) -> int:
        """Before the log restarts at a snapshot at ``zxid`` (writer thread):
        a commit point recorded above it would be above everything the log
        holds after the reset, which recovery refuses, so it is lowered first,
        durably (the only write of the commit file that is synced); snapshots
        above it (taken locally up to the old commit point) would be newer
        than the installed one and not in the new log, so they go. Returns
        the fsync calls made."""
        syncs = 0
        # -1: nothing written since load(), the file may hold the old point
        if self._commit_written < 0 or self._commit_written > zxid:
            self._commit_file.write(zxid, fsync=self.fsync)
            self._commit_written = zxid
            syncs += 1 if self.fsync else 0
        if drop_snapshots_above(self.snap_dir, zxid, fsync=self.fsync) and self.fsync:
            syncs += 1
        return syncs


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for f in futures:
        if not f.done():
            f.set_result(None)


def _common_prefix(zs: array[int], hz: list[int], j: int) -> int:
    """Length of the common prefix of ``zs`` and ``hz[j:]``."""
    n = min(len(zs), len(hz) - j)
    step = 4096
    k = 0
    while k < n:
        m = min(step, n - k)
        if zs[k : k + m].tolist() == hz[j + k : j + k + m]:
            k += m
            continue
        while k < n and zs[k] == hz[j + k]:
            k += 1
        return k
    return k


if TYPE_CHECKING:  # DiskStorage satisfies the protocol the server is written against
    _storage_check: Storage = DiskStorage("")

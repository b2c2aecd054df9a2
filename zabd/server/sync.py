"""Sync plans on the wire: the frames of a leader's ``SendSync``, and what a
follower makes of them.

The core decides how to sync each follower (DIFF, TRUNC or SNAP; see
``zabd.protocol.window``). Here a ``SendSync`` effect becomes frames: a
SyncPlan, for SNAP the state machine's snapshot in SnapData frames, then the
txns in SyncTxns parts, the ones that left the core's memory read from the
log on disk page by page. A SNAP's snapshot is streamed: a frozen view of
the state at the plan's point, encoded a piece at a time as the link takes
it (``PeerSession.push_stream``), so the leader's loop goes on between
pieces and a slow follower costs it a socket window, not the state's size.

The follower builds the state and writes the snapshot file as the pieces
come (``SnapPiece``), a bounded step each; the plan's end (``SyncArrived``)
checks the whole (its digest) and gives the core its ``Sync`` message; the
core's ``InstallSnapshot`` swaps the built state in and has the storage make
the file durable. A link lost in the middle leaves nothing installed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from zabd.codec.framing import frame
from zabd.machine import Restoring, StateMachine
from zabd.protocol import zxid as zx
from zabd.protocol.effects import SendSync
from zabd.protocol.messages import SNAP, SYNC_MODES, Sync, SyncInfo, Txn
from zabd.server import peer_wire as wire
from zabd.server.applier import Applier
from zabd.server.peer_session import SnapPiece, SyncArrived
from zabd.server.snapshots import Snapshotter
from zabd.storage.base import PurgedError, SnapshotSink, Storage

SNAP_PIECE = 256 << 10  # a SNAP frame's snapshot bytes: ~0.5 ms to encode, ~3 ms to build at the follower


class SnapshotRefused(ValueError):
    """A SNAP whose snapshot did not arrive whole or is not a valid one: the
    link is closed, the core never hears of the plan, the leader plans again."""


@dataclass(slots=True)
class Incoming:
    """A SNAP's snapshot while it arrives: the state built and the file
    written piece by piece."""

    plan: wire.SyncPlanFrame
    peer: int
    restoring: Restoring
    sink: SnapshotSink
    started: float
    received: int = 0


class SyncFrames(NamedTuple):
    """A sync plan's frames: ``head``, then the snapshot's frames as the link
    takes them (SNAP), then ``tail`` (the txns)."""

    head: list[bytes]
    snapshot: Iterator[bytes] | None
    tail: list[bytes]


class SyncService:
    def __init__(
        self,
        machine: StateMachine,
        applier: Applier,
        storage: Storage,
        snapshotter: Snapshotter | None,
        max_frame: int,
        log: Any,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """``progress``: told the peer each time a piece of a SNAP is sent
        to it (and the replica tells the core of each piece that arrives)."""
        self.machine = machine
        self.progress = progress
        self.applier = applier
        self.storage = storage
        self.snapshotter = snapshotter
        self.budget = max_frame // 2
        self.log = log
        self.sent: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self.streams = 0  # SNAP streams being sent
        self._incoming: Incoming | None = None  # a SNAP's snapshot arriving
        self._ready: Incoming | None = None  # arrived whole, until the core installs it

    # ---------------------------------------------------------------- leader

    def frames(self, e: SendSync) -> SyncFrames | None:
        """The frames of one sync plan; None if the log it needs was purged
        meanwhile (the core retries the sync, by then knowing of the purge).
        A SNAP's snapshot is a frozen view of the state at the plan's point,
        encoded as the link takes it: a step at a time between this node's
        other work, never whole in memory."""
        mode = SYNC_MODES[e.mode]
        try:
            head = self.storage.read_range(e.read_after, e.read_upto, self.budget) if e.read_upto > e.read_after else []
        except PurgedError as exc:
            self.log.warning("sync not sent: its log was purged", peer=e.dst, error=str(exc))
            return None
        snapshot: Iterator[bytes] | None = None
        if e.mode == SNAP:
            if self.applier.applied != e.point:
                # effects run in order, so the state is exactly at the commit point the core saw
                self.log.error("snapshot for a sync is not at the planned point", applied=zx.fmt(self.applier.applied),
                               point=zx.fmt(e.point))
                return None
            snapshot = self._snapshot_frames(e, self.machine.snapshot_view())
        plan: tuple[object, ...] = (wire.TAG_SYNC_PLAN, e.epoch, mode, e.point, e.point if snapshot is not None else 0,
                                    e.point, b"" if snapshot is not None else None)
        first = [frame((*plan, e.membership, e.membership_zxid) if e.membership else plan)]
        parts: list[list[Txn]] = []
        after = e.read_after
        while head:  # the rest of the log range, a page at a time
            parts.extend(wire.txn_chunks(head, self.budget))
            after = head[-1].zxid
            head = self.storage.read_range(after, e.read_upto, self.budget) if after < e.read_upto else []
        parts.extend(wire.txn_chunks(e.txns, self.budget))
        parts = [p for p in parts if p] or [[]]
        last = len(parts) - 1
        tail = [frame((wire.TAG_SYNC_TXNS, e.epoch, int(k == last), p)) for k, p in enumerate(parts)]
        self.sent[mode] += 1
        self.log.info("sync sent", peer=e.dst, mode=mode, point=zx.fmt(e.point), txns=sum(len(p) for p in parts),
                      snapshot="streamed" if snapshot is not None else None)
        return SyncFrames(first, snapshot, tail)

    def _snapshot_frames(self, e: SendSync, view: object) -> Iterator[bytes]:
        self.streams += 1
        t0 = time.monotonic()
        sent = 0
        budget = self.budget
        try:
            for piece in self.machine.encode_chunks(view, SNAP_PIECE):
                if self.progress is not None:
                    self.progress(e.dst)
                for off in range(0, len(piece), budget):
                    data = piece[off : off + budget] if len(piece) > budget else piece
                    sent += len(data)
                    yield frame((wire.TAG_SNAP_DATA, e.epoch, data))
            self.log.info("snapshot streamed", peer=e.dst, point=zx.fmt(e.point), snapshot_bytes=sent,
                          seconds=round(time.monotonic() - t0, 3))
        finally:
            self.streams -= 1

    @staticmethod
    def info_frame(info: SyncInfo) -> bytes:
        return frame((wire.TAG_SYNC_INFO, info.base, info.epoch_ends))

    # -------------------------------------------------------------- follower

    def snap_piece(self, peer: int, piece: SnapPiece) -> None:
        """The next bytes of a SNAP's snapshot: into the state being built
        and the file being written (a bounded step per piece)."""
        inc = self._incoming
        if inc is None or inc.plan is not piece.plan:
            self.abandon()
            zxid = piece.plan.snapshot_zxid
            inc = self._incoming = Incoming(piece.plan, peer, self.machine.restoring(),
                                            self.storage.receive_snapshot(zxid), time.monotonic())
            self.log.info("snapshot arriving", peer=peer, point=zx.fmt(zxid))
        try:
            inc.restoring.feed(piece.data)
        except ValueError as exc:
            self.abandon()
            raise SnapshotRefused(f"the snapshot at {zx.fmt(piece.plan.snapshot_zxid)} is not one: {exc}") from None
        inc.sink.write(piece.data)
        inc.received += len(piece.data)

    @property
    def arriving(self) -> int:
        """Bytes of a SNAP's snapshot received so far (0: none arriving)."""
        return self._incoming.received if self._incoming is not None else 0

    def abandon(self, peer: int | None = None) -> None:
        """A snapshot arriving (from ``peer``, or any) will not be whole: its
        file goes, its state is dropped."""
        inc = self._incoming
        if inc is not None and (peer is None or inc.peer == peer):
            self._incoming = None
            inc.sink.abort()
            self.log.info("snapshot abandoned", peer=inc.peer, point=zx.fmt(inc.plan.snapshot_zxid),
                          received_bytes=inc.received)

    def arrived(self, peer: int, got: SyncArrived) -> Sync:
        p = got.plan
        mode = SYNC_MODES.index(p.mode)
        if mode == SNAP:
            inc = self._incoming
            if inc is None or inc.plan is not p:
                raise SnapshotRefused("a SNAP plan ended without its snapshot")
            self._incoming = None
            try:
                inc.restoring.check()
            except ValueError as exc:
                inc.sink.abort()
                raise SnapshotRefused(f"the snapshot at {zx.fmt(p.snapshot_zxid)} is refused: {exc}") from None
            if self._ready is not None:
                self._ready.sink.abort()
            self._ready = inc
        self.received[p.mode] += 1
        self.log.info("sync received", peer=peer, mode=p.mode, point=zx.fmt(p.truncate_to), txns=len(got.txns),
                      snapshot_bytes=self._ready.received if mode == SNAP and self._ready is not None else None)
        return Sync(p.epoch, mode, p.truncate_to, got.txns, p.membership, p.membership_zxid)

    def install(self, zxid: int) -> None:
        """The core's InstallSnapshot: the received state replaces ours, and
        the file it came in becomes this node's snapshot (durable on the
        storage's writer thread; the pipeline holds what follows until then)."""
        inc = self._ready
        self._ready = None
        if inc is None or inc.plan.snapshot_zxid != zxid:
            raise RuntimeError(f"install of a snapshot at {zx.fmt(zxid)} that never arrived")
        if self.snapshotter is not None:
            self.snapshotter.wait()
        self.storage.install_snapshot(zxid, inc.sink, zxid)
        self.machine.restore_from(inc.restoring)
        self.applier.reset_to(zxid)
        self.log.info("snapshot installed", point=zx.fmt(zxid), snapshot_bytes=inc.received,
                      seconds_since_first_byte=round(time.monotonic() - inc.started, 3))

    def status(self) -> dict[str, Any]:
        return {"sync_sent": dict(self.sent), "sync_received": dict(self.received), "log_base": self.storage.log_start,
                "snapshot_streams": self.streams,
                "snapshot_arriving": self.arriving}

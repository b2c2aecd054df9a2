"""Sync plans on the wire: the frames of a leader's ``SendSync``, and what a
follower makes of them.

The core decides how to sync each follower (DIFF, TRUNC or SNAP; see
``zabd.protocol.window``). Here a ``SendSync`` effect becomes frames: a
SyncPlan, for SNAP the state machine's snapshot in SnapData parts, then the
txns in SyncTxns parts, the ones that left the core's memory read from the
log on disk page by page. The follower's session joins them into one
``SyncArrived``; the core gets a ``Sync`` message, and the snapshot bytes
wait here for the core's ``InstallSnapshot`` effect.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from zabd.codec.framing import frame
from zabd.machine import StateMachine
from zabd.protocol import zxid as zx
from zabd.protocol.effects import SendSync
from zabd.protocol.messages import SNAP, SYNC_MODES, Sync, SyncInfo, Txn
from zabd.server import peer_wire as wire
from zabd.server.applier import Applier
from zabd.server.peer_session import SyncArrived
from zabd.server.snapshots import Snapshotter
from zabd.storage.base import PurgedError, Storage


class SyncService:
    def __init__(
        self,
        machine: StateMachine,
        applier: Applier,
        storage: Storage,
        snapshotter: Snapshotter | None,
        max_frame: int,
        log: Any,
    ) -> None:
        self.machine = machine
        self.applier = applier
        self.storage = storage
        self.snapshotter = snapshotter
        self.budget = max_frame // 2
        self.log = log
        self.sent: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self._snapshot: bytes | None = None  # received with a SNAP, until the core installs it

    # ---------------------------------------------------------------- leader

    def frames(self, e: SendSync) -> list[bytes] | None:
        """The frames of one sync plan; None if the log it needs was purged
        meanwhile (the core retries the sync, by then knowing of the purge)."""
        mode = SYNC_MODES[e.mode]
        try:
            head = self.storage.read_range(e.read_after, e.read_upto, self.budget) if e.read_upto > e.read_after else []
        except PurgedError as exc:
            self.log.warning("sync not sent: its log was purged", peer=e.dst, error=str(exc))
            return None
        data: bytes | None = None
        if e.mode == SNAP:
            if self.applier.applied != e.point:
                # effects run in order, so the state is exactly at the commit point the core saw
                self.log.error("snapshot for a sync is not at the planned point", applied=zx.fmt(self.applier.applied),
                               point=zx.fmt(e.point))
                return None
            data = self.machine.snapshot()
        budget = self.budget
        plan: tuple[object, ...] = (wire.TAG_SYNC_PLAN, e.epoch, mode, e.point, e.point if data is not None else 0,
                                    e.point, data[:budget] if data is not None else None)
        out = [frame((*plan, e.membership, e.membership_zxid) if e.membership else plan)]
        if data is not None:
            out.extend(frame((wire.TAG_SNAP_DATA, e.epoch, data[off : off + budget]))
                       for off in range(budget, len(data), budget))
        parts: list[list[Txn]] = []
        after = e.read_after
        while head:  # the rest of the log range, a page at a time
            parts.extend(wire.txn_chunks(head, budget))
            after = head[-1].zxid
            head = self.storage.read_range(after, e.read_upto, budget) if after < e.read_upto else []
        parts.extend(wire.txn_chunks(e.txns, budget))
        parts = [p for p in parts if p] or [[]]
        last = len(parts) - 1
        out.extend(frame((wire.TAG_SYNC_TXNS, e.epoch, int(k == last), p)) for k, p in enumerate(parts))
        self.sent[mode] += 1
        self.log.info("sync sent", peer=e.dst, mode=mode, point=zx.fmt(e.point),
                      txns=sum(len(p) for p in parts), snapshot_bytes=len(data) if data is not None else None)
        return out

    @staticmethod
    def info_frame(info: SyncInfo) -> bytes:
        return frame((wire.TAG_SYNC_INFO, info.base, info.epoch_ends))

    # -------------------------------------------------------------- follower

    def arrived(self, peer: int, got: SyncArrived) -> Sync:
        p = got.plan
        mode = SYNC_MODES.index(p.mode)
        self._snapshot = got.snapshot if mode == SNAP else None
        self.received[p.mode] += 1
        self.log.info("sync received", peer=peer, mode=p.mode, point=zx.fmt(p.truncate_to), txns=len(got.txns),
                      snapshot_bytes=len(got.snapshot) if got.snapshot is not None else None)
        return Sync(p.epoch, mode, p.truncate_to, got.txns, p.membership, p.membership_zxid)

    def install(self, zxid: int) -> None:
        """The core's InstallSnapshot: the received state replaces ours."""
        data = self._snapshot
        self._snapshot = None
        if data is None:
            raise RuntimeError(f"install of a snapshot at {zx.fmt(zxid)} that never arrived")
        if self.snapshotter is not None:
            self.snapshotter.wait()
        self.storage.install_snapshot(zxid, data, zxid)
        self.machine.restore(data)
        self.applier.reset_to(zxid)

    def status(self) -> dict[str, Any]:
        return {"sync_sent": dict(self.sent), "sync_received": dict(self.received), "log_base": self.storage.log_start}

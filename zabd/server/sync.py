"""Syncing a follower without sending it the whole history (DIFF, TRUNC, SNAP).

A follower reports its ``SyncInfo`` (peer frame SyncInfo) before each
``AckEpoch``/``LookForLeader`` and when a link comes up. The leader's
``Send(f, NewLeader(e, h))`` then leaves as a plan (``zabd.storage.sync``)
instead of ``h``; the follower rebuilds ``NewLeader(e, history)`` with
``apply_plan`` (after installing the snapshot for SNAP) and hands the core
exactly the history the full message would have given it. Without a report
from that follower the leader sends the full history (or SNAP when its log
was purged).

A stale report is harmless: in ZAB two histories that hold the same zxid
agree up to it, so keeping the follower's txns up to any zxid it holds and
appending the leader's after it gives the leader's history; ``apply_plan``
refuses a plan that keeps a zxid the follower does not hold, and the
follower then drops the link (the leader resyncs it).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

from zabd.codec import peer as wire
from zabd.codec.framing import frame
from zabd.kv.machine import StateMachine
from zabd.protocol import zxid as zx
from zabd.protocol.messages import NewLeader
from zabd.protocol.node import Node
from zabd.server.applier import Applier
from zabd.server.peer_session import SyncArrived
from zabd.server.snapshots import Snapshotter
from zabd.storage.sync import SNAP, SyncError, SyncInfo, SyncPlan, apply_plan, plan_sync, sync_info

FULL = "FULL"


class SnapshotInstaller(Protocol):
    def install_snapshot(self, zxid: int, data: bytes, log_base: int) -> None: ...


class LinkRefused(Exception):
    """The sync cannot be used: drop the link so that the leader resyncs."""


class SyncService:
    def __init__(
        self,
        node: Node,
        machine: StateMachine,
        applier: Applier,
        disk: SnapshotInstaller | None,
        snapshotter: Snapshotter | None,
        base: int,
        max_frame: int,
        log: Any,
    ) -> None:
        self.node = node
        self.machine = machine
        self.applier = applier
        self.disk = disk
        self.snapshotter = snapshotter
        self.base = base  # node.history holds the txns after this zxid
        self.max_frame = max_frame
        self.log = log
        self.infos: dict[int, SyncInfo] = {}
        self.sent: Counter[str] = Counter()
        self.received: Counter[str] = Counter()

    # ---------------------------------------------------------------- leader

    def on_sync_info(self, peer: int, info: wire.SyncInfoFrame) -> None:
        self.infos[peer] = SyncInfo(info.base, info.epoch_ends)

    def new_leader_frames(self, peer: int, msg: NewLeader) -> list[bytes]:
        info = self.infos.get(peer)
        if info is None and self.base == 0:
            self.sent[FULL] += 1
            self.log.info("sync sent", peer=peer, mode=FULL, txns=len(msg.history))
            return wire.encode_new_leader(msg, self.max_frame)
        snapshot_zxid = max(self.applier.applied, self.base)
        try:
            plan = plan_sync(msg.history, info or SyncInfo(0, ()), log_base=self.base, snapshot_zxid=snapshot_zxid)
        except SyncError as exc:
            self.log.warning("sync info unusable; sending a snapshot or the full history", peer=peer, error=str(exc))
            if self.base == 0:
                self.sent[FULL] += 1
                return wire.encode_new_leader(msg, self.max_frame)
            plan = plan_sync(msg.history, SyncInfo(0, ()), log_base=self.base, snapshot_zxid=snapshot_zxid)
        data = self.machine.snapshot() if plan.mode == SNAP else None
        self.sent[plan.mode] += 1
        self._log_plan("sync sent", peer, plan)
        budget = self.max_frame // 2
        # a snapshot larger than a frame travels in SnapData parts after the plan
        first = data[:budget] if data is not None else None
        head = (wire.TAG_SYNC_PLAN, msg.epoch, plan.mode, plan.truncate_to, plan.snapshot_zxid, plan.log_base, first)
        frames = [frame(head)]
        if data is not None:
            for off in range(budget, len(data), budget):
                frames.append(frame((wire.TAG_SNAP_DATA, msg.epoch, data[off : off + budget])))
        chunks = wire.txn_chunks(plan.txns, budget)
        last = len(chunks) - 1
        frames.extend(frame((wire.TAG_SYNC_TXNS, msg.epoch, int(k == last), c)) for k, c in enumerate(chunks))
        return frames

    # -------------------------------------------------------------- follower

    def info_frame(self) -> bytes:
        info = sync_info(self.node.history, self.base)
        return frame((wire.TAG_SYNC_INFO, info.base, info.epoch_ends))

    def arrived(self, peer: int, got: SyncArrived) -> NewLeader | None:
        """The NewLeader this plan stands for, or None when the core would
        ignore it anyway; LinkRefused when the plan cannot be applied."""
        p = got.plan
        if p.epoch < self.node.accepted_epoch:
            return None  # the core would ignore this NewLeader: change nothing
        plan = SyncPlan(p.mode, p.truncate_to, p.snapshot_zxid, p.log_base, got.txns)
        if plan.mode == SNAP:
            try:
                self._install(plan, got.snapshot or b"")
            except (ValueError, OSError) as exc:
                raise LinkRefused(f"snapshot install refused: {exc}") from exc
            history = list(plan.txns)
        else:
            try:
                history = apply_plan(self.node.history, plan, self.base)
            except SyncError as exc:
                raise LinkRefused(f"stale sync plan: {exc}") from exc
        self.received[plan.mode] += 1
        self._log_plan("sync received", peer, plan)
        return NewLeader(p.epoch, tuple(history))

    def _install(self, plan: SyncPlan, data: bytes) -> None:
        if self.snapshotter is not None:
            self.snapshotter.wait()
        if self.disk is not None:
            self.disk.install_snapshot(plan.snapshot_zxid, data, plan.log_base)
        self.machine.restore(data)
        self.applier.reset_to(plan.snapshot_zxid)
        self.base = plan.log_base

    def _log_plan(self, event: str, peer: int, plan: SyncPlan) -> None:
        self.log.info(
            event,
            peer=peer,
            mode=plan.mode,
            truncate_to=zx.fmt(plan.truncate_to),
            snapshot_zxid=zx.fmt(plan.snapshot_zxid),
            txns=len(plan.txns),
        )

    def status(self) -> dict[str, Any]:
        return {"sync_sent": dict(self.sent), "sync_received": dict(self.received), "log_base": self.base}

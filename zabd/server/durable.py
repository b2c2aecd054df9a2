"""Durable storage, the KV state machine and sync plans, wired into the server.

The replica runtime (``replica.py``) stays the effect pipeline; this module
adds what a node with a data directory needs around it, without touching
the protocol core:

* **Recovery.** ``recover(state)`` restores the state machine from the
  newest snapshot and replays the committed txns after it, and returns the
  commit point the runtime starts from.
* **Snapshots.** A :class:`~zabd.storage.snapshot.Snapshotter` takes a
  background snapshot every ~``snap_count`` applied txns (randomized per
  node) and purges beyond ``snap_retain``.
* **Sync plans on the wire.** A follower reports its ``SyncInfo`` (driver
  frame ``SYNC_INFO``) before each ``AckEpoch``/``LookForLeader`` and when a
  link comes up. The leader's ``Send(f, NewLeader(e, h))`` leaves as a plan
  (DIFF, TRUNC or SNAP, from ``zabd.storage.sync``) instead of ``h``; the
  follower rebuilds ``NewLeader(e, history)`` with ``apply_plan`` (after
  installing the snapshot for SNAP) and hands the core exactly the history
  the full message would have given it. Without a report from that follower
  the leader sends the full history (or SNAP when its log was purged).

A stale report is harmless: in ZAB two histories that hold the same zxid
agree up to it, so keeping the follower's txns up to any zxid it holds and
appending the leader's after it gives the leader's history;
``apply_plan`` refuses a plan that keeps a zxid the follower does not hold,
and the follower then drops the link (the leader resyncs it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import zlib
from bisect import bisect_left
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

from zabd.kv.store import KVLeader, KVStore, Result
from zabd.protocol import zxid as zx
from zabd.protocol.messages import AckEpoch, AckLeader, LookForLeader, Message, NewLeader, Txn
from zabd.server import wire
from zabd.storage.base import PersistentState
from zabd.storage.disk import DiskStorage
from zabd.storage.snapshot import Snapshotter
from zabd.storage.sync import SNAP, SyncError, SyncInfo, SyncPlan, apply_plan, plan_sync, sync_info

if TYPE_CHECKING:
    from zabd.server.replica import PeerConn, Replica

TAG_SYNC_INFO = 69  # [69, base, [epoch ends...]]                               follower -> leader
TAG_SYNC_PLAN = 70  # [70, epoch, mode, truncate_to, snapshot_zxid, log_base, snapshot bytes | nil]
TAG_SYNC_TXNS = 71  # [71, epoch, final (0|1), [[zxid, payload], ...]]   after a SYNC_PLAN, >= 1 of them
TAG_KV_FORWARD = 72  # [72, fwd_id, [op, key, value, version]]           follower -> leader
TAG_SYNC_REQ = 73  # [73, fwd_id]  client sync through a follower; answered with FORWARD_OK(fwd_id, commit point)
TAG_SNAP_DATA = 74  # [74, epoch, bytes]  more snapshot bytes of a SNAP plan, between SYNC_PLAN and SYNC_TXNS

FULL = "FULL"
# Test hook (not a ZABD_* variable: those are config fields): SIGKILL this
# process right after an AckLeader frame was handed to the socket.
CRASH_ENV = "ZABDTEST_CRASH_AFTER"

# KV txns are tagged so that raw ``propose`` payloads (any bytes) can share
# the log with them: 0xc1 is never the first byte of a msgpack value.
KV_MAGIC = b"\xc1kv1"
_RESULTS_KEPT = 65536


class KVMachine:
    """The state machine a server applies committed txns to: the KV store
    for txns tagged ``KV_MAGIC``; any other payload is a raw log entry and
    leaves the store alone. Keeps recent results for the clients waiting on
    them and feeds the snapshotter."""

    def __init__(self) -> None:
        self.store = KVStore()
        self.leader = KVLeader(self.store)
        self.results: dict[int, Result] = {}
        self._result_order: deque[int] = deque()
        self.snapshotter: Snapshotter | None = None
        self.errors = 0

    def apply(self, txn: Txn) -> object:
        p = txn.payload
        result: Result | None = None
        if p[:4] == KV_MAGIC:
            try:
                result = self.store.apply(Txn(txn.zxid, p[4:]))
            except Exception:
                # Deterministic on every replica (same bytes): a malformed
                # tagged payload changes nothing anywhere.
                self.errors += 1
            else:
                self.results[txn.zxid] = result
                order = self._result_order
                order.append(txn.zxid)
                if len(order) > _RESULTS_KEPT:
                    self.results.pop(order.popleft(), None)
                self.leader.committed(txn.zxid)
        self.store.applied = txn.zxid
        snap = self.snapshotter
        if snap is not None:
            snap.applied(txn.zxid)
        return result

    def snapshot(self) -> bytes:
        return self.store.snapshot()

    def restore(self, data: bytes) -> None:
        self.store = KVStore()
        if data:
            self.store.restore(data)
        self.leader = KVLeader(self.store)
        self.results.clear()
        self._result_order.clear()

    def snapshot_view(self) -> object:
        return self.store.snapshot_view()

    def encode_view(self, view: object) -> bytes:
        return self.store.encode_view(view)

    def digest(self) -> int | None:
        """CRC-32 of the encoded state (equal states, equal digests), for
        tests and audits; None above 200,000 keys (too slow for a status call)."""
        if len(self.store.data) > 200_000:
            return None
        return zlib.crc32(self.store.snapshot())


class Durable:
    """Per-replica durable-storage, snapshot and sync-plan logic."""

    def __init__(self, replica: Replica) -> None:
        self.r = replica
        self.log = replica.log
        storage = replica.storage
        self.disk: DiskStorage | None = storage if isinstance(storage, DiskStorage) else None
        sm = replica.state_machine
        self.machine: KVMachine | None = sm if isinstance(sm, KVMachine) else None
        self.snapshotter: Snapshotter | None = None
        self.base = 0  # node.history holds the txns after this zxid
        self.infos: dict[int, SyncInfo] = {}
        self.sent: Counter[str] = Counter()
        self.received: Counter[str] = Counter()
        self._plans: dict[int, tuple[int, SyncPlan, bytearray | None, list[Txn]]] = {}
        self.crash_after = os.environ.get(CRASH_ENV, "")
        self.kv_epoch = -1
        self.kv_barrier = 0
        self.recovered_in_s = 0.0

    # ------------------------------------------------------------- recovery

    def recover(self, state: PersistentState) -> int:
        """Restore the state machine; returns the commit point it reflects."""
        self.base = state.log_base
        committed = state.last_committed
        m = self.machine
        if m is not None:
            if state.snapshot is not None:
                m.restore(state.snapshot)
            lo = state.snapshot_zxid
            h = state.history
            i = bisect_left(h, lo + 1, key=_zxid_key)
            apply = m.apply
            for txn in h[i:]:
                if txn.zxid > committed:
                    break
                apply(txn)
        if self.disk is not None:
            for w in self.disk.warnings:
                self.log.warning("storage recovery", detail=w)
            if not self.disk.fsync:
                self.log.warning("fsync = false: acknowledged writes can be lost on a crash (benchmarks only)")
            if m is not None:
                loop_holder: list[asyncio.AbstractEventLoop] = []

                def on_error(exc: BaseException) -> None:
                    if loop_holder:
                        loop_holder[0].call_soon_threadsafe(self.r._die, exc)

                self._loop_holder = loop_holder
                cfg = self.r.config
                self.snapshotter = Snapshotter(
                    self.disk,
                    m,
                    snap_count=cfg.snap_count,
                    retain=cfg.snap_retain,
                    seed=cfg.seed ^ (cfg.id * 0x9E3779B97F4A7C15 & 0xFFFF_FFFF_FFFF_FFFF),
                    on_error=on_error,
                )
                m.snapshotter = self.snapshotter
        return committed

    def started(self) -> None:
        holder = getattr(self, "_loop_holder", None)
        if holder is not None:
            holder.append(asyncio.get_running_loop())

    def close(self) -> None:
        if self.snapshotter is not None:
            try:
                self.snapshotter.wait(30.0)
            except Exception as exc:
                self.log.error("snapshot failed", error=str(exc))

    # ---------------------------------------------------------- sync: leader

    def new_leader_frames(self, peer: int, msg: NewLeader) -> list[bytes]:
        r = self.r
        conn = r._conns.get(peer)
        if conn is None or conn.closed:
            return []  # not sent: _send_core reports the broken link to the core
        info = self.infos.get(peer)
        if info is None and self.base == 0:
            self.sent[FULL] += 1
            self.log.info("sync sent", peer=peer, mode=FULL, txns=len(msg.history))
            return wire.encode_new_leader(msg, r.config.max_frame)
        try:
            plan = plan_sync(
                msg.history, info or SyncInfo(0, ()), log_base=self.base, snapshot_zxid=max(r._applied, self.base)
            )
        except SyncError as exc:
            self.log.warning("sync info unusable; sending a snapshot or the full history", peer=peer, error=str(exc))
            if self.base == 0:
                self.sent[FULL] += 1
                return wire.encode_new_leader(msg, r.config.max_frame)
            plan = plan_sync(msg.history, SyncInfo(0, ()), log_base=self.base, snapshot_zxid=max(r._applied, self.base))
        data: bytes | None = None
        if plan.mode == SNAP:
            data = self.machine.snapshot() if self.machine is not None else b""
        self.sent[plan.mode] += 1
        self._log_plan("sync sent", peer, plan)
        budget = r.config.max_frame // 2
        # a snapshot larger than a frame travels in SNAP_DATA parts after the plan
        first = data[:budget] if data is not None else None
        frames = [
            wire.frame(
                (TAG_SYNC_PLAN, msg.epoch, plan.mode, plan.truncate_to, plan.snapshot_zxid, plan.log_base, first)
            )
        ]
        if data is not None:
            for off in range(budget, len(data), budget):
                frames.append(wire.frame((TAG_SNAP_DATA, msg.epoch, data[off : off + budget])))
        chunk: list[Txn] = []
        size = 32
        for txn in plan.txns:
            need = len(txn.payload) + 16
            if chunk and size + need > budget:
                frames.append(wire.frame((TAG_SYNC_TXNS, msg.epoch, 0, chunk)))
                chunk = []
                size = 32
            chunk.append(txn)
            size += need
        frames.append(wire.frame((TAG_SYNC_TXNS, msg.epoch, 1, chunk)))
        return frames

    # -------------------------------------------------------- sync: follower

    def info_frame(self) -> bytes:
        info = sync_info(self.r.node.history, self.base)
        return wire.frame((TAG_SYNC_INFO, info.base, info.epoch_ends))

    def before_send(self, peer: int, msg: Message) -> None:
        """Called before a core message to ``peer`` is queued."""
        cls = type(msg)
        if cls is AckEpoch or cls is LookForLeader:
            self.r._send_extra(peer, self.info_frame())

    def after_send(self, peer: int, msg: Message) -> None:
        if type(msg) is AckLeader and self.crash_after == "ack_leader":
            self.log.warning("test hook: SIGKILL after AckLeader", peer=peer)
            asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGKILL)

    def peer_up(self, conn: PeerConn) -> None:
        if conn.peer is not None:
            self.r._send_extra(conn.peer, self.info_frame())
            self.r._kick()

    def on_frame(self, conn: PeerConn, peer: int, tag: int, body: tuple[Any, ...]) -> bool:
        """A driver frame of this module; False if the tag is not ours."""
        if tag == TAG_SYNC_INFO:
            if len(body) != 3 or not wire._u64(body[1]) or type(body[2]) is not tuple:
                raise wire.FrameError(f"malformed SYNC_INFO frame {wire._short(body)}")
            ends = body[2]
            if not all(wire._u64(e) for e in ends):
                raise wire.FrameError(f"malformed SYNC_INFO frame {wire._short(body)}")
            self.infos[peer] = SyncInfo(body[1], ends)
            return True
        if tag == TAG_SYNC_PLAN:
            if (
                len(body) != 7
                or not wire._u32(body[1])
                or body[2] not in ("DIFF", "TRUNC", "SNAP")
                or not all(wire._u64(x) for x in body[3:6])
                or not (body[6] is None or type(body[6]) is bytes)
            ):
                raise wire.FrameError(f"malformed SYNC_PLAN frame {wire._short(body)}")
            plan = SyncPlan(body[2], body[3], body[4], body[5], ())
            self._plans[peer] = (body[1], plan, bytearray(body[6]) if body[6] is not None else None, [])
            return True
        if tag == TAG_SNAP_DATA:
            if len(body) != 3 or not wire._u32(body[1]) or type(body[2]) is not bytes:
                raise wire.FrameError(f"malformed SNAP_DATA frame {wire._short(body)}")
            pending = self._plans.get(peer)
            if pending is None or pending[0] != body[1] or pending[2] is None:
                raise wire.FrameError("SNAP_DATA without its SNAP plan")
            pending[2].extend(body[2])
            return True
        if tag == TAG_SYNC_TXNS:
            if len(body) != 4 or not wire._u32(body[1]) or body[2] not in (0, 1) or type(body[3]) is not tuple:
                raise wire.FrameError(f"malformed SYNC_TXNS frame {wire._short(body)}")
            pending = self._plans.get(peer)
            if pending is None or pending[0] != body[1]:
                raise wire.FrameError("SYNC_TXNS without its SYNC_PLAN")
            txns = pending[3]
            last = txns[-1].zxid if txns else 0
            for raw in body[3]:
                txn = wire._txn(raw)
                if txn.zxid <= last:
                    raise wire.FrameError("sync plan txns are not in ascending zxid order")
                last = txn.zxid
                txns.append(txn)
            if body[2] == 1:
                del self._plans[peer]
                epoch, plan, data, _ = pending
                snap = bytes(data) if data is not None else None
                self._apply(conn, peer, epoch, plan._replace(txns=tuple(txns)), snap)
            return True
        if tag == TAG_KV_FORWARD:
            from zabd.server import kv_service

            kv_service.on_forward(self.r, peer, body)
            return True
        if tag == TAG_SYNC_REQ:
            if len(body) != 2 or not wire._u64(body[1]):
                raise wire.FrameError(f"malformed SYNC_REQ frame {wire._short(body)}")
            self.r._send_extra(peer, wire.frame((wire.TAG_FORWARD_OK, body[1], self.r._applied)))
            return True
        return False

    def _apply(self, conn: PeerConn, peer: int, epoch: int, plan: SyncPlan, data: bytes | None) -> None:
        r = self.r
        node = r.node
        if epoch < node.accepted_epoch:
            return  # the core would ignore this NewLeader: change nothing
        if plan.mode == SNAP:
            try:
                self._install(plan, data or b"")
            except (ValueError, OSError) as exc:
                self.log.error("snapshot install refused; dropping the link", peer=peer, error=str(exc))
                conn.abort()
                return
            history = list(plan.txns)
        else:
            try:
                history = apply_plan(node.history, plan, self.base)
            except SyncError as exc:
                self.log.warning("stale sync plan; dropping the link to resync", peer=peer, error=str(exc))
                conn.abort()
                return
        self.received[plan.mode] += 1
        self._log_plan("sync received", peer, plan)
        node.on_message(peer, NewLeader(epoch, tuple(history)), r.now())

    def _log_plan(self, event: str, peer: int, plan: SyncPlan) -> None:
        self.log.info(
            event,
            peer=peer,
            mode=plan.mode,
            truncate_to=zx.fmt(plan.truncate_to),
            snapshot_zxid=zx.fmt(plan.snapshot_zxid),
            txns=len(plan.txns),
        )

    def _install(self, plan: SyncPlan, data: bytes) -> None:
        r = self.r
        if self.snapshotter is not None:
            self.snapshotter.wait()
        if self.disk is not None:
            self.disk.install_snapshot(plan.snapshot_zxid, data, plan.log_base)
        if self.machine is not None:
            self.machine.restore(data)
            self.machine.store.applied = plan.snapshot_zxid
        r._applied = plan.snapshot_zxid
        r._applied_idx = 0
        r._applied_list = []
        self.base = plan.log_base

    # ---------------------------------------------------------------- status

    def status(self) -> dict[str, Any]:
        storage = self.r.storage
        st = storage.stats
        out: dict[str, Any] = {
            "storage_stats": {"flushes": st.flushes, "syncs": st.syncs, "records_synced": st.records_synced},
            "sync_sent": dict(self.sent),
            "sync_received": dict(self.received),
            "log_base": self.base,
        }
        if self.snapshotter is not None:
            s = self.snapshotter.stats
            out["snapshots"] = {
                "taken": s.taken,
                "last_zxid": s.last_zxid,
                "snapshots_purged": s.snapshots_purged,
                "segments_purged": s.segments_purged,
            }
        if self.machine is not None:
            out["kv_keys"] = len(self.machine.store.data)
            out["kv_digest"] = self.machine.digest()
        return out


def _zxid_key(txn: Txn) -> int:
    return txn.zxid

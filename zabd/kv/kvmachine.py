"""The server's state machine: the KV store, the ZooKeeper tree, raw entries.

Committed txns tagged ``KV_MAGIC`` change the KV store, ``ZK_MAGIC`` the
ZooKeeper tree (``zabd.zk``); any other payload is a raw log entry (a
client ``propose``, tagged raw by the server: ``zabd.kv.kinds``) and changes
neither. One log, one commit order for all three.

Applying never fails: a committed txn the store or the tree cannot apply
(``MalformedTxn``: refused whole, nothing changed) gets an error result, the
same on every replica, and is logged once here; a replica that raised instead
would stop, and stop again at every restart as its log replays the txn.
Recent results are kept for the clients waiting on them, and
``zk_applied`` (set by the server) hears of every applied ZooKeeper txn, to
fire watches and end sessions.

A membership change (``zabd.protocol.membership``) is kept in
``membership_changes``: the core's membership is protocol state, and a
snapshot must say what it was at its point.

A snapshot holds all of it: ``SNAP_MAGIC_M``, the KV part's length (u64),
the KV part, the changes' length (u64) and the changes (u64 zxid, u32 length,
payload; each), the tree's part. An older snapshot (``SNAP_MAGIC``: no
changes section) and a bare KV snapshot (a KV-only server's) still restore.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Container
from typing import cast

import structlog

from zabd.codec.members import decode_specs, zookeeper_config_text
from zabd.kv.store import MALFORMED, KVLeader, KVStore, Result
from zabd.machine import MalformedTxn, record_change
from zabd.protocol.membership import MAGIC as MEMBERSHIP_MAGIC
from zabd.protocol.membership import decode as decode_membership
from zabd.protocol.messages import Txn
from zabd.zk.errors import Code
from zabd.zk.events import EventType
from zabd.zk.prep import DEFAULT_MAX_DATA, ZKLeader
from zabd.zk.records import ErrorResult, WriteResult
from zabd.zk.tree import CONFIG_PATH, Applied, DataTree
from zabd.zk.txn import ZK_MAGIC

# 0xc1 is never the first byte of a msgpack value, so no KV payload is mistaken
# for a raw one that happens to be msgpack.
KV_MAGIC = b"\xc1kv1"
SNAP_MAGIC = b"\xc1zkv"
SNAP_MAGIC_M = b"\xc1zkm"
RESULTS_KEPT = 65536
DIGEST_MAX_KEYS = 200_000
_LEN = struct.Struct("<Q")
_CHANGE = struct.Struct("<QI")
_log = structlog.get_logger("zabd.kv")
# the kind of the Applied a membership change hands to zk_applied: ZooKeeper's OpCode.reconfig
# (no ZooKeeper txn of zabd's has it: a membership change is the core's, zabd.kv.kinds)
RECONFIG_KIND = 16


class _Results:
    """The results of the last RESULTS_KEPT / 2 to RESULTS_KEPT txns of one
    kind, by zxid: two generations of dicts that only grow, the older dropped
    whole when the newer is full. One dict with a delete per insert cost
    253 ns an add on every replica, this 125 (both called from Python)."""

    def __init__(self) -> None:
        self._new: dict[int, object] = {}
        self._old: dict[int, object] = {}

    def add(self, zxid: int, result: object) -> None:
        new = self._new
        if len(new) >= RESULTS_KEPT // 2:
            self._old, self._new = new, {zxid: result}
        else:
            new[zxid] = result

    def get(self, zxid: int) -> object:
        r = self._new.get(zxid)
        return self._old.get(zxid) if r is None else r

    def clear(self) -> None:
        self._new = {}
        self._old = {}


class KVMachine:
    def __init__(self, zk_max_data: int = DEFAULT_MAX_DATA, zk_config: bytes = b"",
                 wall_ms: Callable[[], int] | None = None) -> None:
        """``zk_config``: ZooKeeper's ``/zookeeper/config`` text of this ensemble;
        ``wall_ms``: this server's clock, for that node's mtime as ZooKeeper
        sets it (when the server starts, restores a snapshot or applies a
        reconfig); without one (the simulator, tools) it is 0."""
        self.store = KVStore()
        self.leader = KVLeader(self.store)
        self.zk_max_data = zk_max_data
        self.zk_config = zk_config
        self.wall_ms = wall_ms
        self.zk = DataTree()
        if zk_config:
            self.zk.set_config(zk_config, 0, self._now())
        self.zk_leader = ZKLeader(self.zk, zk_max_data)
        self.zk_applied: Callable[[int, Applied], None] | None = None
        self.zk_restored: Callable[[], None] | None = None  # the tree was replaced by a snapshot
        # the sessions whose writes may be answered here (set by the server:
        # those attached to it); None: every result is kept
        self.zk_answered: Container[int] | None = None
        self._kv_results = _Results()
        self._zk_results = _Results()
        self.errors = 0  # committed txns not applied (malformed, or a fault)
        self.faults = 0  # of which applying raised something other than MalformedTxn: a bug
        self.membership_changes: list[tuple[int, bytes]] = []

    def apply(self, txn: Txn) -> object:
        p = txn.payload
        tag = p[:4]
        result: object = None
        if tag == KV_MAGIC:
            try:
                result = self.store.apply(Txn(txn.zxid, p[4:]))
            except MalformedTxn as exc:
                result = self._refused(txn.zxid, "kv", exc)
            except Exception as exc:  # a bug, not a txn: still never a replica that cannot start
                result = self._refused(txn.zxid, "kv", exc, fault=True)
            self._kv_results.add(txn.zxid, result)
            self.leader.committed(txn.zxid)
        elif tag == ZK_MAGIC:
            try:
                applied = self.zk.apply(txn.zxid, p, self.zk_answered)
            except MalformedTxn as exc:
                result = self._refused(txn.zxid, "zk", exc)
            except Exception as exc:
                result = self._refused(txn.zxid, "zk", exc, fault=True)
            else:
                result = applied.result
                if result is not None:
                    self._zk_results.add(txn.zxid, result)
                if self.zk_applied is not None:
                    self.zk_applied(txn.zxid, applied)
            self.zk_leader.committed(txn.zxid)
        elif p.startswith(MEMBERSHIP_MAGIC):
            record_change(self.membership_changes, txn)
            if self._config_from(txn.zxid, p) and self.zk_applied is not None:
                # ZooKeeper's reconfig sets the node's data: its data watches fire (Curator's
                # EnsembleTracker and zkCli's `config -w` learn of the change from them)
                node = self.zk.nodes[CONFIG_PATH]
                changed = (EventType.NODE_DATA_CHANGED, CONFIG_PATH, node.acl)
                self.zk_applied(txn.zxid, Applied(RECONFIG_KIND, 0, None, [changed]))
        self.store.applied = txn.zxid
        return result

    def _refused(self, zxid: int, kind: str, exc: Exception, fault: bool = False) -> object:
        """The result of a txn not applied: an error for whoever waits on it."""
        self.errors += 1
        if fault:
            self.faults += 1
            _log.error("applying a committed txn raised; it is answered with an error and changed nothing "
                       "it had not changed already", zxid=f"{zxid:#x}", kind=kind,
                       error=f"{type(exc).__name__}: {exc}")
        else:
            _log.warning("a committed txn cannot be applied; every replica answers it with an error",
                         zxid=f"{zxid:#x}", kind=kind, reason=str(exc))
        if kind == "kv":
            return Result(MALFORMED, 0)
        result = ErrorResult(Code.MARSHALLING_ERROR)
        self._zk_results.add(zxid, result)
        return result

    def _config_from(self, zxid: int, payload: bytes) -> bool:
        """ZooKeeper's ``/zookeeper/config`` after the change at ``zxid``
        (False: the tree holds it already)."""
        m = decode_membership(payload)
        if m is None or zxid <= self.zk.applied:  # not again in a replay over a snapshot that holds it
            return False
        try:
            specs = decode_specs(m.extra)
        except ValueError:
            specs = {}
        self.zk.reconfigured(zookeeper_config_text(m.voters, m.observers, specs, zxid), zxid, self._now())
        return True

    def _now(self) -> int:
        return 0 if self.wall_ms is None else self.wall_ms()

    def result(self, zxid: int) -> Result | None:
        """The result of the KV txn at ``zxid``, if still kept here."""
        return cast(Result | None, self._kv_results.get(zxid))

    def zk_result(self, zxid: int) -> WriteResult | None:
        """The result of the ZooKeeper txn at ``zxid``, if still kept here."""
        return cast(WriteResult | None, self._zk_results.get(zxid))

    def snapshot(self) -> bytes:
        return self.encode_view(self.snapshot_view())

    def restore(self, data: bytes) -> None:
        self.store = KVStore()
        self.zk = DataTree()
        self.membership_changes = []
        if data[:4] in (SNAP_MAGIC, SNAP_MAGIC_M):
            (kv_len,) = _LEN.unpack_from(data, 4)
            start = 4 + _LEN.size
            self.store.restore(data[start : start + kv_len])
            start += kv_len
            if data[:4] == SNAP_MAGIC_M:
                (m_len,) = _LEN.unpack_from(data, start)
                start += _LEN.size
                self.membership_changes = _decode_changes(data[start : start + m_len])
                start += m_len
            self.zk = DataTree.restore(data[start:])
        elif data:
            self.store.restore(data)
        if self.membership_changes:
            self._config_from(*self.membership_changes[-1])
            self.zk.stamp_config(self._now())  # the snapshot holds 0 for it
        elif self.zk_config:
            self.zk.set_config(self.zk_config, 0, self._now())
        self.leader = KVLeader(self.store)
        self.zk_leader = ZKLeader(self.zk, self.zk_max_data)
        self._kv_results.clear()
        self._zk_results.clear()
        if self.zk_restored is not None:
            self.zk_restored()

    def snapshot_view(self) -> object:
        return (self.store.snapshot_view(), self.zk.snapshot_view(), tuple(self.membership_changes))

    def encode_view(self, view: object) -> bytes:
        kv_view, zk_view, changes = cast(tuple[object, object, tuple[tuple[int, bytes], ...]], view)
        kv = self.store.encode_view(kv_view)
        mem = b"".join(_CHANGE.pack(z, len(p)) + p for z, p in changes)
        return b"".join((SNAP_MAGIC_M, _LEN.pack(len(kv)), kv, _LEN.pack(len(mem)), mem,
                         DataTree.encode_view(zk_view)))  # fmt: skip

    def digest(self) -> int | None:
        """CRC-32 of the encoded KV state (equal states, equal digests), for
        tests and audits; None above DIGEST_MAX_KEYS keys (too slow for a
        status call). The tree keeps its own digest (``zk.digest``)."""
        if len(self.store.data) > DIGEST_MAX_KEYS:
            return None
        return zlib.crc32(self.store.snapshot())


def _decode_changes(data: bytes) -> list[tuple[int, bytes]]:
    out = []
    off = 0
    while off < len(data):
        z, n = _CHANGE.unpack_from(data, off)
        off += _CHANGE.size
        out.append((z, data[off : off + n]))
        off += n
    return out

"""The server's state machine: the KV store, the ZooKeeper tree, raw entries.

Committed txns tagged ``KV_MAGIC`` change the KV store, ``ZK_MAGIC`` the
ZooKeeper tree (``zabd.zk``); any other payload is a raw log entry (a
client ``propose``, tagged raw by the server: ``zabd.kv.kinds``) and changes
neither. One log, one commit order for all three.

Applying never fails: a committed txn the store or the tree cannot apply
(``MalformedTxn``: refused whole, nothing changed) gets an error result, the
same on every replica, and is logged once here; a replica that raised instead
would stop, and stop again at every restart as its log replays the txn.
``apply`` returns what the txn did: a KV txn's ``Result``, a ZooKeeper
txn's ``Applied`` (its result and the watches it triggers), for whoever
waits on it and the server's watches; nothing is kept for later.

A membership change (``zabd.protocol.membership``) is kept in
``membership_changes``: the core's membership is protocol state, and a
snapshot must say what it was at its point.

A snapshot holds all of it: ``SNAP_MAGIC_M``, the KV part's length (u64),
the KV part, the changes' length (u64) and the changes (u64 zxid, u32 length,
payload; each), the tree's part. An older snapshot (``SNAP_MAGIC``: no
changes section) and a bare KV snapshot (a KV-only server's) still restore.
"""

from __future__ import annotations

import gc
import struct
import zlib
from collections.abc import Callable, Container, Iterator
from typing import cast

import structlog

from zabd.codec.members import decode_specs, zookeeper_config_text
from zabd.kv.store import MALFORMED, KVLeader, KVStore, Result
from zabd.machine import MalformedTxn, Restoring, record_change
from zabd.protocol.membership import MAGIC as MEMBERSHIP_MAGIC
from zabd.protocol.membership import decode as decode_membership
from zabd.protocol.messages import Txn
from zabd.zk.errors import Code
from zabd.zk.events import EventType
from zabd.zk.prep import DEFAULT_MAX_DATA, ZKLeader
from zabd.zk.records import ErrorResult
from zabd.zk.tree import CONFIG_PATH, Applied, DataTree, TreeBuilder
from zabd.zk.txn import T_ERROR, ZK_MAGIC

# 0xc1 is never the first byte of a msgpack value, so no KV payload is mistaken
# for a raw one that happens to be msgpack.
KV_MAGIC = b"\xc1kv1"
SNAP_MAGIC = b"\xc1zkv"
SNAP_MAGIC_M = b"\xc1zkm"
DIGEST_MAX_KEYS = 200_000
_LEN = struct.Struct("<Q")
_CHANGE = struct.Struct("<QI")
_FEED_STEP = 1 << 22  # a restore's bytes handed to the tree builder this many at a time
_log = structlog.get_logger("zabd.kv")
# the kind of the Applied a membership change returns (its config node's watches): ZooKeeper's OpCode.reconfig
# (no ZooKeeper txn of zabd's has it: a membership change is the core's, zabd.kv.kinds)
RECONFIG_KIND = 16


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
        self.zk_answered: Container[int] | None = None  # see answer_only
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
            self.leader.committed(txn.zxid)
        elif tag == ZK_MAGIC:
            try:
                result = self.zk.apply(txn.zxid, p, self.zk_answered)
            except MalformedTxn as exc:
                result = self._refused(txn.zxid, "zk", exc)
            except Exception as exc:
                result = self._refused(txn.zxid, "zk", exc, fault=True)
            self.zk_leader.committed(txn.zxid)
        elif p.startswith(MEMBERSHIP_MAGIC):
            record_change(self.membership_changes, txn)
            if self._config_from(txn.zxid, p):
                # ZooKeeper's reconfig sets the node's data: its data watches fire (Curator's
                # EnsembleTracker and zkCli's `config -w` learn of the change from them)
                node = self.zk.nodes[CONFIG_PATH]
                changed = (EventType.NODE_DATA_CHANGED, CONFIG_PATH, node.acl)
                result = Applied(RECONFIG_KIND, 0, None, [changed])
        self.store.applied = txn.zxid
        return result

    def answer_only(self, sessions: Container[int]) -> None:
        """Build ZooKeeper results only for the writes of ``sessions`` (a
        server's: the table of those attached to it, which its session layer
        keeps): a setData of any other session's gets no Stat, which nobody
        here would read. Without it every result is built."""
        self.zk_answered = sessions

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
        return Applied(T_ERROR, 0, ErrorResult(Code.MARSHALLING_ERROR), [])

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

    def snapshot(self) -> bytes:
        return self.encode_view(self.snapshot_view())

    def restore(self, data: bytes) -> None:
        restoring = self.restoring()
        # a whole state at once (a restart, a tool): a million new nodes would
        # set off collections over a growing heap, and they hold no cycles
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            restoring.feed(data)
            self.restore_from(restoring)
        finally:
            if gc_was_enabled:
                gc.enable()

    def restoring(self) -> Restoring:
        return SnapshotRestore()

    def restore_from(self, restoring: object) -> None:
        """The state a :class:`SnapshotRestore` was fed replaces this one
        (ValueError, nothing replaced, if it is not a whole snapshot)."""
        assert isinstance(restoring, SnapshotRestore)
        store, changes, zk = restoring.finish()
        self.store = store
        self.zk = zk
        self.membership_changes = changes
        if self.membership_changes:
            self._config_from(*self.membership_changes[-1])
            self.zk.stamp_config(self._now())  # the snapshot holds 0 for it
        elif self.zk_config:
            self.zk.set_config(self.zk_config, 0, self._now())
        self.leader = KVLeader(self.store)
        self.zk_leader = ZKLeader(self.zk, self.zk_max_data)

    def snapshot_view(self) -> object:
        return (self.store.snapshot_view(), self.zk.snapshot_view(), tuple(self.membership_changes))

    def encode_view(self, view: object) -> bytes:
        return b"".join(self.encode_chunks(view, 1 << 24))

    def encode_chunks(self, view: object, size: int) -> Iterator[bytes]:
        """The view encoded in pieces of about ``size`` bytes: the KV part
        and the membership changes in the first (the KV store is sorted
        whole), then the tree's rows, a bounded step each."""
        kv_view, zk_view, changes = cast(tuple[object, object, tuple[tuple[int, bytes], ...]], view)
        kv = self.store.encode_view(kv_view)
        mem = b"".join(_CHANGE.pack(z, len(p)) + p for z, p in changes)
        yield b"".join((SNAP_MAGIC_M, _LEN.pack(len(kv)), kv, _LEN.pack(len(mem)), mem))
        yield from DataTree.encode_chunks(zk_view, size)

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


class SnapshotRestore:
    """A :class:`KVMachine` snapshot fed in pieces of any size (``feed``) and
    turned into its parts at the end (``finish``): the tree's rows become
    nodes as they come (:class:`~zabd.zk.tree.TreeBuilder`), so a follower
    receiving a streamed SNAP never does the whole restore in one step.
    The KV part and the changes (the head) are kept whole until complete."""

    def __init__(self) -> None:
        self._head = bytearray()
        self._parts: tuple[KVStore, list[tuple[int, bytes]]] | None = None
        self._tree: TreeBuilder | None = None
        self._bare = False  # a KV-only snapshot: no tree, kept whole
        self._whole: tuple[KVStore, list[tuple[int, bytes]], DataTree] | None = None

    def feed(self, data: bytes | memoryview) -> None:
        tree = self._tree
        if tree is not None:
            _feed_in_steps(tree, data)
            return
        if self._head or self._bare:
            self._head += data
            buf = memoryview(self._head)
        else:
            buf = memoryview(data)  # a whole snapshot in one piece (a restart) is not copied
        try:
            tree_at = self._parse_head(buf)
        finally:
            buf.release()
        if tree_at is None:
            if not self._head:
                self._head += data
            return
        rest = memoryview(self._head if self._head else data)[tree_at:]
        tree = self._tree = TreeBuilder()
        _feed_in_steps(tree, rest)
        self._head = bytearray()

    def _parse_head(self, buf: memoryview) -> int | None:
        """Where the tree's part starts, once the KV part and the changes are
        in (and taken); None until then, or for a bare KV snapshot."""
        if self._bare or len(buf) < 4:
            return None
        magic = bytes(buf[:4])
        if magic not in (SNAP_MAGIC, SNAP_MAGIC_M):
            self._bare = True
            return None
        start = 4 + _LEN.size
        if len(buf) < start:
            return None
        kv_len: int = _LEN.unpack_from(buf, 4)[0]
        end = start + kv_len
        changes: list[tuple[int, bytes]] = []
        if magic == SNAP_MAGIC_M:
            if len(buf) < end + _LEN.size:
                return None
            m_len: int = _LEN.unpack_from(buf, end)[0]
            m_start = end + _LEN.size
            if len(buf) < m_start + m_len:
                return None
            changes = _decode_changes(bytes(buf[m_start : m_start + m_len]))
            tree_at = m_start + m_len
        else:
            if len(buf) < end:
                return None
            tree_at = end
        store = KVStore()
        store.restore(bytes(buf[start:end]))
        self._parts = (store, changes)
        return tree_at

    def check(self) -> None:
        self.finish()

    def finish(self) -> tuple[KVStore, list[tuple[int, bytes]], DataTree]:
        """The parts (once made, the same ones); ValueError if the snapshot
        was cut short or is not valid."""
        if self._whole is None:
            self._whole = self._finish()
        return self._whole

    def _finish(self) -> tuple[KVStore, list[tuple[int, bytes]], DataTree]:
        if self._tree is not None and self._parts is not None:
            return self._parts[0], self._parts[1], self._tree.finish()
        if self._bare:
            store = KVStore()
            store.restore(bytes(self._head))
            return store, [], DataTree()
        if not self._head:
            return KVStore(), [], DataTree()
        raise ValueError(f"snapshot cut short: {len(self._head)} bytes of its head")


def _feed_in_steps(tree: TreeBuilder, data: bytes | memoryview) -> None:
    mv = memoryview(data)
    for off in range(0, len(mv), _FEED_STEP):
        tree.feed(mv[off : off + _FEED_STEP])

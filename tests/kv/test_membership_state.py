"""The membership is part of the state machine's state: a snapshot says what
it was at its point, and a server restarting from a snapshot and its log
gives the core the membership in effect where its history starts."""

from __future__ import annotations

import struct
from pathlib import Path

from zabd.codec.members import encode_addresses
from zabd.kv.kvmachine import SNAP_MAGIC, KVMachine
from zabd.machine import NullMachine, membership_at
from zabd.protocol.membership import Membership, encode
from zabd.protocol.messages import Txn
from zabd.protocol.node import Node
from zabd.server.recovery import recover
from zabd.storage.disk import DiskStorage
from zabd.zk.events import EventType
from zabd.zk.tree import CONFIG_PATH, Applied


def change(voters: set[int], observers: set[int] = frozenset()) -> bytes:  # type: ignore[assignment]
    return encode(Membership(frozenset(voters), frozenset(observers), b"addresses"))


def test_changes_are_applied_once_and_travel_in_snapshots() -> None:
    m = KVMachine(zk_config=b"server.1=h:1:1:participant\nversion=0")
    m.apply(Txn(1, b"raw"))
    m.apply(Txn(2, change({1, 2})))
    m.apply(Txn(2, change({1, 2})))  # a replay over a snapshot that covers it
    m.apply(Txn(5, change({1, 2}, {3})))
    assert m.membership_changes == [(2, change({1, 2})), (5, change({1, 2}, {3}))]
    assert membership_at(m.membership_changes, 4) == (2, change({1, 2}))
    assert membership_at(m.membership_changes, 1) is None
    copy = KVMachine(zk_config=b"server.1=h:1:1:participant\nversion=0")
    copy.restore(m.snapshot())
    assert copy.membership_changes == m.membership_changes
    assert copy.zk.digest == m.zk.digest
    null = NullMachine()
    null.apply(Txn(7, change({1})))
    assert null.membership_changes == [(7, change({1}))]


def test_a_snapshot_from_before_membership_changes_still_restores() -> None:
    m = KVMachine()
    snap = m.snapshot()
    kv_len = struct.unpack_from("<Q", snap, 4)[0]
    start = 4 + 8 + kv_len
    old = SNAP_MAGIC + snap[4:start] + snap[start + 8 :]  # the format without the changes' section
    again = KVMachine()
    again.restore(old)
    assert again.membership_changes == [] and again.zk.digest == m.zk.digest


def test_a_restart_gives_the_core_the_membership_where_its_history_starts(tmp_path: Path) -> None:
    """A change that left the in-memory window (and one before the snapshot)
    is still the membership in effect after a restart."""
    storage = DiskStorage(str(tmp_path), window=4)
    storage.load()
    machine = KVMachine()
    txns = [Txn((1 << 32) | i, b"x%d" % i) for i in range(1, 21)]
    txns[2] = Txn(txns[2].zxid, change({1, 2, 3, 4}))  # before the snapshot
    txns[9] = Txn(txns[9].zxid, change({1, 2, 3, 4}, {5}))  # after it, below the window
    storage.persist_epochs(1, 1, 1)
    for t in txns:
        storage.append(t)
    for t in txns[:6]:
        machine.apply(t)
    storage.flush_sync()
    storage.write_snapshot(txns[5].zxid, machine.snapshot())
    storage.commit_to(txns[-1].zxid)
    storage.close()

    again = DiskStorage(str(tmp_path), window=4)
    state = again.load()
    assert state.window_base > txns[9].zxid and state.snapshot_zxid == txns[5].zxid
    node = Node(1, [2, 3], 0)
    restored = KVMachine()
    recover(state, again, node, restored, _Quiet(), [])
    assert node.membership == Membership(frozenset({1, 2, 3, 4}), frozenset({5}), b"addresses")
    assert [z for z, _ in restored.membership_changes] == [txns[2].zxid, txns[9].zxid]
    again.close()


class _Quiet:
    def info(self, *args: object, **kw: object) -> None:
        pass

    def warning(self, *args: object, **kw: object) -> None:
        pass


def test_the_config_node_carries_each_servers_mtime_outside_digest_and_snapshot() -> None:
    """``/zookeeper/config``'s mtime is the server's clock when it set the node (as
    ZooKeeper's): replicas that applied the same change differ there only, and still
    have one digest and snapshots of the same bytes; a restore stamps its own time;
    the change fires the node's data watches."""
    static = b"server.1=h:1:2:participant;0.0.0.0:3\nversion=0"
    specs = encode_addresses({1: "h:1:2;3", 2: "g:4:5:observer;g:6"})
    payload = encode(Membership(frozenset({1}), frozenset({2}), specs))
    heard: list[tuple[int, object]] = []
    machines = [KVMachine(zk_config=static, wall_ms=lambda t=t: t) for t in (1000, 2000)]
    for m in machines:
        assert m.zk.nodes[CONFIG_PATH].mtime in (1000, 2000)
        heard.append((7, m.apply(Txn(7, payload))))  # what the server's watches hear of
    a, b = machines
    assert a.zk.nodes[CONFIG_PATH].data == b.zk.nodes[CONFIG_PATH].data == (
        b"server.1=h:1:2:participant;0.0.0.0:3\nserver.2=g:4:5:observer;g:6\nversion=7")
    assert (a.zk.nodes[CONFIG_PATH].mtime, b.zk.nodes[CONFIG_PATH].mtime) == (1000, 2000)
    assert a.zk.stat(CONFIG_PATH).mzxid == 7 and a.zk.digest == b.zk.digest and a.snapshot() == b.snapshot()
    assert [(z, x.triggers[0][:2]) for z, x in heard if isinstance(x, Applied)] == [
        (7, (EventType.NODE_DATA_CHANGED, CONFIG_PATH))] * 2
    restored = KVMachine(zk_config=static, wall_ms=lambda: 3000)
    restored.restore(a.snapshot())
    assert restored.zk.nodes[CONFIG_PATH].mtime == 3000 and restored.zk.digest == a.zk.digest
    assert restored.zk.nodes[CONFIG_PATH].data == a.zk.nodes[CONFIG_PATH].data

"""A restarted node's state equals the state of a node that applied the same txns live.

``recover`` restores the newest snapshot and replays the committed txns after it: the part
below the window from the log files, a page at a time, and the rest from the window the load
read already. Whatever the window and the page, the tree comes out as the live one: same
digest, same nodes, same sessions, same zxid; and nothing above the commit point is applied.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from tests.zk.standalone import Standalone
from zabd.kv.kvmachine import KVMachine
from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn
from zabd.protocol.node import Node
from zabd.protocol.options import for_server
from zabd.server import recovery
from zabd.storage.disk import DiskStorage
from zabd.zk.acl import OPEN_ACL_UNSAFE
from zabd.zk.records import Create, Delete, SetData

SMALL = {"segment_bytes": 4096, "prealloc_bytes": 4096}  # many segments: pages cross their ends
SNAP_AT = 120  # the snapshot covers the first 120 txns
COMMIT_AT = 460  # committed; the txns above it are in the log only


def workload() -> list[Txn]:
    """ZooKeeper txns of every kind a tree replays: sessions, creates (ephemeral too),
    setData, deletes, a session closed with its ephemerals."""
    sa = Standalone()
    sa.recorded = []
    acl = tuple(OPEN_ACL_UNSAFE)
    a, b = sa.session(), sa.session()
    for p in range(12):
        sa.write(a, Create(f"/p{p}", b"parent", acl, 0))
        for c in range(10):
            sa.write(b if c % 3 == 0 else a, Create(f"/p{p}/e{c}", bytes([c]) * 40, acl, 1 if c % 3 == 0 else 0))
    for k in range(300):
        sa.write(a, SetData(f"/p{k % 12}/e{1 + k % 2}", b"v%d" % k, -1))
    for p in range(0, 12, 3):
        sa.write(a, Delete(f"/p{p}/e1", -1))
    sa.close(b)  # its ephemerals go with it
    for k in range(60):
        sa.write(a, SetData(f"/p{1 + k % 11}/e2", b"late%d" % k, -1))
    return [Txn(z, p) for z, p in sa.recorded]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KVMachine, list[Txn]]:
    """A data dir as a server leaves it: the log, a snapshot inside it, a commit point
    below its end; and the machine that applied the committed txns live."""
    txns = workload()
    assert len(txns) > COMMIT_AT + 20
    d = tmp_path_factory.mktemp("replay")
    disk = DiskStorage(str(d), fsync=False, **SMALL)  # type: ignore[arg-type]
    disk.load()
    disk.persist_epochs(1, 1, 1)
    live = KVMachine()
    for k, txn in enumerate(txns, 1):
        disk.append(txn)
        if k <= COMMIT_AT:
            live.apply(txn)
        if k == SNAP_AT:
            disk.flush_sync()
            disk.write_snapshot(txn.zxid, live.snapshot())
    disk.commit_to(txns[COMMIT_AT - 1].zxid)
    disk.flush_sync()
    disk.close()
    return d, live, txns


@pytest.mark.parametrize("window", [16, 300, 10_000])
@pytest.mark.parametrize("page", [1, 2048, recovery.REPLAY_PAGE])
def test_a_replayed_tree_equals_the_one_applied_live(
    written: tuple[Path, KVMachine, list[Txn]], window: int, page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    d, live, txns = written
    monkeypatch.setattr(recovery, "REPLAY_PAGE", page)
    disk = DiskStorage(str(d), fsync=False, window=window, **SMALL)  # type: ignore[arg-type]
    try:
        state = disk.load()
        assert state.snapshot_zxid == txns[SNAP_AT - 1].zxid
        machine = KVMachine()
        node = Node(1, [2, 3], 1, for_server(window, 100_000, 10))
        got = recovery.recover(state, disk, node, machine, structlog.get_logger("test"), [])
    finally:
        disk.close()
    assert got.replayed == COMMIT_AT - SNAP_AT
    tree, want = machine.zk, live.zk
    assert tree.applied == want.applied == txns[COMMIT_AT - 1].zxid, zx.fmt(tree.applied)
    assert tree.digest == want.digest
    assert {p: n.blob for p, n in tree.walk()} == {p: n.blob for p, n in want.walk()}
    assert tree.sessions == want.sessions
    assert node.last_zxid() == txns[-1].zxid  # the uncommitted tail is the core's, not applied

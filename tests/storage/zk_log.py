"""ZooKeeper txns for storage tests: a one-replica ZooKeeper that keeps every
payload it commits, to write into a data directory as a server would."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.zk.standalone import Standalone
from zabd.kv import KVMachine
from zabd.protocol.messages import Txn
from zabd.storage.disk import DiskStorage
from zabd.zk.acl import Id
from zabd.zk.records import (
    EPHEMERAL_SEQUENTIAL,
    Create,
    Delete,
    Multi,
    SetData,
    Write,
    WriteResult,
)


class Recording(Standalone):
    """``Standalone`` that keeps (zxid, payload) of each committed write."""

    def __init__(self, epoch: int = 1) -> None:
        super().__init__(epoch)
        self.txns: list[Txn] = []

    def write(self, session: int, req: Write, auth: Sequence[Id] = ()) -> WriteResult:
        prepared = self.leader.prepare(session, auth, req, self.clock_ms())
        self.zxid += 1
        self.leader.proposed(self.zxid, prepared)
        self.txns.append(Txn(self.zxid, prepared.payload))
        applied = self.tree.apply(self.zxid, prepared.payload)
        self.leader.committed(self.zxid)
        self.triggers = applied.triggers
        return applied.result


def workload(zk: Recording, rounds: int = 5) -> int:
    """Sessions, ephemerals, sequential nodes, binary data, a multi, a close:
    returns the session left open."""
    s1 = zk.session(5000)
    s2 = zk.session(8000)
    zk.write(s1, Create("/app", b"config v1"))
    for i in range(rounds):
        zk.write(s2, Create("/app/lock-", b"me", mode=EPHEMERAL_SEQUENTIAL))
        zk.write(s1, SetData("/app", bytes(range(i, i + 40)), -1))
    zk.write(s1, Multi((Create("/m", b""), Create("/m/x", b"x"))))
    zk.write(s1, Delete("/m/x", -1))
    zk.write(s1, Create("/app", b"again"))  # fails: NODE_EXISTS, logged as an error txn
    zk.close(s2)  # its ephemerals go with it
    return s1


def write_dir(d: Path, txns: list[Txn], *, commit: int, snap_at: int = 0, snap_data: bytes | None = None) -> None:
    """The txns in a data dir (epoch 1), committed up to ``commit``; with
    ``snap_at``, a snapshot of a KVMachine that applied the txns up to it
    (or ``snap_data``)."""
    s = DiskStorage(str(d), segment_bytes=4096, prealloc_bytes=4096)
    s.load()
    s.persist_epochs(1, 1, 1)
    m = KVMachine()
    for t in txns:
        s.append(t)
        if t.zxid <= snap_at:
            m.apply(t)
        if t.zxid == snap_at:
            s.flush_sync(30)
            s.write_snapshot(t.zxid, snap_data if snap_data is not None else m.snapshot())
    s.flush_sync(30)
    s.commit_to(commit)
    s.flush_sync(30)
    s.close()

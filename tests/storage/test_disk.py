"""DiskStorage round trips (real files, real fsync)."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.storage.helpers import run, segments, z
from zabd.protocol.messages import Txn
from zabd.storage.base import PersistentState
from zabd.storage.disk import DiskStorage
from zabd.storage.epochs import read_epochs

SMALL = {"segment_bytes": 4096, "prealloc_bytes": 4096}


def reopen(d: str, **kw: int) -> PersistentState:
    s = DiskStorage(d, **kw)  # type: ignore[arg-type]
    st = s.load()
    assert s.warnings == []
    s.close()
    return st


async def test_round_trip_appends_replace_epochs(tmp_path: object) -> None:
    d = str(tmp_path)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    assert s.load() == PersistentState()
    s.persist_epochs(1, 2, 0)
    for t in run(1, 1, 300, b"first-epoch-payload"):
        s.append(t)
    await s.flush()
    # a NewLeader of epoch 3: keeps (1,1..250), drops the rest, adds epoch 3
    new = run(1, 1, 250, b"first-epoch-payload") + run(3, 1, 40, b"third")
    s.replace_history(new)
    s.persist_epochs(3, 7, 3)
    s.commit_to(z(1, 200))
    await s.flush()
    for t in run(3, 41, 60, b"third"):
        s.append(t)
    s.commit_to(z(3, 50))
    await s.flush()
    s.close()
    st = reopen(d, **SMALL)
    assert st.history == new + run(3, 41, 60, b"third")
    assert (st.accepted_epoch, st.epoch_leader, st.current_epoch) == (3, 7, 3)
    assert st.last_committed == z(3, 50)
    assert len(segments(d)) >= 3  # rolled, and the truncation unlinked later ones


@pytest.mark.parametrize("keep", [0, 1, 57, 199, 200])
def test_replace_history_keeps_exactly_the_shared_prefix(tmp_path: object, keep: int) -> None:
    d = str(tmp_path)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    old = run(1, 1, 120, b"a") + run(2, 1, 80, b"b")
    for t in old:
        s.append(t)
    s.flush_sync()
    new = old[:keep] + run(4, 1, 30, b"c")
    s.replace_history(new)
    s.flush_sync()
    s.close()
    assert reopen(d, **SMALL).history == new


def test_replace_history_with_identical_history_writes_nothing(tmp_path: object) -> None:
    s = DiskStorage(str(tmp_path))
    s.load()
    h = run(1, 1, 10)
    for t in h:
        s.append(t)
    s.flush_sync()
    s.replace_history(h)
    assert not s.dirty
    s.close()


def test_replace_history_refuses_to_drop_committed_txns(tmp_path: object) -> None:
    s = DiskStorage(str(tmp_path))
    s.load()
    for t in run(1, 1, 10):
        s.append(t)
    s.commit_to(z(1, 8))
    with pytest.raises(ValueError, match="committed"):
        s.replace_history(run(1, 1, 5) + run(2, 1, 3))
    with pytest.raises(ValueError, match="hole"):
        s.replace_history(run(1, 1, 8) + run(1, 10, 12))
    s.close()


async def test_group_commit_one_sync_for_concurrent_flushes(tmp_path: object) -> None:
    s = DiskStorage(str(tmp_path))
    s.load()
    s.append(Txn(z(1, 1), b"warm"))
    await s.flush()  # creates the segment
    before = s.stats.syncs

    async def writer(i: int) -> None:
        s.append(Txn(z(1, 2 + i), b"x"))
        await s.flush()

    # 50 appends+flushes in one loop iteration: the writer batches them
    await asyncio.gather(*(writer(i) for i in range(50)))
    assert s.stats.records_synced == 51
    assert s.stats.syncs - before == 1  # one loop iteration: one batch, one fdatasync
    s.close()
    assert len(reopen(str(tmp_path)).history) == 51


def test_epoch_file_is_atomic_and_checked(tmp_path: object) -> None:
    d = str(tmp_path)
    s = DiskStorage(d)
    s.load()
    s.persist_epochs(5, 2, 4)
    s.persist_epochs(6, 3, 5)
    s.flush_sync()
    s.close()
    assert read_epochs(os.path.join(d, "epochs")) == (6, 3, 5)
    assert not os.path.exists(os.path.join(d, "epochs.tmp"))


def test_install_snapshot_then_history(tmp_path: object) -> None:
    d = str(tmp_path)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    for t in run(1, 1, 50, b"old") + run(2, 1, 5, b"divergent"):
        s.append(t)
    s.flush_sync()
    leader = run(1, 1, 300, b"old") + run(3, 1, 20, b"new")
    # SNAP: the leader's snapshot covers up to (1,300), its log after (1,290)
    s.install_snapshot(z(1, 300), b"state-at-1:300", log_base=z(1, 290))
    s.replace_history(leader[290:])
    s.flush_sync()
    s.close()
    s2 = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    st = s2.load()
    assert st.snapshot == b"state-at-1:300" and st.snapshot_zxid == z(1, 300)
    assert st.log_base == z(1, 290) and st.history == leader[290:]
    assert st.last_committed == z(1, 300)
    s2.append(Txn(z(3, 21), b"more"))
    s2.close()
    assert reopen(d, **SMALL).history == [*leader[290:], Txn(z(3, 21), b"more")]


def test_interrupted_install_discards_stale_log(tmp_path: object) -> None:
    d = str(tmp_path)
    s = DiskStorage(d)
    s.load()
    for t in run(1, 1, 5) + run(2, 1, 5):
        s.append(t)
    s.close()
    # the crash state after a received snapshot became durable but before the
    # log reset: write only the snapshot, as the writer does first
    from zabd.storage.snapshot import write_snapshot

    write_snapshot(os.path.join(d, "snap"), z(3, 7), b"S", received=True)
    s = DiskStorage(d)
    st = s.load()
    assert st.history == [] and st.log_base == z(3, 7) and st.snapshot == b"S"
    assert any("interrupted install" in w for w in s.warnings)
    s.append(Txn(z(3, 8), b"next"))
    s.close()
    s = DiskStorage(d)
    assert s.load().history == [Txn(z(3, 8), b"next")]
    s.close()


def test_local_snapshot_ahead_of_log_is_refused(tmp_path: object) -> None:
    from zabd.storage.snapshot import write_snapshot
    from zabd.storage.txnlog import StorageError

    d = str(tmp_path)
    s = DiskStorage(d)
    s.load()
    for t in run(1, 1, 5):
        s.append(t)
    s.close()
    write_snapshot(os.path.join(d, "snap"), z(1, 9), b"S")
    with pytest.raises(StorageError, match="log records are missing"):
        DiskStorage(d).load()


def test_fsync_off_still_round_trips(tmp_path: object) -> None:
    d = str(tmp_path)
    s = DiskStorage(d, fsync=False)
    s.load()
    for t in run(1, 1, 100):
        s.append(t)
    s.flush_sync()
    assert s.stats.syncs == 0
    s.close()
    assert reopen(d).history == run(1, 1, 100)


async def test_segments_after_the_first_come_from_a_spare_made_in_the_background(tmp_path: object) -> None:
    d = str(tmp_path)
    kw = {"segment_bytes": 8192, "prealloc_bytes": 4096}
    s = DiskStorage(d, **kw)  # type: ignore[arg-type]
    s.load()
    txns = run(1, 1, 400, b"spare" * 20)
    for t in txns:
        s.append(t)
        if t.zxid % 50 == 0:
            await s.flush()
    await s.flush()
    segs = segments(d)
    assert len(segs) >= 3
    # the first segment starts at prealloc_bytes and grows on the writer
    # thread; the later ones were made whole (segment_bytes and one chunk for
    # the last record's overshoot) before a rollover took them, so none grew
    assert all(os.path.getsize(p) == 8192 + 4096 for p in segs[1:])
    spare = os.path.join(d, "log", ".tmp-spare-segment")
    assert os.path.exists(spare)  # the next one, made while this one fills
    s.close()
    assert not os.path.exists(spare)  # a clean stop leaves no spare behind
    with open(spare, "wb") as f:  # a crash while one was being made
        f.write(b"\0" * 100)
    st = reopen(d, **kw)
    assert st.history == txns and not os.path.exists(spare)


def _v1_log(d: str, txns: list[Txn]) -> str:
    """A log as zabd wrote it before payloads were tagged by kind: one segment of version 1."""
    from zabd.storage.txnlog import encode_record, encode_segment_header

    os.makedirs(os.path.join(d, "log"))
    path = os.path.join(d, "log", "00000001.log")
    with open(path, "wb") as f:
        f.write(encode_segment_header(1, 0, version=1))
        f.write(b"".join(encode_record(t.zxid, t.payload) for t in txns))
        f.write(bytes(4096))
    return path


async def test_a_version_1_log_is_read_and_goes_on_in_a_version_2_segment(tmp_path: object) -> None:
    from zabd.kv.kinds import RAW, ZK, kind_of, raw_body, tag_raw
    from zabd.storage.txnlog import SEG_HEADER, SEG_VERSION

    d = str(tmp_path)
    bare = Txn(z(1, 1), b"a raw proposal, stored bare")
    zk = Txn(z(1, 2), b"\xc1zk1" + b"\x93\x05\x00\x00")  # a ZooKeeper txn: tagged then as now
    old = _v1_log(d, [bare, zk])
    s = DiskStorage(d)
    st = s.load()
    assert st.history == [bare, zk]
    assert [kind_of(t.payload) for t in st.history] == [RAW, ZK] and raw_body(bare.payload) == bare.payload
    s.append(Txn(z(1, 3), tag_raw(b"new")))
    await s.flush()
    s.close()
    # the old segment is left as it was; what follows is in a segment of the version written now
    segs = segments(d)
    assert segs[0] == old and len(segs) == 2
    for path, version in zip(segs, (1, SEG_VERSION), strict=True):
        with open(path, "rb") as f:
            assert SEG_HEADER.unpack(f.read(SEG_HEADER.size))[1] == version
    assert reopen(d).history == [bare, zk, Txn(z(1, 3), tag_raw(b"new"))]

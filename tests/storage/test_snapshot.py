"""Snapshots in the background, log replay after them, purge; the tools."""

from __future__ import annotations

import os

import pytest

from tests.storage.helpers import flip_byte, run, segments, z
from zabd.kv import Cas, KVLeader, KVStore, Put
from zabd.protocol.messages import Txn
from zabd.server.snapshots import Snapshotter, snap_threshold
from zabd.storage.disk import DiskStorage
from zabd.storage.snapshot import SNAP_HEADER_SIZE, list_snapshots, read_snapshot, write_snapshot
from zabd.storage.tools import dump_main, verify, verify_main
from zabd.storage.txnlog import LogCorruption

SMALL = {"segment_bytes": 4096, "prealloc_bytes": 4096}


def run_workload(d: str, n: int) -> tuple[KVStore, Snapshotter, list[Txn]]:
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    store = KVStore()
    leader = KVLeader(store)
    snapper = Snapshotter(s, store, snap_count=80, retain=2, seed=5)
    log: list[Txn] = []
    for i in range(n):
        key = f"k{i % 37}"
        req = Put(key, b"v%d" % i) if i % 3 else Cas(key, leader.version(key), b"c%d" % i)
        payload = leader.prepare(req)
        txn = Txn((1 << 32) | (i + 1), payload)
        leader.proposed(txn.zxid, payload)
        s.append(txn)
        log.append(txn)
        if i % 5 == 4:
            s.flush_sync()
            s.commit_to(txn.zxid)
            while len(log) > (store.applied & 0xFFFFFFFF):
                t = log[store.applied & 0xFFFFFFFF]
                store.apply(t)
                leader.committed(t.zxid)
                snapper.applied(t.zxid)
    snapper.wait(30)
    s.close()
    return store, snapper, log


def recover(d: str) -> tuple[KVStore, int, int]:
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    st = s.load()
    s.close()
    store = KVStore()
    if st.snapshot is not None:
        store.restore(st.snapshot)
    for t in st.history:
        if st.snapshot_zxid < t.zxid <= st.last_committed:
            store.apply(t)
    return store, st.snapshot_zxid, st.log_base


def test_snapshot_plus_log_equals_all_txns_and_purges(tmp_path: object) -> None:
    d = str(tmp_path)
    store, snapper, log = run_workload(d, 1500)
    assert snapper.stats.taken >= 5
    assert len(list_snapshots(os.path.join(d, "snap"))) <= 2
    assert snapper.stats.segments_purged > 0
    recovered, snap_zxid, log_base = recover(d)
    assert snap_zxid > 0 and 0 < log_base <= snap_zxid
    reference = KVStore()
    for t in log:
        reference.apply(t)
    assert recovered.data == reference.data == store.data
    problems, _ = verify(d)
    assert problems == []


def test_flipped_byte_in_snapshot_is_refused(tmp_path: object) -> None:
    d = str(tmp_path)
    s = DiskStorage(d)
    s.load()
    for t in run(1, 1, 10):
        s.append(t)
    s.flush_sync()
    path = s.write_snapshot(1 << 32 | 10, os.urandom(200_000))
    s.close()
    flip_byte(path, SNAP_HEADER_SIZE + 70_000)  # in data block 1
    with pytest.raises(LogCorruption) as ei:
        DiskStorage(d).load()
    assert ei.value.path == path and ei.value.offset == SNAP_HEADER_SIZE + 65536
    assert "block 1" in str(ei.value)
    problems, _ = verify(d)
    assert len(problems) == 1 and path in problems[0] and f"offset {SNAP_HEADER_SIZE + 65536}" in problems[0]


def test_snapshot_round_trip_and_truncated_file(tmp_path: object) -> None:
    d = str(tmp_path)
    data = os.urandom(150_000)
    path = write_snapshot(d, 42, data)
    snap = read_snapshot(path)
    assert (snap.zxid, snap.data, snap.received) == (42, data, False)
    os.truncate(path, os.path.getsize(path) - 1)
    with pytest.raises(LogCorruption, match="expected"):
        read_snapshot(path)


def test_verify_and_dump_report_damage_by_file_and_offset(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(tmp_path)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    for t in run(1, 1, 300, b"payload-bytes"):
        s.append(t)
    s.close()
    assert verify_main([d]) == 0
    assert dump_main([d]) == 0
    out = capsys.readouterr().out
    assert "zxid=1:300" in out and "checksum=ok" in out
    seg = segments(d)[1]
    flip_byte(seg, 32 + 20)  # inside the first record of segment 2
    assert verify_main([d]) == 1
    out = capsys.readouterr().out
    assert f"{seg}: offset 32: corrupt: checksum mismatch" in out
    assert dump_main([d]) == 1
    assert "checksum=BAD" in capsys.readouterr().out


def test_snap_threshold_is_randomized_per_node() -> None:
    import random



    per_node = [snap_threshold(100_000, random.Random(node)) for node in range(1, 6)]
    assert all(50_000 <= t <= 100_000 for t in per_node)
    assert len(set(per_node)) == len(per_node)  # nodes do not snapshot in lockstep


@pytest.mark.parametrize("size", [0, 1, 65536, 2 * 65536, 2 * 65536 + 17])
def test_read_snapshot_checks_every_part_and_returns_the_bytes_it_read(tmp_path: object, size: int) -> None:
    d = str(tmp_path)
    data = os.urandom(size)
    path = write_snapshot(d, 7, data, received=True)
    snap = read_snapshot(path)
    assert type(snap.data) is bytes and snap.data == data and snap.received
    nblocks = -(-size // 65536)
    damage = [(3, 0, "header checksum")]  # inside the header
    if nblocks:
        last = SNAP_HEADER_SIZE + (nblocks - 1) * 65536
        damage += [(SNAP_HEADER_SIZE + size, SNAP_HEADER_SIZE + size, "table damaged"),  # the block table
                   (SNAP_HEADER_SIZE + size - 1, last, f"block {nblocks - 1}")]  # the last data byte
    for at, offset, what in damage:
        write_snapshot(d, 7, data, received=True)
        flip_byte(path, at)
        with pytest.raises(LogCorruption, match=what) as ei:
            read_snapshot(path)
        assert ei.value.offset == offset


def test_two_snaps_of_one_point_arrive_back_to_back_and_both_install(tmp_path: object) -> None:
    """The leader re-planned: a second SNAP of the same point streams in while
    the first's install waits for the writer thread. Each has its own temp
    file (they shared one: the second truncated the first, then the first's
    rename took the file from under the second's, a fatal storage error),
    and the second install leaves the second's bytes."""
    d = str(tmp_path)
    s = DiskStorage(d)
    s.load()
    point = z(2, 9)
    first = s.receive_snapshot(point)
    first.write(b"first-" * 1000)
    second = s.receive_snapshot(point)  # opened before the first's install runs
    s.install_snapshot(point, first, point)
    second.write(b"second-" * 1000)
    s.install_snapshot(point, second, point)
    s.flush_sync()
    s.close()
    snap_dir = os.path.join(d, "snap")
    assert [name for name in os.listdir(snap_dir) if name.startswith(".tmp-")] == []
    again = DiskStorage(d)
    state = again.load()
    assert state.snapshot_zxid == point and state.snapshot == b"second-" * 1000
    again.close()


def test_an_abandoned_snapshot_leaves_nothing(tmp_path: object) -> None:
    d = str(tmp_path)
    s = DiskStorage(d)
    s.load()
    sink = s.receive_snapshot(z(1, 5))
    sink.write(b"half a snapshot")
    sink.abort()
    s.close()
    assert os.listdir(os.path.join(d, "snap")) == []

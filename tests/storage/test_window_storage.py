"""DiskStorage for a windowed core: load only the newest txns, read older
ones from the segment files, cut and append for sync plans, forget what a
purge removed (real files, real fsync)."""

from __future__ import annotations

import os

import pytest

from tests.storage.helpers import run, segments, z
from zabd.storage.base import PurgedError
from zabd.storage.disk import DiskStorage
from zabd.storage.txnlog import PURGED_PREFIX

SMALL = {"segment_bytes": 4096, "prealloc_bytes": 4096}


def filled(d: str, committed: int, uncommitted: int = 0) -> None:
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    s.persist_epochs(1, 1, 1)
    for t in run(1, 1, committed + uncommitted, b"p"):
        s.append(t)
    s.commit_to(z(1, committed))
    s.flush_sync()
    s.close()


def test_load_reads_only_the_window_and_the_epoch_ends_below_it(tmp_path: object) -> None:
    d = str(tmp_path)
    filled(d, committed=500, uncommitted=30)
    s = DiskStorage(d, window=100, **SMALL)  # type: ignore[arg-type]
    st = s.load()
    try:
        # every uncommitted txn, and the newest committed ones
        assert [t.zxid for t in st.history] == [z(1, c) for c in range(431, 531)]
        assert st.window_base == z(1, 430) and st.below_ends == {1: z(1, 430)}
        assert st.last_committed == z(1, 500)
        # older txns come from the segment files, in pages
        page = s.read_range(z(1, 10), z(1, 430), max_bytes=200)
        assert page[0].zxid == z(1, 11) and 1 <= len(page) < 50
        assert s.read_range(0, z(1, 430)) == run(1, 1, 430, b"p")
        # pages read one after another are the whole range, whatever the budget (one
        # smaller than a txn, one that ends inside a segment, one over many segments)
        for budget in (1, 200, 5000):
            paged, after = [], z(1, 10)
            while after < z(1, 430):
                page = s.read_range(after, z(1, 430), max_bytes=budget)
                assert page and sum(len(t.payload) for t in page[:-1]) < budget
                paged += page
                after = page[-1].zxid
            assert paged == run(1, 1, 430, b"p")[10:]
    finally:
        s.close()


async def test_truncate_append_cuts_only_uncommitted_txns(tmp_path: object) -> None:
    d = str(tmp_path)
    filled(d, committed=50, uncommitted=10)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    with pytest.raises(ValueError, match="committed"):
        s.truncate_append(z(1, 40), [])
    s.truncate_append(z(1, 50), run(2, 1, 5, b"q"))
    await s.flush()
    s.close()
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    st = s.load()
    s.close()
    assert [t.zxid for t in st.history][-6:] == [z(1, 50)] + [z(2, c) for c in range(1, 6)]


def test_a_purge_is_forgotten_and_purged_reads_say_so(tmp_path: object) -> None:
    d = str(tmp_path)
    filled(d, committed=400)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    try:
        s.write_snapshot(z(1, 300), b"state at 300")
        s.purge(1)
        assert s.log_start > 0  # whole segments below the snapshot are gone
        with pytest.raises(PurgedError, match="purged") as info:
            s.read_range(0, z(1, 400))
        assert info.value.oldest == s.log_start
        assert s.read_range(s.log_start, z(1, 400))[0].zxid == s.log_start + 1
    finally:
        s.close()


def test_a_purge_leaves_no_files_behind(tmp_path: object) -> None:
    d = str(tmp_path)
    filled(d, committed=400)
    before = set(os.listdir(os.path.join(d, "log")))
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    try:
        s.write_snapshot(z(1, 300), b"state at 300")
        s.purge(1)
    finally:
        s.close()
    after = set(os.listdir(os.path.join(d, "log")))
    assert after < before and not [n for n in after if n.startswith(".tmp-")]


def test_a_crash_in_the_middle_of_a_purge_leaves_a_log_that_loads(tmp_path: object) -> None:
    """What a crash while a purged segment shrinks leaves: the oldest segment
    renamed to a temp name and cut part way. The next load removes it, and
    the log starts after it, with no gap."""
    d = str(tmp_path)
    filled(d, committed=400)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    s.write_snapshot(z(1, 300), b"state at 300")  # a purge only follows a snapshot that covers it
    s.close()
    oldest = segments(d)[0]
    half_cut = os.path.join(os.path.dirname(oldest), PURGED_PREFIX + os.path.basename(oldest))
    os.rename(oldest, half_cut)
    os.truncate(half_cut, os.path.getsize(half_cut) // 2)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    st = s.load()
    try:
        assert not os.path.exists(half_cut)
        assert s.log_start > 0 and st.last_committed == z(1, 400)
        assert s.read_range(s.log_start, z(1, 400)) == run(1, 1, 400, b"p")[s.log_start & 0xFFFF_FFFF :]
    finally:
        s.close()

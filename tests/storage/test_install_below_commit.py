"""A SNAP below the follower's own commit point (found by the simulator's
pipeline variant): a leader that recovered an older commit point (the commit
file is not a barrier) snapshots at it, 1:20, for a follower that had
committed up to 1:28. The snapshot replaces the follower's state, the
leader's txns after it (which hold 1:21..1:28) follow in the same sync and
are committed again; every crash point on the way recovers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.storage.helpers import z
from zabd.protocol.messages import Txn
from zabd.storage.base import MemoryStorage
from zabd.storage.disk import DiskStorage
from zabd.storage.epochs import CommitFile
from zabd.storage.snapshot import list_snapshots, write_snapshot

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = {"segment_bytes": 4096, "prealloc_bytes": 4096}
POINT = z(1, 20)  # the leader's recovered commit point: its snapshot
COMMITTED = z(1, 28)  # the follower's commit point
SNAPSHOT = b"leader-state-at-1:20"


def txns(epoch: int, first: int, last: int) -> list[Txn]:
    # ~1 KiB each: a few txns a 4 KiB segment, so a purge can cut the log above 1:20
    return [Txn(z(epoch, c), b"%d:%d-" % (epoch, c) + b"x" * 1000) for c in range(first, last + 1)]


OLD = txns(1, 1, 30)  # the follower's log: 1:29 and 1:30 uncommitted
LEADER = txns(1, 21, 30) + txns(2, 1, 3)  # what the leader sends after its snapshot


def follower(d: str) -> None:
    """The follower before the sync: committed up to 1:28, a local snapshot
    there, and the log purged up to it (so the log no longer holds 1:20)."""
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    for t in OLD:
        s.append(t)
    s.commit_to(COMMITTED)
    s.flush_sync()
    s.write_snapshot(COMMITTED, b"local-state-at-1:28")
    s.purge(1)
    assert s.log_start > POINT
    s.close()


def snapshots(d: str) -> list[int]:
    return [zxid for zxid, _ in list_snapshots(os.path.join(d, "snap"))]


def test_install_below_the_commit_point_replaces_the_state_and_lowers_the_point(tmp_path: object) -> None:
    d = str(tmp_path)
    follower(d)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    assert s.load().last_committed == COMMITTED
    s.install_snapshot(POINT, SNAPSHOT, POINT)  # was: ValueError "below the commit point"
    assert s.last_committed == POINT
    s.truncate_append(POINT, LEADER)
    s.commit_to(COMMITTED)  # the core's CommitTo(its commit point) after a SNAP below it
    s.flush_sync()
    s.close()
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    st = s.load()
    s.close()
    assert s.warnings == []
    assert (st.snapshot_zxid, st.snapshot, st.log_base) == (POINT, SNAPSHOT, POINT)
    assert st.history == LEADER and st.last_committed == COMMITTED
    assert snapshots(d) == [POINT]  # the local one at 1:28 went with the state it held


CHILD = """
import os, sys
from tests.storage.test_install_below_commit import LEADER, POINT, SMALL, SNAPSHOT, z
from zabd.storage.disk import DiskStorage
d, steps = sys.argv[1], sys.argv[2]
s = DiskStorage(d, **SMALL)
s.load()
s.install_snapshot(POINT, SNAPSHOT, POINT)
if "txns" in steps:
    s.truncate_append(POINT, LEADER)
if "commit" in steps:
    s.commit_to(z(2, 2))
s.flush_sync()
os._exit(0)  # a crash: no close(), which would record the commit point once more
"""


@pytest.mark.parametrize(
    "steps,history,committed",
    [("install", [], POINT), ("install+txns", LEADER, POINT), ("install+txns+commit", LEADER, z(2, 2))],
)
def test_a_crash_after_the_install_recovers_from_the_snapshot(
    tmp_path: object, steps: str, history: list[Txn], committed: int
) -> None:
    d = str(tmp_path)
    follower(d)
    subprocess.run([sys.executable, "-c", CHILD, d, steps], cwd=ROOT, check=True, timeout=60)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    st = s.load()
    s.close()
    assert s.warnings == []
    assert (st.snapshot_zxid, st.snapshot, st.log_base) == (POINT, SNAPSHOT, POINT)
    # the commit point is never above what the log holds: 1:28 is gone until the leader resends it
    assert st.history == history and st.last_committed == committed
    assert snapshots(d) == [POINT]


def test_a_crash_before_the_local_snapshot_went_recovers_the_old_state(tmp_path: object) -> None:
    """The install's first write: the received snapshot is durable, the
    local one above it and the old log are still there."""
    d = str(tmp_path)
    follower(d)
    write_snapshot(os.path.join(d, "snap"), POINT, SNAPSHOT, received=True)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    st = s.load()
    s.close()
    assert st.snapshot_zxid == COMMITTED and st.last_committed == COMMITTED
    assert st.history[-1] == OLD[-1]


def test_a_crash_before_the_log_reset_discards_the_old_log(tmp_path: object) -> None:
    """The install's writes but the last: the received snapshot, the commit
    point lowered to it, the local snapshot above it deleted; the old log,
    which starts above 1:20, not yet reset. It is left over: discarded."""
    d = str(tmp_path)
    follower(d)
    write_snapshot(os.path.join(d, "snap"), POINT, SNAPSHOT, received=True)
    os.unlink(dict(list_snapshots(os.path.join(d, "snap")))[COMMITTED])
    commit = CommitFile(os.path.join(d, "commit"))
    commit.write(POINT, fsync=True)
    commit.close()
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    st = s.load()
    assert any("interrupted install" in w for w in s.warnings)
    assert (st.snapshot_zxid, st.log_base, st.history, st.last_committed) == (POINT, POINT, [], POINT)
    s.truncate_append(POINT, LEADER)
    s.close()
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    assert s.load().history == LEADER
    s.close()


def test_memory_storage_install_sets_the_commit_point_too() -> None:
    s = MemoryStorage()
    for t in OLD:
        s.append(t)
    s.commit_to(COMMITTED)
    s.install_snapshot(POINT, SNAPSHOT)
    st = s.load()
    assert (st.last_committed, st.log_base, st.history) == (POINT, POINT, [])

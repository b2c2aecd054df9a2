"""SIGKILL a real child process that appends, replaces history and flushes in
a loop; on reopen every flush that returned is there, in order, no holes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.storage.crash_workload import SEG, steps
from zabd.protocol.messages import Txn
from zabd.storage.disk import DiskStorage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def common(a: list[Txn], b: list[Txn]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x.zxid != y.zxid:
            break
        n += 1
    return n


def crash_once(data_dir: str, seed: int, kill_after: int) -> int:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.crash_workload", data_dir, str(seed), "100000", "20"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    last = -1
    deadline = time.monotonic() + 30
    try:
        while last < kill_after and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            last = int(line)
    finally:
        child.send_signal(signal.SIGKILL)  # the child we started, by its pid
        # read through the same buffered reader: readline() may already hold
        # later lines that communicate() would never see
        rest = child.stdout.read()
        child.wait(timeout=30)
    for line in rest.split():
        last = int(line)  # flushes that returned before the kill
    assert last >= 0, "child never flushed"
    # what flush `last` and the in-flight flush `last + 1` held
    gen = steps(seed)
    hist_k: list[Txn] = []
    epoch_k = 1
    for _ in range(last + 1):
        _, hist_k, epoch_k = next(gen)
    _, hist_next, epoch_next = next(gen)
    s = DiskStorage(data_dir, **SEG)  # type: ignore[arg-type]
    st = s.load()
    s.close()
    d = st.history
    floor = common(hist_k, hist_next)
    prefix_of_k = d == hist_k[: len(d)]
    prefix_of_next = d == hist_next[: len(d)]
    assert prefix_of_k or prefix_of_next, f"flush {last}: on-disk history is neither old nor new"
    assert len(d) >= floor, f"flush {last}: lost durable txns ({len(d)} < {floor})"
    if hist_next[: len(hist_k)] == hist_k:  # the in-flight flush only appended
        assert d[: len(hist_k)] == hist_k
    if st.snapshot is not None:  # an installed SNAP: the snapshot and the log after its base
        assert st.snapshot == b"snapshot-%d" % st.snapshot_zxid
        assert st.log_base <= st.snapshot_zxid
        assert not d or d[0].zxid > st.log_base
    if st.current_epoch == epoch_next != epoch_k:
        # the in-flight flush's epoch write is durable, so its history is too
        # (history before epochs, ZOOKEEPER-4643)
        assert d == hist_next, f"flush {last + 1}: epochs durable before the history"
    assert st.current_epoch in (epoch_k, epoch_next) or (st.current_epoch == 0 and epoch_k == 1)
    return last


@pytest.mark.parametrize("seed,kill_after", [(1, 40), (2, 150), (3, 300)])
def test_sigkill_loses_no_durable_txn(tmp_path: object, seed: int, kill_after: int) -> None:
    crash_once(str(tmp_path), seed, kill_after)


@pytest.mark.soak
def test_sigkill_many(tmp_path: object) -> None:
    for seed in range(10, 40):
        crash_once(os.path.join(str(tmp_path), str(seed)), seed, 20 + seed * 17 % 500)


@pytest.mark.parametrize("kill_after", [150, 700])
def test_sigkill_with_snapshots_recovers_kv_state(tmp_path: object, kill_after: int) -> None:
    """Snapshots and purges run in the background while the child is killed;
    snapshot + log replay equals applying the committed txns in order."""
    from itertools import islice

    from tests.storage.kv_crash_workload import SEG as KV_SEG
    from tests.storage.kv_crash_workload import txns
    from zabd.kv import KVStore

    d = str(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.kv_crash_workload", d, "100000", "20"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    durable = 0
    deadline = time.monotonic() + 30
    try:
        while durable < kill_after and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            durable = int(line)
    finally:
        child.send_signal(signal.SIGKILL)  # the child we started, by its pid
        rest = child.stdout.read()
        child.wait(timeout=30)
    for line in rest.split():
        durable = int(line)
    s = DiskStorage(d, **KV_SEG)  # type: ignore[arg-type]
    st = s.load()
    s.close()
    expected = list(islice(txns(), durable + 7))
    assert st.snapshot is not None, "the run should have snapshotted"
    if kill_after >= 700:
        assert st.log_base > 0, "the run should have purged segments"
    # every durable txn is there, in order (the log holds those after its base)
    assert st.history == expected[st.log_base & 0xFFFFFFFF : len(st.history) + (st.log_base & 0xFFFFFFFF)]
    assert (st.log_base & 0xFFFFFFFF) + len(st.history) >= durable
    recovered = KVStore()
    recovered.restore(st.snapshot)
    for t in st.history:
        if st.snapshot_zxid < t.zxid <= st.last_committed:
            recovered.apply(t)
    reference = KVStore()
    for t in expected[: st.last_committed & 0xFFFFFFFF]:
        reference.apply(t)
    assert recovered.data == reference.data

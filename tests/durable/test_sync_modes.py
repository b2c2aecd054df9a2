"""DIFF, TRUNC and SNAP on the wire, each in a real three-process scenario.

The mode is read from the status counters (``sync_sent`` at the leader,
``sync_received`` at the follower, also logged as "sync received"); the
follower's resulting history and KV state must equal the leader's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from tests.durable.crashload import read_history
from zabd.client import Client
from zabd.client.spawn import LocalCluster

Factory = Callable[..., LocalCluster]


async def _write(cluster: LocalCluster, node: int, n: int, tag: str, kv_every: int = 0) -> None:
    async with await Client.connect(cluster.client_addr(node)) as c:
        coros: list[Any] = []
        for k in range(n):
            if kv_every and k % kv_every == 0:
                coros.append(c.put(f"{tag}-{k % 50}", b"%d" % k, retry_for=10))
            else:
                coros.append(c.propose(f"{tag}-{k}".encode() + b"." * 100, retry_for=10))
        await asyncio.gather(*coros)


async def _same_everywhere(cluster: LocalCluster, nodes: list[int]) -> list[Any]:
    await cluster.wait_leader(nodes=nodes)
    async with await Client.connect(cluster.client_addr(nodes[0])) as c:
        await c.propose(b"barrier", retry_for=10)
    await cluster.wait_caught_up(nodes)
    sts = await cluster.statuses(nodes)
    # compare what every node still holds (a purged log starts after its base)
    start = max(st["log_base"] for st in sts.values() if st) + 1
    logs = [await read_history(cluster, i, start) for i in nodes]
    assert all(log == logs[0] for log in logs[1:])
    assert len({st["kv_digest"] for st in sts.values() if st}) == 1, sts
    return logs[0]


def _received(st: dict[str, Any] | None) -> dict[str, int]:
    assert st is not None
    return dict(st["sync_received"])


async def test_diff_after_follower_restart(disk_cluster: Factory) -> None:
    c = disk_cluster(3)
    leader = await c.wait_leader()
    f = next(i for i in (1, 2, 3) if i != leader)
    await _write(c, leader, 100, "before", kv_every=5)
    c.kill(f)
    await _write(c, leader, 200, "missed", kv_every=5)
    c.start_node(f)
    await _same_everywhere(c, [1, 2, 3])
    got = _received((await c.statuses([f]))[f])
    assert got.get("DIFF", 0) >= 1 and "TRUNC" not in got and "SNAP" not in got and "FULL" not in got, got
    assert "mode=DIFF" in c.log_text(f) or '"mode": "DIFF"' in c.log_text(f)


async def _synced_records(c: LocalCluster, node: int) -> int:
    st = await c.status(node)
    assert st is not None
    return int(st["storage_stats"]["records_synced"])


async def _logged_uncommitted(
    c: LocalCluster, node: int, count: int, synced_before: int, timeout: float = 20.0
) -> None:
    """Wait until ``node`` holds ``count`` txns above its commit point, on disk."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = await c.status(node)
        if (
            st is not None
            and st["last_zxid"] - st["last_committed"] >= count
            and st["storage_stats"]["records_synced"] >= synced_before + count
        ):
            return
        await asyncio.sleep(0.02)  # polling the node's status, not a time window
    raise TimeoutError(f"node {node} did not log {count} uncommitted txns")


async def test_trunc_of_uncommitted_txns(disk_cluster: Factory) -> None:
    c = disk_cluster(3)
    old = await c.wait_leader()
    others = [i for i in (1, 2, 3) if i != old]
    await _write(c, old, 50, "committed")
    # The leader alone logs proposals no follower ever sees, then dies.
    for i in others:
        c.kill(i)
    async with await Client.connect(c.client_addr(old)) as cl:
        synced = await _synced_records(c, old)
        futs = [asyncio.ensure_future(cl.propose(b"orphan-%d" % k)) for k in range(20)]
        await _logged_uncommitted(c, old, 20, synced)
        c.kill(old)
        await asyncio.gather(*futs, return_exceptions=True)
    for i in others:
        c.start_node(i)
    await c.wait_leader(nodes=others, timeout=30)
    await _write(c, others[0], 30, "new-epoch")
    c.start_node(old)
    log = await _same_everywhere(c, [1, 2, 3])
    assert not any(t.payload.startswith(b"orphan") for t in log)
    got = _received((await c.statuses([old]))[old])
    assert got.get("TRUNC", 0) >= 1, got


async def test_snap_when_the_leader_purged_the_log(disk_cluster: Factory) -> None:
    # max_frame 4 KiB: the snapshot and the txns of the plan travel in many frames
    extra = {"snap_count": 300, "snap_retain": 1, "log_segment_bytes": 32768, "max_frame": 4096}
    c = disk_cluster(3, extra=extra)
    leader = await c.wait_leader()
    f = next(i for i in (1, 2, 3) if i != leader)
    rest = [i for i in (1, 2, 3) if i != f]
    await _write(c, leader, 100, "early", kv_every=3)
    c.kill(f)
    for round_ in range(6):
        await _write(c, leader, 500, f"late{round_}", kv_every=3)
    sts = await c.statuses(rest)
    for i in rest:
        st = sts[i]
        assert st and st["snapshots"]["taken"] >= 1 and st["snapshots"]["segments_purged"] >= 1, st
    # Restart the two up-to-date nodes: they come back from snapshot + the
    # log after it (purged below), so their history starts after a base.
    for i in rest:
        assert c.terminate(i) == 0
    for i in rest:
        c.start_node(i)
    await _same_everywhere(c, rest)
    sts = await c.statuses(rest)
    assert all(st and st["log_base"] > 0 for st in sts.values()), sts
    # The follower is behind the leader's log base: only a snapshot helps.
    c.start_node(f)
    await _same_everywhere(c, [1, 2, 3])
    got = _received((await c.statuses([f]))[f])
    assert got.get("SNAP", 0) >= 1, got
    sts = await c.statuses()
    assert all(st and st["kv_keys"] > 100 for st in sts.values())  # a snapshot above one frame
    # ... and it restarts from the installed snapshot on its own
    assert c.terminate(f) == 0
    c.start_node(f)
    await _same_everywhere(c, [1, 2, 3])

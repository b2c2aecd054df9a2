"""A SNAP streamed to a real follower process: the tree built and the file
written a frame at a time, and a follower killed in the middle of one.

The leader's log says the snapshot was streamed, the follower's that it
arrived and was installed; a follower SIGKILLed with half a snapshot in its
temp file restarts from its old state (the temp file gone), gets the SNAP
again and ends with the leader's tree."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from tests.server.test_zk_sessions import ZK, same_digests, until, zk_status
from tests.server.zk_driver import ZKDriver
from zabd.client.spawn import LocalCluster
from zabd.zk.records import Create, SetData

Factory = Callable[..., LocalCluster]


def _temp_snapshots(cluster: LocalCluster, i: int) -> list[Path]:
    snap = Path(cluster.node_config(i).data_dir) / "snap"
    return sorted(snap.glob(".tmp-*")) if snap.is_dir() else []


async def _fill(d: ZKDriver, parents: int, children: int) -> None:
    for p in range(parents):
        await d.ok(Create(f"/p{p}", b"p" * 50))
        await asyncio.gather(*(d.ok(Create(f"/p{p}/c{c}", b"x" * 100)) for c in range(children)))


async def test_a_follower_killed_mid_snapshot_restarts_clean_and_gets_it_again(cluster_factory: Factory) -> None:
    # max_frame 8 KiB: the snapshot (~0.3 MB) travels in over a hundred SnapData frames
    extra = {**ZK, "snap_count": 64, "snap_retain": 1, "log_segment_bytes": 8192, "max_frame": 8192}
    cluster = cluster_factory(3, storage="disk", extra=extra)
    leader = await cluster.wait_leader()
    late = next(i for i in (1, 2, 3) if i != leader)
    rest = [i for i in (1, 2, 3) if i != late]
    d = await ZKDriver.connect(cluster.client_addr(leader))
    try:
        await d.ok(Create("/before", b"late saw this"))
        await until("the late follower has /before", lambda: same_digests(cluster, [1, 2, 3]))
        cluster.kill(late)
        await _fill(d, 20, 100)  # snapshots, and purges of the log they cover
        for i in range(40):
            await d.ok(SetData("/p0", b"v%d" % i))
    finally:
        await d.drop()
    await until("the two live replicas agree", lambda: same_digests(cluster, rest))
    # The live two restart from snapshot + log, so the leader's history starts
    # above what the late follower holds: only a SNAP brings it back.
    for i in rest:
        assert cluster.terminate(i) == 0
    for i in rest:
        cluster.start_node(i)
    leader = await cluster.wait_leader(nodes=rest)
    await until("the restarted replicas agree", lambda: same_digests(cluster, rest))

    # the late follower dies with part of the snapshot in its temp file
    cluster.start_node(late, cluster.write_config(late, cluster.base / f"node{late}-crash.toml",
                                                  test_crash_after="snap_piece"))
    await asyncio.wait_for(asyncio.to_thread(cluster.procs[late].wait), 60)
    assert "test hook: SIGKILL after a snapshot piece" in cluster.log_text(late)
    assert _temp_snapshots(cluster, late), "the killed follower left no temp snapshot file"

    cluster.start_node(late)
    await until("the late follower caught up", lambda: same_digests(cluster, [1, 2, 3]), timeout=60)
    assert not _temp_snapshots(cluster, late)
    st = await cluster.status(late)
    assert st is not None and st["sync_received"].get("SNAP", 0) >= 1, st
    assert (await zk_status(cluster, [late]))[late]["znodes"] == (await zk_status(cluster, [leader]))[leader]["znodes"]
    text = cluster.log_text(late)
    assert "snapshot arriving" in text and "snapshot installed" in text
    assert "snapshot streamed" in cluster.log_text(leader)

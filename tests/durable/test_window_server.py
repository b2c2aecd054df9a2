"""Servers with a small history window: reads below it come from disk, a
purged range says so, and a follower that rejoins is synced exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from zabd.client import Client, ZabdError
from zabd.client.spawn import LocalCluster

Factory = Callable[..., LocalCluster]
SMALL = {"history_window": 16, "snap_count": 200, "snap_retain": 1, "log_segment_bytes": 16384}


async def write(cluster: LocalCluster, node: int, n: int, tag: str) -> list[int]:
    async with await Client.connect(cluster.client_addr(node)) as c:
        return list(await asyncio.gather(*(c.propose(b"%s-%d" % (tag.encode(), k), retry_for=10) for k in range(n))))


async def test_reads_below_the_window_come_from_disk(disk_cluster: Factory) -> None:
    c = disk_cluster(3, extra={**SMALL, "snap_count": 100_000})  # no snapshot: nothing purged
    leader = await c.wait_leader()
    zxids = await write(c, leader, 600, "w")
    await c.wait_caught_up([1, 2, 3])
    for i in (1, 2, 3):
        async with await Client.connect(c.client_addr(i)) as cl:
            log = await cl.read_all()
        assert [t.zxid for t in log if t.payload.startswith(b"w-")] == sorted(zxids)
        st = await c.status(i)
        assert st is not None and st["log_base"] == 0


async def purged(c: LocalCluster, node: int, timeout: float = 20.0) -> dict[str, Any]:
    """The node's status once a background purge has happened (it runs on
    the snapshot thread, after the commits that caused it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        st = await c.status(node)
        if st is not None and st["log_base"] > 0 and st["snapshots"]["segments_purged"] > 0:
            return st
        assert loop.time() < deadline, st
        await asyncio.sleep(0.05)  # polling the node's status, not a time window


async def test_a_purged_range_names_the_oldest_zxid_held(disk_cluster: Factory) -> None:
    c = disk_cluster(3, extra=SMALL)
    leader = await c.wait_leader()
    await write(c, leader, 1500, "w")
    await c.wait_caught_up([1, 2, 3])
    await purged(c, leader)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    async with await Client.connect(c.client_addr(leader)) as cl:
        while True:
            with pytest.raises(ZabdError) as info:
                await cl.read(0, 10)
            assert info.value.code == "purged" and not info.value.retryable
            # The snapshots the writes caused may still be purging (the first purge is not
            # the last): the message names the base at its read, the status the one after.
            st = await c.status(leader)
            assert st is not None
            base = st["log_base"]
            if f"{base >> 32}:{base & 0xFFFF_FFFF}" in info.value.message:
                try:
                    rest = await cl.read_all(base + 1)  # from disk, then from memory
                    break
                except ZabdError as late:  # one more purge came between
                    assert late.code == "purged", late
            assert loop.time() < deadline, (info.value.message, base)  # purges end once the writes did
    assert rest[0].zxid == base + 1 and len(rest) == st["last_committed"] - base


async def test_a_follower_that_rejoins_is_synced_exactly_once(disk_cluster: Factory) -> None:
    c = disk_cluster(3, extra=SMALL)
    leader = await c.wait_leader()
    f = next(i for i in (1, 2, 3) if i != leader)
    await write(c, leader, 200, "before")
    before = await c.status(leader)
    assert before is not None
    c.kill(f)
    await write(c, leader, 3000, "missed")  # past snapshots and purges: a SNAP
    c.start_node(f)
    await c.wait_leader([1, 2, 3])
    await write(c, leader, 50, "after")
    last = await c.wait_caught_up([1, 2, 3])
    sts = await c.statuses()
    received = sts[f]["sync_received"] if sts[f] else {}
    assert sum(received.values()) == 1, received  # one plan, not one per trigger
    assert sts[leader] is not None
    assert sum(sts[leader]["sync_sent"].values()) - sum(before["sync_sent"].values()) == 1
    assert len({st["kv_digest"] for st in sts.values() if st}) == 1 and last > 0

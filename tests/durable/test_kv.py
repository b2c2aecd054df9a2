"""KV calls on a real disk cluster: put/get/cas/delete through leader and
followers, sync for read-your-writes, state after a restart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from zabd.client import Client, ZabdError
from zabd.client.spawn import LocalCluster

Factory = Callable[..., LocalCluster]


async def test_kv_calls_follower_leader_sync_and_restart(disk_cluster: Factory) -> None:
    c = disk_cluster(3)
    leader = await c.wait_leader()
    follower = next(i for i in (1, 2, 3) if i != leader)
    other = next(i for i in (1, 2, 3) if i not in (leader, follower))
    async with await Client.connect(c.client_addr(follower)) as fc, await Client.connect(c.client_addr(leader)) as lc:
        w = await fc.put("a", b"1")
        assert w.version == 1 and w.zxid > 0
        # a follower answers after applying the write itself: read-your-writes on the same server
        g = await fc.get("a")
        assert (g.value, g.version) == (b"1", 1)
        w2 = await lc.cas("a", 1, b"2")
        assert w2.version == 2
        with pytest.raises(ZabdError) as info:
            await fc.cas("a", 1, b"3")  # stale version
        assert info.value.code == "bad_version"
        with pytest.raises(ZabdError) as info:
            await fc.delete("missing")
        assert info.value.code == "no_node"
        created = await fc.cas("b", 0, b"new")  # 0: create only if absent
        assert created.version == 1
        # pipelined put then get on one connection: the get sees the put
        import asyncio

        put_f = asyncio.ensure_future(fc.put("p", b"x"))
        get_f = asyncio.ensure_future(fc.get("p"))
        await put_f
        assert (await get_f).value == b"x"
        d = await lc.delete("b", 1)
        assert d.version == 0
    # sync on the third node: it has applied everything acknowledged before
    async with await Client.connect(c.client_addr(other)) as oc:
        z = await oc.sync()
        assert z >= w2.zxid
        assert (await oc.get("a")).value == b"2"
        assert (await oc.get("b")).value is None
    # the event: every node has applied the last write (the delete through the leader);
    # until then a follower's digest can still be the one before it
    async def applied_everywhere() -> dict[int, dict[str, Any] | None]:
        while True:
            sts = await c.statuses()
            if all(st is not None and st["last_committed"] >= d.zxid for st in sts.values()):
                return sts
            await asyncio.sleep(0.02)  # between two status polls

    sts = await asyncio.wait_for(applied_everywhere(), 20)
    digests = {st["kv_digest"] for st in sts.values() if st}
    assert len(digests) == 1 and sts[leader] and sts[leader]["kv_keys"] == 2
    # every node restarts from its own data dir with the same state
    for i in (1, 2, 3):
        assert c.terminate(i) == 0
    for i in (1, 2, 3):
        c.start_node(i)
    await c.wait_leader()
    async with await Client.connect(c.client_addr(follower)) as fc:
        await fc.sync(retry_for=10)
        g = await fc.get("a")
        assert (g.value, g.version) == (b"2", 2)
        assert (await fc.put("a", b"3", retry_for=10)).version == 3


async def test_kv_cli(disk_cluster: Factory) -> None:
    import asyncio
    import json
    import subprocess
    import sys

    c = disk_cluster(3)
    await c.wait_leader()
    servers = ",".join(c.servers)

    async def kv(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "zabd", "kv", *args]
        return await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)

    r = await kv("put", "color", "blue", "--servers", c.client_addr(1), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["version"] == 1
    r = await kv("cas", "color", "1", "red", "--servers", c.client_addr(2))
    assert r.returncode == 0 and "version=2" in r.stdout, r.stdout + r.stderr
    r = await kv("cas", "color", "1", "green", "--servers", c.client_addr(2))
    assert r.returncode == 1 and "bad_version" in r.stderr and "\n" not in r.stderr.strip()
    r = await kv("get", "color", "--sync", "--servers", c.client_addr(3))
    assert r.returncode == 0 and r.stdout.strip() == "red"
    r = await kv("delete", "color", "--servers", servers, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["version"] == 0
    r = await kv("get", "color", "--sync", "--servers", c.client_addr(3))
    assert r.returncode == 1 and "absent" in r.stderr
    r = await kv("frobnicate")
    assert r.returncode == 2 and "usage" in r.stderr

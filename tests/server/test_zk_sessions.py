"""ZooKeeper sessions, ephemerals and watches on real server processes,
driven through the servers' session layer (tests/server/zk_driver.py):
they replicate, survive a leader SIGKILL while their owner stays alive, and
vanish on every node when the owner stops touching them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tests.server.zk_driver import ZKDriver, ZKRefused
from zabd.client.spawn import LocalCluster
from zabd.zk.errors import Code
from zabd.zk.events import EventType, KeeperState
from zabd.zk.records import (
    EPHEMERAL,
    EPHEMERAL_SEQUENTIAL,
    CloseSession,
    Create,
    CreateResult,
    DataResult,
    Delete,
    Exists,
    ExistsResult,
    GetData,
    SetData,
    Sync,
)

Factory = Callable[..., LocalCluster]
ZK = {"zk_tick_ms": 100}  # session timeouts between 200 ms and 2 s


async def until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)


async def zk_status(cluster: LocalCluster, nodes: list[int]) -> dict[int, dict[str, Any]]:
    out = {}
    for i in nodes:
        st = await cluster.status(i)
        assert st is not None, f"node {i} does not answer"
        out[i] = st["zk"]
    return out


async def exists_everywhere(cluster: LocalCluster, nodes: list[int], path: str) -> dict[int, bool]:
    seen = {}
    for i in nodes:
        d = await ZKDriver.connect(cluster.client_addr(i), ping=False)
        try:
            await d.ok(Sync(path))
            result = await d.ok(Exists(path))
            assert isinstance(result, ExistsResult)
            seen[i] = result.stat is not None
        finally:
            await d.ok(CloseSession())
            await d.drop()
    return seen


async def same_digests(cluster: LocalCluster, nodes: list[int]) -> bool:
    seen = set()
    for i in nodes:
        st = await cluster.status(i)
        if st is None:  # not serving yet (restarting)
            return False
        seen.add((st["zk"]["digest_zxid"], st["zk"]["digest"]))
    return len(seen) == 1


async def test_sessions_ephemerals_and_watches_replicate(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, storage="disk", extra=ZK)
    leader = await cluster.wait_leader()
    follower = next(i for i in (1, 2, 3) if i != leader)
    owner = await ZKDriver.connect(cluster.client_addr(follower))
    other = await ZKDriver.connect(cluster.client_addr(leader))
    try:
        assert owner.timeout_ms == 2000  # negotiated down to 20 ticks
        await owner.ok(Create("/app", b"cfg"))
        made = await owner.ok(Create("/app/worker-", b"w", mode=EPHEMERAL_SEQUENTIAL))
        assert isinstance(made, CreateResult) and made.path == "/app/worker-0000000000"
        assert made.stat.ephemeralOwner == owner.session
        # a data watch set on the leader fires there when the follower's session writes
        got = await other.ok(GetData("/app", watch=True))
        assert isinstance(got, DataResult) and got.data == b"cfg"
        await owner.ok(SetData("/app", b"cfg2"))
        kind, state, path, _ = await other.event()
        assert (kind, state, path) == (EventType.NODE_DATA_CHANGED, KeeperState.SYNC_CONNECTED, "/app")
        # the reader's own session sees the write once it syncs
        await other.ok(Sync("/app"))
        got = await other.ok(GetData("/app"))
        assert isinstance(got, DataResult) and got.data == b"cfg2" and got.stat.version == 1
        assert await exists_everywhere(cluster, [1, 2, 3], made.path) == {1: True, 2: True, 3: True}
        await until("every replica has the same tree digest", lambda: same_digests(cluster, [1, 2, 3]))
        st = await zk_status(cluster, [1, 2, 3])
        assert all(s["ephemerals"] == 1 for s in st.values()), st
        # the session re-attaches on another server with its password, not without
        await owner.drop()
        with_pw = await ZKDriver.connect(cluster.client_addr(leader), session=owner.session, password=owner.password,
                                         last_zxid=owner.last_zxid)
        try:
            _, err, _ = await with_pw.call(Create("/app/again", b"", mode=EPHEMERAL))
            assert err == Code.OK
        finally:
            await with_pw.drop()
        try:
            await ZKDriver.connect(cluster.client_addr(follower), session=owner.session, password=b"x" * 16)
        except ZKRefused as exc:
            assert exc.code == Code.SESSION_EXPIRED
        else:
            raise AssertionError("a wrong password re-attached the session")
    finally:
        await other.drop()


async def test_ephemerals_survive_a_leader_kill_and_vanish_when_the_owner_stops(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, storage="disk", extra=ZK)
    leader = await cluster.wait_leader()
    follower = next(i for i in (1, 2, 3) if i != leader)
    owner = await ZKDriver.connect(cluster.client_addr(follower), timeout_ms=1500)
    await owner.ok(Create("/lock", b"", mode=EPHEMERAL))
    cluster.kill(leader)  # SIGKILL
    live = [i for i in (1, 2, 3) if i != leader]
    new_leader = await cluster.wait_leader(nodes=live, exclude=leader)
    assert new_leader != leader
    # the follower closed its ZooKeeper connections when it lost its leader
    # (as ZooKeeper's do): the owner re-attaches, as a client library does
    await asyncio.wait_for(owner.closed.wait(), 10)
    owner = await ZKDriver.connect(cluster.client_addr(follower), session=owner.session, password=owner.password,
                                   last_zxid=owner.last_zxid, timeout_ms=1500)
    # well past the session timeout: the owner kept touching through the change
    await asyncio.sleep(2.5)
    assert await exists_everywhere(cluster, live, "/lock") == {i: True for i in live}
    _, err, _ = await owner.call(SetData("/lock", b"still mine"))
    assert err == Code.OK
    # the owner stops touching (a crashed client): the leader expires it
    await owner.drop()

    async def gone() -> bool:
        st = await zk_status(cluster, live)
        return all(s["ephemerals"] == 0 and s["sessions"] == 0 for s in st.values())

    await until("the expired session's ephemeral is gone on every live node", gone, timeout=15)
    assert await exists_everywhere(cluster, live, "/lock") == {i: False for i in live}
    try:
        await ZKDriver.connect(cluster.client_addr(new_leader), session=owner.session, password=owner.password)
    except ZKRefused as exc:
        assert exc.code == Code.SESSION_EXPIRED
    else:
        raise AssertionError("an expired session re-attached")
    await until("the live replicas agree on the tree", lambda: same_digests(cluster, live))


async def test_a_connected_owner_learns_its_session_expired(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, extra=ZK)
    leader = await cluster.wait_leader()
    quiet = await ZKDriver.connect(cluster.client_addr(leader), timeout_ms=300, ping=False)
    try:
        await quiet.ok(Create("/e", b"", mode=EPHEMERAL))
        kind, state, path, _ = await quiet.event(timeout=10)
        assert (kind, state, path) == (EventType.NONE, KeeperState.EXPIRED, "")
        await asyncio.wait_for(quiet.closed.wait(), 10)
    finally:
        await quiet.drop()


async def test_session_order_and_event_before_later_answers(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, extra=ZK)
    leader = await cluster.wait_leader()
    follower = next(i for i in (1, 2, 3) if i != leader)
    writer = await ZKDriver.connect(cluster.client_addr(leader))
    watcher = await ZKDriver.connect(cluster.client_addr(follower))
    try:
        # pipelined without waiting: the read is answered after the session's write, and sees it
        created, read = await asyncio.gather(watcher.call(Create("/o", b"1")), watcher.call(GetData("/o", watch=True)))
        assert created[1] == Code.OK
        assert isinstance(read[2], DataResult) and read[2].data == b"1"
        await writer.ok(Sync("/o"))
        await writer.ok(SetData("/o", b"2"))
        # the watcher's next request is answered after the event of the change it reads
        await watcher.ok(Sync("/o"))
        xid, (_, err, got) = await watcher.call_xid(GetData("/o"))
        assert err == Code.OK and isinstance(got, DataResult) and got.data == b"2"
        arrivals = watcher.arrivals
        assert ("event", "/o") in arrivals
        assert arrivals.index(("event", "/o")) < arrivals.index(("reply", xid)), arrivals
        kind, _, path, _ = await watcher.event()
        assert (kind, path) == (EventType.NODE_DATA_CHANGED, "/o")
    finally:
        await writer.drop()
        await watcher.drop()


async def test_requests_behind_a_close_session_are_not_served(cluster_factory: Factory) -> None:
    # zabd's own port as ZooKeeper's: a connection whose session closed reads
    # nothing more (the jute port's fuzzer found answers after it out of order)
    cluster = cluster_factory(3, extra=ZK)
    node = await cluster.wait_leader()
    d = await ZKDriver.connect(cluster.client_addr(node), ping=False)
    try:
        close, read = await asyncio.gather(d.call(CloseSession()), d.call(Exists("/")), return_exceptions=True)
        assert not isinstance(close, BaseException) and close[1] == Code.OK
        assert isinstance(read, ConnectionError), read
        await asyncio.wait_for(d.closed.wait(), 10)
        assert [kind for kind, _ in d.arrivals] == ["reply", "reply"]  # the connect's and the close's
    finally:
        await d.drop()


async def test_set_watches_after_a_reconnect_fires_what_was_missed(cluster_factory: Factory) -> None:
    from zabd.zk.records import WATCH_PERSISTENT_RECURSIVE, AddWatch, CheckWatches, RemoveWatches, SetWatches

    cluster = cluster_factory(3, extra=ZK)
    leader = await cluster.wait_leader()
    others = [i for i in (1, 2, 3) if i != leader]
    client = await ZKDriver.connect(cluster.client_addr(others[0]))
    writer = await ZKDriver.connect(cluster.client_addr(leader))
    try:
        for path in ("/d", "/c", "/gone"):
            await client.ok(Create(path, b""))
        await client.ok(GetData("/d", watch=True))
        seen = client.last_zxid
        await client.drop()  # the connection, not the session
        await writer.ok(SetData("/d", b"changed"))
        await writer.ok(Create("/c/kid", b""))
        await writer.ok(Delete("/gone"))
        back = await ZKDriver.connect(cluster.client_addr(others[1]), session=client.session,
                                      password=client.password, last_zxid=seen)
        try:
            await back.ok(Sync("/"))
            await back.ok(SetWatches(seen, data=("/d",), exist=("/new",), child=("/c", "/gone")))
            fired = {(await back.event())[:3:2] for _ in range(3)}
            assert fired == {(EventType.NODE_DATA_CHANGED, "/d"), (EventType.NODE_CHILDREN_CHANGED, "/c"),
                             (EventType.NODE_DELETED, "/gone")}
            # the exist watch was registered: it fires when the node appears
            await writer.ok(Create("/new", b""))
            assert (await back.event())[:3:2] == (EventType.NODE_CREATED, "/new")
            # a persistent recursive watch hears of changes below it and stays
            await back.ok(AddWatch("/c", WATCH_PERSISTENT_RECURSIVE))
            await writer.ok(SetData("/c/kid", b"1"))
            await writer.ok(SetData("/c/kid", b"2"))
            assert [(await back.event())[:3:2] for _ in range(2)] == [(EventType.NODE_DATA_CHANGED, "/c/kid")] * 2
            assert (await back.call(CheckWatches("/c", 5)))[1] == Code.OK
            assert (await back.call(RemoveWatches("/c", 5)))[1] == Code.OK
            assert (await back.call(CheckWatches("/c", 5)))[1] == Code.NO_WATCHER
        finally:
            await back.drop()
    finally:
        await writer.drop()


async def test_the_tree_and_sessions_survive_a_whole_cluster_restart_and_a_snap_sync(
    cluster_factory: Factory,
) -> None:
    """Snapshots hold the tree and the session table: a cluster killed at once
    comes back from its snapshots and logs with the same tree and the session
    alive, and a follower behind the purged log gets them by SNAP."""
    extra = {**ZK, "snap_count": 16, "snap_retain": 1, "log_segment_bytes": 4096}
    cluster = cluster_factory(3, storage="disk", extra=extra)
    leader = await cluster.wait_leader()
    late = next(i for i in (1, 2, 3) if i != leader)
    rest = [i for i in (1, 2, 3) if i != late]
    owner = await ZKDriver.connect(cluster.client_addr(leader), timeout_ms=2000)
    await owner.ok(Create("/app", b"root"))
    await owner.ok(Create("/app/member-", b"me", mode=EPHEMERAL_SEQUENTIAL))
    cluster.kill(late)  # SIGKILL
    for i in range(80):  # snapshots, and purges of the log they cover
        await owner.ok(Create(f"/app/n{i}", b"x" * 64))
        if i % 3 == 0:
            await owner.ok(SetData("/app", b"v%d" % i))
    await until("the two live replicas agree", lambda: same_digests(cluster, rest))
    before = (await zk_status(cluster, [leader]))[leader]
    # ZooKeeper's count: the empty tree's 5 (the root counted twice, as its DataTree does), /app, its member, 80
    assert before["znodes"] == 5 + 1 + 1 + 80 and before["sessions"] == 1 and before["ephemerals"] == 1
    await owner.drop()

    for i in rest:
        cluster.kill(i)
    for i in rest:
        cluster.start_node(i)
    leader = await cluster.wait_leader(nodes=rest)
    # the new leader gives the session a full timeout: re-attach within it
    again = await ZKDriver.connect(cluster.client_addr(leader), session=owner.session, password=owner.password,
                                   last_zxid=owner.last_zxid)
    try:
        result = await again.ok(GetData("/app"))
        assert isinstance(result, DataResult) and result.data == b"v78"
        await until("the restarted replicas agree on the tree", lambda: same_digests(cluster, rest))
        after = (await zk_status(cluster, [leader]))[leader]
        assert (after["digest"], after["digest_zxid"]) == (before["digest"], before["digest_zxid"])
        assert after["sessions"] == 1 and after["ephemerals"] == 1
        cluster.start_node(late)
        await until("the late follower caught up", lambda: same_digests(cluster, [1, 2, 3]), timeout=30)
        late_status = await cluster.status(late)
        assert late_status is not None and late_status["sync_received"].get("SNAP", 0) >= 1, late_status
        assert late_status["zk"]["sessions"] == 1 and late_status["zk"]["ephemerals"] == 1
    finally:
        await again.ok(CloseSession())
        await again.drop()

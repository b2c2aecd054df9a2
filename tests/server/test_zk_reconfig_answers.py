"""ZooKeeper's reconfig answered as ZooKeeper answers it, through kazoo on
real server processes (issue 37, go-zookeeper's TestIntegration_Reconfig and
TestIntegration_IncrementalReconfig): a client on the server the change
removes hears "ok" for its removal and for its return, on one connection
(the removed server follows on as the leader's guest); one that asks while a
removed leader hands over hears "ok" or sees its connection close, never
``ReconfigInProgress`` for a change that committed or could still be made."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, KazooException

from tests.kazoo_suite.zabd_cluster import SUPER_DIGEST
from zabd.client.spawn import LocalCluster

Factory = Callable[..., LocalCluster]
CONFIG = "/zookeeper/config"


def client(cluster: LocalCluster, first: int) -> KazooClient:
    """A superuser's client that tries ``first`` before the others."""
    order = [first] + [i for i in range(1, cluster.n + 1) if i != first]
    kz = KazooClient(hosts=",".join(cluster.zk_addr(i) for i in order), randomize_hosts=False, timeout=4.0)
    kz.start(timeout=20)
    kz.add_auth("digest", "super:test")
    return kz


def reconfig(kz: KazooClient, **change: str) -> str:
    """One reconfig: "ok", "closed" (the connection dropped under it) or the error's name."""
    try:
        kz.reconfig(joining=change.get("joining"), leaving=change.get("leaving"), new_members=None)
    except ConnectionLoss:
        return "closed"
    except KazooException as exc:
        return type(exc).__name__
    return "ok"


def new_members(kz: KazooClient, specs: list[str]) -> str:
    """One reconfig with a whole new list: "ok", "closed" or the error's name."""
    try:
        kz.reconfig(joining=None, leaving=None, new_members=",".join(specs))
    except ConnectionLoss:
        return "closed"
    except KazooException as exc:
        return type(exc).__name__
    return "ok"


def voters_in_config(kz: KazooClient) -> set[int]:
    data, _ = kz.retry(kz.get, CONFIG)
    return {int(line.split("=", 1)[0][7:]) for line in data.decode().splitlines() if line.startswith("server.")}


def wait_for_config(kz: KazooClient, voters: set[int]) -> None:
    deadline = time.monotonic() + 30
    while voters_in_config(kz) != voters:
        assert time.monotonic() < deadline, f"/zookeeper/config never listed {voters}: {voters_in_config(kz)}"
        time.sleep(0.05)


def spec_of(kz: KazooClient, node: int) -> str:
    data, _ = kz.retry(kz.get, CONFIG)
    (line,) = [ln for ln in data.decode().splitlines() if ln.startswith(f"server.{node}=")]
    return line


def test_a_client_on_the_removed_server_hears_ok_for_both_changes_on_one_connection(
        cluster_factory: Factory) -> None:
    """go-zookeeper's TestIntegration_Reconfig: the client's own server is
    removed and added back with ``new_members``, both on one connection.
    The removed server follows on as the leader's guest, as ZooKeeper's does:
    it forwards the second change and answers both."""
    cluster = cluster_factory(3, extra={"zk_tick_ms": 200, "zk_super_digest": SUPER_DIGEST})
    leader = asyncio.run(cluster.wait_leader())
    removed = next(i for i in (1, 2, 3) if i != leader)
    kz = client(cluster, removed)
    states: list[KazooState] = []
    kz.add_listener(states.append)
    session = kz.client_id
    try:
        specs = {i: spec_of(kz, i) for i in (1, 2, 3)}
        rest = sorted({1, 2, 3} - {removed})
        assert new_members(kz, [specs[i] for i in rest]) == "ok"
        assert voters_in_config(kz) == set(rest)  # the replicated config, read on the removed server
        assert new_members(kz, [specs[i] for i in (1, 2, 3)]) == "ok"
        assert voters_in_config(kz) == {1, 2, 3}
        # no state change since the start: the client never left its first server, the removed one
        assert states == [] and kz.client_id == session, f"the connection to server {removed} dropped: {states}"
    finally:
        kz.stop()
        kz.close()


def test_a_reconfig_during_a_removed_leaders_hand_over_is_never_in_progress(cluster_factory: Factory) -> None:
    """The leader removes itself and hands over; a reconfig sent right behind
    it finds no leader for a moment: the connection closes, and asked again
    it is made (ZooKeeper's client does the same)."""
    cluster = cluster_factory(3, extra={"zk_tick_ms": 200, "zk_super_digest": SUPER_DIGEST})
    leader = asyncio.run(cluster.wait_leader())
    follower = next(i for i in (1, 2, 3) if i != leader)
    kz = client(cluster, follower)
    try:
        spec = spec_of(kz, leader)
        outcomes = [reconfig(kz, leaving=str(leader)), reconfig(kz, joining=spec)]
        assert all(o in ("ok", "closed") for o in outcomes), outcomes
        deadline = time.monotonic() + 30
        while voters_in_config(kz) != {1, 2, 3}:  # asked again until made, as a client would
            assert time.monotonic() < deadline, outcomes
            if leader not in voters_in_config(kz):
                outcomes.append(reconfig(kz, joining=spec))
                assert outcomes[-1] in ("ok", "closed", "BadArgumentsError"), outcomes
            time.sleep(0.05)
        assert "ReconfigInProgressError" not in outcomes
    finally:
        kz.stop()
        kz.close()

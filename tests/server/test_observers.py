"""Observers on real processes: 3 voters and 2 observers (``observers =
[4, 5]``). Observers follow and serve clients (reads here, writes forwarded),
say so in ``zabd status``, ``srvr`` and ``mntr``, never lead, and never count
toward a quorum: losing both changes nothing, while losing two voters stops
writes although three of five members are up."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.server.zk_driver import four_letter
from zabd.client.client import Client, ZabdError
from zabd.client.spawn import LocalCluster


async def until_role(cluster: LocalCluster, node: int, roles: set[str], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    st = None
    while time.monotonic() < deadline:
        st = await cluster.status(node)
        if st is not None and st["role"] in roles:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"node {node} not {roles} within {timeout} s: {st}")


async def test_observers_serve_but_never_vote(tmp_path: Path) -> None:
    with LocalCluster(5, base_dir=tmp_path, extra={"observers": [4, 5], "zk_4lw_whitelist": "mntr"}) as cluster:
        leader = await cluster.wait_leader(timeout=30)
        assert leader in (1, 2, 3)
        statuses = await cluster.statuses()
        assert {i: st["role"] for i, st in statuses.items() if st and i > 3} == {4: "observing", 5: "observing"}
        assert all(st and st["observers"] == [4, 5] for st in statuses.values())
        membership = {"voters": [1, 2, 3], "observers": [4, 5], "version": "0:0", "zxid": 0}
        assert all(st and st["membership"] == membership for st in statuses.values())
        assert "Mode: observer" in four_letter(cluster.zk_addr(4), "srvr")
        mntr = four_letter(cluster.zk_addr(5), "mntr")
        assert "zk_server_state\tobserver" in mntr and "zk_quorum_size\t3" in mntr

        # a write through an observer is forwarded to the leader; the other observer reads it
        at4 = await Client.connect(cluster.client_addr(4))
        at5 = await Client.connect(cluster.client_addr(5))
        try:
            wrote = await at4.put("k", b"through an observer")
            await at5.sync()
            assert (await at5.get("k")).value == b"through an observer"
        finally:
            await at4.close()
            await at5.close()

        # ZooKeeper's clients too: kazoo on an observer alone
        zk = KazooClient(hosts=cluster.zk_addr(5), timeout=10)
        await asyncio.to_thread(zk.start, 20)
        try:
            # /zookeeper/config as a static ZooKeeper 3.8 ensemble shows it (checked against Debian's
            # 3.8.0: "server.1=127.0.0.1:<quorum>:<election>:participant;127.0.0.1:<client>\n...\nversion=0",
            # version -1)
            config, cstat = await asyncio.to_thread(zk.get, "/zookeeper/config")
            roles = {1: "participant", 2: "participant", 3: "participant", 4: "observer", 5: "observer"}
            lines = [f"server.{i}=127.0.0.1:{cluster.peer_ports[i]}:{cluster.election_ports[i]}:{roles[i]};"
                     f"{cluster.zk_addr(i)}" for i in roles]
            assert config.decode() == "\n".join([*lines, "version=0"])
            assert (cstat.version, cstat.aversion, cstat.mzxid) == (-1, -1, 0)
            path = await asyncio.to_thread(zk.create, "/obs", b"v", None, False, True)
            data, stat = await asyncio.to_thread(zk.get, path)
            assert (data, stat.mzxid > wrote.zxid) == (b"v", True)
        finally:
            await asyncio.to_thread(zk.stop)
            await asyncio.to_thread(zk.close)

        # both observers SIGKILLed: the voters go on committing
        cluster.kill(4)
        cluster.kill(5)
        voters = await Client.connect([cluster.client_addr(i) for i in (1, 2, 3)])
        try:
            await voters.put("k", b"no observers needed", retry_for=10)
        finally:
            await voters.close()

        # observers back, two voters SIGKILLed: 3 of 5 members up, no quorum
        cluster.start_node(4)
        cluster.start_node(5)
        await until_role(cluster, 4, {"observing"})
        others = [i for i in (1, 2, 3) if i != leader]
        cluster.kill(others[0])
        cluster.kill(others[1])
        await until_role(cluster, leader, {"looking"})
        at4 = await Client.connect(cluster.client_addr(4))
        try:
            with pytest.raises(ZabdError):
                await at4.put("k", b"must not commit", retry_for=3)
        finally:
            await at4.close()
        st = await cluster.status(leader)
        assert st is not None and st["role"] == "looking"


def test_observers_config_is_checked(tmp_path: Path) -> None:
    from zabd.config import ConfigError, load_config

    base = 'id = 1\nclient = "127.0.0.1:7000"\n[peers]\n1 = "127.0.0.1:7001"\n2 = "127.0.0.1:7002"\n'
    for observers, expected in (("[3]", "[3] not in peers"), ("[1, 2]", "at least one voter"),
                                ("[2, 2]", "listed twice")):  # fmt: skip
        cfg = tmp_path / "c.toml"
        cfg.write_text(f"observers = {observers}\n" + base)
        with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
            load_config(cfg, {})
    assert load_config(None, {"ZABD_ID": "1", "ZABD_CLIENT": "127.0.0.1:7000", "ZABD_PEERS":
                              "1=127.0.0.1:7001,2=127.0.0.1:7002", "ZABD_OBSERVERS": "2"}).observers == [2]

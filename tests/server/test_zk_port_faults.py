"""kazoo sessions under faults on real server processes: a client stopped
past its session timeout loses its ephemerals on every node; a leader
SIGKILL costs a client nothing (SUSPENDED, then CONNECTED, never LOST) and a
watch set before it fires exactly once after it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NotReadOnlyCallError
from kazoo.protocol.states import KazooState, KeeperState, ZnodeStat
from kazoo.recipe.watchers import DataWatch

from zabd.client.spawn import LocalCluster

Factory = Callable[..., LocalCluster]
ZK = {"zk_tick_ms": 200}  # session timeouts between 400 ms and 4 s


def until(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def client(hosts: str, **kw: object) -> KazooClient:
    zk = KazooClient(hosts=hosts, **kw)  # type: ignore[arg-type]
    zk.start(timeout=15)
    return zk


def test_a_stopped_clients_ephemerals_vanish_on_every_node(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, extra=ZK)
    asyncio.run(cluster.wait_leader())
    code = (
        "import sys, time\n"
        "from kazoo.client import KazooClient\n"
        "zk = KazooClient(hosts=sys.argv[1], timeout=1.0)\n"
        "zk.start(timeout=15)\n"
        "zk.create('/workers/w-', b'', ephemeral=True, sequence=True, makepath=True)\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, cluster.zk_addr(2)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        watchers = [client(cluster.zk_addr(i)) for i in (1, 2, 3)]
        try:
            assert all(len(w.get_children("/workers")) == 1 for w in watchers)
            os.kill(child.pid, signal.SIGSTOP)  # the client we started, by its pid: it stops pinging

            def gone() -> bool:
                for w in watchers:
                    w.sync("/workers")
                return all(w.get_children("/workers") == [] for w in watchers)

            until("the stopped client's ephemeral is gone on every node", gone)
        finally:
            for w in watchers:
                w.stop()
                w.close()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)


def test_a_leader_kill_suspends_the_session_and_a_watch_fires_once_after_it(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, extra=ZK)
    leader = asyncio.run(cluster.wait_leader())
    others = [i for i in (1, 2, 3) if i != leader]
    # connected to the leader first, so that its death moves the session
    hosts = ",".join(cluster.zk_addr(i) for i in (leader, *others))
    zk = client(hosts, timeout=4.0, randomize_hosts=False)
    states: list[KazooState] = []
    reconnected = threading.Event()

    def listener(state: KazooState) -> None:
        states.append(state)
        if state == KazooState.CONNECTED:
            reconnected.set()

    seen: list[bytes] = []
    changed = threading.Event()

    def on_data(data: bytes | None, stat: ZnodeStat | None) -> None:
        seen.append(b"" if data is None else data)
        if data == b"v2":
            changed.set()

    try:
        zk.create("/lock", b"", ephemeral=True)
        zk.create("/config", b"v1")
        # kazoo drops plain watches when a connection drops (its _reset_watchers);
        # its DataWatch sets them again after the reconnect (setWatches)
        DataWatch(zk, "/config", on_data)
        zk.add_listener(listener)
        cluster.kill(leader)  # SIGKILL
        assert reconnected.wait(20), states
        assert states[:2] == [KazooState.SUSPENDED, KazooState.CONNECTED] and KazooState.LOST not in states
        other = client(cluster.zk_addr(others[1]))
        try:
            other.sync("/lock")
            assert other.exists("/lock") is not None  # the session lived through the change
            other.set("/config", b"v2")
        finally:
            other.stop()
            other.close()
        assert changed.wait(10)
        # an event comes before the answer to any later request: a second
        # event for this change would be here once these are answered
        zk.sync("/config")
        assert zk.get("/config")[0] == b"v2"
        assert seen == [b"v1", b"v2"]
        assert KazooState.LOST not in states
    finally:
        zk.stop()
        zk.close()


def test_read_only_mode_serves_reads_without_a_quorum_and_moves_back(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, extra={**ZK, "zk_read_only": True})
    leader = asyncio.run(cluster.wait_leader())
    alone = next(i for i in (1, 2, 3) if i != leader)
    writer = client(cluster.zk_hosts)
    writer.create("/data", b"before")
    writer.stop()
    writer.close()
    for i in (1, 2, 3):
        if i != alone:
            cluster.kill(i)  # SIGKILL: the survivor has no quorum
    until("the survivor knows it has no quorum", lambda: four_letter_isro(cluster.zk_addr(alone)) == "ro")
    zk = KazooClient(hosts=cluster.zk_addr(alone), read_only=True)
    zk.start(timeout=15)
    try:
        assert zk.client_state == KeeperState.CONNECTED_RO
        assert zk.get("/data")[0] == b"before"
        with pytest.raises(NotReadOnlyCallError):
            zk.create("/more", b"")
        for i in (1, 2, 3):
            if i != alone:
                cluster.start_node(i)
        # the quorum is back: the node closes read-only connections, kazoo reconnects read-write
        until("the client is read-write again", lambda: zk.client_state == KeeperState.CONNECTED, timeout=30)
        zk.create("/more", b"after")
        assert zk.get("/more")[0] == b"after"
    finally:
        zk.stop()
        zk.close()


def four_letter_isro(addr: str) -> str:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"isro")
        return s.recv(64).decode()

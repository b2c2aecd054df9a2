"""A peer link's dial over real sockets, in process, on uvloop (the loop
the server runs on)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import uvloop

from zabd.client.client import Client
from zabd.client.spawn import LocalCluster, free_ports
from zabd.config import ServerConfig
from zabd.server import peer_wire as wire
from zabd.server.replica import Replica
from zabd.storage.base import MemoryStorage

STEPS = 40  # turns of the loop between a dial and its giving up: 0, 1, 2, ...


async def _hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()
    writer.close()


async def _dials_given_up_at_every_step(tmp_path: Path) -> int:
    silent = await asyncio.start_server(_hold, "127.0.0.1", 0)  # node 2: accepts links, says nothing
    p1, c1 = free_ports(2)
    a1, a2 = f"127.0.0.1:{p1}", f"127.0.0.1:{silent.sockets[0].getsockname()[1]}"
    cfg = ServerConfig(id=1, peers={1: a1, 2: a2}, client=f"127.0.0.1:{c1}", storage="memory",
                       data_dir=str(tmp_path), connect_grace_ms=0, peer_silence_ms=600_000)
    replica = Replica(cfg, MemoryStorage())
    net = replica.transport
    await replica.start()
    up = 0
    try:
        for steps in range(STEPS):
            net.set_members({1: a1})  # 2 removed: no longer dialed; a link that is up stays
            if 2 in net.peers:
                net.peers[2].abort()
            net.set_members({1: a1, 2: a2})  # 2 added: dialed
            for _ in range(steps):
                await asyncio.sleep(0)
            net.set_members({1: a1})  # 2 removed again, its dial given up wherever it got to
            for _ in range(4):
                await asyncio.sleep(0)
            assert replica.fatal is None, f"after {steps} steps: {replica.fatal!r}"
            if net.connected(2):
                up += 1
                assert net.send_frame(2, wire.PING_FRAME)
                net.flush()
    finally:
        await replica.shutdown()
        silent.close()
    return up


def test_a_dial_given_up_after_its_link_came_up_leaves_no_dead_link(tmp_path: Path) -> None:
    """uvloop calls a dialed link's connection_made, then closes its
    transport, and calls no connection_lost, when the connect is given up
    right after (cancelled: a membership change stops dialing a member the
    node had just learned of; or timed out). The link stayed attached to
    that closed transport: the next frame to the peer raised in the flush,
    and the server stopped."""
    up = uvloop.run(_dials_given_up_at_every_step(tmp_path))
    # a dial given up at once never came up, one given up after 40 turns of the loop had: the
    # steps in between crossed the moment connection_made ran
    assert 0 < up < STEPS


def test_peers_that_dial_the_election_ports_form_the_ensemble(tmp_path: Path) -> None:
    """A ZooKeeper spec's election port takes the same peer links as the
    quorum port: with nodes 1 and 2 told the others' ports the other way
    round, every link is dialed to an election port, and the ensemble still
    elects, links fully and commits."""
    cluster = LocalCluster(3, base_dir=tmp_path, storage="memory")
    cluster.write_configs()
    for i in (1, 2):  # the lower id dials: 1 dials 2 and 3, 2 dials 3
        path = cluster.config_path(i)
        text = path.read_text()
        for j in range(i + 1, 4):
            q, e = cluster.peer_ports[j], cluster.election_ports[j]
            text = text.replace(f"127.0.0.1:{q}:{e}:", f"127.0.0.1:{e}:{q}:")
        path.write_text(text)
    try:
        for i in (1, 2, 3):
            cluster.start_node(i)

        async def check() -> None:
            await cluster.wait_leader(timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                sts = await cluster.statuses()
                if all(st and len(st["peers_connected"]) == 2 for st in sts.values()):
                    break
                await asyncio.sleep(0.05)
            assert all(st and len(st["peers_connected"]) == 2 for st in sts.values()), sts
            async with await Client.connect(cluster.servers, timeout=5) as c:
                assert (await c.put("k", b"v", retry_for=20)).zxid > 0

        asyncio.run(check())
    finally:
        cluster.stop()

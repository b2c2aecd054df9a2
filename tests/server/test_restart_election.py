"""A restarted cluster elects as soon as a quorum is up, whatever order its nodes come in.

After a whole-cluster restart the nodes finish recovering at different times. One still in
its connect grace (not yet ticking: its election has not started) hears the vote of a peer
that is already looking. It must weigh that vote against its own position, not the core's
placeholder (epoch 0, zxid 0): otherwise it follows the worse peer, the peer moves its vote
to it, and nobody leads until the follower's election timeout.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from zabd.client.spawn import free_ports
from zabd.config import ServerConfig
from zabd.protocol.node import FOLLOWING, LEADING
from zabd.server.replica import Replica
from zabd.storage.base import MemoryStorage


def config(i: int, peers: dict[int, str], client: int, grace_ms: int, tmp_path: Path) -> ServerConfig:
    return ServerConfig(id=i, peers=peers, client=f"127.0.0.1:{client}", storage="memory",
                        data_dir=str(tmp_path / f"d{i}"), connect_grace_ms=grace_ms)


def restarted_storage() -> MemoryStorage:
    """What a node of a cluster that ran in epoch 1 recovers: its candidate is (1, 0, id)."""
    storage = MemoryStorage()
    storage.persist_epochs(1, 1, 1)
    return storage


async def test_a_node_in_its_connect_grace_weighs_a_peer_vote_against_its_own_position(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    p1, p2, c1, c2 = free_ports(4)
    peers = {1: f"127.0.0.1:{p1}", 2: f"127.0.0.1:{p2}"}
    # node 1 is up first and looks alone; node 2 (the better candidate: same state, higher id)
    # comes up later with a grace longer than the test, so only node 1's messages end it
    first = Replica(config(1, peers, c1, 0, tmp_path), restarted_storage())
    second = Replica(config(2, peers, c2, 60_000, tmp_path), restarted_storage())
    await first.start()
    try:
        async with asyncio.timeout(10):
            while first.node.target[0] != 1:  # its election started: its own position, not the placeholder
                await asyncio.sleep(0.01)
        await second.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if (second.node.role == LEADING and second.node.synced and first.node.role == FOLLOWING
                    and first.node.in_sync):
                break
            await asyncio.sleep(0.01)
        assert second.node.role == LEADING and first.node.role == FOLLOWING, (second.node.role, first.node.role)
    finally:
        await second.shutdown()
        await first.shutdown()
    lines = "".join(capfd.readouterr()).splitlines()
    # node 2 never followed node 1 (only node 2 could: node 1 never follows itself), and no
    # election timed out on the way
    assert not [ln for ln in lines if "role changed" in ln and "new_role=following" in ln and "leader=1 " in ln]
    assert not [ln for ln in lines if "election started" in ln and "reason=timer" in ln]

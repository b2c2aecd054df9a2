"""By default the leader's Propose waits for its own log write to sync
(persist before you speak). With leader_early_propose it leaves while that
write syncs (overlapping the leader's fsync with the followers', as ZooKeeper
does). Either way no commit becomes visible (Commit to followers, the
client's answer) before the leader's write is durable. A replica runs as leader in this process on real TCP and real
files; the test plays follower 2 and holds the leader's flushes back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.durable.test_ack_durable import GatedDisk
from tests.server.test_persist_before_speak import read_frames, send
from zabd.client import Client
from zabd.client.spawn import free_ports
from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn
from zabd.server import wire
from zabd.server.config import ServerConfig
from zabd.server.durable import KVMachine
from zabd.server.replica import Replica
from zabd.storage.disk import DiskStorage
from zabd.storage.txnlog import iter_records


@pytest.mark.parametrize("early", [False, True], ids=["strict-default", "early-propose"])
async def test_commit_waits_for_the_leader_fsync(tmp_path: Path, early: bool) -> None:
    p1, p2, p3, c1 = free_ports(4)
    data = str(tmp_path / "d1")
    # node 1 has a txn of epoch 1, so it wins the election against an empty node 2
    pre = DiskStorage(data)
    pre.load()
    pre.persist_epochs(1, 1, 1)
    pre.append(Txn(zx.make(1, 1), b"old"))
    pre.commit_to(zx.make(1, 1))
    pre.close()
    config = ServerConfig(
        id=1,
        peers={1: f"127.0.0.1:{p1}", 2: f"127.0.0.1:{p2}", 3: f"127.0.0.1:{p3}"},
        client=f"127.0.0.1:{c1}",
        connect_grace_ms=0,
        data_dir=data,
        leader_early_propose=early,
    )
    conn: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await conn.put((r, w))

    server = await asyncio.start_server(accept, "127.0.0.1", p2)  # we are node 2
    storage = GatedDisk(data)
    storage.open = True  # setup: flushes go through
    replica = Replica(config, storage, KVMachine())
    await replica.start()
    client: Client | None = None
    try:
        reader, writer = await asyncio.wait_for(conn.get(), 10)
        frames: list[Any] = []

        async def until(pred: Any, seconds: float = 10.0) -> Any:
            deadline = asyncio.get_running_loop().time() + seconds
            while asyncio.get_running_loop().time() < deadline:
                for f in frames:
                    if pred(f):
                        return f
                frames.extend(await read_frames(reader, 0.05))
            raise AssertionError(f"no such frame; got {[f[0] for f in frames][-20:]}")

        await until(lambda f: f[0] == 1)  # node 1 looks for a leader: vote for it
        send(writer, (1, 0, 0, 0, 1))  # Vote(epoch 0, last 0, accepted 0, leader 1)
        ne = await until(lambda f: f[0] == 2)  # NewEpoch
        epoch = ne[1]
        send(writer, (3, epoch, 0, 0))  # AckEpoch
        await until(lambda f: f[0] in (4, wire.TAG_NEWLEADER_PART))  # NewLeader (full: we sent no SYNC_INFO)
        send(writer, (5, epoch))  # AckLeader
        await until(lambda f: f[0] == 8 and f[1] == zx.make(1, 1))  # Commit of the old txn: broadcast phase
        frames.clear()

        client = await Client.connect(f"127.0.0.1:{c1}")
        storage.open = False  # from now on each flush waits for the gate
        z = zx.make(epoch, 1)
        answer = asyncio.ensure_future(client.propose(b"new"))
        if not early:
            frames.extend(await read_frames(reader, 0.4))
            assert not any(f[0] == 6 for f in frames), "Propose left before the leader's fsync"
            storage.gate.set()  # the leader's append syncs; now the Propose may leave
            prop = await until(lambda f: f[0] == 6, 5.0)
            assert prop[1][0] == z
            assert [r.zxid for r in iter_records(data)][-1] == z
            storage.open = True  # the leader's copy is durable: the commit may now follow
            send(writer, (7, z))
            assert await asyncio.wait_for(answer, 5) == z
            await until(lambda f: f[0] == 8 and f[1] == z, 2.0)
            writer.close()
            return
        else:
            prop = await until(lambda f: f[0] == 6, 2.0)
            assert prop[1][0] == z  # the Propose left before the leader's flush
            assert [r.zxid for r in iter_records(data)][-1] == zx.make(1, 1)  # not even written yet
        send(writer, (7, z))  # Ack from us: a quorum (leader + node 2), but the leader's copy is not durable
        frames.extend(await read_frames(reader, 0.4))
        assert not any(f[0] == 8 and f[1] >= z for f in frames), "Commit before the leader's fsync"
        assert not answer.done(), "client answered before the leader's fsync"
        storage.gate.set()
        assert await asyncio.wait_for(answer, 5) == z
        assert [r.zxid for r in iter_records(data)][-1] == z
        await until(lambda f: f[0] == 8 and f[1] == z, 2.0)
        writer.close()
    finally:
        if client is not None:
            await client.close()
        storage.open = True
        storage.gate.set()
        await replica.shutdown()
        server.close()

"""An acknowledgement never leaves before what it acknowledges is flushed.

A replica runs in this process on real TCP with a storage whose flush()
waits for the test; the test plays its leader over the peer protocol and
watches what the replica sends while the flush is held back.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import msgpack

from zabd.client.spawn import free_ports
from zabd.protocol.messages import AckEpoch, AckLeader, NewEpoch, NewLeader, Propose, Txn
from zabd.server import wire
from zabd.server.config import ServerConfig
from zabd.server.replica import Replica
from zabd.storage.base import MemoryStorage


class GatedStorage(MemoryStorage):
    """MemoryStorage whose flush completes only when the gate is open."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.flushed_records = 0
        self.log: list[str] = []

    def persist_epochs(self, accepted_epoch: int, epoch_leader: int, current_epoch: int) -> None:
        self.log.append(f"epochs {accepted_epoch}")
        super().persist_epochs(accepted_epoch, epoch_leader, current_epoch)

    def append(self, txn: Txn) -> None:
        self.log.append(f"append {txn.zxid}")
        super().append(txn)

    async def flush(self) -> None:
        await self.gate.wait()
        self.gate.clear()
        self.log.append("flushed")
        await super().flush()


async def read_frames(reader: asyncio.StreamReader, seconds: float) -> list[Any]:
    frames: list[Any] = []
    buf = wire.FrameReader(1 << 20)
    try:
        async with asyncio.timeout(seconds):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                frames.extend(buf.feed(data))
    except TimeoutError:
        pass
    return frames


def send(writer: asyncio.StreamWriter, obj: object) -> None:
    body = msgpack.packb(obj)
    writer.write(struct.pack(">I", len(body)) + body)


async def test_acks_wait_for_the_flush() -> None:
    p1, p2, p3, c2 = free_ports(4)
    config = ServerConfig(
        id=2,
        peers={1: f"127.0.0.1:{p1}", 2: f"127.0.0.1:{p2}", 3: f"127.0.0.1:{p3}"},
        client=f"127.0.0.1:{c2}",
        connect_grace_ms=0,
    )
    storage = GatedStorage()
    replica = Replica(config, storage)
    await replica.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", p2)
        send(writer, (wire.TAG_HELLO, wire.WIRE_VERSION, 1))  # we are node 1, the leader
        await read_frames(reader, 0.2)  # its election messages

        def acks(frames: list[Any]) -> list[Any]:
            return [wire.decode_message(f) for f in frames if f[0] in (3, 5, 7)]

        # NewEpoch -> PersistEpochs, then AckEpoch: held until the flush
        send(writer, (2, *NewEpoch(5)))
        assert acks(await read_frames(reader, 0.4)) == []
        storage.gate.set()
        assert acks(await read_frames(reader, 0.4)) == [AckEpoch(5, 0, 0)]

        # NewLeader -> ReplaceHistory + PersistEpochs, then AckLeader
        send(writer, (4, 5, ()))
        assert acks(await read_frames(reader, 0.4)) == []
        storage.gate.set()
        assert acks(await read_frames(reader, 0.4)) == [AckLeader(5)]

        # Propose -> AppendTxn, then Ack
        z = (5 << 32) | 1
        send(writer, (6, (z, b"payload")))
        assert acks(await read_frames(reader, 0.4)) == []
        assert storage.log[-1] == f"append {z}"
        storage.gate.set()
        got = acks(await read_frames(reader, 0.4))
        assert [type(m).__name__ for m in got] == ["Ack"] and got[0].zxid == z
        assert storage.log[-1] == "flushed"
        writer.close()
    finally:
        storage.gate.set()
        await replica.shutdown()
    assert NewLeader and Propose  # the message types the frames above encode by hand

"""With DiskStorage, an AckEpoch/AckLeader/Ack never leaves before what it
acknowledges was fdatasync'ed: a replica runs in this process on real TCP
and real files; the test plays its leader and holds each flush back."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.server.test_persist_before_speak import read_frames, send
from zabd.client.spawn import free_ports
from zabd.protocol.messages import AckEpoch, AckLeader, Txn
from zabd.server import wire
from zabd.server.config import ServerConfig
from zabd.server.durable import TAG_SYNC_INFO, TAG_SYNC_PLAN, TAG_SYNC_TXNS, KVMachine
from zabd.server.replica import Replica
from zabd.storage.disk import DiskStorage
from zabd.storage.epochs import read_epochs
from zabd.storage.txnlog import iter_records


class GatedDisk(DiskStorage):
    """DiskStorage whose flush() starts only when the test opens the gate;
    records what was durable (synced) each time a flush returned."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.gate = asyncio.Event()
        self.open = False  # at shutdown: let every flush through

    async def flush(self) -> None:
        if not self.open:
            await self.gate.wait()
            self.gate.clear()
        await super().flush()


async def test_acks_wait_for_fdatasync(tmp_path: Path) -> None:
    p1, p2, p3, c2 = free_ports(4)
    config = ServerConfig(
        id=2,
        peers={1: f"127.0.0.1:{p1}", 2: f"127.0.0.1:{p2}", 3: f"127.0.0.1:{p3}"},
        client=f"127.0.0.1:{c2}",
        connect_grace_ms=0,
        data_dir=str(tmp_path / "d2"),
    )
    storage = GatedDisk(config.data_dir)
    replica = Replica(config, storage, KVMachine())
    await replica.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", p2)
        send(writer, (wire.TAG_HELLO, wire.WIRE_VERSION, 1))  # we are node 1, the leader
        first = await read_frames(reader, 0.3)
        infos = [f for f in first if f[0] == TAG_SYNC_INFO]
        assert infos and infos[0][1:] == (0, ())  # its sync report: empty history

        def acks(frames: list[Any]) -> list[Any]:
            return [wire.decode_message(f) for f in frames if f[0] in (3, 5, 7)]

        send(writer, (2, 5))  # NewEpoch(5)
        assert acks(await read_frames(reader, 0.4)) == []
        storage.gate.set()
        got = await read_frames(reader, 0.5)
        assert acks(got) == [AckEpoch(5, 0, 0)]
        ep = read_epochs(str(tmp_path / "d2" / "epochs"))
        assert ep is not None and ep.accepted_epoch == 5
        syncs = storage.stats.syncs

        # NewLeader as a DIFF plan with two txns -> ReplaceHistory + PersistEpochs, then AckLeader
        z1, z2 = (4 << 32) | 1, (4 << 32) | 2
        send(writer, (TAG_SYNC_PLAN, 5, "DIFF", 0, 0, 0, None))
        send(writer, (TAG_SYNC_TXNS, 5, 1, [(z1, b"a"), (z2, b"b")]))
        assert acks(await read_frames(reader, 0.4)) == []
        assert storage.stats.syncs == syncs  # nothing synced, nothing said
        storage.gate.set()
        assert acks(await read_frames(reader, 0.5)) == [AckLeader(5)]
        assert storage.stats.syncs > syncs
        on_disk = [(r.zxid, r.payload) for r in iter_records(config.data_dir)]
        assert on_disk == [(z1, b"a"), (z2, b"b")]
        ep = read_epochs(str(tmp_path / "d2" / "epochs"))
        assert ep is not None and ep.current_epoch == 5
        assert replica.ext.received["DIFF"] == 1

        # Propose -> AppendTxn, then Ack only after the record is synced
        z = (5 << 32) | 1
        send(writer, (6, (z, b"payload")))
        assert acks(await read_frames(reader, 0.4)) == []
        assert [r.zxid for r in iter_records(config.data_dir)][-1] == z2
        storage.gate.set()
        got = acks(await read_frames(reader, 0.5))
        assert [type(m).__name__ for m in got] == ["Ack"] and got[0].zxid == z
        assert [r.zxid for r in iter_records(config.data_dir)][-1] == z
        writer.close()
    finally:
        storage.open = True
        storage.gate.set()
        await replica.shutdown()
    assert Txn

"""A ZooKeeper session's password never rests in a data directory, and what
zabd's port reads of the log holds no ZooKeeper data: a real cluster on disk,
kazoo sessions on every node, snapshots taken."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from zabd.client import Client
from zabd.client.spawn import LocalCluster

Factory = Callable[..., LocalCluster]


async def test_passwords_and_acld_data_are_nowhere_a_client_or_the_disk_holds_them(
        cluster_factory: Factory) -> None:
    c = cluster_factory(3, storage="disk", extra={"snap_count": 20})
    await c.wait_leader()
    clients = [KazooClient(hosts=c.zk_addr(i)) for i in (1, 2, 3)]
    secret = b"only-alice-reads-this-0123456789"
    try:
        for k in clients:
            k.start(timeout=15)
        alice = clients[0]
        alice.add_auth("digest", "alice:pw")
        alice.create("/vault", secret, acl=[make_digest_acl("alice", "pw", all=True)])
        for i, k in enumerate(clients):
            k.create(f"/lock-{i}", b"", ephemeral=True)
            for j in range(15):  # past snap_count: every node writes a snapshot
                k.create(f"/n-{i}-{j}", b"x")
        passwords = [k.client_id[1] for k in clients]
        assert all(len(p) == 16 for p in passwords)
        async with await Client.connect(c.client_addr(2)) as anyone:
            z = await anyone.propose(b"after them all")
            log = await anyone.read_all(page=10)  # pages of ZooKeeper txns alone read as empty, and go on
        assert [(t.zxid, t.kind, t.payload) for t in log] == [(z, "raw", b"after them all")]
        seen = b"".join(t.payload for t in log)
        files = [p for i in (1, 2, 3) for p in (Path(c.base) / f"data{i}").rglob("*") if p.is_file()]
        assert any("snap" in str(p) for p in files), files
        on_disk = b"".join(p.read_bytes() for p in files)
        for pw in passwords:
            assert pw not in seen and pw not in on_disk
        assert secret not in seen and secret in on_disk  # the data is the operator's to read, with the files
    finally:
        for k in clients:
            k.stop()
            k.close()

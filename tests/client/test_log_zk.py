"""``zabd log`` of a real cluster shows ZooKeeper txns decoded, one line each
(and the ``zk_txn.describe`` dict under ``--json``), written through the
servers' ZooKeeper session layer (tests/server/zk_driver.py), to the admin
role only: a ZooKeeper txn may hold data its znode's ACL keeps from others."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from tests.client.cli_support import zabd
from tests.server.zk_driver import ZKDriver
from zabd.client.spawn import LocalCluster
from zabd.protocol import zxid as zx
from zabd.zk.records import EPHEMERAL_SEQUENTIAL, CloseSession, Create, CreateResult, SetData

RW, ADMIN = "rw-token-for-the-log", "admin-token-for-the-log"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(3, tokens={RW: "rw", ADMIN: "admin"})
    try:
        c.start()
        asyncio.run(c.wait_leader())
        yield c
    finally:
        c.stop()


def test_log_decodes_zookeeper_txns_for_the_admin_alone(cluster: LocalCluster) -> None:
    async def drive() -> tuple[int, int, str]:
        d = await ZKDriver.connect(cluster.client_addr(1), token=RW)
        try:
            first, _, _ = await d.call(Create("/cli-log", b"hello"))
            _, _, made = await d.call(Create("/cli-log/e-", b"\x00\xff" * 20, mode=EPHEMERAL_SEQUENTIAL))
            assert isinstance(made, CreateResult)
            await d.ok(SetData("/cli-log", b"v2", 0))
            await d.call(CloseSession())
            return first, d.session, made.path
        finally:
            await d.drop()

    first, session, eph = asyncio.run(drive())
    r = zabd("log", "--servers", cluster.client_addr(2), "--from", zx.fmt(first), "--limit", "4", "--token", ADMIN)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    who = f"zk session 0x{session:x}"
    assert lines[0] == f'{zx.fmt(first)}\t{who} create /cli-log "hello" (persistent, parent cversion 1)', lines
    assert lines[1].endswith(f"\t{who} create {eph} <40 bytes {'00ff' * 8}...> (ephemeral, parent cversion 1)")
    assert lines[2].endswith(f'\t{who} setData /cli-log "v2" (version 1)')
    assert lines[3].endswith(f"\t{who} closeSession (deletes {eph})")

    r = zabd("log", "--servers", cluster.client_addr(3), "--from", zx.fmt(first), "--limit", "2", "--json",
             "--token", ADMIN)
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert rows[0]["zk"] | {"time": 0} == {
        "session": f"0x{session:x}", "time": 0, "op": "create", "path": "/cli-log", "data": "hello",
        "acl": [[31, "world", "anyone"]], "ephemeralOwner": 0, "parentCVersion": 1,
    }
    assert rows[1]["zk"]["data"] == {"hex": "00ff" * 20} and rows[1]["zk"]["ephemeralOwner"] == session
    assert bytes.fromhex(rows[0]["payload"]["hex"]).startswith(b"\xc1zk1")

    # an rw token reads the log without them: the same range holds nothing it may see
    r = zabd("log", "--servers", cluster.client_addr(3), "--from", zx.fmt(first), "--token", RW)
    assert r.returncode == 0 and "zk session" not in r.stdout, r.stdout

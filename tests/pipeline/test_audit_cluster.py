"""Audit of the data directories of a real three-node ``zabd serve`` run with disk storage."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from zabd.pipeline.audit import audit

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::FutureWarning")]


def test_audit_of_a_real_three_node_run(spark: Any, tmp_path: Path) -> None:
    from zabd.client import Client
    from zabd.client.spawn import LocalCluster

    cluster = LocalCluster(3, storage="disk", base_dir=tmp_path / "cluster")

    async def drive() -> int:
        leader = await cluster.wait_leader(timeout=30)
        async with await Client.connect(cluster.client_addr(leader)) as c:
            for i in range(150):
                await c.propose(b"before-%d" % i, retry_for=10)
        # a leader change: the next epoch's txns must line up behind the first's
        cluster.terminate(leader)
        survivors = [i for i in (1, 2, 3) if i != leader]
        new_leader = await cluster.wait_leader(survivors, timeout=30, exclude=leader)
        async with await Client.connect(cluster.client_addr(new_leader)) as c:
            for i in range(100):
                await c.propose(b"after-%d" % i, retry_for=10)
        cluster.start_node(leader)
        await cluster.wait_leader(timeout=30)
        last = await cluster.wait_caught_up([1, 2, 3], timeout=30)
        return last

    try:
        cluster.start()
        last = asyncio.run(drive())
    finally:
        cluster.stop()
    dirs = [str(tmp_path / "cluster" / f"data{i}") for i in (1, 2, 3)]
    report = audit(spark, dirs)
    assert report.ok, report.problems
    assert all(n["records"] >= 250 for n in report.nodes), report.nodes
    assert len(report.epochs) >= 2  # the leader change started a new epoch
    assert sum(e["txns"] for e in report.epochs) >= 250
    assert max(n["last"] for n in report.nodes) >= last


def test_zookeeper_trees_of_a_real_run_agree_in_verify_and_audit(spark: Any, tmp_path: Path) -> None:
    """ZooKeeper writes (sessions, ephemerals, sequential nodes) on a real disk
    cluster that snapshots as it goes: every node's ``zabd log verify`` rebuilds
    the tree its server reported, and the audit's trees agree."""
    from tests.client.cli_support import zabd
    from tests.server.zk_driver import ZKDriver
    from zabd.client import Client
    from zabd.client.spawn import LocalCluster
    from zabd.zk.records import EPHEMERAL_SEQUENTIAL, CloseSession, Create, SetData

    cluster = LocalCluster(3, storage="disk", base_dir=tmp_path / "cluster", extra={"snap_count": 40})

    async def drive() -> dict[int, dict[str, Any]]:
        leader = await cluster.wait_leader(timeout=30)
        a = await ZKDriver.connect(cluster.client_addr(leader))
        b = await ZKDriver.connect(cluster.client_addr(leader % 3 + 1))
        try:
            await a.ok(Create("/jobs", b"queue"))
            for i in range(60):
                await b.ok(Create("/jobs/j-", b"%d" % i, mode=EPHEMERAL_SEQUENTIAL))
                await a.ok(SetData("/jobs", bytes([i]) * 30, -1))
            await b.call(CloseSession())  # its ephemerals go with it
        finally:
            await a.drop()
            await b.drop()
        # a few raw txns after: each node's commit file (written lazily, when a later
        # batch is flushed) then covers the last ZooKeeper txn, as verify reads it
        async with await Client.connect(cluster.client_addr(leader)) as c:
            for i in range(5):
                await c.propose(b"after-%d" % i, retry_for=10)
        await cluster.wait_caught_up([1, 2, 3], timeout=30)
        return {i: (await cluster.status(i) or {})["zk"] for i in (1, 2, 3)}

    try:
        cluster.start()
        zk = asyncio.run(drive())
    finally:
        cluster.stop()
    dirs = [str(tmp_path / "cluster" / f"data{i}") for i in (1, 2, 3)]
    assert len({st["digest"] for st in zk.values()}) == 1, zk
    for i, d in enumerate(dirs, 1):
        r = zabd("log", "verify", "-v", d)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"digest {zk[i]['digest']} at zxid" in r.stdout, r.stdout
    assert any(Path(d, "snap").glob("snap.*") for d in dirs)  # the replay started from a snapshot somewhere
    report = audit(spark, dirs)
    assert report.ok, report.problems
    assert [n["tree_digest"] for n in report.nodes] == [zk[i]["digest"] for i in (1, 2, 3)]

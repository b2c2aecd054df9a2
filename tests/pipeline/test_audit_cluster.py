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

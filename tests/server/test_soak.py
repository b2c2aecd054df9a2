"""Long failover soak (``-m soak``): repeated leader SIGKILLs under load."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.loadgen import Load
from tests.server.test_cluster import assert_same_logs, read_logs
from zabd.client.spawn import LocalCluster

Factory = Callable[..., LocalCluster]


@pytest.mark.soak
@pytest.mark.parametrize("n", [3, 5])
async def test_repeated_leader_kills(cluster_factory: Factory, n: int) -> None:
    # a restarted node far behind gets a DIFF, not a snapshot: the whole logs are compared
    cluster = cluster_factory(n, extra={"diff_limit": 100_000_000})
    nodes = list(range(1, n + 1))
    await cluster.wait_leader()
    load = Load(cluster, nodes, window=4)
    load.start()
    worst = 0.0  # printed: how fast is for benchmarks, each failover's outcome is asserted
    try:
        for _ in range(5):
            await load.wait_acked(len(load.acked) + 100)
            leader = await cluster.wait_leader(nodes, timeout=30)
            cluster.kill(leader)
            t0 = time.monotonic()
            others = [i for i in nodes if i != leader]
            await cluster.wait_leader(others, timeout=15, exclude=leader)  # 15 s: only against a hang
            worst = max(worst, time.monotonic() - t0)
            cluster.start_node(leader)
            await cluster.wait_leader(nodes, timeout=30)
        await load.wait_acked(len(load.acked) + 100)  # writes go on after the last failover too
    finally:
        await load.finish()
    print(f"slowest failover {worst:.2f}s")
    await cluster.wait_caught_up(nodes, timeout=30)
    assert_same_logs(await read_logs(cluster, nodes), load.acked)

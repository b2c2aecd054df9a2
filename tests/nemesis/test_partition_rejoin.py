"""Real silent partitions (network namespaces, iptables DROP: no RST) on
three real servers: an isolated leader is replaced, and a cut-off node is
back in sync after the partition heals (its dead links were closed and
redialed) with one sync plan. How fast is printed, not asserted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from tests.loadgen import Load
from zabd.client.spawn import LocalCluster
from zabd.nemesis.netlab import NetLab, available

ok, why = available()
pytestmark = pytest.mark.skipif(not ok, reason=why)

# Only against a hang: measured here ~0.3-0.7 s after the heal (printed).
REJOIN_HANG_S = 60.0


@pytest.fixture
def lab_cluster(tmp_path: Path) -> Iterator[tuple[NetLab, LocalCluster]]:
    with NetLab(3) as lab:

        def spawn(i: int, argv: list[str], env: dict[str, str], out: BinaryIO) -> Any:
            return lab.spawn(i, argv, env=env, stdout=out, stderr=out)

        cluster = LocalCluster(3, storage="disk", base_dir=tmp_path, hosts={i: lab.addr(i) for i in (1, 2, 3)},
                               spawn=spawn)
        cluster.start()
        try:
            yield lab, cluster
        finally:
            lab.heal()
            cluster.stop()


async def in_sync(cluster: LocalCluster, node: int, leader_hint: int, timeout: float) -> float:
    """Seconds until ``node`` follows a serving leader with its commit point."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        st = await cluster.status(node, timeout=0.5)
        if st is not None and st["phase"] == "broadcast" and st["leader"]:
            lst = await cluster.status(st["leader"], timeout=0.5)
            if lst is not None and lst["role"] == "leading" and st["last_committed"] >= lst["last_committed"] - 0:
                return time.monotonic() - t0
        await asyncio.sleep(0.02)  # polling status, not a time window
    raise TimeoutError(f"node {node} not in sync {timeout}s after the heal")


def syncs(st: dict[str, Any] | None) -> int:
    assert st is not None
    return sum(st["sync_received"].values())


@pytest.mark.parametrize("who", ["follower", "leader"])
async def test_a_cut_off_node_rejoins_after_the_heal(lab_cluster: tuple[NetLab, LocalCluster], who: str) -> None:
    await partition_and_heal(*lab_cluster, who, seconds=0)


@pytest.mark.soak
@pytest.mark.parametrize("who", ["follower", "leader"])
async def test_a_twenty_second_partition(lab_cluster: tuple[NetLab, LocalCluster], who: str) -> None:
    await partition_and_heal(*lab_cluster, who, seconds=20)


async def partition_and_heal(lab: NetLab, cluster: LocalCluster, who: str, seconds: float) -> None:
    """Cut a node off for ``seconds`` (at least until it closed its links),
    heal, and see it back in sync with exactly one sync plan."""
    leader = await cluster.wait_leader(timeout=30)
    node = leader if who == "leader" else next(i for i in (1, 2, 3) if i != leader)
    others = [i for i in (1, 2, 3) if i != node]
    load = Load(cluster, others, window=2)
    load.start()
    try:
        await load.wait_acked(50)
        before = syncs(await cluster.status(node))
        lab.isolate(node, clients=True)  # its peers cannot reach it; clients still can
        cut_at = time.monotonic()
        if who == "leader":
            new = await cluster.wait_leader(others, timeout=15, exclude=node)
            print(f"new leader {new} {time.monotonic() - cut_at:.2f} s after the cut")
            assert new != node
        await load.wait_acked(load.total + 100)  # the majority goes on
        # past the silence limit: the cut-off node closed its links, and stepped down if it led
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            st = await cluster.status(node)
            if st is not None and not st["peers_connected"] and st["role"] != "leading":
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"node {node} still connected or leading while cut off: {st}")
        while time.monotonic() - cut_at < seconds:
            await load.wait_acked(load.total + 50)  # load goes on, the partition stays
        lab.heal()
        took = await in_sync(cluster, node, leader, REJOIN_HANG_S)
        print(f"{who} {node} back in sync {took:.2f} s after the heal")
        assert syncs(await cluster.status(node)) - before == 1  # one plan, not one per trigger
    finally:
        await load.finish()
    last = await cluster.wait_caught_up([1, 2, 3])
    assert last >= max(load.acked)

"""Crash consistency of a real disk cluster: SIGKILL under client load,
restart on the same data dir, nothing acknowledged lost or duplicated."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from tests.durable.crashload import Load, check_consistent, kill_restart_cycle
from zabd.client.spawn import LocalCluster

Factory = Callable[..., LocalCluster]


async def _run(cluster: LocalCluster, seed: int, kills: int, budget_s: float, snapshots: bool = False) -> None:
    rng = random.Random(seed)
    await cluster.wait_leader()
    load = Load(cluster, window=2, limit=200_000, kv_every=3)
    load.start()
    try:
        events = await kill_restart_cycle(cluster, load, rng, kills, time.monotonic() + budget_s)
        await load.wait_acked(load.total + 50)  # load goes on after the last restart
    finally:
        await load.finish()
    history = await check_consistent(cluster, load)
    assert len(events) >= 1
    assert len(load.acked) > 50 and load.kv_acked, (len(load.acked), len(load.kv_acked))
    assert any(t.payload == b"final" for t in history)
    if snapshots:  # background snapshots were taken (and nodes restarted with them) while killing
        sts = await cluster.statuses()
        assert any(st and st["snapshots"]["taken"] > 0 for st in sts.values()), sts


async def test_sigkill_under_load_loses_nothing(disk_cluster: Factory) -> None:
    await _run(disk_cluster(3), seed=11, kills=4, budget_s=60)


@pytest.mark.soak
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_sigkill_under_load_soak(disk_cluster: Factory, seed: int) -> None:
    await _run(disk_cluster(3, extra={"snap_count": 2000}), seed=seed, kills=15, budget_s=300, snapshots=True)

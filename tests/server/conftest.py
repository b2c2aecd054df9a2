from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from zabd.client.spawn import LocalCluster


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """Starts real server processes; every one is stopped (by PID) afterwards."""
    made: list[LocalCluster] = []

    def make(n: int, **kw: Any) -> LocalCluster:
        c = LocalCluster(n, base_dir=tmp_path / f"cluster{len(made)}", **kw)
        made.append(c)
        c.start()
        return c

    try:
        yield make
    finally:
        for c in made:
            c.stop()


@pytest.fixture
def zk_cluster(cluster_factory: Callable[..., LocalCluster]) -> LocalCluster:
    """Three nodes with short ZooKeeper ticks (sessions of 0.4 to 4 s), a leader elected."""
    c = cluster_factory(3, extra={"zk_tick_ms": 200})
    asyncio.run(c.wait_leader())
    return c

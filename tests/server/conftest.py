from __future__ import annotations

import asyncio
import socket
import time
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
        # its ports bound before anyone picks free ports again: a port picked free is
        # free only until someone binds it (two clusters started back to back collided)
        deadline = time.monotonic() + 20
        for i in range(1, n + 1):
            while c.alive(i) and time.monotonic() < deadline:
                try:
                    socket.create_connection((c.hosts[i], c.client_ports[i]), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.02)
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

"""One real cluster for each CLI test module that asks for ``cluster``
(test_failover.py has a ``cluster`` of its own: a factory)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from zabd.client.spawn import LocalCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(3)
    try:
        c.start()
        asyncio.run(c.wait_leader())
        yield c
    finally:
        c.stop()

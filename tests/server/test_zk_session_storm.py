"""A reconnect storm at small scale (issue 39): 300 go-zookeeper sessions, each
with a data watch, spread over three zabd servers; one follower is SIGKILLed
and every one of its clients moves to the other two at once. No session may be
told it expired (its client never stopped trying), and one change of the
watched znode must reach every session exactly once after the move.

The clients are ``bench/zk_sessions.py``'s driver (go-zookeeper/zk v1.0.4, a
real ``*zk.Conn`` per session), built with go (``scripts/install.sh`` installs
it) against the library's source vendored in ``third_party/go-zookeeper-zk``
(``GOZK_SRC`` names another copy)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.zk_sessions import Driver, build_driver, driver_available
from zabd.client.spawn import LocalCluster

SRC = Path(os.environ.get("GOZK_SRC", Path(__file__).resolve().parents[2] / "third_party" / "go-zookeeper-zk"))
SESSIONS = 300


def test_every_client_of_a_killed_follower_moves_with_its_session_and_watch(
    cluster_factory: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    ok, why = driver_available(SRC)
    if not ok:
        pytest.skip(why)
    binary = build_driver(tmp_path / "driver", SRC)
    c = cluster_factory(3, extra={"max_client_cnxns": 0})  # 300 sessions from one address
    leader = asyncio.run(c.wait_leader(timeout=30))
    with open(tmp_path / "driver.err", "wb") as err:
        drv = Driver(binary, [c.zk_addr(i) for i in (1, 2, 3)], timeout_ms=10_000, expire=0, deadline_s=30.0,
                     stderr=err)
        try:
            opened = drv.cmd(f"open {SESSIONS}")
            assert opened["ok"], opened
            assert sorted(opened["per_server"].values()) == [100, 100, 100]

            victim = next(i for i in (1, 2, 3) if i != leader)
            armed = drv.cmd(f"arm {c.zk_addr(victim)}")
            assert armed["affected"] == 100
            c.kill(victim)
            moved = drv.cmd("moved")
            assert moved["ok"] and moved["moved"] == 100, moved
            assert c.zk_addr(victim) not in moved["per_server"]

            fired = drv.cmd("fire")
            assert fired["expected"] == SESSIONS
            assert fired["sessions_notified"] == SESSIONS, fired
            assert fired["received"] == SESSIONS and fired["sessions_notified_twice"] == 0, fired
            assert fired["sessions_told_expired"] == 0 and fired["new_sessions"] == 0, fired["expired_sample"]
        finally:
            drv.stop()

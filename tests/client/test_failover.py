"""The client library and CLI ride a leader failover (issue: fast failover).

Real server processes on 127.0.0.1 at the default tick (10 ms), disk storage
with fsync; the leader is SIGKILLed or SIGSTOPped. Calls that change nothing
come back on another server; a write never reports a success it cannot vouch
for: it succeeds, fails as certainly not applied, or raises OutcomeUnknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from zabd.client import Client, OutcomeUnknown, ZabdError
from zabd.client.spawn import LocalCluster

Factory = Callable[..., LocalCluster]
# Only against a hang: how fast a failover is (about 10-20 ms on servers) is
# the benchmarks' to measure, not a test's to assert.
HANG_S = 60.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Factory]:
    made: list[LocalCluster] = []

    def make(n: int = 3, **kw: Any) -> LocalCluster:
        kw.setdefault("storage", "disk")
        c = LocalCluster(n, base_dir=tmp_path / f"c{len(made)}", **kw)
        made.append(c)
        c.start()
        return c

    try:
        yield make
    finally:
        for c in made:
            c.stop()


async def test_reads_ride_a_leader_kill_on_another_server(cluster: Factory) -> None:
    c = cluster()
    leader = await c.wait_leader()
    order = [leader] + [i for i in range(1, 4) if i != leader]
    client = await Client.connect([c.client_addr(i) for i in order], timeout=2.0)
    try:
        await client.put("k", b"v1", retry_for=10)
        assert client.server is not None and client.server[1] == c.client_ports[leader]
        c.kill(leader)
        async with asyncio.timeout(HANG_S):
            st = await client.status()  # the connection to the leader is gone: another server answers
            assert st.id != leader
            await client.sync()
            got = await client.get("k")
            assert got.value == b"v1"
            assert b"v1" in (await client.read_all())[-1].payload  # the put, as a KV txn
    finally:
        await client.close()


async def test_a_write_is_never_reported_done_unless_it_committed(cluster: Factory) -> None:
    """A writer on a follower while the leader dies: every call ends in success,
    a certain failure, or OutcomeUnknown; every success is in the final log."""
    c = cluster()
    leader = await c.wait_leader()
    follower = next(i for i in range(1, 4) if i != leader)
    client = await Client.connect(c.client_addr(follower), timeout=2.0)
    acked: dict[int, bytes] = {}
    unknown = certain_failures = 0
    try:
        for k in range(40):
            await client.propose(b"warm-%d" % k)
        c.kill(leader)
        for k in range(200):
            payload = b"after-%d" % k
            try:
                z = await client.propose(payload, retry_for=5.0)
            except OutcomeUnknown as exc:
                assert exc.applied is None and exc.retryable
                unknown += 1
                continue
            except ZabdError as exc:
                assert exc.applied is False, exc
                certain_failures += 1
                continue
            acked[z] = payload
        assert acked, "no write succeeded after the leader was killed"
        log = {t.zxid: t.payload for t in await client.read_all()}
    finally:
        await client.close()
    for z, payload in acked.items():
        assert log.get(z) == payload
    assert unknown <= 2  # only the calls in flight at the kill


async def test_a_write_without_a_quorum_fails_fast_and_says_it_did_nothing(cluster: Factory) -> None:
    c = cluster()
    leader = await c.wait_leader()
    survivor = next(i for i in range(1, 4) if i != leader)
    for i in range(1, 4):
        if i != survivor:
            c.kill(i)
    client = await Client.connect(c.client_addr(survivor), timeout=2.0)
    try:
        # the survivor notices the lost leader at once and looks for a quorum it cannot get
        async with asyncio.timeout(HANG_S):
            while True:
                try:
                    await client.propose(b"x")
                except OutcomeUnknown:
                    pass  # raced with the kill
                except ZabdError as exc:
                    if exc.code == "no_leader":
                        assert exc.retryable and exc.applied is False
                        break
            t1 = time.monotonic()
            with pytest.raises(ZabdError) as info:
                await client.propose(b"y", retry_for=0.3)
        assert info.value.code == "no_leader" and info.value.applied is False
        assert time.monotonic() - t1 >= 0.25  # it was retried for its retry_for, not given up at once
    finally:
        await client.close()


async def test_watch_resumes_on_another_server(cluster: Factory) -> None:
    """The watch's server is killed: it resumes elsewhere from the next zxid,
    so what it yields is exactly the committed log, nothing missed or twice."""
    c = cluster()
    leader = await c.wait_leader()
    order = [leader] + [i for i in range(1, 4) if i != leader]
    writer = await Client.connect([c.client_addr(i) for i in reversed(order)], timeout=2.0)
    watcher = await Client.connect([c.client_addr(i) for i in order], timeout=2.0)
    seen: list[tuple[int, bytes]] = []

    async def watch() -> None:
        async for txn in watcher.watch(0):
            seen.append((txn.zxid, txn.payload))
            if txn.payload == b"last":
                return

    task = asyncio.create_task(watch())
    try:
        for k in range(10):
            await writer.propose(b"w%d" % k, retry_for=5)
        c.kill(leader)
        for k in range(10, 20):
            with contextlib.suppress(OutcomeUnknown):
                await writer.propose(b"w%d" % k, retry_for=5)
        while True:
            try:
                await writer.propose(b"last", retry_for=5)
                break
            except OutcomeUnknown:
                continue
        await asyncio.wait_for(task, 20)
        log = [(t.zxid, t.payload) for t in await writer.read_all()]
    finally:
        task.cancel()
        await writer.close()
        await watcher.close()
    assert seen == log[: len(seen)]
    assert seen[-1][1] == b"last"


def zabd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZABD_")}
    return subprocess.run(
        [sys.executable, "-m", "zabd", *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


async def test_cli_exit_status_three_for_a_write_of_unknown_outcome(cluster: Factory) -> None:
    c = cluster()
    leader = await c.wait_leader()
    follower = next(i for i in range(1, 4) if i != leader)
    c.signal(leader, signal.SIGSTOP)
    try:
        # forwarded to a leader that cannot answer: the follower's timeout ends it
        r = await asyncio.to_thread(
            zabd, "propose", "--servers", c.client_addr(follower), "--timeout", "1", "--retry-for", "0", "x"
        )
        assert r.returncode == 3, (r.returncode, r.stderr)
        assert "may or may not have been applied" in r.stderr
        assert "Traceback" not in r.stderr
    finally:
        c.signal(leader, signal.SIGCONT)
    # and the CLI's reads ride the failover: status of all three still answers
    r = await asyncio.to_thread(zabd, "kv", "get", "--sync", "--servers", ",".join(c.servers), "nothing")
    assert r.returncode == 1 and "absent" in r.stderr


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))

"""The admin port on real servers: /health, /status and /metrics over HTTP."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from zabd.client import Client
from zabd.client.spawn import LocalCluster

Factory = Callable[..., LocalCluster]


def get(port: int, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.headers["content-type"], r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["content-type"], exc.read()


async def test_health_status_and_metrics(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, admin=True, storage="disk")
    leader = await cluster.wait_leader()
    async with await Client.connect(cluster.client_addr(leader)) as c:
        for k in range(20):
            await c.put(f"k{k}", b"v")
    for i in (1, 2, 3):
        code, ctype, body = await asyncio.to_thread(get, cluster.admin_ports[i], "/health")
        assert code == 200 and ctype == "application/json"
        assert json.loads(body)["serving"] is True
    code, _, body = await asyncio.to_thread(get, cluster.admin_ports[leader], "/status")
    st = json.loads(body)
    assert code == 200 and st["id"] == leader and st["role"] == "leading" and st["followers_synced"] == 2
    code, ctype, body = await asyncio.to_thread(get, cluster.admin_ports[leader], "/metrics")
    assert code == 200 and ctype.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    for name in (
        "zabd_build_info", "zabd_role", "zabd_serving", "zabd_epoch", "zabd_last_committed", "zabd_followers_synced",
        "zabd_outstanding_requests", "zabd_peers_connected", "zabd_client_connections", "zabd_watches",
        "zabd_elections", "zabd_last_election_seconds", "zabd_request_seconds", "zabd_fsync_seconds",
        "zabd_log_bytes", "zabd_snapshot_bytes", "zabd_snapshots_taken", "zabd_purged_segments",
        "zabd_loop_lag_seconds",
    ):
        assert name in families, name
    role = {s.labels["role"]: s.value for s in families["zabd_role"].samples}
    membership = {n: families[n].samples[0].value for n in ("zabd_voters", "zabd_observers", "zabd_membership_version")}
    assert membership == {"zabd_voters": 3.0, "zabd_observers": 0.0, "zabd_membership_version": 0.0}
    assert role == {"looking": 0.0, "following": 0.0, "observing": 0.0, "leading": 1.0}
    writes = [s for s in families["zabd_request_seconds"].samples
              if s.name == "zabd_request_seconds_count" and s.labels["kind"] == "write"]
    assert writes and writes[0].value >= 20
    fsyncs = [s for s in families["zabd_fsync_seconds"].samples if s.name == "zabd_fsync_seconds_count"]
    assert fsyncs[0].value > 0
    assert families["zabd_log_bytes"].samples[0].value > 0
    # the loop's lag is sampled at each GC freeze (every 250 ms when idle)
    deadline = time.monotonic() + 10
    while (lags := await loop_lag_count(cluster.admin_ports[leader])) == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # polling the metric, not a time window
    assert lags > 0
    code, _, _ = await asyncio.to_thread(get, cluster.admin_ports[leader], "/nothing")
    assert code == 404


async def loop_lag_count(port: int) -> float:
    _, _, body = await asyncio.to_thread(get, port, "/metrics")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    return next(s.value for s in families["zabd_loop_lag_seconds"].samples if s.name.endswith("_count"))


async def test_health_is_503_without_a_quorum(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, admin=True)
    leader = await cluster.wait_leader()
    survivor = next(i for i in (1, 2, 3) if i != leader)
    for i in (1, 2, 3):
        if i != survivor:
            cluster.kill(i)
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        code, _, body = await asyncio.to_thread(get, cluster.admin_ports[survivor], "/health")
        if code == 503:
            break
        assert asyncio.get_running_loop().time() < deadline, body
        await asyncio.sleep(0.05)  # polling the endpoint, not a time window
    assert json.loads(body)["serving"] is False
    assert "election started" in cluster.log_text(survivor) and "lost leader" in cluster.log_text(survivor)


async def test_a_bad_request_gets_400_and_the_port_serves_on(cluster_factory: Factory) -> None:
    cluster = cluster_factory(1, admin=True)
    await cluster.wait_leader()
    port = cluster.admin_ports[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"THIS IS NOT HTTP\r\n\r\n")
    got = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert got.startswith(b"HTTP/1.1 400")
    code, _, _ = await asyncio.to_thread(get, port, "/health")
    assert code == 200

"""The admin port on real servers: /health, /status and /metrics over HTTP.
/status tells no more than the four-letter words anyone may send to
ZooKeeper's port (zk_4lw_whitelist)."""

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
from zabd.config import FOUR_LETTER_WORDS
from zabd.server.admin import STATUS_WORDS, visible_status

Factory = Callable[..., LocalCluster]


def get(port: int, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.headers["content-type"], r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["content-type"], exc.read()


async def test_health_status_and_metrics(cluster_factory: Factory) -> None:
    # mntr and conf: every part of /status is shown, as `zabd status` shows it on the client port
    cluster = cluster_factory(3, admin=True, storage="disk", extra={"zk_4lw_whitelist": "mntr, conf"})
    leader = await cluster.wait_leader()
    async with await Client.connect(cluster.client_addr(leader)) as c:
        for k in range(20):
            await c.put(f"k{k}", b"v")
        full = (await c.status()).model_dump()
    for i in (1, 2, 3):
        code, ctype, body = await asyncio.to_thread(get, cluster.admin_ports[i], "/health")
        assert code == 200 and ctype == "application/json"
        assert json.loads(body)["serving"] is True
    code, _, body = await asyncio.to_thread(get, cluster.admin_ports[leader], "/status")
    st = json.loads(body)
    assert code == 200 and st["id"] == leader and st["role"] == "leading" and st["followers_synced"] == 2
    assert "withheld" not in st and st.keys() == full.keys() and st["zk"].keys() == full["zk"].keys()
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


async def test_status_shows_only_what_the_whitelisted_words_show(cluster_factory: Factory) -> None:
    """By default (srvr alone) /status is srvr's part: no configuration, no
    counters; with mntr the counters too, not the configuration. /health and
    /metrics (srvr's and mntr's numbers, no address or path) are the same."""
    default = cluster_factory(1, admin=True, storage="disk")
    counters = cluster_factory(1, admin=True, storage="disk", extra={"zk_4lw_whitelist": ["mntr"]})
    await default.wait_leader()
    await counters.wait_leader()
    async with await Client.connect(default.client_addr(1)) as c:
        full = (await c.status()).model_dump()  # the client port's document, for its keys

    _, _, body = await asyncio.to_thread(get, default.admin_ports[1], "/status")
    st = json.loads(body)
    srvr = {k for k, w in STATUS_WORDS.items() if w == "srvr"}
    assert {k for k in st if k not in ("zk", "withheld")} | {f"zk.{k}" for k in st["zk"]} == srvr
    assert st["withheld"] == ["conf", "mntr"]  # every part of the real document has its word: none needs "*"
    assert st["role"] == "leading" and st["zk"]["znodes"] == full["zk"]["znodes"]
    assert "zookeeper_port" not in st and "peers" not in st and "sessions" not in st["zk"]
    code, _, body = await asyncio.to_thread(get, default.admin_ports[1], "/health")
    assert code == 200 and json.loads(body)["serving"] is True
    _, _, body = await asyncio.to_thread(get, default.admin_ports[1], "/metrics")
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {"zabd_zk_znode_count", "zabd_zk_global_sessions", "zabd_log_bytes", "zabd_epoch"} <= names

    _, _, body = await asyncio.to_thread(get, counters.admin_ports[1], "/status")
    st = json.loads(body)
    assert st["withheld"] == ["conf"] and "zookeeper_port" not in st and "membership" not in st
    assert "current_epoch" in st and "sessions" in st["zk"] and "storage_stats" in st


def test_a_status_part_nobody_classified_needs_every_word() -> None:
    """A part added to the status without a word in STATUS_WORDS is withheld
    until every word is whitelisted: it may be one that cons would show."""
    st = {"id": 1, "role": "leading", "peers": [2, 3], "kv_keys": 4, "client_addrs": ["10.0.0.1:5000"],
          "zk": {"znodes": 5, "digest": "ab", "by_addr": {"10.0.0.1:5000": 1}}}
    assert visible_status(st, {"srvr"}) == {"id": 1, "role": "leading", "zk": {"znodes": 5},
                                            "withheld": ["*", "conf", "mntr"]}
    assert visible_status(st, {"srvr", "conf", "mntr"}) == {"id": 1, "role": "leading", "peers": [2, 3], "kv_keys": 4,
                                                            "zk": {"znodes": 5, "digest": "ab"}, "withheld": ["*"]}
    assert visible_status(st, FOUR_LETTER_WORDS) == st

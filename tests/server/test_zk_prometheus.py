"""Dashboards and alert rules written for ZooKeeper, answered by zabd's
admin port: every metric name their PromQL reads is on a live cluster's
``/metrics`` with a value, or is named in ``zk_metrics.NOT_MEASURED`` with
the reason zabd does not measure it (JVM metrics aside: zabd is no JVM).

The expressions are in ``data/zookeeper_dashboards.json``, each list with
its source: ZooKeeper's own alert rules (its monitor guide), Grafana
dashboard 10465 (the one that guide links) and Grafana's ZooKeeper mixin.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from zabd.client.spawn import LocalCluster
from zabd.server.zk.metrics import COUNTERS, NOT_MEASURED, SUMMARIES

Factory = Callable[..., LocalCluster]
DATA = Path(__file__).parent / "data" / "zookeeper_dashboards.json"
# PromQL's own words in these expressions: functions, aggregations, keywords
PROMQL = {"rate", "irate", "increase", "max", "min", "sum", "avg", "count", "by", "without", "clamp_max", "time",
          "or", "and", "unless"}
# made by Prometheus from the scrape itself, not exported by any target
SYNTHETIC = {"up"}
WRITES = 40


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    e = re.sub(r'"[^"]*"', "", expr)  # strings (label values)
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges
    e = re.sub(r"\b(by|without)\s*\([^)]*\)", "", e)  # grouping labels
    e = re.sub(r"\$\w+", "", e)  # dashboard variables
    tokens = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", e))
    return {t for t in tokens if t not in PROMQL and not re.fullmatch(r"\d+[smhd]", t)}


def scrape(port: int) -> dict[str, tuple[str, dict[str, float]]]:
    """Every series of ``/metrics`` by the name Prometheus stores it under:
    sample name -> (its family's type, {label text: value}). Read line by
    line, as Prometheus reads the text format: Python's parser would rename
    a counter's samples to ``<name>_total``, which Prometheus does not."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        body = r.read().decode()
    types: dict[str, str] = {}
    out: dict[str, tuple[str, dict[str, float]]] = {}
    for line in body.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})? (\S+)", line)
        assert m, line
        name, labels, value = m.group(1), (m.group(2) or "{}")[1:-1], float(m.group(3))
        family = next((name.removesuffix(sfx) for sfx in ("", "_total", "_count", "_sum", "_bucket", "_created",
                                                         "_info") if name.removesuffix(sfx) in types), name)
        label_text = ",".join(sorted(p.replace('"', "") for p in labels.split(",") if p))
        out.setdefault(name, (types.get(family, "untyped"), {}))[1][label_text] = value
    # the text format is the Prometheus client's too: Python's own parser reads all of it
    assert list(text_string_to_metric_families(body))
    return out


def base(name: str) -> str:
    """A sample's ZooKeeper metric: a summary's ``_count``/``_sum`` are its parts."""
    for suffix in ("_count", "_sum"):
        if name.endswith(suffix) and (name[: -len(suffix)] in SUMMARIES or name[: -len(suffix)] in NOT_MEASURED):
            return name[: -len(suffix)]
    return name


def test_zookeeper_dashboards_and_alerts_are_answered(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, admin=True, storage="disk",
                              extra={"zk_tick_ms": 200, "snap_count": 10, "zk_4lw_whitelist": "*"})
    leader = asyncio.run(cluster.wait_leader())
    follower = next(i for i in (1, 2, 3) if i != leader)
    zk = KazooClient(hosts=cluster.zk_addr(follower), timeout=4.0)
    zk.start(timeout=15)
    try:  # writes through a follower (proposals, commits, a snapshot or more), reads, watches, an ephemeral
        zk.create("/app", b"")
        zk.create("/app/lock", b"", ephemeral=True)
        for k in range(WRITES):
            zk.set("/app", str(k).encode())
        zk.get("/app", watch=lambda event: None)
        zk.get_children("/app", watch=lambda event: None)
        seen = {i: scrape(cluster.admin_ports[i]) for i in (leader, follower)}
    finally:
        zk.stop()
        zk.close()

    lists = json.loads(DATA.read_text())
    answered: dict[str, set[str]] = {}
    for name, doc in lists.items():
        assert doc["source"] and doc["exprs"], name
        for expr in doc["exprs"]:
            for metric in metric_names(expr):
                if metric.startswith("jvm_") or metric in SYNTHETIC:
                    continue  # zabd is no JVM; ``up`` is Prometheus' own
                if base(metric) in NOT_MEASURED:
                    assert NOT_MEASURED[base(metric)], metric  # a reason, in docs/zookeeper.md too
                    assert all(metric not in s for s in seen.values()), f"{metric} is exported and listed as not"
                    continue
                where = [i for i, s in seen.items() if metric in s]
                assert where, f"{name}: {expr!r} reads {metric}, which zabd's /metrics lacks"
                values = [v for i in where for v in seen[i][metric][1].values()]
                assert values and all(isinstance(v, float) for v in values), (metric, values)
                answered.setdefault(metric, set()).add(name)

    # what the brief names, each answered by a real value (these are the dashboards' and rules' own reads)
    for metric in ("znode_count", "watch_count", "ephemerals_count", "approximate_data_size", "num_alive_connections",
                   "outstanding_requests", "avg_latency", "min_latency", "max_latency", "packets_received",
                   "packets_sent", "open_file_descriptor_count", "quorum_size", "leader_uptime", "learners",
                   "election_time_count", "election_time_sum", "fsynctime_sum", "snapshottime_sum",
                   "process_open_fds", "process_cpu_seconds_total"):
        assert metric in answered, metric
    lead, fol = seen[leader], seen[follower]
    one = {k: next(iter(v[1].values())) for k, v in lead.items()}
    two = {k: next(iter(v[1].values())) for k, v in fol.items()}
    assert one["quorum_size"] == 3 and one["learners"] == 2 and one["synced_followers"] == 2
    assert one["leader_uptime"] > 0 and "leader_uptime" not in fol  # a leader's gauge, as ZooKeeper registers it
    assert one["znode_count"] == two["znode_count"] >= 6 and one["ephemerals_count"] == 1
    assert two["watch_count"] >= 2 and two["num_alive_connections"] >= 1
    assert one["proposal_count"] >= WRITES + 2 and one["commit_count"] >= 1
    assert two["learner_proposal_received_count"] >= WRITES + 2 and two["learner_commit_received_count"] >= 1
    assert two["packets_received"] >= WRITES + 4 and two["bytes_received_count"] > two["packets_received"] * 4
    assert two["updatelatency_count"] >= WRITES + 2 and two["readlatency_count"] >= 2
    assert two["election_time_count"] >= 1 and two["follower_sync_time_count"] >= 1
    assert one["snapshottime_count"] >= 1 and one["fsynctime_count"] >= 1 and one["dbinittime_count"] == 1
    assert not math.isnan(one["fsynctime"]) and lead["fsynctime"][1].keys() == {"quantile=0.5"}
    assert set(fol["updatelatency"][1]) == {"quantile=0.5", "quantile=0.9", "quantile=0.99"}  # ADVANCED
    # ZooKeeper's types, as its PrometheusMetricsProvider declares them
    for name in COUNTERS:
        assert lead[name][0] == "counter", name
    for name in SUMMARIES:
        assert lead[name][0] == "summary", name
    assert lead["znode_count"][0] == "gauge" and lead["packets_received"][0] == "gauge"
    # zabd's own names are still there
    assert one["zabd_zk_znode_count"] == one["znode_count"] and "zabd_role" in lead


def test_the_exposition_is_written_as_zookeeper_writes_it(cluster_factory: Factory) -> None:
    """Counters without ``_total``, labels ending with a comma: the bytes of
    ZooKeeper 3.8's simpleclient 0.9.0, so a scraper sees the same series."""
    cluster = cluster_factory(1, admin=True)
    asyncio.run(cluster.wait_leader())
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.admin_ports[1]}/metrics", timeout=10) as r:
        body = r.read().decode()
    assert "# HELP looking_count looking_count\n# TYPE looking_count counter\nlooking_count 0.0\n" in body
    assert re.search(r'\nelection_time\{quantile="0\.5",\} \d+\.\d+\nelection_time_count 1\.0\n'
                     r"election_time_sum \d+\.\d+\n", body), body
    assert "\n# TYPE znode_count gauge\nznode_count 5.0\n" in body  # an empty tree, counted as ZooKeeper counts it
    assert "leader_uptime" not in body  # standalone: ZooKeeper's leader gauges are its Leader's

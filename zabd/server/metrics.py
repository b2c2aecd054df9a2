"""What the admin port's ``/metrics`` says, in the Prometheus format.

The exposition is ``prometheus_client``'s; the values are read from the
replica when a scrape comes (a collector), so the hot path pays nothing for
gauges. ZooKeeper's ``mntr`` numbers are exported too, as ``zabd_zk_*``
(``zabd.server.zk.words.mntr_rows``: one source for both). Latencies are
counted into fixed buckets by :class:`Latency`, which costs a bisect per
observation and no lock (everything runs on the event loop), and are
exposed as Prometheus histograms.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from zabd.server.zk.metrics import SUMMARY_PARTS, ZkMetrics, prometheus_text
from zabd.server.zk.words import COUNTERS, mntr_rows, zk_gauges

# seconds: 100 us .. 10 s
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Latency:
    """A histogram of durations in seconds, Prometheus buckets, no lock."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.sum += seconds

    def family(self, name: str, doc: str, labels: dict[str, str] | None = None) -> HistogramMetricFamily:
        keys = list(labels or {})
        h = HistogramMetricFamily(name, doc, labels=keys)
        cumulative = []
        total = 0
        for bound, count in zip((*BUCKETS, float("inf")), self.counts, strict=True):
            total += count
            cumulative.append((str(bound) if bound != float("inf") else "+Inf", total))
        h.add_metric([labels[k] for k in keys] if labels else [], cumulative, self.sum)
        return h


@dataclass(slots=True)
class Counters:
    """Event counts and latencies the replica records as they happen."""

    elections: int = 0
    last_election_s: float = 0.0
    slow_fsyncs: int = 0
    requests: dict[str, Latency] = field(default_factory=lambda: {"write": Latency(), "sync": Latency()})
    fsync: Latency = field(default_factory=Latency)
    loop_lag: Latency = field(default_factory=Latency)
    zk: ZkMetrics = field(default_factory=ZkMetrics)  # ZooKeeper's own counters and summaries, its names

    def flushed(self, seconds: float, slow_ms: int) -> bool:
        """Count a storage flush; True if it was slow (the caller logs it)."""
        self.fsync.observe(seconds)
        self.zk.observe("fsynctime", int(seconds * 1000))
        if seconds * 1000 > slow_ms:
            self.slow_fsyncs += 1
            return True
        return False


def dir_bytes(path: str) -> int:
    total = 0
    try:
        with os.scandir(path) as it:
            for entry in it:
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        return 0
    return total


class ReplicaCollector(Collector):
    def __init__(
        self, status: Callable[[], dict[str, Any]], counters: Counters, dirs: dict[str, str], version: str
    ) -> None:
        self.status = status
        self.counters = counters
        self.dirs = dirs
        self.version = version

    def collect(self) -> Iterator[Metric]:
        st = self.status()
        c = self.counters
        yield InfoMetricFamily("zabd_build", "zabd build", value={"version": self.version, "node": str(st["id"])})
        role = GaugeMetricFamily("zabd_role", "1 for the role this node has now", labels=["role"])
        for name in ("looking", "following", "observing", "leading"):
            role.add_metric([name], 1.0 if st["role"] == name else 0.0)
        yield role
        gauges = {
            "zabd_serving": ("1 when this node serves clients (broadcast phase)", float(st["phase"] == "broadcast")),
            "zabd_epoch": ("current epoch", st["current_epoch"]),
            "zabd_accepted_epoch": ("accepted epoch", st["accepted_epoch"]),
            "zabd_last_zxid": ("last zxid in this node's history (64-bit epoch<<32|counter)", st["last_zxid"]),
            "zabd_last_committed": ("last zxid applied here", st["last_committed"]),
            "zabd_last_zxid_counter": ("counter part of the last zxid", st["last_zxid"] & 0xFFFF_FFFF),
            "zabd_followers_synced": ("followers in the broadcast phase (leader only)", st["followers_synced"]),
            "zabd_outstanding_requests": ("client writes waiting for an answer", st["outstanding"]),
            "zabd_peers_connected": ("peer links up", len(st["peers_connected"])),
            "zabd_client_connections": ("client connections", st["client_connections"]),
            "zabd_watches": ("connections streaming commits", st["watches"]),
            "zabd_last_election_seconds": ("how long the last election took", c.last_election_s),
            "zabd_voters": ("voters in the membership in effect here", len(st["membership"]["voters"])),
            "zabd_observers": ("observers in the membership in effect here", len(st["membership"]["observers"])),
            "zabd_membership_version": ("zxid of the membership change in effect (0: the configured one)",
                                        st["membership"]["zxid"]),
        }
        for name, (doc, value) in gauges.items():
            yield GaugeMetricFamily(name, doc, value=float(value))
        limits = st["client_limits"]
        refused = CounterMetricFamily("zabd_client_refused", "client connections refused, by the limit they hit",
                                      labels=["reason"])
        for reason, n in sorted(limits["refused"].items()):
            refused.add_metric([reason], n)
        yield refused
        cut = CounterMetricFamily("zabd_client_cut", "client connections closed by a limit, by the limit",
                                  labels=["reason"])
        for reason, n in sorted(limits["cut"].items()):
            cut.add_metric([reason], n)
        yield cut
        yield GaugeMetricFamily("zabd_client_queued_bytes", "answers queued to clients that do not read them",
                                value=limits["queued_bytes"])
        yield GaugeMetricFamily("zabd_client_buffered_bytes", "bytes of client frames begun and not finished",
                                value=limits["buffered_bytes"])
        yield CounterMetricFamily("zabd_elections", "elections this node took part in", value=c.elections)
        yield CounterMetricFamily("zabd_slow_fsyncs", "flushes slower than slow_fsync_ms", value=c.slow_fsyncs)
        snaps = st.get("snapshots") or {}
        yield CounterMetricFamily("zabd_snapshots_taken", "snapshots written", value=snaps.get("taken", 0))
        yield CounterMetricFamily(
            "zabd_purged_segments", "log segments deleted by purges", value=snaps.get("segments_purged", 0)
        )
        for kind, path in self.dirs.items():
            yield GaugeMetricFamily(f"zabd_{kind}_bytes", f"bytes in the {kind} directory", value=dir_bytes(path))
        for kind, lat in c.requests.items():
            yield lat.family("zabd_request_seconds", "client request latency, arrival to answer", {"kind": kind})
        yield c.fsync.family("zabd_fsync_seconds", "storage flush (write + fdatasync) latency")
        yield c.loop_lag.family(
            "zabd_loop_lag_seconds", "how late the event loop ran a timer due every 20-250 ms (long turns, CPU waits)"
        )
        if "zk" in st:
            yield from _mntr_families(st)
            zk = st["zk"]
            if "sasl_failed" in zk:
                yield CounterMetricFamily("zabd_zk_sasl_succeeded", "SASL exchanges completed on ZooKeeper's port",
                                          value=zk["sasl_succeeded"])
                yield CounterMetricFamily("zabd_zk_sasl_failed", "SASL exchanges failed on ZooKeeper's port "
                                          "(AUTH_FAILED, connection closed)", value=zk["sasl_failed"])


def _mntr_families(st: dict[str, Any]) -> Iterator[Metric]:
    """Every number of ZooKeeper's ``mntr`` as ``zabd_<its key>``, from the same rows."""
    for key, value in mntr_rows(st):
        if isinstance(value, str) or key in SUMMARY_PARTS:  # a summary's parts: its own families have them
            continue
        doc = f"{key} as ZooKeeper's mntr four-letter word shows it (its client port; latencies in ms)"
        if key in COUNTERS:
            yield CounterMetricFamily("zabd_" + key, doc, value=value)
        else:
            yield GaugeMetricFamily("zabd_" + key, doc, value=float(value))


def zookeeper_exposition(status: Callable[[], dict[str, Any]], counters: Counters,
                         read_only: bool = False) -> Callable[[], str]:
    """ZooKeeper's families, its names and types, from the same status report
    as ``mntr`` (empty while this node serves no clients: ZooKeeper has
    unregistered its server's gauges then)."""

    def text() -> str:
        st = status()
        if "zk" not in st:
            return ""
        part = st.get("zk_metrics", {})
        return prometheus_text(zk_gauges(st, read_only), part.get("counters", {}), counters.zk.summaries)

    return text


def registry(collector: ReplicaCollector) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    # process_cpu_seconds_total, process_open_fds, ...: the names ZooKeeper's
    # exporter serves beside its own (simpleclient's StandardExports)
    ProcessCollector(registry=reg)
    return reg

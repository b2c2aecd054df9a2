"""ZooKeeper 3.8's own metrics, under its names: what its ``mntr`` prints
after the classic rows, and what its ``PrometheusMetricsProvider`` serves on
``/metrics`` (``ServerMetrics.java``; ``ZooKeeperServer.registerMetrics``).

ZooKeeper has three kinds. A gauge is read when asked (here: a numeric row
of ``zk_words.mntr_rows``, its name without ``zk_``). A counter only grows.
A summary takes observations in whole milliseconds (or counts); ``mntr``
prints its ``avg_``/``min_``/``max_``/``cnt_``/``sum_`` since the start,
Prometheus its quantiles over the last ten minutes and ``_count``/``_sum``.

Only the quantities zabd measures with ZooKeeper's meaning are here
(``COUNTERS``, ``SUMMARIES``); the others are named with the reason in
``NOT_MEASURED`` (and docs/zookeeper.md): no fake zeros.

The exposition (``prometheus_text``) is written the way ZooKeeper 3.8's
Prometheus client (simpleclient 0.9.0) writes it, counters without a
``_total`` suffix, so that a dashboard or alert rule written for ZooKeeper
reads the same series from zabd.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

# ZooKeeper's counters zabd counts: name -> what it counts here
COUNTERS = {
    "looking_count": "elections this server entered (it went LOOKING)",
    "diff_count": "learners synced by a diff (DIFF or TRUNC) while this server led",
    "snap_count": "learners synced by a snapshot while this server led",
    "commit_count": "COMMIT messages this server sent as leader",
    "proposal_count": "txns this server proposed as leader",
    "learner_proposal_received_count": "txns proposed to this server as a follower",
    "learner_commit_received_count": "COMMIT messages this server received as a learner",
    "bytes_received_count": "bytes read from clients on ZooKeeper's client port",
    "connection_request_count": "ConnectRequests read on ZooKeeper's client port",
    "connection_rejected": "client connections refused over a connection limit",
    "stale_sessions_expired": "sessions this server expired as leader",
}
# ZooKeeper's summaries zabd observes: name -> (ZooKeeper's detail level: the quantiles Prometheus shows, meaning)
BASIC = (0.5,)
ADVANCED = (0.5, 0.9, 0.99)
# what ZooKeeper's default provider's mntr prints of an ADVANCED summary (its AvgMinMaxPercentileCounter)
MNTR_PERCENTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99, "p999": 0.999}
SUMMARIES = {
    "election_time": (BASIC, "ms from going LOOKING to knowing the leader"),
    "follower_sync_time": (BASIC, "ms a follower took to sync with its new leader"),
    "fsynctime": (BASIC, "ms per write and fdatasync of the txn log"),
    "snapshottime": (BASIC, "ms to write a snapshot"),
    "dbinittime": (BASIC, "ms to load the database at start (snapshot and log)"),
    "startup_snap_load_time": (BASIC, "ms to load the newest snapshot at start"),
    "startup_txns_loaded": (BASIC, "txns replayed from the log at start"),
    "startup_txns_load_time": (BASIC, "ms to replay the log at start"),
    "readlatency": (ADVANCED, "ms from reading a request that changes nothing to writing its answer"),
    "updatelatency": (ADVANCED, "ms from reading a request that is a txn to writing its answer"),
}
# ZooKeeper 3.8 metrics zabd does not export, and why (docs/zookeeper.md says the same)
_PIPELINE = ("ZooKeeper's request processor chain (prep, sync, commit and final processors, their queues and "
             "session queues) has no counterpart: zabd's one event loop has no such queues")
_WATCH_MANAGER = "ZooKeeper's optimized watch manager cleans dead watchers in a thread; zabd drops them at once"
NOT_MEASURED: dict[str, str] = {
    **dict.fromkeys((
        "prep_processor_queue_time_ms", "prep_processor_queue_size", "prep_processor_request_queued",
        "prep_process_time", "proposal_process_time", "close_session_prep_time", "outstanding_changes_queued",
        "outstanding_changes_removed", "sync_processor_queue_and_flush_time_ms", "sync_processor_queue_size",
        "sync_processor_request_queued", "sync_processor_queue_time_ms", "sync_processor_queue_flush_time_ms",
        "sync_process_time", "sync_processor_batch_size", "commit_process_time", "read_commitproc_time_ms",
        "write_commitproc_time_ms", "local_write_committed_time_ms", "server_write_committed_time_ms",
        "read_commit_proc_req_queued", "write_commit_proc_req_queued", "commit_commit_proc_req_queued",
        "request_commit_queued", "read_commit_proc_issued", "write_commit_proc_issued",
        "concurrent_request_processing_in_commit_processor", "time_waiting_empty_pool_in_commit_processor_read_ms",
        "write_batch_time_in_commit_processor", "requests_in_session_queue", "pending_session_queue_size",
        "reads_after_write_in_session_queue", "reads_issued_from_session_queue", "session_queues_drained",
        "read_final_proc_time_ms", "write_final_proc_time_ms", "requests_not_forwarded_to_commit_processor",
        "skip_learner_request_to_next_processor_count", "learner_request_processor_queue_size",
        "learner_handler_qp_size", "learner_handler_qp_time_ms", "throttled_ops", "request_throttle_wait_count",
        "request_throttle_queue_time_ms", "stale_requests", "stale_requests_dropped", "stale_replies",
    ), _PIPELINE),
    **dict.fromkeys(("dead_watchers_queued", "dead_watchers_cleared", "dead_watchers_cleaner_latency",
                     "add_dead_watcher_stall_time"), _WATCH_MANAGER),
    **dict.fromkeys(("response_packet_cache_hits", "response_packet_cache_misses",
                     "response_packet_get_children_cache_hits", "response_packet_get_children_cache_misses"),
                    "zabd has no cache of serialized read answers"),
    **dict.fromkeys(("connection_drop_probability", "connection_drop_count", "connection_token_deficit",
                     "connection_revalidate_count", "revalidate_count"),
                    "zabd has no connection throttle that drops by chance and no token bucket; a session is "
                    "re-attached without the learner's revalidation round trip"),
    **dict.fromkeys(("ensemble_auth_success", "ensemble_auth_fail", "ensemble_auth_skip"),
                    "zabd has no ensemble-name client authentication provider"),
    **dict.fromkeys(("auth_failed_count", "non_mtls_remote_conn_count", "non_mtls_local_conn_count",
                     "insecure_admin_count", "outstanding_tls_handshake", "tls_handshake_exceeded",
                     "unsuccessful_handshake"),
                    "ZooKeeper's SASL/X509 auth providers and its Netty TLS handshake limit have no counterpart here "
                    "(a failed TLS handshake is logged, not counted)"),
    **dict.fromkeys(("om_proposal_process_time_ms", "om_commit_process_time_ms", "observer_sync_time"),
                    "zabd's observers sync from the leader; there is no observer master"),
    **dict.fromkeys(("proposal_latency", "proposal_ack_creation_latency", "commit_propagation_latency",
                     "propagation_latency", "quorum_ack_latency", "ack_latency", "proposal_process_time"),
                    "proposals are batched (one ProposeMany for many txns) and not timestamped per txn; zabd's "
                    "zabd_request_seconds histogram times a write from arrival to answer"),
    **dict.fromkeys(("last_proposal_size", "max_proposal_size", "min_proposal_size"),
                    "proposals are batched: there is no per-txn proposal packet to measure"),
    **dict.fromkeys(("last_client_response_size", "max_client_response_size", "min_client_response_size",
                     "response_bytes", "watch_bytes"),
                    "answers are encoded straight into the connection's output; their sizes are not kept"),
    **dict.fromkeys(("node_created_watch_count", "node_deleted_watch_count", "node_changed_watch_count",
                     "node_children_watch_count", "write_per_namespace", "read_per_namespace"),
                    "counted inside ZooKeeper's DataTree/WatchManager per operation; zabd's tree does not count "
                    "per namespace or per triggered event"),
    **dict.fromkeys(("inflight_diff_count", "inflight_snap_count", "leader_unavailable_time", "unavailable_time",
                     "quit_leading_due_to_disloyal_voter", "digest_mismatches_count", "unrecoverable_error_count",
                     "cnxn_closed_without_zk_server_running", "sessionless_connections_expired",
                     "large_requests_rejected", "netty_queued_buffer_capacity", "socket_closing_time",
                     "jvm_pause_time_ms"),
                    "ZooKeeper-internal events with no counterpart in zabd (sync throttle, oracle quorum, "
                    "digest checks against the leader, Netty buffers, JVM pauses); zabd stops on an unrecoverable "
                    "error and counts connections cut by its own limits as zabd_client_cut"),
    **dict.fromkeys(("quota_count_limit_per_namespace", "quota_bytes_limit_per_namespace",
                     "quota_count_usage_per_namespace", "quota_bytes_usage_per_namespace",
                     "quota_exceeded_error_per_namespace"), "zabd does not enforce ZooKeeper quotas"),
}
# the mntr lines of the summaries' parts
SUMMARY_PARTS = frozenset(f"zk_{part}_{name}" for name in SUMMARIES
                          for part in ("avg", "min", "max", "cnt", "sum", *MNTR_PERCENTILES))
WINDOW_S = 600.0  # simpleclient's Summary: quantiles over the last 10 minutes ...
AGE_BUCKETS = 5  # ... kept as 5 buckets, the oldest dropped every 2 minutes


class Summary:
    """ZooKeeper's summary of whole-number observations: count, sum, min and
    max since the start (``mntr``), and exact quantiles over the last
    ``WINDOW_S`` (Prometheus). Observations are milliseconds or counts, so
    few distinct values: each age bucket is a Counter of values, memory
    bounded by how many distinct values, not by how many observations."""

    __slots__ = ("quantiles", "count", "sum", "min", "max", "buckets", "rotate_at")

    def __init__(self, quantiles: tuple[float, ...] = BASIC) -> None:
        self.quantiles = quantiles
        self.count = 0
        self.sum = 0
        self.min = 0
        self.max = 0
        self.buckets: list[Counter[int]] = [Counter()]
        self.rotate_at = time.monotonic() + WINDOW_S / AGE_BUCKETS

    def observe(self, value: int, n: int = 1) -> None:
        """``n`` observations of ``value``."""
        if self.count == 0 or value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        self.count += n
        self.sum += value * n
        self._age(time.monotonic())
        self.buckets[-1][value] += n

    def observe_many(self, values: list[int]) -> None:
        """One observation of each of ``values`` (a batch of answers written at once)."""
        low, high = min(values), max(values)
        if self.count == 0 or low < self.min:
            self.min = low
        if high > self.max:
            self.max = high
        self.count += len(values)
        self.sum += sum(values)
        self._age(time.monotonic())
        self.buckets[-1].update(values)

    def _age(self, now: float) -> None:
        if now < self.rotate_at:
            return
        step = WINDOW_S / AGE_BUCKETS
        while self.rotate_at <= now:
            self.buckets.append(Counter())
            self.rotate_at += step
        del self.buckets[:-AGE_BUCKETS]

    def window_quantiles(self, quantiles: tuple[float, ...] | None = None) -> dict[float, float]:
        """Each quantile (by default Prometheus') of the observations of the
        window; NaN when it has none, as simpleclient says."""
        self._age(time.monotonic())
        seen: Counter[int] = Counter()
        for b in self.buckets:
            seen.update(b)
        total = sum(seen.values())
        wanted = self.quantiles if quantiles is None else quantiles
        out = dict.fromkeys(wanted, math.nan)
        if not total:
            return out
        values = sorted(seen.items())
        for q in wanted:
            rank, below = max(1, math.ceil(q * total)), 0  # the nearest rank
            for value, n in values:
                below += n
                if below >= rank:
                    out[q] = float(value)
                    break
        return out


class ZkMetrics:
    """The counters and summaries above that are counted where they happen
    (those read from other parts of the status are added by ``values``)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.summaries = {name: Summary(q) for name, (q, _) in SUMMARIES.items()}

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def observe(self, name: str, value: int, n: int = 1) -> None:
        self.summaries[name].observe(value, n)


def mntr_rows(part: Mapping[str, Any]) -> list[tuple[str, int | float]]:
    """The counters' and summaries' lines of ``mntr``, as ZooKeeper's default
    provider prints them, from the status report's ``zk_metrics`` part."""
    counters = part.get("counters", {})
    rows: list[tuple[str, int | float]] = [(f"zk_{name}", int(counters.get(name, 0))) for name in COUNTERS]
    for name, s in part.get("summaries", {}).items():
        count = int(s["count"])
        avg = round(s["sum"] / count, 4) if count else 0.0  # ZooKeeper's AvgMinMaxCounter.getAvg
        rows += [(f"zk_avg_{name}", avg), (f"zk_min_{name}", s["min"]), (f"zk_max_{name}", s["max"]),
                 (f"zk_cnt_{name}", count), (f"zk_sum_{name}", s["sum"])]
        rows += [(f"zk_{p}_{name}", v) for p, v in s.get("percentiles", {}).items()]
    return rows


def _go(value: float) -> str:
    """A value as Java's simpleclient writes it (``Collector.doubleToGoString``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _family(name: str, kind: str, samples: Iterable[str]) -> str:
    return f"# HELP {name} {name}\n# TYPE {name} {kind}\n" + "".join(samples)


def prometheus_text(gauges: Iterable[tuple[str, float]], counters: Mapping[str, int],
                    summaries: Mapping[str, Summary]) -> str:
    """ZooKeeper's families in the text format 0.0.4, as its PrometheusMetricsProvider
    writes them: the help is the name, labels end with a comma, no ``_total``."""
    out = [_family(name, "gauge", [f"{name} {_go(value)}\n"]) for name, value in gauges]
    out += [_family(name, "counter", [f"{name} {_go(counters.get(name, 0))}\n"]) for name in COUNTERS]
    for name, s in summaries.items():
        samples = [f'{name}{{quantile="{q}",}} {_go(v)}\n' for q, v in s.window_quantiles().items()]
        samples += [f"{name}_count {_go(s.count)}\n", f"{name}_sum {_go(s.sum)}\n"]
        out.append(_family(name, "summary", samples))
    return "".join(out)


def status_part(zk: ZkMetrics, derived: Mapping[str, int]) -> dict[str, Any]:
    """The ``zk_metrics`` part of the status report: every counter (``derived``:
    those read from elsewhere) and each summary's totals since the start."""
    counters = {name: int(derived.get(name, zk.counts.get(name, 0))) for name in COUNTERS}
    summaries: dict[str, dict[str, Any]] = {}
    for name, s in zk.summaries.items():
        summaries[name] = {"count": s.count, "sum": s.sum, "min": s.min, "max": s.max}
        if s.quantiles == ADVANCED:  # of the last 10 minutes (ZooKeeper's: of a reservoir since its last reset)
            window = s.window_quantiles(tuple(MNTR_PERCENTILES.values()))
            summaries[name]["percentiles"] = {p: 0 if math.isnan(window[q]) else int(window[q])
                                              for p, q in MNTR_PERCENTILES.items()}
    return {"counters": counters, "summaries": summaries}

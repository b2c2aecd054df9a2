"""The admin port: ``/health``, ``/status`` and ``/metrics`` over HTTP.

HTTP is parsed by ``h11`` (sans-IO, like our own sessions) on an asyncio
server in the replica's own loop, so every answer reads the replica's state
between two events, never in the middle of one. ``/health`` is 200 only
while this node serves (leading or following, in the broadcast phase), which
is what a container healthcheck or a load balancer wants to know.

The port asks nobody who they are, like ZooKeeper's client port asks no one
who sends a four-letter word, so it tells no more than the words anyone may
send there (``zk_4lw_whitelist``): each part of ``/status`` is shown only when
the word that shows the same facts is whitelisted (``STATUS_WORDS``). By
default that is ``srvr``'s part alone. ``/health`` shows what ``srvr`` shows
and ``/metrics`` the numbers of ``mntr`` and ``dirs``, never an address, a
path or a session id, as ZooKeeper's metrics exporter serves them whatever
its whitelist: both are served to all. ``/metrics`` also serves ZooKeeper's
own metric names (``zabd.server.zk.metrics``), as ZooKeeper 3.8's
PrometheusMetricsProvider does on its port 7000, so that dashboards and alert
rules written for ZooKeeper read zabd unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Collection
from typing import Any

import h11
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from zabd.config import DEFAULT_WHITELIST, FOUR_LETTER_WORDS

MAX_REQUEST = 16 * 1024
IDLE_S = 30.0

# The four-letter word that shows the same facts as each part of the status
# document (``zabd.server.status``; ``zk.<key>``: a key of its ``zk`` part).
# srvr: what srvr and /health show (mode, zxid, node count, the port's
# counters); conf: this node's configuration; mntr: counters and replication
# state (mntr's, and /metrics'). A part not listed here is shown only when
# every word is whitelisted: a new part is withheld until someone decides.
STATUS_WORDS = {
    **dict.fromkeys(("id", "version", "role", "phase", "leader", "last_committed", "zk.znodes",
                     "zk.packets_received", "zk.packets_sent", "zk.min_latency", "zk.avg_latency",
                     "zk.max_latency", "zk.alive_connections", "zk.outstanding_requests"), "srvr"),
    **dict.fromkeys(("zookeeper_port", "storage", "fsync", "peers", "observers", "membership"), "conf"),
    **dict.fromkeys(("current_epoch", "accepted_epoch", "last_zxid", "peers_connected", "client_connections",
                     "watches", "outstanding", "followers_synced", "uptime_s", "open_fds", "max_fds", "gc_ms",
                     "gc_collections", "storage_stats", "sync_sent", "sync_received", "log_base", "snapshots",
                     "snapshot_streams", "snapshot_arriving",
                     "kv_keys", "kv_digest", "zk.sessions", "zk.ephemerals", "zk.digest_zxid", "zk.digest",
                     "zk.connections", "zk.watches", "zk.data_bytes", "zk.sasl_succeeded", "zk.sasl_failed",
                     "role_uptime_ms", "leader_uptime_ms", "observers_synced", "syncs_pending",
                     # ZooKeeper's own counters and summaries (zabd.server.zk.metrics): numbers only
                     "zk_metrics",
                     # zabd.server.limits' counts by reason and bytes held (/metrics has them): no address
                     "client_limits"), "mntr"),
}
ALL_WORDS = "*"  # a part no word shows: it needs them all


def visible_status(st: dict[str, Any], words: Collection[str]) -> dict[str, Any]:
    """The parts of ``st`` whose word is in ``words`` (the words answered,
    ``zk_words.enabled_words``); ``withheld`` names the words that would show
    the rest, when something was left out."""
    every = FOUR_LETTER_WORDS.issubset(words)

    def shown(key: str) -> bool:
        word = STATUS_WORDS.get(key, ALL_WORDS)
        return every if word == ALL_WORDS else word in words

    out: dict[str, Any] = {}
    withheld: set[str] = set()
    for key, value in st.items():
        if key == "zk" and isinstance(value, dict):
            zk = {k: v for k, v in value.items() if shown(f"zk.{k}")}
            withheld.update(STATUS_WORDS.get(f"zk.{k}", ALL_WORDS) for k in value if k not in zk)
            out[key] = zk
        elif shown(key):
            out[key] = value
        else:
            withheld.add(STATUS_WORDS.get(key, ALL_WORDS))
    if withheld:
        out["withheld"] = sorted(withheld)  # zk_4lw_whitelist words that would show the rest
    return out


class AdminServer:
    def __init__(self, status: Callable[[], dict[str, Any]], registry: CollectorRegistry, log: Any,
                 words: Collection[str] = DEFAULT_WHITELIST, zookeeper: Callable[[], str] | None = None) -> None:
        """``words``: the four-letter words ZooKeeper's port answers here
        (``zabd.server.zk.words.enabled_words``). ``zookeeper``: ZooKeeper's
        own families in its exposition, served on ``/metrics`` after zabd's."""
        self.status = status
        self.registry = registry
        self.zookeeper = zookeeper
        self.log = log
        self.words = words
        self.server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._serve, host, port, reuse_address=True)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    def answer(self, method: str, target: str) -> tuple[int, str, bytes]:
        """(status code, content type, body) for one request."""
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"only GET\n"
        if path == "/health":
            st = self.status()
            serving = st["phase"] == "broadcast" and st["role"] in ("leading", "following")
            body = {"serving": serving, "role": st["role"], "phase": st["phase"], "leader": st["leader"] or None}
            return (200 if serving else 503), "application/json", json.dumps(body).encode() + b"\n"
        if path == "/status":
            body = visible_status(self.status(), self.words)
            return 200, "application/json", json.dumps(body).encode() + b"\n"
        if path == "/metrics":
            text = generate_latest(self.registry)
            if self.zookeeper is not None:
                text += self.zookeeper().encode()
            return 200, CONTENT_TYPE_LATEST, text
        return 404, "text/plain", b"not found; try /health, /status or /metrics\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await asyncio.wait_for(reader.read(65536), IDLE_S)
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    code, ctype, body = self.answer(event.method.decode(), event.target.decode())
                    headers = [("content-type", ctype), ("content-length", str(len(body)))]
                    writer.write(conn.send(h11.Response(status_code=code, headers=headers)) or b"")
                    if event.method != b"HEAD":
                        writer.write(conn.send(h11.Data(data=body)) or b"")
                    writer.write(conn.send(h11.EndOfMessage()) or b"")
                    await writer.drain()
                elif isinstance(event, h11.EndOfMessage):
                    if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                        conn.start_next_cycle()
                elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    break
        except h11.RemoteProtocolError as exc:
            # a bad request is the client's problem: answer 400 when still possible, log one line
            self.log.warning("bad admin request", error=str(exc))
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                with contextlib.suppress(Exception):
                    writer.write(conn.send(h11.Response(status_code=400, headers=[("content-length", "0")])) or b"")
                    writer.write(conn.send(h11.EndOfMessage()) or b"")
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

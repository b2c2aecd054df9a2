"""What ZooKeeper's client port counts: per connection (``cons``) and for the
server (``srvr``, ``mntr`` and ``/metrics``, which read the same totals).

ZooKeeper counts every packet read and written, and times each request from
the moment it was read to the moment its answer went out, in milliseconds.
Here a connection's counters are attributes bumped where its frames are read
and its answers encoded: no allocation per request, and the clock is read
once per batch of frames read (``arrived``) and once per flush (the
transport's own ``now``). The server's totals are the closed connections'
plus the live ones', summed when someone asks.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from zabd.server.client_session import ClientSession
from zabd.server.zk.metrics import ZkMetrics
from zabd.zk import jute

# ZooKeeper's FinalRequestProcessor's names of the last operation (``lop``)
OP_NAMES = {
    jute.OP_CREATE: "CREA", jute.OP_CREATE2: "CREA", jute.OP_CREATE_CONTAINER: "CREA", jute.OP_CREATE_TTL: "CREA",
    jute.OP_DELETE: "DELE", jute.OP_DELETE_CONTAINER: "DELE", jute.OP_EXISTS: "EXIS", jute.OP_GET_DATA: "GETD",
    jute.OP_SET_DATA: "SETD", jute.OP_GET_ACL: "GETA", jute.OP_SET_ACL: "SETA", jute.OP_GET_CHILDREN: "GETC",
    jute.OP_GET_CHILDREN2: "GETC", jute.OP_GET_ALL_CHILDREN_NUMBER: "GETC", jute.OP_SYNC: "SYNC",
    jute.OP_PING: "PING", jute.OP_CHECK: "CHEC", jute.OP_MULTI: "MULT", jute.OP_MULTI_READ: "MLTR",
    jute.OP_RECONFIG: "RECO", jute.OP_CHECK_WATCHES: "CHKW", jute.OP_REMOVE_WATCHES: "REMW",
    jute.OP_SET_WATCHES: "SETW", jute.OP_SET_WATCHES2: "SETW", jute.OP_ADD_WATCH: "ADDW",
    jute.OP_GET_EPHEMERALS: "GETE", jute.OP_WHO_AM_I: "HOMI", jute.OP_CREATE_SESSION: "SESS",
    jute.OP_CLOSE_SESSION: "CLOS",
}
_U64 = (1 << 64) - 1
# requests that are txns, which ZooKeeper times as updates (the others, pings too, as reads)
UPDATE_OPS = frozenset({
    jute.OP_CREATE, jute.OP_CREATE2, jute.OP_CREATE_CONTAINER, jute.OP_CREATE_TTL, jute.OP_DELETE,
    jute.OP_DELETE_CONTAINER, jute.OP_SET_DATA, jute.OP_SET_ACL, jute.OP_MULTI, jute.OP_RECONFIG,
    jute.OP_CREATE_SESSION, jute.OP_CLOSE_SESSION,
})


class ConnStats:
    """One connection's counters."""

    __slots__ = ("addr", "est_ms", "reading", "received", "sent", "op", "cxid", "zxid", "arrived", "answered",
                 "updates", "count", "total_s", "min_s", "max_s", "last_s", "last_resp", "metrics")

    def __init__(self, addr: str = "", est_ms: int = 0, metrics: ZkMetrics | None = None) -> None:
        self.addr = addr
        self.est_ms = est_ms  # wall-clock ms when the connection was accepted (ZooKeeper's ``est``)
        self.reading = True  # False once a four-letter word was read: the connection reads no more
        self.received = 0
        self.sent = 0
        self.op = jute.OP_ERROR  # the last request answered, its opcode
        self.cxid = 0
        self.zxid = 0
        self.arrived = 0.0  # monotonic seconds: when the frames being handled now were read
        # arrival times of answers encoded and not written yet: of reads, and of txns (ZooKeeper's updates)
        self.answered: list[float] = []
        self.updates: list[float] = []
        self.metrics = metrics  # the port's: ZooKeeper's read and update latency summaries
        self.count = 0
        self.total_s = 0.0
        self.min_s = 0.0
        self.max_s = 0.0
        self.last_s = 0.0
        self.last_resp = 0.0  # monotonic seconds of the last answer written

    def written(self, now: float) -> None:
        """The answers encoded so far went out at ``now`` (monotonic seconds)."""
        reads, updates = self.answered, self.updates
        n = len(reads) + len(updates)
        newest = max(max(reads, default=0.0), max(updates, default=0.0))
        oldest = min(min(reads, default=now), min(updates, default=now))
        self.total_s += n * now - sum(reads) - sum(updates)
        if self.count == 0 or now - newest < self.min_s:
            self.min_s = now - newest
        if now - oldest > self.max_s:
            self.max_s = now - oldest
        self.count += n
        self.last_s = now - newest
        self.last_resp = now
        if self.metrics is not None:  # ZooKeeper's readlatency and updatelatency, in whole ms
            summaries = self.metrics.summaries
            if reads:
                summaries["readlatency"].observe_many([int((now - a) * 1000) for a in reads])
            if updates:
                summaries["updatelatency"].observe_many([int((now - a) * 1000) for a in updates])
        reads.clear()
        updates.clear()

    def add(self, other: ConnStats) -> None:
        """Count ``other``'s packets and latencies in these."""
        self.received += other.received
        self.sent += other.sent
        if other.count:
            if self.count == 0 or other.min_s < self.min_s:
                self.min_s = other.min_s
            self.max_s = max(self.max_s, other.max_s)
            self.count += other.count
            self.total_s += other.total_s


class Client(NamedTuple):
    """A row of ``cons``: one connection as ZooKeeper describes it."""

    addr: str
    reading: bool
    queued: int
    received: int
    sent: int
    session: int  # 0 until the connection has a session
    op: str
    est_ms: int
    timeout_ms: int
    cxid: int
    zxid: int
    last_resp_ms: int
    last_ms: int
    min_ms: int
    avg_ms: int
    max_ms: int


def _ms(seconds: float) -> int:
    return int(seconds * 1000)  # whole milliseconds, as ZooKeeper's clock gives them


class PortStats:
    """The counters of every connection of the port, and of those it had."""

    def __init__(self, metrics: ZkMetrics | None = None) -> None:
        self.live: dict[ClientSession, ConnStats] = {}
        self.gone = ConnStats()  # the closed connections' sums
        self.metrics = metrics

    def opened(self, io: ClientSession, addr: str) -> ConnStats:
        stats = self.live[io] = ConnStats(addr, int(time.time() * 1000), self.metrics)
        return stats

    def closed(self, io: ClientSession) -> None:
        stats = self.live.pop(io, None)
        if stats is not None:
            self.gone.add(stats)

    def totals(self) -> ConnStats:
        out = ConnStats()
        out.add(self.gone)
        for stats in self.live.values():
            out.add(stats)
        return out

    def numbers(self) -> dict[str, int | float]:
        """The port's part of ``mntr`` (and of ``/metrics``)."""
        t = self.totals()
        return {
            "packets_received": t.received,
            "packets_sent": t.sent,
            "min_latency": _ms(t.min_s),
            # ZooKeeper's: the mean in ms, to 4 decimals
            "avg_latency": round(t.total_s * 1000 / t.count, 4) if t.count else 0.0,
            "max_latency": _ms(t.max_s),
            "alive_connections": len(self.live),
            "outstanding_requests": sum(io.outstanding for io in self.live),
        }

    def client(self, io: ClientSession, session: int, timeout_ms: int) -> Client:
        s = self.live[io]
        avg = s.total_s / s.count if s.count else 0.0
        return Client(
            "/" + s.addr, s.reading and not io.reading_paused, io.outstanding, s.received, s.sent, session,
            OP_NAMES.get(s.op, "NA"), s.est_ms, timeout_ms, s.cxid & _U64, s.zxid & _U64, _ms(s.last_resp),
            _ms(s.last_s), _ms(s.min_s), _ms(avg), _ms(s.max_s),
        )

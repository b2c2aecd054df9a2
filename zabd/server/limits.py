"""What one client address, and all clients together, may hold of a server.
Socket-free: the transport asks, this decides.

ZooKeeper's limits, on both client ports (zabd's and ZooKeeper's):

| config field | ZooKeeper's | what |
| --- | --- | --- |
| ``max_client_cnxns`` | ``maxClientCnxns`` (60) | connections from one address, on each port |
| ``max_cnxns`` | ``maxCnxns`` (none) | connections in all (0: what the descriptor limit leaves) |
| ``client_max_frame`` | ``jute.maxbuffer`` (1 MiB) | a request, checked from its length prefix |
| ``client_frame_timeout_ms`` | ``sessionlessCnxnTimeout`` | to send a frame once begun (10 s) |
| ``client_max_queued`` | | answers queued to one connection that does not read them |
| ``client_max_queued_total`` | | the same, all connections together |
| ``client_max_buffered_total`` | | bytes of frames begun and not finished, all connections together |

On ZooKeeper's port the frame deadline also runs from the connection's start
to its ConnectRequest, as ZooKeeper closes a connection without a session.
(ZooKeeper's port reads requests up to ``zk_max_data``, its jute.maxbuffer.)

A connection that does not read its answers is paced first: once its socket
buffer is full, the server stops reading its requests and stops computing the
answers of those it already has (``ClientSession``), so its queue stays near
the socket's high-water mark. Only what it is sent regardless (watch events)
can grow it: past ``client_max_queued`` it is cut off, and while all queues
together are past ``client_max_queued_total`` the largest ones are. Frames
that stall are cut at their deadline, and the largest partial frames while
all of them together are past ``client_max_buffered_total``. Every refusal
and cut is counted by reason (``/metrics``) and logged at most once per
address and reason every few seconds (``tls_gate.Refusals``).
"""

from __future__ import annotations

import resource
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

# descriptors kept for what is not a client: the log, snapshots, peers, listeners
RESERVED_FDS = 256

# reasons, as /metrics labels them
PER_ADDRESS = "per_address"
TOTAL = "total"
FRAME_TIMEOUT = "frame_timeout"
QUEUED = "queued"
QUEUED_TOTAL = "queued_total"
BUFFERED_TOTAL = "buffered_total"


@dataclass(slots=True, frozen=True)
class ClientLimits:
    per_address: int  # 0: no limit
    total: int
    frame_timeout_s: float
    queued: int
    queued_total: int
    buffered_total: int


def total_connections(configured: int) -> int:
    """``max_cnxns`` as configured, or (0) what the descriptor limit leaves."""
    if configured:
        return configured
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(64, soft - RESERVED_FDS)


class Conn(Protocol):
    """A client connection as the limits see it."""

    @property
    def mid_frame(self) -> int:
        """Bytes of a frame begun and not finished (0: none)."""
        ...

    @property
    def frame_since(self) -> float | None:
        """When the frame being read began (or the connection, waiting for its first frame); None: not waiting."""
        ...

    def queued(self) -> int:
        """Bytes written to it and not yet sent."""
        ...


class ClientGuard:
    """Connections counted by (port, address); refusals and cuts decided and counted."""

    def __init__(self, limits: ClientLimits) -> None:
        self.limits = limits
        self.open: Counter[tuple[str, str]] = Counter()
        self.total = 0
        self.refused: Counter[str] = Counter()  # by reason
        self.cut: Counter[str] = Counter()

    def admit(self, port: str, host: str) -> str | None:
        """Count a new connection from ``host`` on ``port``; or why it is refused (not counted)."""
        lim = self.limits
        key = (port, host)
        if self.total >= lim.total:
            reason = TOTAL
        elif lim.per_address and self.open[key] >= lim.per_address:
            reason = PER_ADDRESS
        else:
            self.open[key] += 1
            self.total += 1
            return None
        self.refused[reason] += 1
        return reason

    def release(self, port: str, host: str) -> None:
        key = (port, host)
        n = self.open[key] - 1
        if n > 0:
            self.open[key] = n
        else:
            del self.open[key]  # a Counter keeps zeros: an address that came once must not stay
        self.total -= 1

    def stalled(self, conns: Iterable[Conn], now: float) -> list[tuple[Conn, str]]:
        """Of the connections waiting on a frame: those past their deadline,
        then the largest partial frames while all together are past the limit."""
        lim = self.limits
        out: list[tuple[Conn, str]] = []
        waiting = []
        buffered = 0
        for c in conns:
            since = c.frame_since
            if since is not None and now - since > lim.frame_timeout_s:
                out.append((c, FRAME_TIMEOUT))
            else:
                waiting.append(c)
                buffered += c.mid_frame
        if buffered > lim.buffered_total:
            for c in sorted(waiting, key=lambda c: c.mid_frame, reverse=True):
                if buffered <= lim.buffered_total:
                    break
                buffered -= c.mid_frame
                out.append((c, BUFFERED_TOTAL))
        for _, reason in out:
            self.cut[reason] += 1
        return out

    def overfull(self, conns: Iterable[Conn]) -> list[tuple[Conn, str]]:
        """Of the connections whose answers queue up: those past their own
        limit, then the largest while all together are past the server's."""
        lim = self.limits
        out: list[tuple[Conn, str]] = []
        rest = []
        total = 0
        for c in conns:
            q = c.queued()
            if q > lim.queued:
                out.append((c, QUEUED))
            else:
                rest.append((q, c))
                total += q
        if total > lim.queued_total:
            for q, c in sorted(rest, key=lambda qc: qc[0], reverse=True):
                if total <= lim.queued_total:
                    break
                total -= q
                out.append((c, QUEUED_TOTAL))
        for _, reason in out:
            self.cut[reason] += 1
        return out

"""ZooKeeper's client port: its jute protocol in front of the session layer.

A connection's first frame is a ``ConnectRequest``; every later one a
request (``zabd.zk.jute``), handed to ``ZKSessions`` as the records the
msgpack port hands it, so both ports share sessions, order and watches. A
connection whose first four bytes are a four-letter word (``ruok``,
``srvr``, ...) is answered in text and closed (``zabd.server.zk.words``:
the words of ``zk_4lw_whitelist``, ZooKeeper's refusal for the others).

What differs from the msgpack port is only the bytes (``JuteWire``): a reply
body depends on the request's opcode, an ``exists`` of a missing node is the
error NoNode with no body, a refused session is a ConnectResponse with a zero
timeout, and an expired session is told by closing the connection (the
client learns it when it reconnects), as ZooKeeper does.

Requests a client sends right behind its ConnectRequest, before the
ConnectResponse (a new session is a proposal: it takes a round trip), are
held, as ZooKeeper holds them behind the session's creation, and served in
order once the session exists (at most ``HELD_FRAMES`` frames and
``HELD_BYTES`` bytes: beyond that the connection closes); if the session is
refused, they go with the connection. Every packet in and out and every
request's latency is counted (``zabd.server.zk.stats``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, ClassVar

from zabd.config import ZK_WORDS
from zabd.server.client_session import ClientSession
from zabd.server.transport import ClientLink, Transport
from zabd.server.zk import words
from zabd.server.zk.metrics import ZkMetrics
from zabd.server.zk.sessions import ZKSessions
from zabd.server.zk.stats import UPDATE_OPS, Client, ConnStats, PortStats
from zabd.server.zk.words import Status
from zabd.tls import server_context
from zabd.zk import jute
from zabd.zk.errors import Code
from zabd.zk.events import EventType, KeeperState

# requests this server answers Unimplemented (the connection stays open)
_UNIMPLEMENTED = (jute.Unknown,)
# requests held while their connection's session is being created
HELD_FRAMES = 1024  # below client_session.MAX_OUTSTANDING: serving them needs no pacing
HELD_BYTES = 4 << 20
# ZooKeeper writes a four-letter word's answer through a BufferedWriter of 8192 chars
WORD_PACKET = 8192


class JuteWire:
    """One connection's encoder: it remembers each request's opcode and
    arrival until its reply, and counts what it encodes."""

    __slots__ = ("pending", "legacy", "stats", "since", "opened", "on_session", "rid")

    def __init__(self, stats: ConnStats, legacy: bool = False,
                 on_session: Callable[[bool], None] | None = None) -> None:
        self.legacy = legacy  # a client of ZooKeeper 3.3 or older: no readOnly byte in the ConnectResponse
        self.stats = stats
        self.since = stats.arrived  # when the ConnectRequest was read
        self.opened = False  # the ConnectResponse is encoded: the session exists
        self.on_session = on_session  # told True when the session opens, False when it is refused
        # request id -> (xid, opcode, a multi's per-op opcodes, arrival) of requests not answered yet: the
        # ids are the wire's own, as a client may reuse an xid and its replies are not encoded in order
        self.pending: dict[int, tuple[int, int, tuple[int, ...], float]] = {}
        self.rid = 0

    def expect(self, r: jute.Request) -> int:
        """The id the session layer answers ``r`` by."""
        self.rid += 1
        self.pending[self.rid] = (r.xid, r.op, r.multi_ops, self.stats.arrived)
        return self.rid

    def connected(self, rid: int, session: int, password: bytes, timeout_ms: int, read_only: bool = False) -> bytes:
        s = self.stats
        s.sent += 1
        s.op = jute.OP_CREATE_SESSION
        s.updates.append(self.since)
        self.opened = True
        if self.on_session is not None:
            self.on_session(True)
        return jute.encode_connect_response(timeout_ms, session, password, read_only, legacy=self.legacy)

    def refused(self, rid: int, code: Code, message: str) -> bytes:
        if self.on_session is not None:
            self.on_session(False)
        # an unknown or expired session: a zero timeout tells the client it
        # expired; any other refusal (this server is behind the client) is a
        # closed connection, after which the client tries another server
        if code != Code.SESSION_EXPIRED:
            return b""
        self.stats.sent += 1
        return jute.encode_connect_refused(legacy=self.legacy)

    def reply(self, rid: int, zxid: int, err: Code, result: Any | None) -> bytes:
        xid, op, multi_ops, arrived = self.pending.pop(rid, (rid, jute.OP_ERROR, (), self.stats.arrived))
        s = self.stats
        s.sent += 1
        s.op = op
        s.cxid = xid
        s.zxid = zxid
        (s.updates if op in UPDATE_OPS else s.answered).append(arrived)
        return jute.encode_reply(xid, zxid, int(err), op, result, multi_ops=multi_ops)

    def event(self, kind: EventType, state: KeeperState, path: str, zxid: int) -> bytes:
        if state != KeeperState.SYNC_CONNECTED:
            return b""  # expiry: the connection closes, the client learns it on reconnecting
        self.stats.sent += 1
        return jute.encode_event(int(kind), int(state), path, zxid)


class ZKPort:
    def __init__(self, sessions: ZKSessions, status: Status, conf: dict[str, Any], kick: Callable[[], None],
                 log: Any, metrics: ZkMetrics | None = None) -> None:
        """``metrics``: where ZooKeeper's own counters of its client port are
        counted (bytes and ConnectRequests read, read and update latencies)."""
        self.sessions = sessions
        self.status = status
        self.conf = conf  # what ``conf`` shows
        self.kick = kick  # the server has work queued (proposals, answers)
        self.log = log
        self.wires: dict[ClientSession, JuteWire] = {}
        self.metrics = metrics if metrics is not None else ZkMetrics()
        self.stats = PortStats(self.metrics)
        # frames read while the connection's session is being created, in order
        self.held: dict[ClientSession, list[bytes]] = {}

    def opened(self, io: ClientSession, addr: str) -> ConnStats:
        return self.stats.opened(io, addr)

    def _stats(self, io: ClientSession, addr: str) -> ConnStats:
        stats = self.stats.live.get(io)
        return stats if stats is not None else self.stats.opened(io, addr)

    def handle(self, io: ClientSession, bodies: list[bytes], addr: str) -> bool:
        """Frames of one connection; False: close it once the answers are out."""
        self.metrics.counts["bytes_received_count"] += sum(map(len, bodies)) + 4 * len(bodies)
        wire = self.wires.get(io)
        if wire is None:
            self._stats(io, addr).received += len(bodies)
            wire = self._connect(io, bodies[0], addr)
            if wire is None:
                return False
            if not wire.opened and not io.hangup:  # a new session: what follows waits for it
                self.held[io] = []
                return self._hold(io, bodies[1:], addr)
            return self._requests(io, wire, bodies[1:], addr)
        wire.stats.received += len(bodies)
        if io in self.held:
            return self._hold(io, bodies, addr)
        return self._requests(io, wire, bodies, addr)

    def _connect(self, io: ClientSession, body: bytes, addr: str) -> JuteWire | None:
        self.metrics.counts["connection_request_count"] += 1
        try:
            req = jute.decode_connect(body)
        except jute.JuteError as exc:
            self.log.error("ZooKeeper connect request rejected; closing the connection", addr=addr,
                           error=str(exc))
            return None
        wire = self.wires[io] = JuteWire(self._stats(io, addr), req.legacy, lambda ok: self._session(io, ok))
        if not self.sessions.connect(io, wire, 0, req.session_id, req.password, req.timeout_ms,
                                     req.last_zxid_seen, addr, req.read_only):
            return None
        return wire

    def _requests(self, io: ClientSession, wire: JuteWire, bodies: list[bytes], addr: str) -> bool:
        for body in bodies:
            if io.hangup:  # the session layer ended the connection (closeSession, expiry): it reads no more
                return False
            if not self.sessions.reads_more(io):  # a closeSession is on its way: its answer is the last
                return True
            try:
                r = jute.decode_request(body)
            except jute.JuteError as exc:
                self.log.error("ZooKeeper request rejected; closing the connection", addr=addr, error=str(exc))
                return False
            rid = wire.expect(r)
            if isinstance(r.record, _UNIMPLEMENTED):
                io.answer(wire.reply(rid, 0, Code.UNIMPLEMENTED, None))
                continue
            if not self.sessions.request(io, rid, r.record):
                return False
        return True

    def _hold(self, io: ClientSession, bodies: list[bytes], addr: str) -> bool:
        held = self.held[io]
        held += bodies
        if len(held) > HELD_FRAMES or sum(map(len, held)) > HELD_BYTES:
            self.log.error("ZooKeeper requests sent before the session was created exceed what is held for "
                           "them; closing the connection", addr=addr, frames=len(held),
                           bytes=sum(map(len, held)), limit_frames=HELD_FRAMES, limit_bytes=HELD_BYTES)
            del self.held[io]
            return False
        return True

    def _session(self, io: ClientSession, ok: bool) -> None:
        """The connection's session opened (``ok``) or was refused."""
        held = self.held.get(io)
        if held is None:
            return
        if not ok:
            del self.held[io]
            io.hang_up()
        elif not held:
            del self.held[io]
        else:
            # served once the ConnectResponse is queued, outside the proposal
            # path's completion (this is called from within it)
            asyncio.get_running_loop().call_soon(self._replay, io)

    def _replay(self, io: ClientSession) -> None:
        held = self.held.pop(io, None)
        wire = self.wires.get(io)
        if held is None or wire is None or io.closed or io.hangup:
            return
        stats = wire.stats
        arrived, stats.arrived = stats.arrived, wire.since  # they waited since the connect, at the latest
        try:
            if not self._requests(io, wire, held, stats.addr):
                io.hang_up()
        finally:
            stats.arrived = arrived
        self.kick()

    def words(self, io: ClientSession, word: str) -> None:
        """A four-letter word instead of a connect: answered in text, then closed."""
        stats = self._stats(io, "?")
        stats.received += 1  # as ZooKeeper counts it
        self.metrics.counts["bytes_received_count"] += 4
        stats.reading = False
        text = words.answer(word, self).encode()
        # as ZooKeeper counts it: a packet per 8 KiB its BufferedWriter hands on, the rest at close
        stats.sent += -(-len(text) // WORD_PACKET)
        io.answer(text)
        io.hang_up()

    def closed(self, io: ClientSession) -> None:
        self.wires.pop(io, None)
        self.held.pop(io, None)
        self.stats.closed(io)

    # ----------------------------------------- what the four-letter words read

    def clients(self) -> list[Client]:
        conns = self.sessions.conns
        out = []
        for io in self.stats.live:
            conn = conns.get(io)
            out.append(self.stats.client(io, conn.session if conn else 0, conn.timeout_ms if conn else 0))
        return out

    def watching(self) -> tuple[int, int, int]:
        """(connections, paths, watches) of the data watches: ZooKeeper's
        ``wchs`` counts those only (its DataTree.getWatchesSummary)."""
        table = self.sessions.watches.data
        return len(table.by_owner), len(table.by_path), table.count()

    def numbers(self) -> dict[str, int | float]:
        """The port's counters as ``status`` (and so ``mntr`` and ``/metrics``) shows them."""
        return self.stats.numbers()

    def sasl_numbers(self) -> dict[str, int]:
        """SASL exchanges that succeeded and failed (``status``' and ``/metrics``' only: not ZooKeeper's mntr)."""
        return {"sasl_succeeded": self.sessions.sasl_succeeded, "sasl_failed": self.sessions.sasl_failed}


class ZKClientLink(ClientLink):
    """A connection to ZooKeeper's client port: jute frames, or a four-letter
    word in place of the first frame's length."""

    PORT: ClassVar[str] = "zookeeper"

    def __init__(self, net: Transport, port: ZKPort) -> None:
        super().__init__(net)
        self.port = port
        # ZooKeeper's jute.maxbuffer (1 MiB - 1 by default) bounds a whole request: a
        # longer one closes the connection without an answer, as ZooKeeper's does
        self.session.reader = jute.FrameReader(min(net.config.max_frame, net.config.zk_max_data - 1))
        self._head: bytes | None = b""  # the first bytes, until there are four
        self.stats = ConnStats()  # this connection's counters, once it is made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.closed:  # refused: over a connection limit
            return
        # as ZooKeeper's sessionless connections: a ConnectRequest within the frame deadline
        self.frame_since = time.monotonic()
        self.net.partial.add(self)
        self.stats = self.port.opened(self.session, self.addr)
        if self.session.role is None:
            # tokens cannot travel in ZooKeeper's protocol: where the server
            # asks for them, only a verified client certificate gets in
            self.net.refusals.refused("ZooKeeper connection refused: the server requires a client certificate or a "
                                      "token, and this port takes certificates only", self.addr, "no certificate")
            self.abort()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._head is not None:
            head = self._head + data
            if len(head) < 4:
                self._head = head
                return
            self._head = None
            word = head[:4].decode("latin-1")
            if word in ZK_WORDS:
                self.port.words(self.session, word)
                return
            data = head
        try:
            bodies = self.session.feed(data)
        except jute.JuteError as exc:
            self.net.refusals.refused("ZooKeeper frame rejected; closing the connection", self.addr, str(exc))
            self.abort()
            return
        self.framing(bool(bodies))
        if bodies:
            self.stats.arrived = time.monotonic()  # one clock read per batch of frames: their latencies start here
            if not self.port.handle(self.session, bodies, self.addr):
                self.session.hang_up()
            self.port.kick()
        self.pace()

    def take_output(self, now: float) -> list[bytes]:
        if self.stats.answered or self.stats.updates:  # the answers encoded so far leave now: their latencies end
            self.stats.written(now)
        return super().take_output(now)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.port.closed(self.session)


def open_zookeeper_port(transport: Transport, sessions: ZKSessions | None, status: Status,
                        kick: Callable[[], None], log: Any, metrics: ZkMetrics | None = None) -> ZKPort | None:
    """ZooKeeper's client port, if the configuration names one and the server
    holds the tree: it listens when the transport starts."""
    cfg = transport.config
    addr, secure = cfg.zookeeper_addr, cfg.zookeeper_secure_addr
    if (addr is None and secure is None) or sessions is None:
        return None
    # what ``conf`` shows: the fields the model marks SHOWN (never a secret such as the superuser
    # digest); the words read zk_read_only and zk_4lw_whitelist from here
    conf = cfg.conf_view()
    port = ZKPort(sessions, status, conf, kick, log, metrics)
    sessions.refused = transport.refusals.refused  # a flood of failed SASL exchanges is not a flood of lines
    if addr is not None:
        # tls_client covers both client ports
        transport.more_ports.append(
            (lambda: ZKClientLink(transport, port), addr[0], addr[1], transport.client_tls, "zookeeper")
        )
    if secure is not None:  # ZooKeeper's secureClientPort, beside a plaintext one
        ctx = server_context(cfg.tls_ca, cfg.tls_cert, cfg.tls_key, cfg.tls_client_certs)
        transport.more_ports.append(
            (lambda: ZKClientLink(transport, port), secure[0], secure[1], ctx, "zookeeper-secure")
        )
    return port

"""ZooKeeper's client port: its jute protocol in front of the session layer. Socket-free.

A connection's first frame is a ``ConnectRequest``; every later one a
request (``zabd.codec.jute``), handed to ``ZKSessions`` as the records the
msgpack port hands it, so both ports share sessions, order and watches. A
connection whose first four bytes are a four-letter word (``ruok``,
``srvr``, ...) is answered in text and closed (``zabd.server.zk_words``).

What differs from the msgpack port is only the bytes (``JuteWire``): a reply
body depends on the request's opcode, an ``exists`` of a missing node is the
error NoNode with no body, a refused session is a ConnectResponse with a zero
timeout, and an expired session is told by closing the connection (the
client learns it when it reconnects), as ZooKeeper does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from zabd.codec import jute
from zabd.kv.zk.errors import Code
from zabd.kv.zk.events import EventType, KeeperState
from zabd.server import zk_words as words
from zabd.server.client_session import ClientSession
from zabd.server.transport import ClientLink, Transport
from zabd.server.zk_sessions import ZKSessions
from zabd.server.zk_words import FOUR_LETTER_WORDS
from zabd.tls import server_context

# requests this server answers Unimplemented (the connection stays open)
_UNIMPLEMENTED = (jute.Unknown,)


class JuteWire:
    """One connection's encoder: it remembers each request's opcode until its reply."""

    __slots__ = ("pending", "legacy")

    def __init__(self, legacy: bool = False) -> None:
        self.legacy = legacy  # a client of ZooKeeper 3.3 or older: no readOnly byte in the ConnectResponse
        # xid -> (opcode, a multi's per-op opcodes) of requests not answered yet
        self.pending: dict[int, list[tuple[int, tuple[int, ...]]]] = {}

    def expect(self, r: jute.Request) -> None:
        self.pending.setdefault(r.xid, []).append((r.op, r.multi_ops))

    def _op(self, xid: int) -> tuple[int, tuple[int, ...]]:
        ops = self.pending.get(xid)
        if not ops:
            return jute.OP_ERROR, ()
        op = ops.pop(0)
        if not ops:
            del self.pending[xid]
        return op

    def connected(self, rid: int, session: int, password: bytes, timeout_ms: int, read_only: bool = False) -> bytes:
        return jute.encode_connect_response(timeout_ms, session, password, read_only, legacy=self.legacy)

    def refused(self, rid: int, code: Code, message: str) -> bytes:
        # an unknown or expired session: a zero timeout tells the client it
        # expired; any other refusal (this server is behind the client) is a
        # closed connection, after which the client tries another server
        return jute.encode_connect_refused(legacy=self.legacy) if code == Code.SESSION_EXPIRED else b""

    def reply(self, xid: int, zxid: int, err: Code, result: Any | None) -> bytes:
        op, multi_ops = self._op(xid)
        return jute.encode_reply(xid, zxid, int(err), op, result, multi_ops=multi_ops)

    def event(self, kind: EventType, state: KeeperState, path: str, zxid: int) -> bytes:
        if state != KeeperState.SYNC_CONNECTED:
            return b""  # expiry: the connection closes, the client learns it on reconnecting
        return jute.encode_event(int(kind), int(state), path, zxid)


class ZKPort:
    def __init__(self, sessions: ZKSessions, four_letter: Callable[[str], str], kick: Callable[[], None],
                 log: Any) -> None:
        self.sessions = sessions
        self.four_letter = four_letter
        self.kick = kick  # the server has work queued (proposals, answers)
        self.log = log
        self.wires: dict[ClientSession, JuteWire] = {}

    def handle(self, io: ClientSession, bodies: list[bytes], addr: str) -> bool:
        """Frames of one connection; False: close it once the answers are out."""
        for body in bodies:
            wire = self.wires.get(io)
            if wire is None:
                try:
                    req = jute.decode_connect(body)
                except jute.JuteError as exc:
                    self.log.error("ZooKeeper connect request rejected; closing the connection", addr=addr,
                                   error=str(exc))
                    return False
                wire = self.wires[io] = JuteWire(req.legacy)
                if not self.sessions.connect(io, wire, 0, req.session_id, req.password, req.timeout_ms,
                                             req.last_zxid_seen, addr, req.read_only):
                    return False
                continue
            try:
                r = jute.decode_request(body)
            except jute.JuteError as exc:
                self.log.error("ZooKeeper request rejected; closing the connection", addr=addr, error=str(exc))
                return False
            wire.expect(r)
            if isinstance(r.record, _UNIMPLEMENTED):
                io.answer(wire.reply(r.xid, 0, Code.UNIMPLEMENTED, None))
                continue
            if not self.sessions.request(io, r.xid, r.record):
                return False
        return True

    def words(self, io: ClientSession, word: str) -> None:
        """A four-letter word instead of a connect: answered in text, then closed."""
        io.answer(self.four_letter(word).encode())
        io.hang_up()

    def closed(self, io: ClientSession) -> None:
        self.wires.pop(io, None)


class ZKClientLink(ClientLink):
    """A connection to ZooKeeper's client port: jute frames, or a four-letter
    word in place of the first frame's length."""

    def __init__(self, net: Transport, port: ZKPort) -> None:
        super().__init__(net)
        self.port = port
        # ZooKeeper's jute.maxbuffer (1 MiB - 1 by default) bounds a whole request: a
        # longer one closes the connection without an answer, as ZooKeeper's does
        self.session.reader = jute.FrameReader(min(net.config.max_frame, net.config.zk_max_data - 1))
        self._head: bytes | None = b""  # the first bytes, until there are four

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
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
            if word in FOUR_LETTER_WORDS:
                self.port.words(self.session, word)
                return
            data = head
        try:
            bodies = self.session.feed(data)
        except jute.JuteError as exc:
            self.net.log.error("ZooKeeper frame rejected; closing the connection", addr=self.addr, error=str(exc))
            self.abort()
            return
        if bodies:
            if not self.port.handle(self.session, bodies, self.addr):
                self.session.hang_up()
            self.port.kick()
        self.pace()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.port.closed(self.session)


# what ``conf`` shows (never a secret such as the superuser digest)
CONF_FIELDS = ("id", "client", "zookeeper", "peers", "tick_ms", "zk_tick_ms", "zk_max_data", "zk_read_only", "storage",
               "data_dir", "snap_count", "fsync")


def open_zookeeper_port(transport: Transport, sessions: ZKSessions | None, status: Callable[[], dict[str, Any]],
                        kick: Callable[[], None], log: Any) -> ZKPort | None:
    """ZooKeeper's client port, if the configuration names one and the server
    holds the tree: it listens when the transport starts."""
    cfg = transport.config
    addr, secure = cfg.zookeeper_addr, cfg.zookeeper_secure_addr
    if (addr is None and secure is None) or sessions is None:
        return None
    conf = {k: v for k, v in cfg.model_dump().items() if k in CONF_FIELDS}
    port = ZKPort(sessions, lambda word: words.answer(word, status(), conf), kick, log)
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

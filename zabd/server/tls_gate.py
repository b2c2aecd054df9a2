"""The TLS handshake of an accepted connection, done before its link exists.

With ``create_server(ssl=...)`` a failed handshake (a certificate of another
CA, no certificate, plaintext on a TLS port) never reaches the protocol: it
is dropped silently (or, in debug mode, logged by asyncio with a traceback).
So a TLS port accepts plain sockets here and runs each handshake itself; a
failure is one log line with the address and the reason, and only a
verified connection gets a link. On a client port the connection limits
(``zabd.server.limits``) are applied before the handshake, which costs the
server more than it costs the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from zabd.tls import describe_error

HANDSHAKE_TIMEOUT = 10.0
# A refused node or client redials several times a second: log the first
# refusal of each address and reason, then at most one line per this many
# seconds (with the count of the ones not logged); and, as a client may come
# from many addresses (any of 127.0.0.0/8 on the same host), at most
# EVENT_LINES lines of one event in that time, whatever the addresses.
REPEAT_S = 10.0
EVENT_LINES = 20


class Refusals:
    """Log lines for refused connections, without a line per redial."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self.pending: set[asyncio.Task[None]] = set()  # handshakes under way
        self._last: dict[tuple[str, str, str], tuple[float, int]] = {}
        self._events: dict[str, tuple[float, int, int]] = {}  # event -> (window start, lines, not logged)

    def refused(self, event: str, addr: str, reason: str, **fields: Any) -> None:
        key = (event, addr.rpartition(":")[0], reason)
        now = time.monotonic()
        at, quiet = self._last.get(key, (-REPEAT_S, 0))
        if now - at < REPEAT_S:
            self._last[key] = (at, quiet + 1)
            return
        start, lines, dropped = self._events.get(event, (now, 0, 0))
        if now - start >= REPEAT_S:
            start, lines = now, 0
        if lines >= EVENT_LINES:
            self._events[event] = (start, lines, dropped + 1)
            return
        self._events[event] = (start, lines + 1, 0)
        if len(self._last) > 1024:  # many addresses: forget them rather than grow
            self._last.clear()
        self._last[key] = (now, 0)
        counts = {"repeats_not_logged": quiet} if quiet else {}
        if dropped:
            counts["others_not_logged"] = dropped  # of this event, from other addresses
        self.log.warning(event, addr=addr, reason=reason, **counts, **fields)


class TlsListener:
    """A TLS port: accepts plain sockets and runs each handshake in a task of
    its own (``connect_accepted_socket`` raises a failed one here, where it
    can be logged; no link is made for it)."""

    def __init__(self, ctx: ssl.SSLContext, make_link: Callable[[], asyncio.Protocol], kind: str,
                 refusals: Refusals, admit: Callable[[str], str | None] | None = None,
                 release: Callable[[str], None] | None = None) -> None:
        """``admit(host)``: None if a connection from ``host`` may go on (it
        is counted until ``release(host)``: by the link it becomes, or here if
        its handshake fails), else why not."""
        self.ctx = ctx
        self.make_link = make_link
        self.kind = kind
        self.refusals = refusals
        self.admit = admit
        self.release = release
        self.sock: socket.socket | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int, backlog: int = 128) -> None:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, addr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(addr)
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.sock = sock
        self.task = asyncio.create_task(self._accept(sock), name=f"accept-{self.kind}")

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:  # out of descriptors, say: try again, do not die
                self.refusals.log.warning(f"{self.kind} accept failed", error=str(exc))
                await asyncio.sleep(0.1)
                continue
            if self.admit is not None:
                try:
                    host, port = conn.getpeername()[:2]
                except OSError:
                    conn.close()
                    continue
                refused = self.admit(host)
                if refused is not None:
                    self.refusals.refused(f"{self.kind} connection refused: too many connections", f"{host}:{port}",
                                          refused)
                    conn.close()
                    continue
            task = asyncio.create_task(self._handshake(conn))
            self.refusals.pending.add(task)
            task.add_done_callback(self.refusals.pending.discard)

    async def _handshake(self, conn: socket.socket) -> None:
        try:
            peer = conn.getpeername()
            addr = f"{peer[0]}:{peer[1]}"
        except OSError:
            addr = "?"
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                self.make_link, conn, ssl=self.ctx, ssl_handshake_timeout=HANDSHAKE_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            self.refusals.refused(f"{self.kind} connection refused: TLS handshake failed", addr,
                                  describe_error(exc, HANDSHAKE_TIMEOUT))
            conn.close()
            if self.release is not None:
                self.release(addr.rpartition(":")[0])

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.sock is not None:
            self.sock.close()

    async def wait_closed(self) -> None:
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

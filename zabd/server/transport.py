"""Sockets: listeners, dialers, links, and one write per link per iteration.

Mechanics only. Bytes that arrive go to the link's session object (socket
free: ``peer_session``/``client_session``) and what it makes of them goes to
the :class:`Handler` (the replica). Output queued on sessions during a loop
iteration is written once per link at its end (``flush``), with
``writelines``. The lower id of each pair dials; a dial gives up after
``peer_connect_timeout_ms`` and is retried with a short backoff. A peer link
is pinged when idle and closed when silent (``PeerSession.keepalive``).
Client connections are admitted, paced and cut as ``zabd.server.limits``
decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Protocol, cast

from zabd.codec.framing import FrameError
from zabd.config import ServerConfig, parse_hostport
from zabd.server.client_session import ClientSession
from zabd.server.limits import ClientGuard, ClientLimits, total_connections
from zabd.server.link import Link
from zabd.server.memory import Trimmer
from zabd.server.peer_session import (
    STREAM_STEP,
    STREAM_WINDOW,
    HandshakeDone,
    IdentityRefused,
    MembershipRefused,
    PeerEvent,
    PeerSession,
)
from zabd.server.peer_wire import Members
from zabd.server.tls_gate import Refusals, TlsListener
from zabd.tls import cert_names, client_context, describe_error, identity_problem, node_name, server_context
from zabd.tokens import ADMIN, RW

# what a TLS connection holds besides its frames (OpenSSL's state and record buffers), for the trim
TLS_CONN_BYTES = 64 << 10
AUTH_FRAME = 8192  # the largest frame before a connection authenticated: an auth request (a token <= 4 KiB)
BACKOFF_MIN = 0.02
# Redials of a peer that is down are cheap (refused at once, or abandoned at
# peer_connect_timeout_ms); a short cap rejoins a healed partition quickly.
# Only the lower id dials, so a node that comes up (a restart: the nodes finish
# recovering seconds apart) waits for its lower peers' next redial to be
# linked: half the cap on average, before any vote can reach it.
BACKOFF_MAX = 0.05


class Handler(Protocol):
    def peer_up(self, peer: int) -> None: ...

    def peer_events(self, peer: int, events: list[PeerEvent]) -> None: ...

    def peer_down(self, peer: int) -> None: ...

    def client_requests(self, link: ClientLink, bodies: list[Any]) -> None: ...

    def client_closed(self, link: ClientLink) -> None: ...

    def client_stalled(self, link: ClientLink, stalled: bool) -> None: ...

    def output_pending(self) -> None:
        """Something was queued: flush at the end of this iteration."""
        ...


def _same(link: PeerLink) -> PeerLink:
    return link


def _preadmitted(make: Callable[[], asyncio.Protocol]) -> asyncio.Protocol:
    link = make()
    assert isinstance(link, ClientLink)
    link.preadmitted = True
    return link


class PeerLink(Link):
    def __init__(self, net: Transport, peer: int | None) -> None:
        super().__init__()
        self.net = net
        self.max_queued = net.config.max_link_buffer
        cfg = net.config
        self.session = PeerSession(
            cfg.id, frozenset(net.addresses), peer, cfg.max_frame, time.monotonic(), net.hello_observers, net.addresses
        )
        self.session.on_output = lambda: net.mark(self)
        self.session.guest = net.guest
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.paused = False  # the socket's buffer holds a stream's window: take no more of it

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # a stream (a SNAP) pauses above a window and goes on when a quarter is left
        cast(asyncio.WriteTransport, transport).set_write_buffer_limits(high=STREAM_WINDOW, low=STREAM_WINDOW // 4)
        self.net.links.add(self)
        if self.net.peer_tls is not None:
            # the dialer's side was checked by TLS itself (server_hostname);
            # an accepted link's Hello must name the node its certificate names
            peercert = transport.get_extra_info("peercert")
            self.session.identity = lambda node: identity_problem(peercert, node)

    def take_output(self, now: float) -> list[bytes]:
        return self.session.take_output(now, 0 if self.paused else STREAM_STEP)

    def more_output(self) -> bool:
        return self.session.stream is not None and not self.paused and not self.closed

    def held(self) -> int:
        return self.session.behind_bytes

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.session.stream is not None and not self.closed:
            self.net.mark(self)

    def given_up(self) -> None:
        """Its dial was given up (timed out, or cancelled by a membership change)
        after connection_made ran: uvloop closed the transport, and no connection_lost follows."""
        if self.transport is not None:
            self.connection_lost(None)

    def data_received(self, data: bytes) -> None:
        # a name per except clause: compiled, the name keeps its first clause's type
        try:
            events = self.session.feed(data, time.monotonic())
        except IdentityRefused as wrong:
            self.net.refusals.refused("peer connection refused: wrong identity", self.addr, str(wrong))
            self.abort()
            return
        except MembershipRefused as outsider:
            self.net.refusals.refused("peer connection refused: membership", self.addr, str(outsider))
            self.abort()
            return
        except FrameError as exc:
            self.net.log.error("peer frame rejected; closing the link", peer=self.session.peer, addr=self.addr,
                               error=str(exc))
            self.abort()
            return
        if events and isinstance(events[0], HandshakeDone):  # only ever the first event
            self.net.attach(self)
            events = events[1:]
        if self.session.heard is not None:
            self.net.learn(self.session.heard)
            self.session.heard = None
        if events and self.session.peer is not None and not self.closed:
            self.net.handler.peer_events(self.session.peer, events)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.session.mid_frame and not self.closed:
            self.net.log.error("peer link closed mid-frame (truncated frame)", peer=self.session.peer,
                               addr=self.addr, buffered=self.session.mid_frame)
        self.closed = True
        self.net.links.discard(self)
        if not self.lost.done():
            self.lost.set_result(None)
        self.net.detach(self)
        self.forget()

    def forget(self) -> None:
        super().forget()
        self.session.on_output = None


class ClientLink(Link):
    PORT: ClassVar[str] = "client"  # the port, as the limits count connections by address on each

    def __init__(self, net: Transport) -> None:
        super().__init__()
        self.net = net
        self.session = ClientSession(net.config.client_max_frame)
        self.session.on_output = lambda: net.mark(self)
        self.max_queued = net.config.client_max_queued
        self.host = "?"
        self.admitted = False  # counted by the transport's guard (released when it closes)
        self.preadmitted = False  # counted before its TLS handshake (tls_gate)
        self.frame_since: float | None = None  # when the frame being read began
        self.peak_queued = 0  # the most it had queued while it did not read (what its close frees)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.host = self.addr.rpartition(":")[0].strip("[]")
        if not self.preadmitted:
            refused = self.net.guard.admit(self.PORT, self.host)
            if refused is not None:
                self.net.refusals.refused(f"{self.PORT} connection refused: too many connections", self.addr, refused,
                                          limit=self.net.limit_of(refused))
                self.abort()
                return
        self.admitted = True
        self.net.clients.add(self)
        # a verified client certificate is an identity; else a token is needed, if the server asks for one
        cert = transport.get_extra_info("peercert")
        if cert and cert_names(cert) & self.net.admin_names:
            self.session.role = ADMIN
        else:
            self.session.role = RW if cert or not self.net.auth_required else None
        if self.session.role is None:  # its first frame is a token: nothing big buffered for a stranger
            self.session.frames_upto(AUTH_FRAME)

    @property
    def mid_frame(self) -> int:
        return self.session.mid_frame

    def queued(self) -> int:
        return self.buffered()

    def framing(self, completed: bool) -> None:
        """After a read: a frame begun and not finished starts (or, after one
        finished, restarts) its deadline."""
        if not self.session.mid_frame:
            if self.frame_since is not None:
                self.frame_since = None
                self.net.partial.discard(self)
        elif completed or self.frame_since is None:
            self.frame_since = time.monotonic()
            self.net.partial.add(self)

    def take_output(self, now: float) -> list[bytes]:
        if self.session.hangup and not self.closed:
            self.close_after_output()
            return []
        if self.session.reading_paused:
            self.pace()  # answers are going out: read again once few enough are in flight
        return self.session.take_output()

    def data_received(self, data: bytes) -> None:
        try:
            bodies = self.session.feed(data)
        except FrameError as exc:
            self.net.refusals.refused("client frame rejected; closing the connection", self.addr, str(exc))
            self.abort()
            return
        self.framing(bool(bodies))
        if bodies:
            self.net.handler.client_requests(self, bodies)
        self.pace()

    def forget(self) -> None:
        super().forget()
        self.session.on_output = None

    def pace(self) -> None:
        """Stop reading while too many requests are in flight, and go on."""
        s = self.session
        if self.transport is None or self.closed:
            return
        if s.wants_pause():
            s.reading_paused = True
            self.transport.pause_reading()
        elif s.wants_resume():
            s.reading_paused = False
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        # it does not read its answers: read none of its requests, compute no more answers
        self.session.writing_paused = True
        self.net.unread.add(self)
        self.pace()
        self.net.handler.client_stalled(self, True)

    def resume_writing(self) -> None:
        self.net.unread.discard(self)
        self.session.drained()
        self.pace()
        self.net.handler.client_stalled(self, False)

    def close_after_output(self) -> None:
        """Send what is queued, then close (after a bad request)."""
        self.write(self.session.take_output())
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.session.mid_frame and not self.closed:
            self.net.refusals.refused("client connection closed mid-frame (truncated frame)", self.addr,
                                      "truncated", buffered=self.session.mid_frame)
        self.closed = True
        self.net.trimmer.freed_bytes(self.session.mid_frame + max(self.buffered(), self.peak_queued)
                                     + (TLS_CONN_BYTES if self.tls else 0))
        self.session.close()
        self.forget()
        if not self.admitted:
            return
        self.admitted = False
        self.net.guard.release(self.PORT, self.host)
        self.net.clients.discard(self)
        self.net.partial.discard(self)
        self.net.unread.discard(self)
        self.net.handler.client_closed(self)


class Transport:
    def __init__(self, config: ServerConfig, handler: Handler, log: Any, auth_required: bool = False) -> None:
        self.config = config
        self.handler = handler
        self.log = log
        self.auth_required = auth_required
        self.admin_names = frozenset(config.tls_admin_names)
        self.peer_tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None  # (accept, dial)
        self.client_tls: ssl.SSLContext | None = None
        if config.tls_peer:
            self.peer_tls = (
                server_context(config.tls_ca, config.tls_cert, config.tls_key, "required"),
                client_context(config.tls_ca, config.tls_cert, config.tls_key),
            )
        if config.tls_client:
            self.client_tls = server_context(config.tls_ca, config.tls_cert, config.tls_key, config.tls_client_certs)
        self._dial_errors: dict[int, str] = {}
        # the members' quorum addresses: the configured ones until a membership change says otherwise
        self.addresses: dict[int, str] = config.quorum_addresses
        self.hello_observers: tuple[int, ...] | None = tuple(sorted(config.observer_ids))
        self.dialers: dict[int, asyncio.Task[None]] = {}
        # quorum addresses of members that peers told of (wire.Members) and the log has not yet
        self.learned: dict[int, str] = {}
        self.peers: dict[int, PeerLink] = {}
        # whether a removed node follows this leader as a guest: its Hello is taken as a member's
        self.guest: Callable[[int], bool] | None = None
        # every open peer link, also those whose Hello has not come yet
        self.links: set[PeerLink] = set()
        self.clients: set[ClientLink] = set()
        self.guard = ClientGuard(ClientLimits(
            config.max_client_cnxns, total_connections(config.max_cnxns), config.client_frame_timeout_ms / 1000.0,
            config.client_max_queued, config.client_max_queued_total, config.client_max_buffered_total))
        self.partial: set[ClientLink] = set()  # client links in the middle of a frame
        self.unread: set[ClientLink] = set()  # client links whose socket buffer is full
        self.trimmer = Trimmer()  # freed client buffers go back to the system after a burst
        self.dirty: list[Link] = []
        self.servers: list[asyncio.AbstractServer | TlsListener] = []
        # (factory, host, port, TLS context, kind) of other client protocols (ZooKeeper's)
        self.more_ports: list[tuple[Callable[[], asyncio.Protocol], str, int, ssl.SSLContext | None, str]] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.refusals = Refusals(log)
        self.stopping = False
        self._ping_s = config.peer_ping_ms / 1000.0
        self._silence_s = config.peer_silence_ms / 1000.0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.config.peer_addr(self.config.id)
        chost, cport = self.config.client_addr
        ports: list[tuple[Callable[[], asyncio.Protocol], str, int, ssl.SSLContext | None, str]] = [
            (lambda: PeerLink(self, None), host, port, self.peer_tls[0] if self.peer_tls else None, "peer"),
            (lambda: ClientLink(self), chost, cport, self.client_tls, "client"),
        ]
        if (election := self.config.election_addr) is not None:
            # ZooKeeper's election port, named in this node's spec: zabd elects on the peer link itself,
            # so this port takes the same links as the quorum port (a peer may dial either)
            ports.append((lambda: PeerLink(self, None), *election, self.peer_tls[0] if self.peer_tls else None,
                          "peer"))
        ports += self.more_ports
        for factory, h, p, ctx, kind in ports:
            backlog = 100 if kind == "peer" else self.config.client_backlog
            if ctx is None:
                self.servers.append(await loop.create_server(factory, h, p, reuse_address=True, backlog=backlog))
                continue
            counted = {"client": ClientLink.PORT, "zookeeper": "zookeeper", "zookeeper-secure": "zookeeper"}.get(kind)
            if counted is None:
                listener = TlsListener(ctx, factory, kind, self.refusals)
            else:  # counted before the handshake: the link it makes is, already
                listener = TlsListener(ctx, functools.partial(_preadmitted, factory), kind, self.refusals,
                                       functools.partial(self.guard.admit, counted),
                                       functools.partial(self.guard.release, counted))
            self.servers.append(listener)
            await listener.start(h, p, backlog)
        for peer in sorted(self.addresses):
            self._dial_later(peer)

    def _dial_later(self, peer: int) -> None:
        """Keep a link to ``peer`` up, if this node is the one that dials it."""
        if peer > self.config.id and peer not in self.dialers and not self.stopping:
            self.dialers[peer] = asyncio.create_task(self._dial(peer), name=f"dial-{peer}")

    def set_members(self, addresses: dict[int, str]) -> None:
        """A membership change: dial new members (the lower id dials), stop
        dialing removed ones, accept new links from members only, and tell
        the dialers of accepted links the new members. A link that is up
        stays: a removed leader still needs its followers' acks to commit its
        own removal, and a removed follower goes on as the leader's guest
        (Options.keep_removed), which may also dial anew (``guest``)."""
        own = self.config.id
        old = self.addresses
        self.addresses = dict(addresses)
        self.hello_observers = None  # the log decides from now on, not the configuration
        # what peers told of is over: the log names the members now
        gone = old.keys() | self.learned.keys()
        self.learned = {}
        members = frozenset(self.addresses)
        for link in self.links:
            link.session.members_changed(members, self.addresses)
        for peer in sorted(gone - addresses.keys() - {own}):
            task = self.dialers.pop(peer, None)
            if task is not None:
                task.cancel()
        if self.servers:
            for peer in sorted(addresses.keys() - old.keys()):
                self._dial_later(peer)

    def learn(self, members: Members) -> None:
        """A peer's members: dial those this node does not know and should
        dial (higher ids), until its own membership names them or not."""
        for peer, addr in members.addresses:
            if peer > self.config.id and peer not in self.addresses:
                self.learned.setdefault(peer, addr)
                self._dial_later(peer)

    async def _dial(self, peer: int) -> None:
        loop = asyncio.get_running_loop()
        host, port = parse_hostport(self.addresses.get(peer) or self.learned[peer])
        timeout = self.config.peer_connect_timeout_ms / 1000.0
        backoff = BACKOFF_MIN
        tls: dict[str, Any] = {}
        if self.peer_tls is not None:
            # TLS checks the certificate names the node we dial
            tls = {"ssl": self.peer_tls[1], "server_hostname": node_name(peer)}
        while not self.stopping:
            link = PeerLink(self, peer)
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can return a connection that came
                # up as the dial was cancelled, and the cancel (a membership change) is lost
                async with asyncio.timeout(timeout):
                    await loop.create_connection(functools.partial(_same, link), host, port, **tls)
            except asyncio.CancelledError:
                link.given_up()
                raise
            except (OSError, TimeoutError) as exc:
                link.given_up()
                if isinstance(exc, ssl.SSLError) and self._dial_errors.get(peer) != describe_error(exc):
                    # one line per new reason, not one per retry
                    self._dial_errors[peer] = describe_error(exc)
                    self.log.error("peer refused: TLS handshake failed", peer=peer, addr=f"{host}:{port}",
                                   reason=describe_error(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            if not link.closed:
                # the link is this node's once the dial returns, not at connection_made: uvloop
                # runs that for a dial given up right after too, then closes the transport under it
                self.mark(link)  # the Hello queued when the session was made
                self.attach(link)
            up_at = time.monotonic()
            await link.lost
            if time.monotonic() - up_at > 1.0:
                backoff = BACKOFF_MIN
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    # ----------------------------------------------------------- peer links

    def attach(self, link: PeerLink) -> None:
        peer = link.session.peer
        assert peer is not None
        old = self.peers.get(peer)
        self.peers[peer] = link
        self.log.info("peer connected", peer=peer, addr=link.addr)
        if old is not None and old is not link:
            old.abort()
            self.handler.peer_down(peer)  # the old link's losses count as a broken link
        self.handler.peer_up(peer)
        self.handler.output_pending()

    def detach(self, link: PeerLink) -> None:
        peer = link.session.peer
        if peer is None or self.peers.get(peer) is not link:
            return
        del self.peers[peer]
        if not self.stopping:
            self.log.info("peer disconnected", peer=peer)
            self.handler.peer_down(peer)

    def connected(self, peer: int) -> bool:
        link = self.peers.get(peer)
        return link is not None and not link.closed

    def send_frame(self, peer: int, data: bytes) -> bool:
        link = self.peers.get(peer)
        if link is None or link.closed:
            return False
        link.session.push(data)
        return True

    def send_frames(self, peer: int, frames: list[bytes]) -> bool:
        link = self.peers.get(peer)
        if link is None or link.closed:
            return False
        link.session.push_all(frames)
        return True

    def send_stream(self, peer: int, frames: Iterator[bytes]) -> bool:
        """Frames produced as the link can take them (``PeerSession.push_stream``)."""
        link = self.peers.get(peer)
        if link is None or link.closed:
            return False
        link.session.push_stream(frames)
        return True

    def drop_peer(self, peer: int, why: str) -> None:
        """Close a peer's link after what it sent was refused (it redials)."""
        link = self.peers.get(peer)
        if link is not None and not link.closed:
            self.log.error("closing a peer link: what it sent was refused", peer=peer, addr=link.addr, error=why)
            link.abort()

    def limit_of(self, reason: str) -> int:
        lim = self.guard.limits
        return {"per_address": lim.per_address, "total": lim.total}.get(reason, 0)

    def police(self) -> None:
        """Cut the client connections the limits say must go (zabd.server.limits)."""
        now = time.monotonic()
        if self.partial:
            for conn, reason in self.guard.stalled(self.partial, now):
                self._cut(conn, reason, buffered=conn.mid_frame)
        if self.unread:
            for link in self.unread:
                link.peak_queued = max(link.peak_queued, link.queued())
            for conn, reason in self.guard.overfull(self.unread):
                self._cut(conn, reason, queued=conn.queued())
        self.trimmer.maybe_trim()

    def _cut(self, conn: object, reason: str, **fields: int) -> None:
        assert isinstance(conn, ClientLink)
        self.refusals.refused(f"{conn.PORT} connection closed: over a limit", conn.addr, reason, **fields)
        conn.abort()

    def keepalive(self) -> None:
        self.police()
        now = time.monotonic()
        for link in list(self.peers.values()):
            if not link.closed and not link.session.keepalive(now, self._ping_s, self._silence_s):
                self.log.warning("peer link silent; closing it to redial", peer=link.session.peer, addr=link.addr,
                                 silent_ms=round((now - link.session.last_rx) * 1000))
                link.abort()

    # --------------------------------------------------------------- output

    def mark(self, link: Link) -> None:
        if not self.dirty:
            self.handler.output_pending()
        self.dirty.append(link)

    def flush(self) -> None:
        """Write what the sessions queued: one ``writelines`` per link."""
        dirty = self.dirty
        if not dirty:
            return
        self.dirty = []
        now = time.monotonic()
        for link in dirty:
            link.write(link.take_output(now))
            if link.more_output():
                self.mark(link)  # a stream's next step, at the loop's next turn
            if link.buffered() + link.held() > link.max_queued:
                # a stopped reader must not grow this node's memory without bound (nor a slow
                # one of a SNAP stream, with everything queued behind it)
                self.refusals.refused("connection write buffer over the limit; closing it", link.addr, "queued",
                                      buffered=link.buffered() + link.held(), limit=link.max_queued)
                if isinstance(link, ClientLink):
                    self.guard.cut["queued"] += 1
                link.abort()

    async def close(self) -> None:
        self.stopping = True
        for srv in self.servers:
            srv.close()
        dialers = list(self.dialers.values())
        for task in [*self.tasks, *dialers, *self.refusals.pending]:
            task.cancel()
        for task in [*self.tasks, *dialers]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.flush()
        for plink in list(self.peers.values()):
            if plink.transport is not None:
                plink.transport.close()
        for clink in list(self.clients):
            if clink.transport is not None:
                clink.transport.close()
        for srv in self.servers:
            try:
                await asyncio.wait_for(srv.wait_closed(), 1.0)
            except (TimeoutError, OSError) as exc:
                self.log.warning("listener did not close in time", error=repr(exc))

"""Client connection limits (zabd.server.limits): the decisions socket-free,
then each limit on real server processes over loopback, and the memory a
closed connection leaves behind on an in-process server."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kazoo.client import KazooClient

from zabd.client import Client
from zabd.client.spawn import LocalCluster, free_ports
from zabd.config import ServerConfig
from zabd.server.client_session import ANSWER_BUDGET, ClientSession
from zabd.server.limits import ClientGuard, ClientLimits
from zabd.server.replica import Replica
from zabd.server.storage_factory import open_state_machine, open_storage
from zabd.server.tls_gate import EVENT_LINES, Refusals

Factory = Callable[..., LocalCluster]
LIMITS = ClientLimits(per_address=2, total=3, frame_timeout_s=1.0, queued=100, queued_total=150, buffered_total=150)


# ------------------------------------------------------------- socket-free


def test_connections_are_counted_by_port_and_address_and_released() -> None:
    g = ClientGuard(LIMITS)
    assert g.admit("client", "10.0.0.1") is None and g.admit("client", "10.0.0.1") is None
    assert g.admit("client", "10.0.0.1") == "per_address"
    assert g.admit("zookeeper", "10.0.0.1") is None  # each port counts its own
    assert g.admit("client", "10.0.0.2") == "total"  # three in all
    g.release("client", "10.0.0.1")
    assert g.admit("client", "10.0.0.2") is None
    for port, host in (("client", "10.0.0.1"), ("zookeeper", "10.0.0.1"), ("client", "10.0.0.2")):
        g.release(port, host)
    # an address that is gone leaves nothing behind (a Counter would keep its zero)
    assert dict(g.open) == {} and g.total == 0
    assert g.refused == {"per_address": 1, "total": 1}


@dataclass
class Conn:
    mid_frame: int = 0
    frame_since: float | None = None
    out: int = 0

    def queued(self) -> int:
        return self.out


def test_stalled_frames_go_at_their_deadline_then_the_largest_while_over_the_total() -> None:
    g = ClientGuard(LIMITS)
    late, big, mid, small = Conn(10, 0.0), Conn(90, 5.0), Conn(50, 5.0), Conn(20, 5.0)
    cut = g.stalled([small, late, mid, big], now=5.5)
    # the late one goes; the rest hold 160 > 150: the largest goes, and that is enough
    assert cut == [(late, "frame_timeout"), (big, "buffered_total")]
    assert g.stalled([mid, small], now=5.9) == []
    assert g.cut == {"frame_timeout": 1, "buffered_total": 1}


def test_unread_answers_over_a_connections_limit_or_the_servers() -> None:
    g = ClientGuard(LIMITS)
    huge, a, b, c = Conn(out=101), Conn(out=80), Conn(out=60), Conn(out=30)
    assert g.overfull([a, huge, b, c]) == [(huge, "queued"), (a, "queued_total")]
    assert g.overfull([b, c]) == []


def test_deferred_answers_wait_for_the_transport_and_a_paused_socket() -> None:
    s = ClientSession(1 << 20)
    big = b"x" * (ANSWER_BUDGET // 2 + 1)
    resolved: list[int] = []

    def answer(i: int) -> Callable[[], bytes]:
        def resolve() -> bytes:
            resolved.append(i)
            return big
        return resolve

    for i in range(10):
        s.open_slot(answer(i))
    # two answers fill the budget: the rest wait, uncomputed, for the transport to take them
    assert resolved == [0, 1] and s.outstanding == 8
    assert len(s.take_output()) == 2 and resolved == [0, 1, 2, 3]
    s.writing_paused = True  # the socket buffer is full
    assert len(s.take_output()) == 2 and resolved == [0, 1, 2, 3]
    assert s.wants_pause()  # and its requests are not read either
    s.drained()
    assert resolved == [0, 1, 2, 3, 4, 5]
    while s.outstanding:
        s.take_output()
    assert resolved == list(range(10))


class Lines:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append({"event": event, **fields})


def test_refusals_from_many_addresses_are_a_bounded_number_of_lines() -> None:
    log = Lines()
    r = Refusals(log)
    for i in range(1000):
        r.refused("client connection refused: too many connections", f"127.0.{i // 250}.{i % 250}:1", "total")
    for _ in range(50):
        r.refused("client connection refused: too many connections", "127.0.0.1:2", "total")
    assert len(log.lines) == EVENT_LINES


# ------------------------------------------------------------ real servers


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


async def _closed_by_server(s: socket.socket, within: float = 20.0) -> bool:
    """True once the server closed ``s`` (reads EOF or a reset), False if it is still open after ``within``."""
    s.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(within):
            while True:
                try:
                    data = await loop.sock_recv(s, 65536)
                except (ConnectionResetError, BrokenPipeError):
                    return True
                if not data:
                    return True
    except TimeoutError:
        return False


async def _still_open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def _jute_connect() -> bytes:
    body = struct.pack(">iqiq", 0, 0, 30000, 0) + struct.pack(">i", 16) + bytes(16) + b"\0"
    return struct.pack(">i", len(body)) + body


def _get_data(xid: int, path: str) -> bytes:
    p = path.encode()
    body = struct.pack(">iii", xid, 4, len(p)) + p + b"\0"
    return struct.pack(">i", len(body)) + body


@pytest.fixture
async def limited(cluster_factory: Factory) -> AsyncIterator[LocalCluster]:
    c = cluster_factory(3, extra={"max_client_cnxns": 8, "client_frame_timeout_ms": 400, "client_max_frame": 65536})
    await c.wait_leader()
    yield c


@pytest.mark.parametrize("port_kind", ["client", "zookeeper"])
async def test_connections_from_one_address_are_capped_and_others_still_come_in(
        limited: LocalCluster, port_kind: str) -> None:
    port = limited.client_ports[1] if port_kind == "client" else limited.zk_ports[1]
    held = [_connect(port, "127.0.0.2") for _ in range(8)]
    if port_kind == "zookeeper":
        for s in held:
            s.sendall(_jute_connect())  # a session: no deadline on them
    over = _connect(port, "127.0.0.2")
    assert await _closed_by_server(over)
    other = _connect(port, "127.0.0.3")
    assert all([await _still_open(s) for s in [*held, other]])
    st = await limited.status(1)
    assert st is not None and st["client_limits"]["refused"] == {"per_address": 1}
    assert "connection refused: too many connections" in limited.log_text(1)
    for s in [*held, over, other]:
        s.close()


async def test_a_stalled_frame_and_a_silent_zookeeper_connection_are_cut_at_the_deadline(
        limited: LocalCluster) -> None:
    half = _connect(limited.client_ports[1])
    half.sendall(struct.pack(">I", 60000) + b"\x81" * 1000)
    silent = _connect(limited.zk_ports[1])
    session = _connect(limited.zk_ports[1])
    session.sendall(_jute_connect())
    assert await _closed_by_server(half) and await _closed_by_server(silent)
    assert await _still_open(session)  # it sent its ConnectRequest: no deadline
    st = await limited.status(1)
    assert st is not None and st["client_limits"]["cut"] == {"frame_timeout": 2}
    for s in (half, silent, session):
        s.close()


async def test_a_frame_longer_than_the_limit_is_refused_from_its_length(limited: LocalCluster) -> None:
    s = _connect(limited.client_ports[1])
    s.sendall(struct.pack(">I", 65537))  # no body sent: the prefix alone says no
    assert await _closed_by_server(s, within=5)
    s.close()


async def test_a_client_that_reads_no_answers_is_paced_not_buffered(cluster_factory: Factory) -> None:
    """7 connections pipeline 200 getData of a 512 KiB znode each (700 MiB of
    answers) and read none: the server computes answers only as their
    sockets take them, and a well-behaved client is served meanwhile."""
    c = cluster_factory(3)
    await c.wait_leader()
    zk = KazooClient(hosts=c.zk_addr(1))
    zk.start(timeout=15)
    try:
        zk.create("/big", b"x" * (512 << 10))
        slow = []
        for _ in range(7):
            s = _connect(c.zk_ports[1])
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(_jute_connect())
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.sendall(b"".join(_get_data(i + 1, "/big") for i in range(200)))
            slow.append(s)
        for i in range(20):  # the well-behaved client, served throughout
            zk.set("/big", b"y" * i)
            assert zk.get("/big")[0] == b"y" * i
        st = await c.status(1)
        assert st is not None
        held = st["client_limits"]["queued_bytes"]
        assert held < 7 * 4 * (512 << 10), held  # a few answers each, not 200
        assert st["client_limits"]["cut"] == {}
        for s in slow:
            s.close()
    finally:
        zk.stop()
        zk.close()


async def test_a_closed_connection_leaves_nothing_behind_though_its_objects_were_frozen() -> None:
    """The server freezes what survives a collection (status.freeze_survivors),
    and frozen cycles are never collected: a connection's objects must go by
    reference counting alone, buffers of half-received frames included."""
    peer, client = free_ports(2)
    cfg = ServerConfig(id=1, peers={1: f"127.0.0.1:{peer}"}, client=f"127.0.0.1:{client}", storage="memory")
    r = Replica(cfg, open_storage(cfg.storage_options()), open_state_machine(cfg))
    await r.start()
    try:
        socks = [_connect(client) for _ in range(20)]
        for s in socks:
            s.sendall(struct.pack(">I", 60000) + b"\x81" * 30000)
        async with asyncio.timeout(10):
            while len(r.transport.partial) < len(socks):
                await asyncio.sleep(0.01)
        sessions = {id(link.session) for link in r.transport.clients}
        assert len(sessions) == len(socks)
        gc.collect()
        gc.freeze()
        for s in socks:
            s.close()
        async with asyncio.timeout(10):
            while r.transport.clients:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0)  # the loop's own references to the closed transports go at the next turn
        # back among what a collection could see, without collecting: alive only if something holds it
        gc.unfreeze()
        alive = [o for o in gc.get_objects() if type(o) is ClientSession and id(o) in sessions]
        assert alive == []
    finally:
        gc.unfreeze()
        await r.shutdown()


async def test_before_its_token_a_connection_sends_nothing_bigger_than_a_token(cluster_factory: Factory) -> None:
    c = cluster_factory(3, tokens={"rw-token-0123456789": "rw"})
    await c.wait_leader()
    stranger = _connect(c.client_ports[1])
    stranger.sendall(struct.pack(">I", 100_000))  # refused from the prefix: the limit is a token's frame
    assert await _closed_by_server(stranger, within=5)
    stranger.close()
    async with await Client.connect(c.client_addr(1), token="rw-token-0123456789") as ok:
        assert await ok.propose(b"x" * 200_000) > 0  # once authenticated, the usual limit

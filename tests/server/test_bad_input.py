"""Hostile bytes on both ports: the connection closes, the error is logged,
the server serves on."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

import msgpack
import pytest

from zabd.client import Client
from zabd.client.spawn import LocalCluster
from zabd.server.peer_wire import WIRE_VERSION

Factory = Callable[..., LocalCluster]


def fr(obj: object) -> bytes:
    body = msgpack.packb(obj)
    return struct.pack(">I", len(body)) + body


CASES: dict[str, tuple[bytes, bool, str]] = {
    # name: (bytes, half-close after sending, log text expected)
    "garbage": (b"\x00\x00\x00\x06\xc1\xc1\xc1\xc1\xc1\xc1", False, "undecodable frame"),
    "http": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", False, "exceeds"),
    "truncated": (struct.pack(">I", 100) + b"\x92" + b"\x01" * 9, True, "truncated frame"),
    "oversized": (struct.pack(">I", 0xFFFF_FFF0) + b"\x00" * 64, False, "exceeds"),
}


async def _expect_closed(port: int, data: bytes, half_close: bool) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    if half_close:
        writer.write_eof()
    got = b""
    try:
        async with asyncio.timeout(5):
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                got += chunk
    except ConnectionResetError:
        pass
    writer.close()
    return got


async def wait_log(cluster: LocalCluster, node: int, text: str, timeout: float = 10.0) -> str:
    """Wait until ``text`` appears in the node's log (an event, bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        log = cluster.log_text(node)
        if text in log or loop.time() > deadline:
            return log
        await asyncio.sleep(0.02)  # polling the log file, not a time window


async def _serves(cluster: LocalCluster, node: int) -> None:
    async with await Client.connect(cluster.client_addr(node)) as c:
        z = await c.propose(b"still-alive", retry_for=10)
        assert z > 0
        assert (await c.status()).id == node


@pytest.fixture
async def cluster(cluster_factory: Factory) -> LocalCluster:
    c = cluster_factory(3)
    await c.wait_leader()
    return c


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("port_kind", ["peer", "election", "client"])
async def test_bad_bytes_close_the_connection(cluster: LocalCluster, case: str, port_kind: str) -> None:
    data, half_close, expect = CASES[case]
    # the election port of a ZooKeeper spec takes peer links: it refuses what the peer port refuses
    ports = {"peer": cluster.peer_ports, "election": cluster.election_ports, "client": cluster.client_ports}
    port = ports[port_kind][2]
    await _expect_closed(port, data, half_close)
    log = await wait_log(cluster, 2, expect)
    assert expect in log, log[-2000:]
    # a peer's bad frame is this cluster's fault; a client's is the client's own, and
    # logged at most once a while per address (a client can send them on purpose)
    line = next(line for line in log.splitlines() if expect in line)
    assert ('"level": "warning"' if port_kind == "client" else '"level": "error"') in line, line
    await _serves(cluster, 2)


async def test_wrong_frame_type_on_peer_port(cluster: LocalCluster) -> None:
    # a client request where a HELLO must come
    await _expect_closed(cluster.peer_ports[2], fr({"v": 1, "type": "status", "id": 1}), False)
    # a HELLO from a node id that does not dial this node (3 > 2)
    await _expect_closed(cluster.peer_ports[2], fr([64, WIRE_VERSION, 3]), False)
    # a well-formed peer message with a wrong field type, after a valid HELLO
    await _expect_closed(cluster.peer_ports[3], fr([64, WIRE_VERSION, 1]) + fr([7, "not-a-zxid"]), False)
    assert "peer frame is not an array" in await wait_log(cluster, 2, "peer frame is not an array")
    assert "not a lower-id member" in await wait_log(cluster, 2, "not a lower-id member")
    assert "malformed Ack frame" in await wait_log(cluster, 3, "malformed Ack frame")
    await cluster.wait_leader(timeout=20)
    for node in (1, 2, 3):
        await _serves(cluster, node)


async def test_wrong_frame_type_on_client_port(cluster: LocalCluster) -> None:
    for bad in (
        [7, 1],
        {"v": 1, "type": "propose", "id": 1, "payload": "text-not-bytes"},
        {"v": 9, "type": "status", "id": 3},
    ):
        got = await _expect_closed(cluster.client_ports[1], fr(bad), False)
        # the client is told why before the close
        body = msgpack.unpackb(got[4:])
        assert body["ok"] is False and body["error"] == "bad_request"
    assert "bad client request" in cluster.log_text(1)
    await _serves(cluster, 1)


async def test_a_raw_payload_shaped_like_a_membership_change_stays_raw(cluster: LocalCluster) -> None:
    """Membership changes are txns the core tells apart by their prefix: a
    client's raw payload with it is committed as what it is, a raw entry
    (the leader tags it), on the leader and through a follower, and changes
    no membership."""
    from zabd.protocol.membership import MAGIC, Membership, encode

    forged = encode(Membership(frozenset({1}), frozenset()))
    assert forged.startswith(MAGIC)
    for node in (1, 2, 3):
        async with await Client.connect(cluster.client_addr(node)) as c:
            z = await c.propose(forged)
            entry = next(t for t in await c.read_all() if t.zxid == z)
            assert (entry.kind, entry.payload) == ("raw", forged)
    for node in (1, 2, 3):
        await _serves(cluster, node)
        assert "membership changed" not in cluster.log_text(node)

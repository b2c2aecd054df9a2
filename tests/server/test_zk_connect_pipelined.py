"""Requests sent right behind a ConnectRequest, before its ConnectResponse,
on ZooKeeper's client port of real server processes: as ZooKeeper does,
they wait for the session and are answered in order, after the
ConnectResponse."""

from __future__ import annotations

import asyncio

import pytest

from tests.server.zk_driver import JuteSocket
from zabd.client.spawn import LocalCluster
from zabd.zk import jute
from zabd.zk.errors import Code
from zabd.zk.records import Create, CreateResult, DataResult, GetData, SetData, StatResult


def connect_and_three(path: str, session: int = 0, password: bytes = b"") -> bytes:
    """A ConnectRequest and create, getData, setData of ``path``, as one write's bytes."""
    return b"".join((
        jute.encode_connect(jute.ConnectRequest(0, 0, 10_000, session, password, False)),
        jute.encode_request(1, jute.OP_CREATE, Create(path, b"one")),
        jute.encode_request(2, jute.OP_GET_DATA, GetData(path)),
        jute.encode_request(3, jute.OP_SET_DATA, SetData(path, b"two", 0)),
    ))


def read_three(c: JuteSocket, path: str) -> list[tuple[int, int, int, object | None]]:
    """The answers to ``connect_and_three``'s requests: in xid order, each as it should be."""
    replies = [jute.decode_reply(c.next_body(), op) for op in (jute.OP_CREATE, jute.OP_GET_DATA, jute.OP_SET_DATA)]
    assert [r[0] for r in replies] == [1, 2, 3]
    assert [r[2] for r in replies] == [0, 0, 0]
    created, got, was_set = (r[3] for r in replies)
    assert isinstance(created, CreateResult) and created.path == path
    created_at = replies[0][1]  # the create's zxid, in its reply's header
    assert isinstance(got, DataResult) and got.stat.czxid == created_at
    assert isinstance(was_set, StatResult) and was_set.stat.version == 1 and was_set.stat.czxid == created_at
    return replies


@pytest.mark.parametrize("node", [1, 2])
def test_requests_before_the_connect_response_wait_for_the_new_session(zk_cluster: LocalCluster, node: int) -> None:
    c = JuteSocket(zk_cluster.zk_addr(node))
    try:
        c.sock.sendall(connect_and_three(f"/early{node}"))
        _, timeout, session, _, _ = jute.decode_connect_response(c.next_body())
        assert timeout > 0 and session != 0
        read_three(c, f"/early{node}")
    finally:
        c.close()


def test_requests_before_the_connect_response_of_a_reattach(zk_cluster: LocalCluster) -> None:
    first = JuteSocket(zk_cluster.zk_addr(1))
    first.sock.sendall(jute.encode_connect(jute.ConnectRequest(0, 0, 10_000, 0, b"", False)))
    _, _, session, password, _ = jute.decode_connect_response(first.next_body())
    first.close()
    asyncio.run(zk_cluster.wait_caught_up([1, 2, 3]))  # every server knows the session
    again = JuteSocket(zk_cluster.zk_addr(2))  # the same session, on another server
    try:
        again.sock.sendall(connect_and_three("/moved", session, password))
        _, timeout, got_session, _, _ = jute.decode_connect_response(again.next_body())
        assert timeout > 0 and got_session == session
        read_three(again, "/moved")
    finally:
        again.close()


def test_requests_behind_a_refused_connect_are_not_served(zk_cluster: LocalCluster) -> None:
    """An unknown session: the zero-timeout ConnectResponse, then the
    connection closes; what was pipelined behind it is not done."""
    c = JuteSocket(zk_cluster.zk_addr(1))
    try:
        c.sock.sendall(connect_and_three("/never", 0x1234, b"\0" * 16))
        _, timeout, _, _, _ = jute.decode_connect_response(c.next_body())
        assert timeout == 0
        assert c.closed_by_server() and not c.bodies
    finally:
        c.close()
    check = JuteSocket(zk_cluster.zk_addr(1))
    try:
        check.sock.sendall(jute.encode_connect(jute.ConnectRequest(0, 0, 10_000, 0, b"", False))
                           + jute.encode_request(1, jute.OP_GET_DATA, GetData("/never")))
        jute.decode_connect_response(check.next_body())
        assert jute.decode_reply(check.next_body(), jute.OP_GET_DATA)[2] == Code.NO_NODE
    finally:
        check.close()


def test_too_much_sent_before_the_connect_response_closes_the_connection(zk_cluster: LocalCluster) -> None:
    """Held requests are bounded (zabd.server.zk.port.HELD_FRAMES): beyond
    that the connection closes, with one log line."""
    from zabd.server.zk.port import HELD_FRAMES

    c = JuteSocket(zk_cluster.zk_addr(1))
    try:
        # one write of ~15 KiB: on loopback it arrives in one read, long
        # before the session's proposal commits
        many = b"".join(jute.encode_request(i, jute.OP_GET_DATA, GetData("/")) for i in range(1, HELD_FRAMES + 50))
        c.sock.sendall(jute.encode_connect(jute.ConnectRequest(0, 0, 10_000, 0, b"", False)) + many)
        assert c.closed_by_server()
    finally:
        c.close()
    assert "exceed what is held for them; closing the connection" in zk_cluster.log_text(1)


def test_a_read_pipelined_between_two_writes_sees_only_the_first(zk_cluster: LocalCluster) -> None:
    """ZooKeeper 3.8 answers b"one" here, every time (20 of 20, on a
    standalone server, a follower and a leader)."""
    c = JuteSocket(zk_cluster.zk_addr(1))
    try:
        c.sock.sendall(connect_and_three("/between"))
        jute.decode_connect_response(c.next_body())
        got = read_three(c, "/between")[1][3]
        assert isinstance(got, DataResult) and got.data == b"one" and got.stat.version == 0
    finally:
        c.close()

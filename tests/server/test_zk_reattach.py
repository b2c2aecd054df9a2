"""A ZooKeeper session re-attached on another server is decided with the
leader's knowledge, as ZooKeeper's learner revalidates it with its leader:
never a "session expired" for a session whose expiry did not commit, never a
ConnectResponse from a server that cannot know (issue 37's probe: the leader
SIGKILLed, a raw re-attach sent to each follower). The socket-free tests
drive a follower's session layer with its core and the leader's answers as
bytes; the others run real server processes."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import msgpack
import structlog

from tests.server.zk_driver import JuteSocket
from zabd.client.spawn import LocalCluster
from zabd.codec.framing import FrameReader
from zabd.kv import KVMachine
from zabd.protocol import zxid as zx
from zabd.protocol.messages import NewLeader, Txn
from zabd.protocol.node import Node
from zabd.protocol.options import SERVER
from zabd.server import peer_wire as wire
from zabd.server.client_session import ClientSession
from zabd.server.proposals import ProposalPath
from zabd.server.zk.expiry import SessionKeeper
from zabd.server.zk.sessions import HOLD_MS, RETRY_MS, ZKSessions
from zabd.zk import jute
from zabd.zk.errors import Code
from zabd.zk.msgpack_wire import MsgpackWire
from zabd.zk.prep import ZKLeader
from zabd.zk.records import EPHEMERAL, CloseSession, Create, CreateSession, Exists, ExistsResult
from zabd.zk.sessions import password_digest
from zabd.zk.tree import DataTree

SID = 0x0300_0000_0000_0001
NOW = 1_700_000_000_000


class Links:
    """The follower's link to its leader, node 3: what it sends, as decoded frames."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.up = True

    def send_frame(self, peer: int, data: bytes) -> bool:
        if not self.up:
            return False
        (body,) = FrameReader(1 << 20).feed(data)
        self.sent.append(body)
        return True

    def now(self) -> int:
        return 100


class Applied:
    def __init__(self, machine: KVMachine) -> None:
        self.machine = machine

    @property
    def applied(self) -> int:
        return self.machine.zk.applied


def follower() -> tuple[KVMachine, ProposalPath, ZKSessions, Links]:
    node = Node(2, [1, 3], 7, SERVER)
    node.on_message(3, NewLeader(1, ()), 5)  # follows 3, in sync
    node.take_effects()
    machine, links = KVMachine(), Links()
    path = ProposalPath(node, machine, links, Applied(machine), max_inflight=8)
    sessions = ZKSessions(machine, path, 2, 200, None, lambda: NOW, structlog.get_logger())
    return machine, path, sessions, links


def leader_txns(password: bytes, close: bool) -> list[Txn]:
    """What the leader committed: the session's CreateSession, then (if ``close``) its CloseSession."""
    prep = ZKLeader(DataTree())
    out = []
    for i, req in enumerate((CreateSession(SID, 4000, password_digest(password)), CloseSession())[:1 + close], 1):
        p = prep.prepare(SID, (), req, NOW)
        prep.proposed(zx.make(1, i), p)
        out.append(Txn(zx.make(1, i), p.payload))
    return out


def answers(s: ClientSession) -> list[dict[str, Any]]:
    return [msgpack.unpackb(f[4:]) for f in s.take_output() if f]  # b"": a slot that says nothing


def test_a_follower_that_has_not_applied_the_session_asks_the_leader_and_attaches() -> None:
    """The false "expired" of issue 37: the follower had not applied the
    CreateSession the leader committed. It says nothing until it applied the
    commit point the leader confirmed, then attaches the session."""
    machine, path, sessions, links = follower()
    password = os.urandom(16)
    s = ClientSession(1 << 20)
    assert sessions.connect(s, MsgpackWire(), 0, SID, password, 4000, 0, "127.0.0.1:1")
    assert answers(s) == []  # nothing known here yet: nothing said
    (req,) = links.sent
    assert wire.decode_frame(req) == wire.SyncReq(1)  # the leader confirms its commit point
    (create,) = leader_txns(password, close=False)
    path.on_forward_ok(wire.ForwardOk(1, create.zxid))
    assert answers(s) == []  # confirmed, not applied here yet
    machine.apply(create)
    path.on_applied(create.zxid)
    (got,) = answers(s)
    assert got["ok"] is True and got["session"] == SID and got["timeout"] == 4000


def test_a_re_attach_touches_the_session_at_the_leader_before_it_is_decided() -> None:
    """ZooKeeper's leader touches a session as it revalidates it. A follower's
    report of its clients comes every half tick: a client back just inside its
    timeout was expired while its re-attach was being decided (issue 39's storm
    of 10,000 moving clients takes seconds to decide). The follower tells the
    leader at once, ahead of its sync request on the same link; a wrong
    password touches nothing (an id alone must not keep a session alive)."""
    machine, path, sessions, links = follower()
    SessionKeeper(path.node, machine, sessions, path, links, 200, lambda: NOW, structlog.get_logger())
    password = os.urandom(16)
    (create,) = leader_txns(password, close=False)
    machine.apply(create)
    s = ClientSession(1 << 20)
    assert sessions.connect(s, MsgpackWire(), 0, SID, password, 4000, 0, "127.0.0.1:1")
    assert [wire.decode_frame(f) for f in links.sent] == [wire.ZKTouch((SID,)), wire.SyncReq(1)]
    links.sent.clear()
    assert sessions.connect(ClientSession(1 << 20), MsgpackWire(), 0, SID, b"\0" * 16, 4000, 0, "127.0.0.1:2")
    assert [wire.decode_frame(f) for f in links.sent] == [wire.SyncReq(2)]
    links.up = False  # no link to the leader now: with the next report, to it or the next one
    assert sessions.connect(ClientSession(1 << 20), MsgpackWire(), 0, SID, password, 4000, 0, "127.0.0.1:3")
    assert sessions.take_touched() == {SID}


def test_a_session_is_reported_expired_only_once_its_close_is_applied() -> None:
    machine, path, sessions, _ = follower()
    password = os.urandom(16)
    create, close = leader_txns(password, close=True)
    machine.apply(create)  # this replica holds the session; the leader already committed its close
    s = ClientSession(1 << 20)
    assert sessions.connect(s, MsgpackWire(), 0, SID, password, 4000, 0, "127.0.0.1:1")
    path.on_forward_ok(wire.ForwardOk(1, close.zxid))
    assert answers(s) == []  # the table here still holds it: nothing said yet
    machine.apply(close)
    path.on_applied(close.zxid)
    (got,) = answers(s)
    assert got["ok"] is False and got["err"] == Code.SESSION_EXPIRED
    assert s.hangup


def test_a_wrong_password_is_refused_after_the_same_check() -> None:
    machine, path, sessions, _ = follower()
    (create,) = leader_txns(os.urandom(16), close=False)
    machine.apply(create)
    s = ClientSession(1 << 20)
    assert sessions.connect(s, MsgpackWire(), 0, SID, b"\0" * 16, 4000, 0, "127.0.0.1:1")
    path.on_forward_ok(wire.ForwardOk(1, create.zxid))
    (got,) = answers(s)
    assert got["ok"] is False and got["err"] == Code.SESSION_EXPIRED


def controlled() -> tuple[dict[str, Any], ZKSessions, ProposalPath, Links, Txn, bytes]:
    """A follower's session layer on a clock and a quorum the test sets
    (``state["now"]``, ``state["serving"]``), its table holding the session."""
    machine, path, _, links = follower()
    state: dict[str, Any] = {"serving": True, "now": NOW}
    sessions = ZKSessions(machine, path, 2, 200, None, lambda: state["now"], structlog.get_logger(),
                          serving=lambda: state["serving"], electing=lambda: not state["serving"])
    password = os.urandom(16)
    (create,) = leader_txns(password, close=False)
    machine.apply(create)
    return state, sessions, path, links, create, password


def test_without_a_leader_the_connection_closes_unanswered() -> None:
    """The leader died before it confirmed anything: nothing is known. The
    connect waits for the next leader (a member finds it in tens of ms) as
    long as a first hold would have; then, on ZooKeeper's port, the client
    sees the connection close (jute's refusal for anything but an expiry is
    no bytes at all)."""
    state, sessions, path, links, _, password = controlled()  # even a replica holding the session does not answer alone
    s = ClientSession(1 << 20)
    assert sessions.connect(s, MsgpackWire(), 0, SID, password, 4000, 0, "127.0.0.1:1")
    state["serving"] = False
    path.leader_changed("lost the connection to the leader")
    assert answers(s) == [] and s in sessions.waiting  # held again for the next leader
    state["now"] += HOLD_MS
    sessions.serve_waiting()
    (got,) = answers(s)
    assert got["ok"] is False and got["err"] == Code.CONNECTION_LOSS and s.hangup
    links.up = False  # a leader that cannot be reached, and the time up: refused the same way
    s2 = ClientSession(1 << 20)
    state["serving"] = True
    assert sessions.connect(s2, MsgpackWire(), 0, SID, password, 4000, 0, "127.0.0.1:1")
    state["serving"] = False
    state["now"] += HOLD_MS
    sessions.serve_waiting()
    (got,) = answers(s2)
    assert got["err"] == Code.CONNECTION_LOSS and s2.hangup and SID not in sessions.attached


def test_a_re_attach_whose_leader_went_away_is_asked_again_of_the_next() -> None:
    """go-zookeeper's TestIntegration_IncrementalReconfig, once in 48 runs:
    a follower that had not yet noticed its leader stepped down forwarded the
    re-attach to it and was refused; closing then left the client no server
    to go to. It is held and asked again of the next leader."""
    state, sessions, path, links, create, password = controlled()
    s = ClientSession(1 << 20)
    assert sessions.connect(s, MsgpackWire(), 0, SID, password, 4000, 0, "127.0.0.1:1")
    path.on_forward_err(wire.ForwardErr(1, "no_leader", "this node no longer leads; retry"))
    assert answers(s) == [] and not s.hangup
    sessions.serve_waiting()  # not asked again at once: each tick would be one more request to the old leader
    assert len(links.sent) == 1
    state["now"] += RETRY_MS
    sessions.serve_waiting()  # a leader again (still node 3 here): asked anew
    assert [wire.decode_frame(f) for f in links.sent] == [wire.SyncReq(1), wire.SyncReq(2)]
    path.on_forward_ok(wire.ForwardOk(2, create.zxid))
    (got,) = answers(s)
    assert got["ok"] is True and got["session"] == SID


def test_a_member_between_leaders_holds_a_connect_until_it_serves_or_its_time_is_up() -> None:
    """zabd elects in tens of milliseconds: a connect that arrives meanwhile
    waits (at most HOLD_MS) instead of being refused, so a client cycling
    through its servers during a hand-over finds one (go-zookeeper's
    TestIntegration_IncrementalReconfig gave up with every server between
    leaders or removed)."""
    machine, path, _, links = follower()
    state = {"serving": False, "now": NOW}
    sessions = ZKSessions(machine, path, 2, 200, None, lambda: state["now"], structlog.get_logger(),
                          serving=lambda: state["serving"], electing=lambda: not state["serving"])
    password = os.urandom(16)
    (create,) = leader_txns(password, close=False)
    machine.apply(create)
    held, late = ClientSession(1 << 20), ClientSession(1 << 20)
    for s in (held, late):
        assert sessions.connect(s, MsgpackWire(), 0, SID, password, 4000, 0, "127.0.0.1:1")
    sessions.serve_waiting()
    assert answers(held) == [] and links.sent == [] and not held.hangup  # held, nothing asked yet
    state["now"] += HOLD_MS  # one waited its whole time: closed unanswered (as refused at once)
    sessions.closed(held)  # ... the other's client gave up first: forgotten
    sessions.serve_waiting()
    (got,) = answers(late)
    assert got["err"] == Code.CONNECTION_LOSS and late.hangup and not sessions.waiting
    again = ClientSession(1 << 20)
    assert sessions.connect(again, MsgpackWire(), 0, SID, password, 4000, 0, "127.0.0.1:1")
    state["serving"] = True  # a leader again: the held connect goes on as if it had just arrived
    sessions.serve_waiting()
    assert [wire.decode_frame(f) for f in links.sent] == [wire.SyncReq(1)]
    path.on_forward_ok(wire.ForwardOk(1, create.zxid))
    (got,) = answers(again)
    assert got["ok"] is True and got["session"] == SID


# ------------------------------------------------------------ real processes


def connect(addr: str, session: int = 0, password: bytes = b"") -> tuple[JuteSocket, int, int, bytes]:
    """A raw ZooKeeper connect: (socket, timeout, session, password) of its ConnectResponse."""
    c = JuteSocket(addr)
    c.sock.sendall(jute.encode_connect(jute.ConnectRequest(0, 0, 4_000, session, password, False)))
    _, timeout, got, pw, _ = jute.decode_connect_response(c.next_body())
    return c, timeout, got, pw


def probe(addr: str, session: int, password: bytes) -> str:
    """A re-attach: "attached" (a ConnectResponse for the session), "expired"
    (the zero-timeout one), or "closed" (no answer)."""
    try:
        c = JuteSocket(addr)
    except OSError:
        return "closed"
    try:
        c.sock.sendall(jute.encode_connect(jute.ConnectRequest(0, 0, 4_000, session, password, False)))
        try:
            body = c.next_body()
        except (AssertionError, OSError):
            return "closed"
        _, timeout, got, _, _ = jute.decode_connect_response(body)
        if timeout == 0:
            return "expired"
        assert got == session
        return "attached"
    finally:
        c.close()


def test_a_session_new_on_the_leader_is_never_expired_on_a_follower(zk_cluster: LocalCluster) -> None:
    """Created at the leader and re-attached at once on each follower, which
    may not have applied the CreateSession yet: ZooKeeper's answer every time
    is the session (its learner asks the leader)."""
    leader = asyncio.run(zk_cluster.wait_leader())
    followers = [i for i in (1, 2, 3) if i != leader]
    outcomes: dict[str, int] = {}
    for _ in range(25):
        c, timeout, session, password = connect(zk_cluster.zk_addr(leader))
        assert timeout > 0
        for i in followers:
            got = probe(zk_cluster.zk_addr(i), session, password)
            outcomes[got] = outcomes.get(got, 0) + 1
        c.close()
    assert outcomes == {"attached": 50}


def test_a_follower_that_cannot_reach_a_quorum_answers_no_re_attach(zk_cluster: LocalCluster) -> None:
    """The leader and the other follower stopped (SIGSTOP: their sockets stay
    open, so nothing tells the follower they are gone): it cannot know
    whether the session lives, and closes the connection unanswered, as
    ZooKeeper's does. It used to answer from its own table at once."""
    leader = asyncio.run(zk_cluster.wait_leader())
    a, b = [i for i in (1, 2, 3) if i != leader]
    c, timeout, session, password = connect(zk_cluster.zk_addr(a))
    c.close()
    assert timeout > 0
    zk_cluster.signal(leader, signal.SIGSTOP)
    zk_cluster.signal(b, signal.SIGSTOP)
    try:
        assert probe(zk_cluster.zk_addr(a), session, password) == "closed"
    finally:
        zk_cluster.signal(b, signal.SIGCONT)
        zk_cluster.signal(leader, signal.SIGCONT)
    asyncio.run(zk_cluster.wait_leader())
    assert probe(zk_cluster.zk_addr(a), session, password) == "attached"


def test_leader_killed_re_attach_on_each_follower(zk_cluster: LocalCluster) -> None:
    """Issue 37's probe: a live session's id and password sent to each
    follower again and again while the leader is SIGKILLed and the others
    elect a new one. Each probe is closed unanswered (no leader to ask) or
    attached; none is told the session expired, and it lives on."""
    leader = asyncio.run(zk_cluster.wait_leader())
    followers = [i for i in (1, 2, 3) if i != leader]
    owner, timeout, session, password = connect(zk_cluster.zk_addr(followers[0]))
    assert timeout > 0
    owner.sock.sendall(jute.encode_request(1, jute.OP_CREATE, Create("/owned", b"", mode=EPHEMERAL)))
    assert jute.decode_reply(owner.next_body(), jute.OP_CREATE)[2] == Code.OK
    owner.close()  # the client moves: its re-attaches below keep the session alive
    zk_cluster.kill(leader)
    seen: list[str] = []
    new_leader = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for i in followers:
            seen.append(probe(zk_cluster.zk_addr(i), session, password))
        if not new_leader:
            statuses = asyncio.run(zk_cluster.statuses(followers))
            new_leader = next((i for i, s in statuses.items() if s and s.get("role") == "leading"), 0)
        if new_leader and seen[-len(followers):] == ["attached"] * len(followers):
            break
    assert "expired" not in seen, seen
    assert new_leader and seen[-2:] == ["attached", "attached"], seen
    c, timeout, got, _ = connect(zk_cluster.zk_addr(new_leader), session, password)
    try:
        assert timeout > 0 and got == session
        c.sock.sendall(jute.encode_request(1, jute.OP_EXISTS, Exists("/owned")))
        _, _, err, stat = jute.decode_reply(c.next_body(), jute.OP_EXISTS)
        assert err == Code.OK and isinstance(stat, ExistsResult) and stat.stat is not None
        assert stat.stat.ephemeralOwner == session
    finally:
        c.close()

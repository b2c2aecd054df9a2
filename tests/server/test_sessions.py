"""Peer and client sessions, and the proposal path, driven with bytes and a
real core: no socket, no timing (as h11 is tested)."""

from __future__ import annotations

from collections.abc import Iterator

import msgpack
import pytest

from tests.protocol.helpers import synced_leader as leader_with
from zabd.codec import client as schema
from zabd.codec.framing import FrameError, FrameReader, frame
from zabd.kv import KVMachine
from zabd.kv.kinds import tag_raw
from zabd.kv.kvmachine import KV_MAGIC
from zabd.kv.store import BAD_VERSION, encode_err
from zabd.protocol import zxid as zx
from zabd.protocol.messages import Commit, NewLeader, Txn
from zabd.protocol.node import Node
from zabd.protocol.options import SERVER
from zabd.server import peer_wire as wire
from zabd.server.client_session import MAX_OUTSTANDING, ClientSession
from zabd.server.peer_session import HandshakeDone, MembershipRefused, PeerSession, SnapPiece, SyncArrived
from zabd.server.proposals import ProposalPath

MEMBERS = frozenset({1, 2, 3})


def body(data: bytes) -> object:
    (got,) = FrameReader(1 << 20).feed(data)
    return got


# ------------------------------------------------------------ peer session


def test_a_dialed_session_says_hello_first() -> None:
    s = PeerSession(1, MEMBERS, 3, 1 << 20, now=0.0)
    (hello,) = s.take_output(0.0)
    assert wire.decode_frame(body(hello)) == wire.Hello(wire.WIRE_VERSION, 1)


def test_an_accepted_session_needs_a_hello_from_a_lower_member() -> None:
    s = PeerSession(2, MEMBERS, None, 1 << 20, now=0.0)
    assert s.feed(frame((wire.TAG_HELLO, wire.WIRE_VERSION, 1)), 1.0) == [HandshakeDone(1)]
    assert s.peer == 1 and s.last_rx == 1.0
    for bad, why in (
        (frame((wire.TAG_HELLO, wire.WIRE_VERSION, 3)), "lower-id member"),  # 3 does not dial 2
        (frame((wire.TAG_HELLO, wire.WIRE_VERSION, 9)), "lower-id member"),  # not a member
        (frame((wire.TAG_HELLO, wire.WIRE_VERSION + 1, 1)), "wire version"),
        (frame((8, 5)), "expected Hello first"),
    ):
        with pytest.raises(FrameError, match=why):
            PeerSession(2, MEMBERS, None, 1 << 20, now=0.0).feed(bad, 0.0)


def test_an_accepting_session_tells_the_dialer_the_members_it_knows() -> None:
    """The lower id dials: a node added back with an old log learns from any
    member that accepts its link how to reach members it never heard of."""
    known = {1: "h:1", 2: "h:2", 5: "h:5"}
    acceptor = PeerSession(2, MEMBERS, None, 1 << 20, now=0.0, addresses=known)
    dialer = PeerSession(1, MEMBERS, 2, 1 << 20, now=0.0)
    assert acceptor.feed(b"".join(dialer.take_output(0.0)), 0.0) == [HandshakeDone(1)]
    assert dialer.feed(b"".join(acceptor.take_output(0.0)), 0.0) == []  # for the transport, not the replica
    assert dialer.heard == wire.Members(((1, "h:1"), (2, "h:2"), (5, "h:5")))
    for bad in ((wire.TAG_MEMBERS, (("1", "h:1"),)), (wire.TAG_MEMBERS, ((1, 7),)), (wire.TAG_MEMBERS,)):
        with pytest.raises(FrameError, match="malformed Members"):
            PeerSession(1, MEMBERS, 2, 1 << 20, now=0.0).feed(frame(bad), 0.0)


def test_an_acceptor_tells_its_dialers_every_membership_change() -> None:
    """Node 3, restarted, accepted node 2's link while it still knew only its
    configured members (1..3); its log then said 3, 4, 5 (5 leading). Node 2
    dials only higher ids it knows: unless node 3 tells it again on the link
    that stays up, it never reaches 4 or 5."""
    configured = {1: "h:1", 2: "h:2", 3: "h:3"}
    acceptor = PeerSession(3, frozenset(configured), None, 1 << 20, now=0.0, addresses=configured)
    dialer = PeerSession(2, frozenset(configured), 3, 1 << 20, now=0.0)
    assert acceptor.feed(b"".join(dialer.take_output(0.0)), 0.0) == [HandshakeDone(2)]
    dialer.feed(b"".join(acceptor.take_output(0.0)), 0.0)
    assert dialer.heard == wire.Members(tuple(configured.items()))
    dialer.heard = None
    logged = {3: "h:3", 4: "h:4", 5: "h:5"}
    acceptor.members_changed(frozenset(logged), logged)
    assert dialer.feed(b"".join(acceptor.take_output(1.0)), 1.0) == []
    assert dialer.heard == wire.Members(tuple(logged.items()))
    # the dialer's end says nothing: the acceptor has the higher id and dials its own
    dialer.members_changed(frozenset(logged), logged)
    assert dialer.take_output(1.0) == []
    # a link accepted before the change whose Hello comes after it: checked
    # against, and told, the new members
    early = PeerSession(3, frozenset(configured), None, 1 << 20, now=0.0, addresses=configured)
    early.members_changed(frozenset(logged), logged)
    with pytest.raises(MembershipRefused, match="node 2: not a member"):
        early.feed(frame((wire.TAG_HELLO, wire.WIRE_VERSION, 2)), 0.0)
    back = {2: "h:2", **logged}
    later = PeerSession(3, frozenset(configured), None, 1 << 20, now=0.0, addresses=configured)
    later.members_changed(frozenset(back), back)
    assert later.feed(frame((wire.TAG_HELLO, wire.WIRE_VERSION, 2)), 0.0) == [HandshakeDone(2)]
    (told,) = later.take_output(0.0)
    assert wire.decode_frame(body(told)) == wire.Members(tuple(sorted(back.items())))


def test_a_leaders_guest_may_link_and_a_stranger_may_not() -> None:
    """A removed node the leader keeps as a guest (Options.keep_removed) may
    dial it anew; any other node outside the membership is still refused."""
    guests = {1}
    for peer, admitted in ((1, True), (2, False)):
        s = PeerSession(3, frozenset({3, 4, 5}), None, 1 << 20, now=0.0)
        s.guest = guests.__contains__
        hello = frame((wire.TAG_HELLO, wire.WIRE_VERSION, peer))
        if admitted:
            assert s.feed(hello, 0.0) == [HandshakeDone(peer)]
        else:
            with pytest.raises(MembershipRefused, match=f"node {peer}: not a member"):
                s.feed(hello, 0.0)


def test_nodes_that_disagree_on_the_observers_do_not_link() -> None:
    """Two nodes with different observer lists would count different quorums:
    the Hello carries the dialer's list and the acceptor refuses another one."""
    dialer = PeerSession(1, MEMBERS, 2, 1 << 20, now=0.0, observers=(3,))
    (hello,) = dialer.take_output(0.0)
    assert wire.decode_frame(body(hello)) == wire.Hello(wire.WIRE_VERSION, 1, (3,))
    assert PeerSession(2, MEMBERS, None, 1 << 20, now=0.0, observers=(3,)).feed(hello, 0.0) == [HandshakeDone(1)]
    for own in ((), (2,), (2, 3)):
        with pytest.raises(MembershipRefused, match=r"node 1 is configured with observers \[3\]"):
            PeerSession(2, MEMBERS, None, 1 << 20, now=0.0, observers=own).feed(hello, 0.0)
    plain = frame((wire.TAG_HELLO, wire.WIRE_VERSION, 1))  # a node without observers
    with pytest.raises(MembershipRefused, match=r"observers \[\], this node with \[3\]"):
        PeerSession(2, MEMBERS, None, 1 << 20, now=0.0, observers=(3,)).feed(plain, 0.0)
    with pytest.raises(FrameError, match="malformed Hello"):  # not a list of node ids
        PeerSession(2, MEMBERS, None, 1 << 20, now=0.0).feed(frame((wire.TAG_HELLO, wire.WIRE_VERSION, 1, ("x",))), 0)


def test_core_messages_and_new_leader_parts() -> None:
    s = PeerSession(1, MEMBERS, 3, 1 << 20, now=0.0)
    history = tuple(Txn(zx.make(1, i), b"x" * 300) for i in range(1, 200))
    parts = wire.encode_new_leader(NewLeader(2, history), max_frame=16 * 1024)
    assert len(parts) > 3
    data = wire.encode_message(Commit(7)) + b"".join(parts) + wire.PING_FRAME
    got: list[object] = []
    for i in range(0, len(data), 1000):  # any chunking
        got.extend(s.feed(data[i : i + 1000], 0.0))
    assert got == [Commit(7), NewLeader(2, history)]  # parts joined, ping absorbed


def test_a_sync_plan_arrives_whole_and_its_snapshot_piece_by_piece() -> None:
    s = PeerSession(1, MEMBERS, 3, 1 << 20, now=0.0)
    t1, t2 = Txn(zx.make(4, 1), b"a"), Txn(zx.make(4, 2), b"b")
    data = (
        frame((wire.TAG_SYNC_PLAN, 5, "SNAP", 0, zx.make(3, 9), zx.make(3, 9), b"snap-"))
        + frame((wire.TAG_SNAP_DATA, 5, b"shot"))
        + frame((wire.TAG_SYNC_TXNS, 5, 0, [t1]))
        + frame((wire.TAG_SYNC_TXNS, 5, 1, [t2]))
    )
    first, second, arrived = s.feed(data, 0.0)
    assert isinstance(first, SnapPiece) and isinstance(second, SnapPiece) and isinstance(arrived, SyncArrived)
    assert first.plan is second.plan is arrived.plan
    assert (first.data, second.data) == (b"snap-", b"shot")
    assert arrived.plan.mode == "SNAP" and arrived.txns == (t1, t2)
    with pytest.raises(FrameError, match="without its SyncPlan"):
        s.feed(frame((wire.TAG_SYNC_TXNS, 5, 1, [t2])), 0.0)


def test_snapshot_data_after_the_plans_txns_began_is_refused() -> None:
    s = PeerSession(1, MEMBERS, 3, 1 << 20, now=0.0)
    t1 = Txn(zx.make(4, 1), b"a")
    s.feed(frame((wire.TAG_SYNC_PLAN, 5, "SNAP", 0, 9, 9, b"")) + frame((wire.TAG_SYNC_TXNS, 5, 0, [t1])), 0.0)
    with pytest.raises(FrameError, match="SnapData without"):
        s.feed(frame((wire.TAG_SNAP_DATA, 5, b"late")), 0.0)


def test_a_stream_is_taken_a_step_at_a_time_and_what_follows_waits_behind_it() -> None:
    s = PeerSession(1, MEMBERS, 3, 1 << 20, now=0.0)
    s.take_output(0.0)  # the Hello
    pulled: list[int] = []

    def pieces(tag: bytes, n: int) -> Iterator[bytes]:
        for i in range(n):
            pulled.append(i)
            yield tag + bytes(99)

    s.push(b"before")
    s.push_stream(pieces(b"a", 10))
    s.push(b"after")  # a Commit, a ping...
    s.push_stream(pieces(b"b", 2))
    s.push(b"last")
    assert s.behind_bytes == len(b"after") + len(b"last")  # what the transport counts against max_link_buffer
    assert s.take_output(0.1, room=0) == [b"before"]  # the socket is full: nothing of the stream
    assert pulled == []  # produced only as the link takes it
    out = s.take_output(0.2, room=250)
    assert [len(f) for f in out] == [100, 100, 100] and len(pulled) == 3
    rest = s.take_output(0.4, room=10_000)
    assert rest == [b"a" + bytes(99)] * 7 + [b"after"] + [b"b" + bytes(99)] * 2 + [b"last"]
    assert s.stream is None and s.behind_bytes == 0
    s.push(b"now")
    assert s.take_output(0.5) == [b"now"]


def test_no_ping_is_queued_behind_a_stream() -> None:
    s = PeerSession(1, MEMBERS, 3, 1 << 20, now=0.0)
    s.take_output(0.0)
    s.push_stream(iter([b"x"]))
    assert s.keepalive(1.0, ping_s=0.25, silence_s=1.5)
    assert s.take_output(1.0, room=10) == [b"x"] and s.stream is None


def test_keepalive_pings_an_idle_link_and_gives_up_on_a_silent_one() -> None:
    s = PeerSession(1, MEMBERS, 3, 1 << 20, now=0.0)
    s.take_output(0.0)
    assert s.keepalive(0.1, ping_s=0.25, silence_s=1.5) and s.out == []
    assert s.keepalive(0.3, ping_s=0.25, silence_s=1.5) and s.out == [wire.PING_FRAME]
    s.take_output(0.3)
    s.feed(wire.PING_FRAME, 1.0)  # heard from: alive again
    assert s.keepalive(2.4, ping_s=0.25, silence_s=1.5)
    assert not s.keepalive(2.6, ping_s=0.25, silence_s=1.5)


# ---------------------------------------------------------- client session


def test_answers_leave_in_request_order_and_deferred_ones_in_their_turn() -> None:
    s = ClientSession(1 << 20)
    first = s.open_slot()
    state = {"value": b"old"}
    s.open_slot(lambda: state["value"])  # computed only when its turn comes
    third = s.open_slot()
    s.complete(third, b"3")
    assert s.take_output() == []
    state["value"] = b"new"  # the write before it took effect
    s.complete(first, b"1")
    assert s.take_output() == [b"1", b"new", b"3"]


def test_reading_pauses_with_too_many_requests_in_flight() -> None:
    s = ClientSession(1 << 20)
    slots = [s.open_slot() for _ in range(MAX_OUTSTANDING + 1)]
    assert s.wants_pause()
    s.reading_paused = True
    for slot in slots[: MAX_OUTSTANDING // 2 + 1]:
        s.complete(slot, b"x")
    assert s.wants_resume()


# ------------------------------------------------------------ proposal path


class Links:
    def __init__(self) -> None:
        self.frames: list[tuple[int, object]] = []
        self.up = {3}

    def send_frame(self, peer: int, data: bytes) -> bool:
        if peer not in self.up:
            return False
        self.frames.append((peer, body(data)))
        return True

    def now(self) -> int:
        return 100


class Position:
    applied = 0


def synced_leader() -> Node:
    return leader_with(SERVER)


def proposed_payloads(node: Node) -> list[bytes]:
    return [t.payload for t in node.history]


def test_raw_and_kv_writes_queued_behind_each_other_keep_their_order() -> None:
    """The client-order bug: a put pipelined behind queued proposals was
    proposed first. One admission queue for both kinds keeps FIFO order."""
    node = synced_leader()
    machine = KVMachine()
    path = ProposalPath(node, machine, Links(), Position(), max_inflight=2)
    s = ClientSession(1 << 20)
    path.submit(s, 1, b"p1")
    path.submit(s, 2, b"p2")  # max_inflight reached: the next ones queue
    path.submit(s, 3, ("put", "k", b"v", 0))
    path.submit(s, 4, b"p3")
    assert proposed_payloads(node) == [tag_raw(b"p1"), tag_raw(b"p2")]  # raw, whatever their bytes
    for txn in list(node.history):
        machine.apply(txn)
    Position.applied = node.history[-1].zxid
    path.on_applied(Position.applied)
    payloads = proposed_payloads(node)
    assert payloads[:2] == [tag_raw(b"p1"), tag_raw(b"p2")] and payloads[3] == tag_raw(b"p3")
    assert payloads[2].startswith(b"\xc1kv1")
    zxids = [t.zxid for t in node.history]
    assert zxids == sorted(zxids)
    Position.applied = 0


def test_a_follower_forwards_writes_in_order_and_answers_after_applying() -> None:
    node = Node(2, [1, 3], 7, SERVER)
    node.on_message(3, NewLeader(1, ()), 5)  # follows 3, in sync
    node.take_effects()
    links = Links()
    path = ProposalPath(node, KVMachine(), links, Position(), max_inflight=8)
    s = ClientSession(1 << 20)
    path.submit(s, 1, b"p1")
    path.submit(s, 2, ("put", "k", b"v", 0))
    path.sync(s, 3)
    sent = [f for _, f in links.frames]
    assert [f[0] for f in sent] == [wire.TAG_FORWARD, wire.TAG_FORWARD, wire.TAG_SYNC_REQ]  # type: ignore[index]
    assert sent[0][2] == b"p1" and sent[1][2] == ("put", "k", b"v", 0)  # type: ignore[index]
    path.on_forward_ok(wire.ForwardOk(1, zx.make(1, 1)))  # committed at the leader, not applied here
    assert s.take_output() == []
    Position.applied = zx.make(1, 1)
    path.on_applied(Position.applied)
    (answer,) = s.take_output()
    assert msgpack.unpackb(answer[4:]) == {"v": 1, "id": 1, "ok": True, "zxid": zx.make(1, 1)}
    path.leader_changed("the leader changed")  # the forwarded put's fate is unknown
    out = [msgpack.unpackb(f[4:]) for f in s.take_output()]
    assert [o["error"] for o in out] == [schema.LEADER_LOST, schema.LEADER_LOST]
    Position.applied = 0


def test_a_write_with_no_leader_is_refused_as_not_applied() -> None:
    node = Node(2, [1, 3], 7, SERVER)  # looking
    path = ProposalPath(node, KVMachine(), Links(), Position(), max_inflight=8)
    s = ClientSession(1 << 20)
    path.submit(s, 9, b"x")
    (answer,) = s.take_output()
    got = msgpack.unpackb(answer[4:])
    assert got["error"] == schema.NO_LEADER and got["retryable"] is True


def test_a_committed_write_is_answered_with_its_result_even_across_a_leader_change() -> None:
    """Found by ``zabd nemesis --nemesis kill-leader``: a follower answered a
    forwarded cas that the leader had committed as a failed condition with
    "ok" once the leader died, before it applied the txn. It must wait for
    the txn and answer with what it did."""
    node = Node(2, [1, 3], 7, SERVER)
    node.on_message(3, NewLeader(1, ()), 5)  # follows 3, in sync
    node.take_effects()
    machine = KVMachine()
    path = ProposalPath(node, machine, Links(), Position(), max_inflight=8)
    s = ClientSession(1 << 20)
    path.submit(s, 1, ("cas", "k", b"v", 4))  # the key is absent: the leader orders a bad_version
    z = zx.make(1, 1)
    path.on_forward_ok(wire.ForwardOk(1, z))  # committed at the leader, not applied here
    path.leader_changed("lost the connection to the leader")
    assert s.take_output() == []  # committed: not "unknown", and not "ok" either before it is applied
    result = machine.apply(Txn(z, KV_MAGIC + encode_err(BAD_VERSION, "k", 0)))
    Position.applied = z
    path.answer_applied(z, result)  # the applier hands the waiting request what applying its txn returned
    path.on_applied(z)
    (answer,) = s.take_output()
    got = msgpack.unpackb(answer[4:])
    assert got["ok"] is False and got["error"] == BAD_VERSION and got["zxid"] == z
    Position.applied = 0


def test_a_write_whose_result_is_unknown_here_is_never_ok() -> None:
    node = Node(2, [1, 3], 7, SERVER)
    node.on_message(3, NewLeader(1, ()), 5)
    node.take_effects()
    path = ProposalPath(node, KVMachine(), Links(), Position(), max_inflight=8)
    s = ClientSession(1 << 20)
    path.submit(s, 1, ("put", "k", b"v", 0))
    path.submit(s, 2, b"raw")
    path.sync(s, 3)
    path.on_forward_ok(wire.ForwardOk(1, zx.make(1, 1)))
    path.on_forward_ok(wire.ForwardOk(2, zx.make(1, 2)))
    path.on_forward_ok(wire.ForwardOk(3, zx.make(1, 2)))
    path.shutting_down()  # nothing of it was applied here
    out = [msgpack.unpackb(f[4:]) for f in s.take_output()]
    assert out[0]["error"] == schema.LEADER_LOST  # committed, result unknown: the client says "unknown"
    assert out[1]["ok"] is True  # a raw write's answer is only "committed"
    assert out[2]["error"] == schema.SHUTTING_DOWN  # a sync wrote nothing: retry elsewhere
    # a snapshot install skipped the txn here: committed, result unknown
    s2 = ClientSession(1 << 20)
    path2 = ProposalPath(node, KVMachine(), Links(), Position(), max_inflight=8)
    path2.submit(s2, 7, ("put", "k", b"v", 0))
    path2.on_forward_ok(wire.ForwardOk(1, zx.make(1, 5)))  # its first forward
    Position.applied = zx.make(1, 9)
    path2.on_applied(Position.applied)
    (answer,) = s2.take_output()
    assert msgpack.unpackb(answer[4:])["error"] == schema.LEADER_LOST
    Position.applied = 0


def test_a_leader_answers_forwarded_writes_once_at_their_commit() -> None:
    """ForwardOk leaves when the commit is decided, ahead of the Commit, not
    after the leader's own apply; applying sends nothing more."""
    node = synced_leader()
    links = Links()
    path = ProposalPath(node, KVMachine(), links, Position(), max_inflight=8)
    path.on_forward(3, wire.Forward(7, b"p1"))
    path.on_forward(3, wire.Forward(8, b"p2"))
    z1, z2 = (t.zxid for t in node.history[-2:])
    path.commit_decided(z1)
    assert [f for _, f in links.frames] == [(wire.TAG_FORWARD_OK, 7, z1)]
    path.commit_decided(z1)  # again: nothing new
    path.answer_applied(z1, None)
    assert len(links.frames) == 1
    path.commit_decided(z2)
    path.answer_applied(z2, None)
    assert [f for _, f in links.frames] == [(wire.TAG_FORWARD_OK, 7, z1), (wire.TAG_FORWARD_OK, 8, z2)]

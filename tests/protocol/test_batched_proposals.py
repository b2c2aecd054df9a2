"""``Options.batch_proposals``: what a leader proposes between two
``take_effects`` leaves as one ProposeMany, and a follower answers it with one
Ack; the same txns, in the same order, as the Proposes one at a time."""

from __future__ import annotations

import pytest

from tests.protocol.helpers import synced_leader
from zabd.codec.framing import FrameError, FrameReader, frame
from zabd.protocol import zxid as zx
from zabd.protocol.effects import AppendTxn, Broadcast, CommitTo, Effect, Send
from zabd.protocol.membership import Membership
from zabd.protocol.membership import encode as encode_membership
from zabd.protocol.messages import (
    Ack,
    Message,
    NewLeader,
    Propose,
    ProposeMany,
    ReadPing,
    Txn,
)
from zabd.protocol.node import FOLLOWING, LOOKING, Node
from zabd.protocol.options import CANONICAL, SERVER, Options
from zabd.server.peer_wire import decode_message, encode_message, encode_propose_many

BATCHING = Options(cumulative_acks=True, batch_proposals=True)


def z(counter: int, epoch: int = 1) -> int:
    return zx.make(epoch, counter)


def txn(counter: int, epoch: int = 1) -> Txn:
    return Txn(z(counter, epoch), b"p%d" % counter)


def follower(options: Options) -> Node:
    """Node 1 of three follows node 3 in epoch 1, in sync, empty."""
    node = Node(1, [2, 3], 7, options)
    node.start_election(0)
    node.take_effects()
    node.on_message(3, NewLeader(1, ()), 5)
    assert node.role == FOLLOWING and node.in_sync
    node.take_effects()
    return node


def messages(effects: list[Effect]) -> list[Message]:
    return [e.msg for e in effects if isinstance(e, (Send, Broadcast))]


def test_proposals_between_two_takes_leave_as_one_batch_after_their_appends() -> None:
    node = synced_leader(BATCHING)
    zs = [node.propose(b"p%d" % k, 10) for k in range(1, 4)]
    effects = node.take_effects()
    appended = tuple(e.txn for e in effects if isinstance(e, AppendTxn))
    assert [t.zxid for t in appended] == zs
    assert effects == [*(AppendTxn(t) for t in appended), Broadcast(ProposeMany(appended))]
    assert type(effects[-1].msg.txns) is tuple  # type: ignore[union-attr]  # frozen once taken


def test_a_lone_proposal_is_a_plain_propose() -> None:
    node = synced_leader(BATCHING)
    node.propose(b"one", 10)
    assert messages(node.take_effects()) == [Propose(txn(1)._replace(payload=b"one"))]


def test_anything_said_between_two_proposals_cuts_the_batch() -> None:
    node = synced_leader(BATCHING)
    node.propose(b"p1", 10)
    node.propose(b"p2", 10)
    node.read_barrier(1, 10)  # a ReadPing between: the order on the wire must stay
    node.propose(b"p3", 10)
    said = messages(node.take_effects())
    assert said == [ProposeMany((txn(1), txn(2))), ReadPing(1), Propose(txn(3))]


def test_a_membership_change_goes_alone() -> None:
    node = synced_leader(BATCHING)
    node.propose(b"p1", 10)
    node.propose(b"p2", 10)
    change = Membership(frozenset({1, 2, 3, 4}), frozenset())
    zc = node.propose_membership(change, 10)
    node.propose(b"p4", 10)
    said = [m for m in messages(node.take_effects()) if isinstance(m, (Propose, ProposeMany))]
    assert said == [ProposeMany((txn(1), txn(2))), Propose(Txn(zc, encode_membership(change))), Propose(txn(4))]


def test_the_canonical_and_the_plain_cumulative_leaders_never_batch() -> None:
    for options in (CANONICAL, Options(cumulative_acks=True)):
        node = synced_leader(options)
        for k in range(1, 4):
            node.propose(b"p%d" % k, 10)
        assert messages(node.take_effects()) == [Propose(txn(k)) for k in range(1, 4)]
    assert SERVER.batch_proposals  # the simulator's server variant runs it


def test_a_follower_appends_a_batch_and_acks_its_last_txn_once() -> None:
    node = follower(BATCHING)
    node.on_message(3, ProposeMany((txn(1), txn(2), txn(3))), 20)
    effects = node.take_effects()
    assert effects == [AppendTxn(txn(1)), AppendTxn(txn(2)), AppendTxn(txn(3)), Send(3, Ack(z(3)))]
    assert node.history == [txn(1), txn(2), txn(3)]


def test_a_batch_holds_the_same_as_its_proposes_one_at_a_time() -> None:
    one_by_one = follower(BATCHING)
    for k in range(1, 6):
        one_by_one.on_message(3, Propose(txn(k)), 20)
    acks = [m for m in messages(one_by_one.take_effects()) if isinstance(m, Ack)]
    batched = follower(BATCHING)
    batched.on_message(3, ProposeMany(tuple(txn(k) for k in range(1, 4))), 20)
    batched.on_message(3, ProposeMany((txn(4), txn(5))), 20)
    assert batched.history == one_by_one.history
    assert [m for m in messages(batched.take_effects()) if isinstance(m, Ack)] == [Ack(z(3)), Ack(z(5))]
    assert acks[-1] == Ack(z(5))


def test_without_cumulative_acks_every_txn_is_acked() -> None:
    node = follower(Options(batch_proposals=True))
    node.on_message(3, ProposeMany((txn(1), txn(2))), 20)
    assert messages(node.take_effects()) == [Ack(z(1)), Ack(z(2))]


def test_txns_already_held_are_skipped_and_a_gap_starts_an_election() -> None:
    node = follower(BATCHING)
    node.on_message(3, ProposeMany((txn(1), txn(2))), 20)
    node.take_effects()
    node.on_message(3, ProposeMany((txn(2), txn(3))), 21)  # (1,2) again: held already
    assert messages(node.take_effects()) == [Ack(z(3))] and len(node.history) == 3
    node.on_message(3, ProposeMany((txn(4), txn(6))), 22)  # (1,5) missing
    assert node.role == LOOKING and node.election_reason == "gap in proposals"


def test_a_batch_from_another_node_is_ignored() -> None:
    node = follower(BATCHING)
    node.on_message(2, ProposeMany((txn(1), txn(2))), 20)
    assert node.take_effects() == [] and node.history == []


def test_a_membership_change_in_a_batch_is_acked_as_its_own_propose_would_be() -> None:
    node = follower(BATCHING)
    change = Membership(frozenset({1, 2, 3, 4}), frozenset())
    zc = txn(3)._replace(payload=encode_membership(change))
    node.on_message(3, ProposeMany((txn(1), txn(2), zc, txn(4))), 20)
    acks = [m for m in messages(node.take_effects()) if isinstance(m, Ack)]
    assert acks == [Ack(z(2)), Ack(z(3)), Ack(z(4))]
    assert node.membership == change


def test_a_leader_commits_a_batch_on_one_cumulative_ack() -> None:
    node = synced_leader(BATCHING)
    zs = [node.propose(b"p%d" % k, 10) for k in range(1, 4)]
    node.take_effects()
    node.on_message(1, Ack(zs[-1]), 11)
    assert [e.zxid for e in node.take_effects() if isinstance(e, CommitTo)] == [zs[-1]]


# ------------------------------------------------------------------- wire


def decode_frames(frames: list[bytes]) -> list[Message]:
    reader = FrameReader(1 << 20)
    return [decode_message(body) for data in frames for body in reader.feed(data)]


def test_a_batch_is_one_frame_and_comes_back_the_same() -> None:
    msg = ProposeMany(tuple(txn(k) for k in range(1, 20)))
    frames = encode_propose_many(msg, 1 << 20)
    assert frames == [encode_message(msg)]
    assert decode_frames(frames) == [msg]


def test_a_batch_above_a_frame_goes_as_consecutive_batches() -> None:
    msg = ProposeMany(tuple(Txn(z(k), bytes(300)) for k in range(1, 40)))
    frames = encode_propose_many(msg, 4096)
    assert len(frames) > 1 and all(len(f) <= 4096 for f in frames)
    got = decode_frames(frames)
    assert all(type(m) is ProposeMany for m in got)
    assert tuple(t for m in got for t in m.txns) == msg.txns  # type: ignore[union-attr]


MALFORMED = [(), ((z(2), b"a"), (z(1), b"b")), ((z(1), "text"),)]


@pytest.mark.parametrize("txns", MALFORMED, ids=["empty", "descending", "str"])
def test_a_malformed_batch_is_refused(txns: tuple[object, ...]) -> None:
    reader = FrameReader(1 << 20)
    (body,) = list(reader.feed(frame((11, txns))))
    with pytest.raises(FrameError):
        decode_message(body)

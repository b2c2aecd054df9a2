"""The windowed variant of the core (``Options.windowed``), driven directly:
trimming, sync plans (DIFF, TRUNC, SNAP), one sync in flight per follower."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zabd.protocol import zxid as zx
from zabd.protocol.effects import InstallSnapshot, Send, SendSync, TruncateAppend
from zabd.protocol.messages import (
    DIFF,
    SNAP,
    TRUNC,
    Ack,
    AckEpoch,
    AckLeader,
    Commit,
    LookForLeader,
    NewEpoch,
    Sync,
    SyncInfo,
    Txn,
    Vote,
)
from zabd.protocol.node import FOLLOWING, LEADING, Node
from zabd.protocol.options import Options
from zabd.protocol.window import count_after, epoch_ends, shared_prefix, window_ends

OPTS = Options(vote_on_follow=True, windowed=True, window=4, diff_limit=10, sync_retry=100)


def z(e: int, c: int) -> int:
    return zx.make(e, c)


def txns(*zs: int) -> tuple[Txn, ...]:
    return tuple(Txn(x, b"p%d" % (x & 0xFFFF)) for x in zs)


def leader_with(history: tuple[Txn, ...], log_start: int = 0, opts: Options = OPTS) -> Node:
    """Node 3 leads epoch 2 with ``history`` (all committed), node 1 synced."""
    node = Node(3, [1, 2], 7, opts)
    node.restore(current_epoch=1, accepted_epoch=1, epoch_leader=3, history=history,
                 last_committed=history[-1].zxid if history else 0, log_start=log_start)
    node.start_election(0)
    node.on_message(1, Vote(1, node.last_zxid(), 1, 3), 1)
    node.on_message(1, SyncInfo(node.base, window_ends(node.history)), 2)
    node.on_message(1, AckEpoch(2, 1, node.last_zxid()), 2)
    node.on_message(1, AckLeader(2), 3)
    assert node.role == LEADING and node.synced
    node.take_effects()
    return node


def plans(node: Node) -> list[SendSync]:
    return [e for e in node.take_effects() if isinstance(e, SendSync)]


# ------------------------------------------------------------------ helpers


def test_the_shared_prefix_needs_only_epoch_ends() -> None:
    leader = epoch_ends(txns(z(1, 1), z(1, 2), z(3, 1)))
    # the example of zabd.protocol.window: (1,2) is the leader's, never the follower's
    assert shared_prefix(leader, 0, SyncInfo(0, (z(1, 1), z(2, 2)))) == z(1, 1)
    assert shared_prefix(leader, 0, SyncInfo(0, (z(1, 2),))) == z(1, 2)  # a prefix: DIFF
    assert shared_prefix(leader, 0, SyncInfo(z(1, 2), ())) == z(1, 2)
    assert shared_prefix(leader, z(1, 1), SyncInfo(0, ())) is None  # below the purged log: SNAP
    assert count_after(leader, z(1, 1), z(3, 1)) == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.data())
def test_the_shared_prefix_equals_a_scan_of_both_histories(epochs: list[int], data: st.DataObject) -> None:
    """Build a leader history and a follower that took a prefix of it, then
    diverged with txns of an epoch the leader never finished."""
    leader: list[Txn] = []
    for e, n in enumerate(epochs, start=1):
        leader += txns(*(z(e, c) for c in range(1, n + 1)))
    k = data.draw(st.integers(0, len(leader)))
    follower = leader[:k]
    if k and data.draw(st.booleans()):  # uncommitted txns of a later epoch only the follower saw
        e = len(epochs) + 1
        follower = follower + list(txns(*(z(e, c) for c in range(1, data.draw(st.integers(1, 3)) + 1))))
    base_i = data.draw(st.integers(0, min(k, len(follower))))
    base = follower[base_i - 1].zxid if base_i else 0
    info = SyncInfo(base, window_ends(follower[base_i:]))
    expected = max([t.zxid for t in follower if t in leader], default=0)
    assert shared_prefix(epoch_ends(leader), 0, info) == max(expected, base)


# ---------------------------------------------------------------- trimming


def test_committed_txns_beyond_the_window_leave_memory() -> None:
    node = leader_with(txns(z(1, 1)))
    for k in range(7):
        zk = node.propose(b"x%d" % k, 10)
        node.on_message(1, Ack(zk), 11)
    assert len(node.history) < 2 * OPTS.window
    assert node.base > 0 and node.base <= node.last_committed
    assert node.below_ends[1] == z(1, 1)
    assert node.last_zxid() == z(2, 7)


def test_committed_txns_leave_memory_a_sixteenth_of_the_window_at_a_time() -> None:
    # a whole window freed at once held every replica's loop at the same zxid
    opts = Options(vote_on_follow=True, windowed=True, window=64, diff_limit=10, sync_retry=100)
    node = leader_with(txns(z(1, 1)), opts=opts)
    lengths = []
    for k in range(300):
        zk = node.propose(b"x%d" % k, 10)
        node.on_message(1, Ack(zk), 11)
        lengths.append(len(node.history))
    assert max(lengths) < 64 + 64 // 16
    assert min(lengths[100:]) >= 64  # never below the window
    assert node.base == node.history[0].zxid - 1 and node.last_committed == node.history[-1].zxid


def test_uncommitted_txns_never_leave_memory() -> None:
    node = leader_with(txns(z(1, 1)))
    for k in range(10):
        node.propose(b"x%d" % k, 10)  # nobody acknowledges
    assert len(node.history) == 11 and node.base == 0


# ------------------------------------------------------------- sync plans


def test_a_follower_a_little_behind_gets_a_diff_from_memory() -> None:
    node = leader_with(txns(z(1, 1), z(1, 2), z(1, 3)))
    node.on_message(2, SyncInfo(0, (z(1, 2),)), 20)
    node.on_message(2, LookForLeader(1, z(1, 2), 1), 20)
    (plan,) = plans(node)
    assert (plan.mode, plan.point, plan.read_after, plan.read_upto) == (DIFF, z(1, 2), z(1, 2), z(1, 2))
    assert [t.zxid for t in plan.txns] == [z(1, 3)]


def test_a_follower_with_txns_the_leader_never_had_is_truncated() -> None:
    node = leader_with(txns(z(1, 1), z(1, 2)))
    node.on_message(2, SyncInfo(0, (z(1, 1), z(2, 5))), 20)  # an old epoch 2 the leader never saw
    node.on_message(2, LookForLeader(1, z(2, 5), 2), 20)
    (plan,) = plans(node)
    assert plan.mode == TRUNC and plan.point == z(1, 1)


def test_txns_that_left_memory_are_read_from_the_log() -> None:
    history = txns(*(z(1, c) for c in range(1, 13)))
    node = leader_with(history)
    node._trim()  # committed, beyond the window
    assert node.base == z(1, 8)
    node.on_message(2, SyncInfo(0, (z(1, 3),)), 20)
    node.on_message(2, LookForLeader(1, z(1, 3), 1), 20)
    (plan,) = plans(node)
    assert (plan.mode, plan.read_after, plan.read_upto) == (DIFF, z(1, 3), z(1, 8))
    assert [t.zxid for t in plan.txns] == [z(1, c) for c in range(9, 13)]


def test_behind_the_purged_log_or_too_far_behind_is_a_snapshot() -> None:
    history = txns(*(z(1, c) for c in range(1, 13)))
    node = leader_with(history, log_start=z(1, 5))
    node.on_message(2, SyncInfo(0, (z(1, 3),)), 20)  # below log_start
    node.on_message(2, LookForLeader(1, z(1, 3), 1), 20)
    (plan,) = plans(node)
    assert plan.mode == SNAP and plan.point == node.last_committed and plan.txns == ()
    far = leader_with(txns(*(z(1, c) for c in range(1, 40))))
    far._trim()
    far.on_message(2, SyncInfo(0, ()), 20)  # more than diff_limit (10) txns to read
    far.on_message(2, LookForLeader(1, 0, 1), 20)
    assert plans(far)[0].mode == SNAP


def test_one_sync_in_flight_per_follower_and_one_retry() -> None:
    node = leader_with(txns(z(1, 1)))
    node.on_message(2, SyncInfo(0, ()), 20)
    node.on_message(2, LookForLeader(1, 0, 1), 20)
    assert len(plans(node)) == 1
    node.on_message(2, LookForLeader(1, 0, 1), 21)  # a repeated request gets no second copy
    node.on_message(2, SyncInfo(0, ()), 22)  # nor the same report again
    assert plans(node) == []
    node.on_message(1, Ack(z(1, 1)), 110)  # node 1 keeps supporting the leader
    node.on_tick(120)  # not acknowledged within sync_retry (100): sent once more
    assert len(plans(node)) == 1
    node.on_message(1, Ack(z(1, 1)), 210)
    node.on_tick(220)  # and then given up: the next request starts afresh
    assert plans(node) == []
    node.on_message(2, LookForLeader(1, 0, 1), 230)
    assert len(plans(node)) == 1
    node.on_message(2, AckLeader(2), 231)  # acknowledged: nothing in flight
    assert 2 not in node.syncing
    assert node.infos[2] == SyncInfo(node.last_zxid(), ())  # and the next plan starts from what it got


def test_a_streaming_sync_holds_off_the_plans_retry_while_it_moves() -> None:
    node = leader_with(txns(z(1, 1)))
    node.on_message(2, SyncInfo(0, ()), 20)
    node.on_message(2, LookForLeader(1, 0, 1), 20)
    assert len(plans(node)) == 1
    for t in range(60, 400, 40):  # a SNAP's pieces keep going out to 2, longer than sync_retry (100)
        node.on_message(1, Ack(z(1, 1)), t)  # node 1 keeps supporting the leader
        node.sync_progress(2, t)
        node.on_tick(t)
        assert plans(node) == []  # no second copy behind the first
    node.sync_progress(1, 400)  # not a follower it syncs: nothing
    node.on_message(1, Ack(z(1, 1)), 470)
    node.on_tick(470)  # the stream stopped at 380: the retry is due at 480
    assert plans(node) == []
    node.on_message(1, Ack(z(1, 1)), 490)
    node.on_tick(490)
    assert len(plans(node)) == 1


def test_a_streaming_sync_holds_off_the_followers_election() -> None:
    node = follower_with((), 0)
    node.on_message(3, NewEpoch(2), 10)  # following 3, not in sync: its timer runs from 10
    assert node.role == FOLLOWING and not node.in_sync
    for t in range(50, 1000, 50):  # pieces of the SNAP from 3, for longer than the election timeout
        node.sync_progress(3, t)
        node.sync_progress(2, t)  # not its leader: holds off nothing
        node.on_tick(t)
        assert node.role == FOLLOWING
    node.on_message(3, Sync(2, DIFF, 0, ()), 1000)
    assert node.in_sync
    node.sync_progress(3, 1100)  # a resync streaming to it: its heartbeats wait behind it too
    assert node.deadline() > 1100
    node.on_tick(node.deadline() + 1)  # and then nothing more from 3
    assert node.role != FOLLOWING


def test_a_follower_a_snapshot_streams_to_counts_for_the_leaders_quorum() -> None:
    """Three nodes, one down: the leader's quorum is itself and the follower
    it is syncing. While pieces reach it, the leader does not step down."""
    node = leader_with(txns(z(1, 1)))
    node.link_failed(1, 20)  # node 1 goes
    node.on_message(2, SyncInfo(0, ()), 20)
    node.on_message(2, LookForLeader(1, 0, 1), 20)
    assert len(plans(node)) == 1
    for t in range(60, 600, 40):  # far past SUPPORT_WINDOW (150) with nothing else from 2
        node.sync_progress(2, t)
        node.on_tick(t)
        assert node.role == LEADING
    node.on_tick(580 + 150)
    assert node.role != LEADING  # the stream stopped at 580: no support left


def test_a_broken_link_loses_the_sync_in_flight_and_an_ack_settles_the_resync() -> None:
    node = leader_with(txns(z(1, 1)))
    node.on_message(2, SyncInfo(0, ()), 20)
    node.on_message(2, LookForLeader(1, 0, 1), 20)
    assert len(plans(node)) == 1
    node.link_failed(2, 21)  # lost with the link: the resync heartbeat sends again
    node.on_message(1, Ack(z(1, 1)), 59)
    node.on_tick(60)
    assert len(plans(node)) == 1
    node.on_message(2, AckLeader(2), 61)  # acknowledged after the loss: no resync is due
    assert 2 not in node.needs_sync
    node.on_message(1, Ack(z(1, 1)), 109)
    node.on_tick(110)
    assert plans(node) == []


def test_a_new_report_while_in_flight_plans_again() -> None:
    node = leader_with(txns(z(1, 1), z(1, 2)))
    node.on_message(2, SyncInfo(0, ()), 20)
    node.on_message(2, LookForLeader(1, 0, 1), 20)
    assert len(plans(node)) == 1
    node.on_message(2, SyncInfo(0, ()), 21)  # the same report: nothing new
    assert plans(node) == []
    node.on_message(2, SyncInfo(0, (z(1, 1),)), 22)  # news: plan again with it
    (plan,) = plans(node)
    assert plan.point == z(1, 1)


# ------------------------------------------------------------- the follower


def follower_with(history: tuple[Txn, ...], committed: int) -> Node:
    node = Node(1, [2, 3], 7, OPTS)
    node.restore(current_epoch=1, accepted_epoch=1, epoch_leader=3, history=history, last_committed=committed)
    return node


def test_a_follower_applies_a_trunc_plan() -> None:
    node = follower_with(txns(z(1, 1), z(1, 2), z(1, 3)), z(1, 1))
    node.on_message(3, Sync(2, TRUNC, z(1, 1), txns(z(2, 1))), 5)
    effects = node.take_effects()
    assert TruncateAppend(z(1, 1), txns(z(2, 1))) in effects
    assert [t.zxid for t in node.history] == [z(1, 1), z(2, 1)] and node.in_sync
    assert Send(3, AckLeader(2)) in effects


def test_a_stale_plan_is_refused_with_a_fresh_report() -> None:
    node = follower_with(txns(z(1, 1), z(1, 2)), z(1, 2))
    node.on_message(3, Sync(2, TRUNC, z(1, 1), ()), 5)  # would drop committed (1,2)
    assert node.take_effects() == [Send(3, SyncInfo(0, (z(1, 2),)))]
    assert [t.zxid for t in node.history] == [z(1, 1), z(1, 2)]


def test_a_snapshot_install_keeps_what_was_committed_here() -> None:
    node = follower_with(txns(z(1, 1), z(1, 2), z(1, 3)), z(1, 3))
    node.on_message(3, Sync(2, SNAP, z(1, 2), txns(z(1, 3), z(2, 1))), 5)
    effects = node.take_effects()
    assert effects[:2] == [InstallSnapshot(z(1, 2)), TruncateAppend(z(1, 2), txns(z(1, 3), z(2, 1)))]
    assert node.base == z(1, 2) and node.last_committed == z(1, 3)
    # the snapshot is older than what this node had applied: apply the rest again
    assert any(getattr(e, "zxid", None) == z(1, 3) and type(e).__name__ == "CommitTo" for e in effects)


@pytest.mark.parametrize("mode", [DIFF, SNAP])
def test_a_synced_follower_acks_proposals_and_commits(mode: int) -> None:
    node = follower_with((), 0)
    node.on_message(3, Sync(2, mode, 0, txns(z(2, 1))), 5)
    node.take_effects()
    node.on_message(3, Commit(z(2, 1)), 6)
    assert node.last_committed == z(2, 1)


# ------------------------------------------------------------ read barriers


def test_a_read_barrier_needs_a_quorum_of_answers_after_it_began() -> None:
    from zabd.protocol.effects import Broadcast, ReadFailed, ReadReady
    from zabd.protocol.messages import ReadPing, ReadPong

    node = leader_with(txns(z(1, 1)))
    node.read_barrier(7, 20)
    assert Broadcast(ReadPing(1)) in node.take_effects()
    node.on_message(1, ReadPong(0), 21)  # an answer to an older ping proves nothing about this read
    assert not any(isinstance(e, ReadReady) for e in node.take_effects())
    node.on_message(1, ReadPong(1), 22)
    assert ReadReady(7, node.last_committed) in node.take_effects()
    node.read_barrier(8, 30)
    node.take_effects()
    node.start_election(31)  # leadership ends: the read cannot be confirmed
    assert ReadFailed(8) in node.take_effects()


def test_only_an_in_sync_follower_of_that_leader_answers_a_ping() -> None:
    from zabd.protocol.messages import ReadPing, ReadPong

    node = follower_with((), 0)
    node.on_message(3, ReadPing(4), 5)  # not synced with 3 yet
    assert node.take_effects() == []
    node.on_message(3, Sync(2, DIFF, 0, ()), 6)
    node.take_effects()
    node.on_message(2, ReadPing(5), 7)  # not its leader
    node.on_message(3, ReadPing(6), 8)
    assert node.take_effects() == [Send(3, ReadPong(6))]

"""Each handler of spec section 8, driven directly: one event in, effects out."""

from __future__ import annotations

import pytest

from zabd.protocol import (
    FOLLOWING,
    LEADING,
    LOOKING,
    PHASE_BROADCAST,
    PHASE_SYNC,
    Ack,
    AckEpoch,
    AckLeader,
    AppendTxn,
    Broadcast,
    Commit,
    CommitTo,
    LookForLeader,
    NewEpoch,
    NewLeader,
    Node,
    NotLeader,
    PersistEpochs,
    Propose,
    ReplaceHistory,
    RoleChanged,
    Send,
    Txn,
    Vote,
)
from zabd.protocol import zxid as zx
from zabd.protocol.rand import deadline_after

SEED = 7


def z(epoch: int, counter: int) -> int:
    return zx.make(epoch, counter)


def sends(effects: list[object]) -> list[object]:
    return [e for e in effects if isinstance(e, (Send, Broadcast))]


def looking(node_id: int = 1, n: int = 3) -> Node:
    node = Node(node_id, [i for i in range(1, n + 1) if i != node_id], SEED)
    node.start_election(0)
    node.take_effects()
    return node


def leader(n: int = 3, t: int = 10) -> Node:
    """Node n elected by node 1's vote: Leading, discovering epoch 1."""
    node = looking(n, n)
    node.on_message(1, Vote(0, 0, 0, n), t)
    assert node.role == LEADING
    node.take_effects()
    return node


def synced_leader(n: int = 3, t: int = 10) -> Node:
    node = leader(n, t)
    node.on_message(1, AckEpoch(1, 0, 0), t)
    node.on_message(1, AckLeader(1), t)
    assert node.synced
    node.take_effects()
    return node


def follower(history: list[Txn] | None = None, t: int = 10) -> Node:
    """Node 1 following node 3 in epoch 1, in sync."""
    node = looking(1, 3)
    node.on_message(3, NewLeader(1, tuple(history or [])), t)
    assert node.role == FOLLOWING and node.in_sync
    node.take_effects()
    return node


# ------------------------------------------------------------------ timers


def test_every_node_starts_an_election_at_tick_zero() -> None:
    node = Node(2, [1, 3], SEED)
    node.on_tick(0)
    effects = node.take_effects()
    assert node.role == LOOKING
    assert sends(effects) == [Broadcast(LookForLeader(0, 0, 0)), Broadcast(Vote(0, 0, 0, 2))]
    assert node.deadline() == deadline_after(SEED, 2, 0)


def test_follower_times_out_exactly_at_its_deadline() -> None:
    node = follower()
    deadline = node.deadline()
    node.on_tick(deadline - 1)
    assert node.role == FOLLOWING and node.take_effects() == []
    node.on_tick(deadline)
    assert node.role == LOOKING


def test_wake_is_a_lower_bound_for_on_tick() -> None:
    node = follower()
    assert node.wake <= node.deadline()
    node.on_tick(node.wake)  # lazily computes the exact deadline, does nothing yet
    assert node.role == FOLLOWING or node.wake == node.deadline()


def test_leader_heartbeat_phases() -> None:
    node = leader(t=10)
    node.on_tick(60)  # not discovered: NewEpoch again
    assert sends(node.take_effects()) == [Broadcast(NewEpoch(1))]
    node.on_message(1, AckEpoch(1, 0, 0), 61)
    node.take_effects()
    node.on_tick(110)  # discovered, not synced: NewLeader again
    assert sends(node.take_effects()) == [Broadcast(NewLeader(1, ()))]
    node.on_message(1, AckLeader(1), 111)
    node.take_effects()
    node.on_tick(160)  # synced: Commit(last_committed) heartbeat
    assert sends(node.take_effects()) == [Broadcast(Commit(0))]


def test_leader_steps_down_without_a_quorum_of_support() -> None:
    node = synced_leader(t=10)
    node.on_tick(159)  # last_heard = 10 for node 2: 149 < 150 still supports
    assert node.role == LEADING
    node.take_effects()
    node.on_tick(160)  # node 1 heard at 10 too: both out of the window
    assert node.role == LOOKING


def test_link_failed_marks_resync_only_at_an_established_leader() -> None:
    node = leader()
    node.link_failed(2, 11)
    assert node.needs_sync == set()
    node.on_message(1, AckEpoch(1, 0, 0), 11)
    node.link_failed(2, 12)
    assert node.needs_sync == {2}
    f = follower()
    f.link_failed(2, 12)  # not its leader: nothing
    assert not f.leader_lost
    f.link_failed(3, 12)
    assert f.role == FOLLOWING  # link_failed never changes the role itself


def test_a_follower_that_loses_its_leader_link_elects_at_its_next_tick() -> None:
    f = follower(t=10)
    f.link_failed(3, 12)
    assert f.leader_lost and f.wake == 12  # a driver must tick it now
    f.on_message(3, Commit(0), 12)  # resets the deadline, not the loss
    assert f.wake == 12
    f.take_effects()
    f.on_tick(12)
    assert f.role == LOOKING and not f.leader_lost
    assert sends(f.take_effects()) == [Broadcast(LookForLeader(1, 0, 1)), Broadcast(Vote(1, 0, 1, 1))]


def test_link_failed_at_a_looking_node_does_nothing() -> None:
    node = looking(1, 3)
    node.link_failed(2, 5)
    assert not node.leader_lost and node.wake > 5


def test_every_role_change_clears_leader_lost() -> None:
    f = follower(t=10)
    f.link_failed(3, 11)
    f.on_message(2, NewEpoch(5), 11)  # follows 2 now
    assert f.leader == 2 and not f.leader_lost


def test_a_drop_before_a_role_change_in_the_same_batch_is_a_no_op() -> None:
    # Node 1 votes for 2 (a Vote broadcast) and follows 2 in the same handler;
    # the spec's link_failed at the drop saw a Looking node, and the change to
    # Following cleared what it would have set.
    node = looking(1, 3)
    node.on_message(2, Vote(0, 0, 0, 2), 5)
    effects = node.take_effects()
    assert node.role == FOLLOWING and node.leader == 2
    vote_at = effects.index(Broadcast(Vote(0, 0, 0, 2)))
    node.send_dropped(vote_at, 2, 5)
    assert not node.leader_lost
    node.on_message(2, NewEpoch(1), 6)
    effects = node.take_effects()
    ack_at = effects.index(Send(2, AckEpoch(1, 0, 0)))
    node.send_dropped(ack_at, 2, 6)  # after the change: a real loss of the leader
    assert node.leader_lost


def test_resync_heartbeat_sends_history_to_the_broken_link_only() -> None:
    node = synced_leader(t=10)
    node.propose(b"a", 11)
    node.take_effects()
    node.link_failed(2, 12)
    node.on_message(1, Ack(z(1, 1)), 12)
    node.take_effects()
    node.on_tick(60)
    out = sends(node.take_effects())
    assert out == [Send(1, Commit(z(1, 1))), Send(2, NewLeader(1, (Txn(z(1, 1), b"a"),)))]
    assert node.needs_sync == set()


# ---------------------------------------------------------------- election


def test_looking_node_adopts_a_better_vote_and_rebroadcasts() -> None:
    node = looking(1, 3)
    node.on_message(2, Vote(0, 0, 0, 2), 5)
    assert node.target == (0, 0, 2)
    assert sends(node.take_effects()) == [Broadcast(Vote(0, 0, 0, 2))]
    # 1 and 2 both vote for 2: a quorum of 3, node 1 follows 2
    assert node.role == FOLLOWING and node.leader == 2


def test_election_ranks_current_epoch_before_zxid() -> None:
    node = looking(3, 3)
    node.history = [Txn(z(1, 5), b"x")]
    node.start_election(0)
    node.take_effects()
    node.on_message(1, Vote(2, z(2, 1), 2, 1), 1)  # newer epoch, smaller zxid: better
    assert node.target == (2, z(2, 1), 1)


def test_worse_vote_is_recorded_but_not_adopted() -> None:
    node = looking(3, 5)
    node.on_message(1, Vote(0, 0, 4, 1), 5)
    assert node.target == (0, 0, 3) and node.view[1] == 1
    assert node.max_epoch_seen == 4
    assert sends(node.take_effects()) == []


def test_look_for_leader_at_a_looking_node_counts_as_a_vote_for_the_sender() -> None:
    node = looking(3, 3)
    node.on_message(1, LookForLeader(0, 0, 0), 5)
    assert node.view[1] == 1


def test_a_looking_node_answers_a_look_for_leader_with_its_own_vote() -> None:
    node = looking(3, 5)
    node.on_message(1, LookForLeader(0, 0, 0), 5)  # 1 ranks below 3's own vote
    assert sends(node.take_effects()) == [Send(1, Vote(0, 0, 0, 3))]
    node.on_message(4, LookForLeader(0, 0, 0), 6)  # 4 ranks above: adopted and broadcast, no answer
    assert sends(node.take_effects()) == [Broadcast(Vote(0, 0, 0, 4))]
    node.on_message(4, Vote(0, 0, 0, 4), 7)  # a Vote is never answered
    assert sends(node.take_effects()) == []


def test_look_for_leader_at_a_follower_answers_with_its_vote() -> None:
    node = follower()
    node.on_message(2, LookForLeader(0, 0, 0), 20)
    assert sends(node.take_effects()) == [Send(2, Vote(1, 0, 1, 3))]


def test_look_for_leader_at_leaders_takes_the_late_joiner_path() -> None:
    node = leader()
    node.on_message(2, LookForLeader(0, 0, 0), 11)
    assert sends(node.take_effects()) == [Send(2, Vote(0, 0, 1, 3)), Send(2, NewEpoch(1))]
    node.on_message(1, AckEpoch(1, 0, 0), 12)
    node.take_effects()
    node.on_message(2, LookForLeader(0, 0, 0), 13)
    assert sends(node.take_effects()) == [Send(2, Vote(1, 0, 1, 3)), Send(2, NewLeader(1, ()))]


def test_vote_is_ignored_unless_looking() -> None:
    node = follower()
    node.on_message(2, Vote(5, z(5, 5), 5, 2), 20)
    assert node.take_effects() == [] and node.role == FOLLOWING


# ------------------------------------------ discovery and synchronization


def test_become_leading_picks_an_epoch_above_everything_seen() -> None:
    node = looking(3, 3)
    node.on_message(2, Vote(0, 0, 7, 3), 1)  # voter accepted epoch 7 already
    assert node.role == LEADING and node.pending_epoch == 8 and node.accepted_epoch == 8
    effects = node.take_effects()
    assert effects.index(PersistEpochs(8, 3, 0)) < effects.index(Broadcast(NewEpoch(8)))


def test_new_epoch_is_acknowledged_once_per_epoch_and_leader() -> None:
    node = looking(1, 3)
    node.on_message(3, NewEpoch(4), 5)
    effects = node.take_effects()
    assert node.role == FOLLOWING and node.leader == 3 and node.accepted_epoch == 4
    assert effects.index(PersistEpochs(4, 3, 0)) < effects.index(Send(3, AckEpoch(4, 0, 0)))
    node.on_message(3, NewEpoch(4), 6)  # same leader, same epoch: acknowledged again
    assert sends(node.take_effects()) == [Send(3, AckEpoch(4, 0, 0))]
    node.on_message(2, NewEpoch(4), 7)  # another leader, same epoch: ignored
    node.on_message(2, NewEpoch(3), 7)  # lower epoch: ignored
    assert node.take_effects() == [] and node.leader == 3


def test_ignored_new_epoch_does_not_reset_the_timer() -> None:
    node = looking(1, 3)
    node.on_message(3, NewEpoch(4), 5)
    deadline = node.deadline()
    node.on_message(2, NewEpoch(4), 100)
    assert node.deadline() == deadline


def test_ack_epoch_for_another_epoch_is_ignored() -> None:
    node = leader()
    node.on_message(1, AckEpoch(2, 0, 0), 11)
    assert not node.discovered and node.take_effects() == []


def test_ack_epoch_from_a_follower_ahead_is_not_counted() -> None:
    node = leader()
    node.on_message(1, AckEpoch(1, 0, z(0, 3)), 11)
    assert not node.discovered and node.epoch_acks == {3}
    assert node.last_heard[1] == 10  # not support either


def test_quorum_of_epoch_acks_finishes_discovery() -> None:
    node = leader()
    node.on_message(1, AckEpoch(1, 0, 0), 11)
    effects = node.take_effects()
    assert node.discovered and node.current_epoch == 1
    assert effects == [
        PersistEpochs(1, 3, 1),
        RoleChanged(LEADING, 3, 1, PHASE_SYNC),
        Broadcast(NewLeader(1, ())),
    ]


def test_ack_epoch_after_discovery_gets_new_leader_directly() -> None:
    node = leader()
    node.on_message(1, AckEpoch(1, 0, 0), 11)
    node.take_effects()
    node.on_message(2, AckEpoch(1, 0, 0), 12)
    assert sends(node.take_effects()) == [Send(2, NewLeader(1, ()))]


def test_new_leader_persists_history_then_epochs_then_acknowledges() -> None:
    node = looking(1, 3)
    history = (Txn(z(1, 1), b"a"), Txn(z(1, 2), b"b"))
    node.on_message(3, NewLeader(1, history), 5)
    effects = node.take_effects()
    kinds = [type(e) for e in effects if not isinstance(e, RoleChanged)]
    assert kinds == [ReplaceHistory, PersistEpochs, Send]
    assert effects[-1] == Send(3, AckLeader(1))
    assert node.history == list(history) and node.in_sync
    assert node.current_epoch == node.accepted_epoch == 1


def test_new_leader_below_accepted_epoch_is_ignored() -> None:
    node = looking(1, 3)
    node.on_message(2, NewEpoch(5), 1)
    node.take_effects()
    node.on_message(3, NewLeader(4, ()), 2)
    assert node.take_effects() == [] and node.leader == 2


def test_new_leader_makes_a_discovering_leader_follow() -> None:
    node = leader()
    node.on_message(2, NewLeader(1, ()), 11)
    assert node.role == FOLLOWING and node.leader == 2 and node.pending_epoch == 0


def test_ack_leader_quorum_syncs_and_commits_the_inherited_history() -> None:
    node = leader()
    node.history = [Txn(z(0, 1), b"old")]
    node.on_message(1, AckEpoch(1, 0, 0), 11)
    node.take_effects()
    node.on_message(1, AckLeader(1), 12)
    effects = node.take_effects()
    assert node.synced and node.last_committed == z(0, 1)
    assert effects == [RoleChanged(LEADING, 3, 1, PHASE_BROADCAST), CommitTo(z(0, 1)), Broadcast(Commit(z(0, 1)))]
    node.on_message(2, AckLeader(1), 13)  # a late AckLeader gets the commit point
    assert sends(node.take_effects()) == [Send(2, Commit(z(0, 1)))]


def test_ack_leader_is_ignored_before_discovery_or_for_another_epoch() -> None:
    node = leader()
    node.on_message(1, AckLeader(1), 11)
    assert node.leader_acks == set()
    node.on_message(1, AckEpoch(1, 0, 0), 11)
    node.on_message(1, AckLeader(2), 12)
    assert not node.synced


# --------------------------------------------------------------- broadcast


def test_propose_requires_a_synced_leader() -> None:
    with pytest.raises(NotLeader):
        leader().propose(b"x", 11)


def test_propose_appends_then_broadcasts_and_commits_on_a_quorum() -> None:
    node = synced_leader()
    assert node.propose(b"x", 11) == z(1, 1)
    effects = node.take_effects()
    assert effects == [AppendTxn(Txn(z(1, 1), b"x")), Broadcast(Propose(Txn(z(1, 1), b"x")))]
    node.on_message(2, Ack(z(1, 1)), 12)
    assert node.take_effects() == [CommitTo(z(1, 1)), Broadcast(Commit(z(1, 1)))]
    assert node.ack_set == {}
    node.on_message(1, Ack(z(1, 1)), 13)  # a late ack changes nothing
    assert node.take_effects() == [] and node.last_heard[1] == 13


def test_follower_accepts_only_the_next_zxid() -> None:
    node = follower()
    node.on_message(3, Propose(Txn(z(1, 1), b"a")), 20)
    assert node.take_effects() == [AppendTxn(Txn(z(1, 1), b"a")), Send(3, Ack(z(1, 1)))]
    node.on_message(3, Propose(Txn(z(1, 1), b"a")), 21)  # a duplicate: ignored
    assert node.take_effects() == []
    node.on_message(3, Propose(Txn(z(1, 3), b"c")), 22)  # a gap: back to an election
    assert node.role == LOOKING


def test_propose_from_another_node_or_before_sync_is_ignored() -> None:
    node = follower()
    node.on_message(2, Propose(Txn(z(1, 1), b"a")), 20)
    assert node.take_effects() == [] and node.history == []
    unsynced = looking(1, 3)
    unsynced.on_message(3, NewEpoch(1), 5)
    unsynced.take_effects()
    unsynced.on_message(3, Propose(Txn(z(1, 1), b"a")), 6)
    assert unsynced.history == []


def test_commit_heartbeat_advance_and_gap() -> None:
    node = follower([Txn(z(1, 1), b"a"), Txn(z(1, 2), b"b")])
    node.on_message(3, Commit(z(1, 1)), 20)  # advances: no answer
    assert node.take_effects() == [CommitTo(z(1, 1))] and node.last_committed == z(1, 1)
    node.on_message(3, Commit(z(1, 1)), 21)  # heartbeat: Ack of the last zxid
    assert node.take_effects() == [Send(3, Ack(z(1, 2)))]
    node.on_message(3, Commit(z(1, 3)), 22)  # beyond the history: a gap
    assert node.role == LOOKING


def test_ack_at_a_follower_is_ignored() -> None:
    node = follower()
    node.on_message(2, Ack(z(1, 1)), 20)
    assert node.take_effects() == []


def test_last_committed_is_never_lowered_by_new_leader() -> None:
    node = follower([Txn(z(1, 1), b"a")])
    node.on_message(3, Commit(z(1, 1)), 20)
    node.on_message(3, NewLeader(2, (Txn(z(1, 1), b"a"),)), 21)
    assert node.last_committed == z(1, 1)


def test_counter_overflow_is_refused() -> None:
    node = synced_leader()
    node.next_counter = zx.U32_MAX
    with pytest.raises(zx.CounterOverflow):
        node.propose(b"x", 11)


def test_crash_keeps_persistent_state_only() -> None:
    node = follower([Txn(z(1, 1), b"a")])
    node.on_message(3, Commit(z(1, 1)), 20)
    node.crash()
    assert (node.role, node.leader, node.in_sync) == (LOOKING, 0, False)
    assert node.history == [Txn(z(1, 1), b"a")] and node.last_committed == z(1, 1)
    assert node.current_epoch == 1 and node.accepted_epoch == 1
    node.restart(500)
    node.on_tick(500)
    assert sends(node.take_effects())[0] == Broadcast(LookForLeader(1, z(1, 1), 1))


# ------------------------------------------------------ link up (driver event)


def test_link_up_at_a_looking_node_repeats_its_election_start_to_that_peer() -> None:
    node = looking(1, 3)
    node.link_up(3, 7)
    assert sends(node.take_effects()) == [Send(3, LookForLeader(0, 0, 0)), Send(3, Vote(0, 0, 0, 1))]


def test_link_up_after_the_vote_moved_starts_a_new_round() -> None:
    node = looking(1, 5)
    node.on_message(2, Vote(0, 0, 0, 2), 5)  # now votes for 2, no quorum yet
    node.take_effects()
    node.link_up(3, 8)
    assert node.target == (0, 0, 1) and node.role == LOOKING
    assert sends(node.take_effects()) == [Broadcast(LookForLeader(0, 0, 0)), Broadcast(Vote(0, 0, 0, 1))]


def test_link_up_is_a_no_op_for_followers_and_leaders() -> None:
    for node in (follower(), synced_leader()):
        node.link_up(2, 30)
        assert node.take_effects() == []


def test_a_healed_node_rejoins_through_link_up_and_the_late_joiner_path() -> None:
    lead = synced_leader(3)  # node 3 leads epoch 1, node 1 synced
    lone = looking(2, 3)  # node 2 was cut off and looks alone
    lone.link_up(3, 40)
    for eff in lone.take_effects():
        assert isinstance(eff, Send) and eff.dst == 3
        lead.on_message(2, eff.msg, 41)
    answers = [e for e in lead.take_effects() if isinstance(e, Send) and e.dst == 2]
    assert [type(e.msg) for e in answers] == [Vote, NewLeader]  # the late-joiner path; a Vote is ignored
    for e in answers:
        lone.on_message(3, e.msg, 42)
    assert lone.role == FOLLOWING and lone.leader == 3 and lone.in_sync

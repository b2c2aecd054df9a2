"""The ZAB replica state machine (spec sections 2, 5, 6 and 8).

Pure: events in (``on_message``, ``on_tick``, ``propose``, ``link_failed``),
effects out (``take_effects``). No clock, sockets, randomness or disk: time is
the integer tick the driver passes in, and the only "random" value, the
election jitter, is derived from the configured seed by the spec's formula.

Two things here are not in the spec's pseudo-code but do not change what it
computes:

* ``election_deadline`` is computed lazily. ``reset_deadline(t)`` runs on
  every Propose and heartbeat at a follower, and the deadline it sets is
  almost always replaced before it is reached; all we need until then is the
  lower bound ``t + 150``. The exact value is derived from ``t`` on demand.
* ``wake`` is a lower bound on the next tick at which ``on_tick`` can do
  anything. Drivers may skip ``on_tick`` for ``t < wake`` (the simulator
  jumps over idle ticks with it; the server can sleep until it).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from mypy_extensions import mypyc_attr

from zabd.protocol import zxid as zx
from zabd.protocol.effects import (
    PHASE_BROADCAST,
    PHASE_NONE,
    PHASE_SYNC,
    AppendTxn,
    Broadcast,
    CommitTo,
    Effect,
    InstallSnapshot,
    MembershipChanged,
    PersistEpochs,
    ReadFailed,
    ReadReady,
    ReplaceHistory,
    RoleChanged,
    Send,
    SendSync,
    TruncateAppend,
)
from zabd.protocol.membership import MAGIC as MEMBERSHIP_MAGIC
from zabd.protocol.membership import ONE_AT_A_TIME, Membership, MembershipError, check_change
from zabd.protocol.membership import decode as decode_membership
from zabd.protocol.membership import encode as encode_membership
from zabd.protocol.messages import (
    DIFF,
    SNAP,
    TRUNC,
    Ack,
    AckEpoch,
    AckLeader,
    Commit,
    History,
    LookForLeader,
    Message,
    NewEpoch,
    NewLeader,
    Propose,
    ProposeMany,
    ReadPing,
    ReadPong,
    Sync,
    SyncInfo,
    Txn,
    Vote,
)
from zabd.protocol.options import CANONICAL, Options
from zabd.protocol.rand import ELECTION_JITTER, ELECTION_TIMEOUT, mix
from zabd.protocol.window import count_after, shared_prefix, window_ends

LOOKING: Final = 0
FOLLOWING: Final = 1
LEADING: Final = 2
ROLE_NAMES = ("looking", "following", "leading")


def role_name(role: int, observing: bool) -> str:
    """What a node is, for people: an observer that follows is observing."""
    return "observing" if observing and role == FOLLOWING else ROLE_NAMES[role]


HEARTBEAT_INTERVAL: Final = 50
SUPPORT_WINDOW: Final = 150
NO_LEADER: Final = 0
# the windowed history leaves memory in steps of 1/TRIM_PARTS of the window
TRIM_PARTS: Final = 16
# The hot path's NamedTuples built with tuple.__new__, not through the
# __new__ namedtuple makes: that one is Python (a frame per message, even
# when this module is compiled); this is one C call.
_make: Final = tuple.__new__


class NotLeader(Exception):
    """``propose`` was called on a node that is not a synced leader."""


# tests and checks subclass the core to plant faults or watch it (mypyc: native
# classes refuse interpreted subclasses unless told)
@mypyc_attr(allow_interpreted_subclasses=True)
class Node:
    __slots__ = (
        "id",
        "peers",
        "membership",
        "membership_zxid",
        "base_membership",
        "base_membership_zxid",
        "_initial_membership",
        "_changes",
        "voter_ids",
        "voting",
        "observing",
        "voters",
        "quorum",
        "seed",
        "options",
        "_cumulative_acks",
        "_batching",
        # persistent
        "current_epoch",
        "accepted_epoch",
        "epoch_leader",
        "history",
        "last_committed",
        # windowed variant: the history in memory starts after base
        "base",
        "below_ends",
        "log_start",
        "infos",
        "syncing",
        "barriers",
        "_read_seq",
        "_window",
        "_trim_at",
        # volatile
        "role",
        "leader",
        "in_sync",
        "leader_lost",
        "election_reason",
        # election
        "target",
        "view",
        "max_epoch_seen",
        # leader-only
        "pending_epoch",
        "discovered",
        "epoch_acks",
        "leader_acks",
        "synced",
        "next_counter",
        "ack_set",
        "last_heard",
        "last_heartbeat",
        "needs_sync",
        "guests",
        # timer
        "election_deadline",
        "_deadline_from",
        "wake",
        # output
        "effects",
        "_announced",
        "_transition_at",
        "_taken_transition_at",
        # batch_proposals: the txns of the open batch, and the index in effects of its Broadcast
        "_batch",
        "_batch_at",
    )

    def __init__(
        self,
        node_id: int,
        peers: Sequence[int],
        seed: int,
        options: Options = CANONICAL,
        observers: Iterable[int] = (),
        membership: Membership | None = None,
    ) -> None:
        """``observers``: the ensemble's members that never vote (this node
        may be one): they follow and hold every txn, but no election, epoch,
        commit or read barrier counts them, and none of them ever leads.
        ``membership``: the one to start with instead of ``peers`` and
        ``observers`` (this node need not be in it: a node to be added later
        starts outside). It changes with the history (zabd.protocol.membership)."""
        if node_id in peers:
            raise ValueError(f"node {node_id} lists itself among its peers")
        if membership is None:
            members = {node_id, *peers}
            observing = frozenset(observers)
            if not observing <= members:
                raise ValueError(f"observers {sorted(observing - members)} are not members of the ensemble")
            if observing >= members:
                raise ValueError("every member is an observer: nobody can vote")
            membership = Membership(frozenset(members - observing), observing)
        elif not membership.voters or membership.voters & membership.observers:
            raise ValueError(f"not a membership: {membership.describe()}")
        self.options = options
        self.id = node_id
        self.base_membership = membership  # in effect at base (all of the history, unwindowed)
        self.base_membership_zxid = 0  # the change that made it (0: the configured one)
        self._initial_membership = membership
        self._changes: list[tuple[int, Membership]] = []  # changes in the history: (zxid, membership)
        # the change that set the membership in effect (0: the initial one, or
        # one that had left memory before a restart)
        self.membership_zxid = 0
        # leader, Options.keep_removed: the removed members it still sends to (never counted)
        self.guests: set[int] = set()
        self._set_membership(membership)
        self.seed = seed
        self.current_epoch = 0
        self.accepted_epoch = 0
        self.epoch_leader = 0
        self.history: list[Txn] = []
        self.last_committed = zx.ZERO
        self.base = zx.ZERO  # every txn up to it is committed and left memory (windowed only)
        self.below_ends: dict[int, int] = {}  # epoch -> last zxid, of the txns that left memory
        self.log_start = zx.ZERO  # the driver's log holds the txns after it (windowed only)
        self.infos: dict[int, SyncInfo] = {}  # what each follower last said it holds
        # follower -> (tick sent, retried, last zxid sent): one sync in flight
        self.syncing: dict[int, tuple[int, bool, int]] = {}
        # read barriers in flight: ping seq -> (token, zxid, followers that answered)
        self.barriers: dict[int, tuple[int, int, set[int]]] = {}
        self._read_seq = 0
        self._window = options.window if options.windowed else 0
        # Trimmed a sixteenth of the window at a time: a whole window at once
        # (10,000 txns at 2x the window) was freed at the same zxid on every
        # replica, three times a second under load, in one loop turn
        # (docs/zookeeper.md, the p99 of setData). A trim costs a bisect and
        # a move of the list.
        self._trim_at = self._window + max(1, self._window // TRIM_PARTS)
        self._cumulative_acks = options.cumulative_acks
        self._batching = options.batch_proposals
        self._batch: list[Txn] | None = None
        self._batch_at = -1
        self.effects: list[Effect] = []
        self._transition_at = 0
        self._taken_transition_at = 0
        self._reset_volatile()

    # ------------------------------------------------------------------ state

    def _reset_volatile(self) -> None:
        """Every volatile, follower, election, leader-only and timer field back
        to its initial value (a crash, spec section 12)."""
        self.role = LOOKING
        self.leader = NO_LEADER
        self.in_sync = False
        self.leader_lost = False
        self.election_reason = "start"
        self.target: tuple[int, int, int] = (0, zx.ZERO, self.id)
        self.view: dict[int, int] = {}
        self.max_epoch_seen = 0
        self._clear_leader_state()
        self.election_deadline = 0
        self._deadline_from = -1
        self.wake = 0
        self._announced: tuple[int, int, int, int] = (LOOKING, NO_LEADER, self.current_epoch, PHASE_NONE)

    def _clear_leader_state(self) -> None:
        self.pending_epoch = 0
        self.discovered = False
        self.epoch_acks: set[int] = set()
        self.leader_acks: set[int] = set()
        self.synced = False
        self.next_counter = 0
        self.ack_set: dict[int, set[int]] = {}
        self.last_heard: dict[int, int] = {}
        self.last_heartbeat = 0
        self.needs_sync: set[int] = set()
        if self.guests:  # only the leader that removed them keeps them
            self.guests.clear()
            self._set_peers()
        if self._window:
            self.syncing.clear()
        if self.barriers:
            for token, _, _ in self.barriers.values():
                self.effects.append(ReadFailed(token))
            self.barriers.clear()

    def restore(
        self,
        *,
        current_epoch: int,
        accepted_epoch: int,
        epoch_leader: int,
        history: Sequence[Txn],
        last_committed: int,
        base: int = zx.ZERO,
        below_ends: dict[int, int] | None = None,
        log_start: int = zx.ZERO,
        base_membership: Membership | None = None,
        base_membership_zxid: int = 0,
    ) -> None:
        """Load persistent state recovered from disk (a restarted server).
        Windowed: ``history`` holds the txns after ``base``; ``below_ends``
        the epoch ends of the log below it, which starts after ``log_start``;
        ``base_membership`` the membership in effect at ``base`` (default:
        the one the node was made with), made by the change at
        ``base_membership_zxid`` (0: the configured one)."""
        if accepted_epoch < current_epoch:
            raise ValueError(f"accepted_epoch {accepted_epoch} is below current_epoch {current_epoch}")
        if base > last_committed:
            raise ValueError(f"base {zx.fmt(base)} is above the commit point {zx.fmt(last_committed)}")
        self.current_epoch = current_epoch
        self.accepted_epoch = accepted_epoch
        self.epoch_leader = epoch_leader
        self.history = list(history)
        self.last_committed = last_committed
        self.base = base
        self.below_ends = dict(below_ends or {})
        self.log_start = log_start
        if base_membership is not None:
            self.base_membership = base_membership
            self.base_membership_zxid = base_membership_zxid
        self._changes = _scan_changes(self.history)
        self._take_membership(0)
        self._reset_volatile()
        # the candidate a vote that comes before this node's election starts
        # (a server's connect grace) is weighed against: its own position, not
        # the placeholder, or a restarted node holding the best state follows a
        # worse peer, which then moves its vote to it, and neither leads until
        # an election timeout
        self.target = (self.current_epoch, self.last_zxid(), self.id)

    def crash(self) -> None:
        """Lose all volatile state; persistent fields are kept."""
        self._reset_volatile()
        self.effects.clear()
        self._batch = None
        self._transition_at = self._taken_transition_at = 0

    def restart(self, t: int) -> None:
        """Come back up; the node starts an election at its next tick."""
        self.election_deadline = t
        self._deadline_from = -1
        self.wake = t

    def take_effects(self) -> list[Effect]:
        if self._batch is not None:
            self._close_batch()
        effects = self.effects
        self.effects = []
        self._taken_transition_at = self._transition_at
        self._transition_at = 0
        return effects

    def _transition(self) -> None:
        """Every role change clears ``leader_lost`` and ``needs_sync``; remember
        where in the pending effects it happened (see ``send_dropped``)."""
        self.leader_lost = False
        self._transition_at = len(self.effects)
        if self._batch is not None:  # what follows the transition starts after it
            self._close_batch()

    def last_zxid(self) -> int:
        h = self.history
        return h[-1].zxid if h else self.base

    def successor(self) -> int:
        last = self.last_zxid()
        counter = (last & zx.U32_MAX) if (last >> 32) == self.current_epoch else 0
        return zx.make(self.current_epoch, counter + 1)

    @property
    def ready(self) -> bool:
        """True when this node is a leader that accepts proposals."""
        return self.role == LEADING and self.synced

    # ----------------------------------------------------------------- output

    def _send(self, dst: int, msg: Message) -> None:
        self.effects.append(_make(Send, (dst, msg)))

    def _broadcast(self, msg: Message) -> None:
        if self.peers:
            self.effects.append(_make(Broadcast, (msg,)))

    def _persist_epochs(self) -> None:
        self.effects.append(PersistEpochs(self.accepted_epoch, self.epoch_leader, self.current_epoch))

    def _announce(self) -> None:
        if self.role == LEADING:
            phase = PHASE_BROADCAST if self.synced else (PHASE_SYNC if self.discovered else PHASE_NONE)
        elif self.role == FOLLOWING:
            phase = PHASE_BROADCAST if self.in_sync else PHASE_NONE
        else:
            phase = PHASE_NONE
        state = (self.role, self.leader, self.current_epoch, phase)
        if state != self._announced:
            self._announced = state
            self.effects.append(RoleChanged(*state))

    def _history_snapshot(self) -> History:
        return tuple(self.history)

    # ----------------------------------------------------------------- timers

    def reset_deadline(self, t: int) -> None:
        # Lazy: remember when, and use the lower bound t + 150 until the exact
        # value (t + 150 + jitter) is needed.
        self._deadline_from = t
        self.election_deadline = t + ELECTION_TIMEOUT
        # a lost leader still calls for an election at the next tick
        self.wake = t if self.leader_lost else self.election_deadline

    def _exact_deadline(self) -> int:
        if self._deadline_from >= 0:
            t = self._deadline_from
            self._deadline_from = -1
            self.election_deadline = t + ELECTION_TIMEOUT + mix(self.seed ^ self.id ^ t) % ELECTION_JITTER
        return self.election_deadline

    def deadline(self) -> int:
        """The exact election deadline (for inspection and tests)."""
        return self._exact_deadline()

    def on_tick(self, t: int) -> None:
        if self.role == LEADING:
            self._leader_tick(t)
            return
        if self.leader_lost:
            self.start_election(t, "lost leader")
            return
        if t < self.election_deadline:
            return
        deadline = self._exact_deadline()
        if t < deadline:
            self.wake = deadline
            return
        self.start_election(t, "timer")

    def _leader_tick(self, t: int) -> None:
        last_heard = self.last_heard
        supporters = 1 if self.voting else 0  # a leader removing itself counts only the others
        for f in self.voters:
            if t - last_heard[f] < SUPPORT_WINDOW:
                supporters += 1
        if supporters < self.quorum:
            self.start_election(t, "lost quorum")
            return
        if t - self.last_heartbeat >= HEARTBEAT_INTERVAL:
            self._heartbeat(t)
        if self.syncing:
            self._retry_syncs(t)
        self._leader_wake()

    def _leader_wake(self) -> None:
        # Support is lost when fewer than quorum-1 peers were heard within the
        # window: at (the (quorum-1)-th most recent last_heard) + window. Since
        # last_heard only grows, this bound stays a lower bound.
        wake = self.last_heartbeat + HEARTBEAT_INTERVAL
        if self.syncing:
            retry = self.options.sync_retry
            for sent, _, _ in self.syncing.values():
                if sent + retry < wake:
                    wake = sent + retry
        need = self.quorum - (1 if self.voting else 0)
        if need > 0:
            last_heard = self.last_heard
            if len(last_heard) == len(self.voters):  # it holds every voter: just them (no observers)
                heard = sorted(last_heard.values(), reverse=True)
            else:
                heard = sorted((last_heard.get(f, 0) for f in self.voters), reverse=True)
            stepdown = heard[need - 1] + SUPPORT_WINDOW if need <= len(heard) else 0
            if stepdown < wake:
                wake = stepdown
        self.wake = wake

    def _heartbeat(self, t: int) -> None:
        self.last_heartbeat = t
        if not self.discovered:
            self._broadcast(NewEpoch(self.pending_epoch))
        elif not self.synced:
            if self._window:
                for f in self.peers:
                    self._send_sync(f, t)
            else:
                self._broadcast(NewLeader(self.current_epoch, self._history_snapshot()))
        else:
            resync = self.needs_sync
            self.needs_sync = set()
            if not resync:
                self._broadcast(Commit(self.last_committed))
                return
            snapshot: History | None = None
            for f in self.peers:
                if f not in resync:
                    self._send(f, Commit(self.last_committed))
                elif self._window:
                    self._send_sync(f, t)
                else:
                    if snapshot is None:
                        snapshot = self._history_snapshot()
                    self._send(f, NewLeader(self.current_epoch, snapshot))

    def sync_progress(self, peer: int, t: int) -> None:
        """Part of a sync plan between this node and ``peer`` moved (the driver
        streams a SNAP's snapshot in pieces, each taking time): the plan is
        alive, however long the whole takes. ZooKeeper gives a learner in its
        sync phase ``initLimit``, longer than the broadcast's ``syncLimit``,
        and counts it as synced for the leader's quorum check meanwhile;
        here progress is what counts, not a longer limit.

        A follower that gets a piece from its leader holds off its election
        timer (the leader's heartbeats wait behind the stream, also when a
        resync streams to a follower that was in sync). A leader that sends a
        piece to a follower it is syncing holds off that plan's retry (a
        second copy would follow the first on the same link and be thrown
        away) and counts the follower as heard from: a piece leaves only when
        the follower's socket took the ones before, and the leader may need
        that follower for its quorum (three nodes, one down)."""
        if self.role == FOLLOWING:
            if peer == self.leader:
                self.reset_deadline(t)
        elif self.role == LEADING:
            plan = self.syncing.get(peer)
            if plan is not None:
                self.syncing[peer] = (t, plan[1], plan[2])
                if peer in self.last_heard:
                    self.last_heard[peer] = t

    def link_failed(self, peer: int, t: int) -> None:
        """The link to ``peer`` broke (a dropped send, a lost connection).

        A follower that loses its leader starts an election at its next
        ``on_tick`` (v1.4), as ZooKeeper's follower does when its socket to the
        leader closes; ``wake`` drops to ``t`` so that a driver ticks it."""
        if self.role == LEADING and self.discovered:
            self.needs_sync.add(peer)
            if self._window:
                self.syncing.pop(peer, None)  # a sync in flight was lost with the link
        elif self.role == FOLLOWING and peer == self.leader:
            self.leader_lost = True
            self.wake = t

    def link_up(self, peer: int, t: int) -> None:
        """A link to ``peer`` came (back) up: a driver event the canonical
        simulator never raises (its links never stay down).

        A Looking node tells the peer what it broadcast when its election
        started, because the peer may never have heard it: the link was down.
        A leader answers that LookForLeader with its late-joiner path, so a
        node cut off by a healed partition rejoins at once instead of at its
        next election timeout. A LookForLeader means "I look, and vote for
        myself", so it is only sent while that is true; a node that has moved
        its vote to another node starts a new round instead, which tells every
        peer the same thing. Other roles need nothing: a leader resyncs a peer
        whose link broke at its next heartbeat (``needs_sync``)."""
        if self.role != LOOKING:
            return
        if self.target[2] != self.id:
            self.start_election(t, "new link")
            return
        last = self.last_zxid()
        if self._window:
            self._send(peer, self.sync_info())
        self._send(peer, LookForLeader(self.current_epoch, last, self.accepted_epoch))
        if not self.observing:
            self._send(peer, Vote(self.current_epoch, last, self.accepted_epoch, self.id))

    def send_dropped(self, index: int, peer: int, t: int) -> None:
        """The send at ``index`` of the effects last taken never reached ``peer``.

        The spec calls ``link_failed`` right after the drop, in the middle of
        the handler; a driver of effects only learns of it afterwards. The two
        agree unless the role changed after that send in the same batch (a
        Looking node that votes and then follows): every change clears what
        ``link_failed`` sets, so such a drop is a no-op. ``index`` counts in the
        list the last ``take_effects`` returned; call this before the node
        handles anything else.
        """
        if index >= self._taken_transition_at:
            self.link_failed(peer, t)

    # --------------------------------------------------------------- election

    def start_election(self, t: int, reason: str = "start") -> None:
        """``reason`` is for the driver's logs only (``election_reason``)."""
        self.election_reason = reason
        self.role = LOOKING
        self.leader = NO_LEADER
        self.in_sync = False
        self._transition()
        self._clear_leader_state()
        last = self.last_zxid()
        self.target = (self.current_epoch, last, self.id)
        self.view = {self.id: self.id}
        self.max_epoch_seen = self.accepted_epoch
        self.reset_deadline(t)
        self._announce()
        if self._window:
            self._broadcast(self.sync_info())
        self._broadcast(LookForLeader(self.current_epoch, last, self.accepted_epoch))
        if self.observing:
            return  # it asks who leads (a leader answers); it never votes
        self._broadcast(Vote(self.current_epoch, last, self.accepted_epoch, self.id))
        self._check_election(t)

    def _on_look_for_leader(self, v: int, m: LookForLeader, t: int) -> None:
        if self.observing:
            return  # who leads is the voters' answer to give
        if v not in self.voter_ids:
            if v in self.membership.observers or v in self.guests:
                self._take_in(v, t)
            return
        if self.role == LOOKING:
            voted = self.target[2]
            self._on_vote(v, m.epoch, m.last_zxid, m.accepted, v, t)
            # v1.4: answer a peer we do not vote for with our vote, as
            # ZooKeeper's FLE answers a lagging peer. Without it, a node that
            # starts looking after the others already did is never told who
            # they chose and waits out a second timeout. Only a LookForLeader
            # is answered, never a Vote, so two nodes cannot bounce votes.
            if self.role == LOOKING:
                if self.target[2] != v:
                    self._send(v, Vote(self.current_epoch, self.last_zxid(), self.accepted_epoch, self.target[2]))
            elif voted == v and self.role == FOLLOWING and self.options.vote_on_follow:
                # Options.vote_on_follow: v may never have heard this vote.
                self._send(v, Vote(self.current_epoch, self.last_zxid(), self.accepted_epoch, v))
            return
        self._send(v, Vote(self.current_epoch, self.last_zxid(), self.accepted_epoch, self.leader))
        self._take_in(v, t)

    def _take_in(self, v: int, t: int) -> None:
        """A leader brings a late joiner (a voter, or an observer or a guest,
        which it counts in no quorum) into its epoch."""
        if self.role != LEADING:
            return
        if self.discovered:
            if self._window:
                self._send_sync(v, t)
            else:
                self._send(v, NewLeader(self.current_epoch, self._history_snapshot()))
        else:
            self._send(v, NewEpoch(self.pending_epoch))

    def _on_vote_msg(self, v: int, m: Vote, t: int) -> None:
        if self.observing or v not in self.voter_ids:
            return
        if self.role == LOOKING:
            self._on_vote(v, m.epoch, m.last_zxid, m.accepted, m.leader, t)

    def _on_vote(self, v: int, e: int, z: int, a: int, leader: int, t: int) -> None:
        if a > self.max_epoch_seen:
            self.max_epoch_seen = a
        cand = (e, z, v)
        if cand > self.target:
            self.target = cand
            self.view = {self.id: v}
            self._broadcast(Vote(self.current_epoch, self.last_zxid(), self.accepted_epoch, v))
        self.view[v] = leader
        self._check_election(t)

    def _check_election(self, t: int) -> None:
        target_id = self.target[2]
        votes = 0
        voter_ids = self.voter_ids
        for k, voted in self.view.items():
            if voted == target_id and k in voter_ids:
                votes += 1
        if votes >= self.quorum:
            if target_id == self.id:
                self._become_leading(t)
            else:
                self._become_following(target_id, t)

    def _become_following(self, leader: int, t: int) -> None:
        self.role = FOLLOWING
        self.leader = leader
        self.in_sync = False
        self._transition()
        self._clear_leader_state()
        self.reset_deadline(t)
        self._announce()

    def _follow(self, leader: int, t: int) -> None:
        if self.role == FOLLOWING and self.leader == leader:
            self.reset_deadline(t)
        else:
            self._become_following(leader, t)

    # ------------------------------------------- discovery and synchronization

    def _become_leading(self, t: int) -> None:
        self.role = LEADING
        self.leader = self.id
        self.in_sync = False
        self._transition()
        self._clear_leader_state()
        self.pending_epoch = max(self.accepted_epoch, self.current_epoch, self.max_epoch_seen) + 1
        if self.pending_epoch > zx.U32_MAX:
            raise zx.CounterOverflow(f"epoch {self.pending_epoch} does not fit in u32")
        self.accepted_epoch = self.pending_epoch
        self.epoch_leader = self.id
        self.epoch_acks = {self.id}
        for f in self.peers:
            self.last_heard[f] = t
        self.last_heartbeat = t
        self.wake = t + HEARTBEAT_INTERVAL
        self._announce()
        self._persist_epochs()
        self._broadcast(NewEpoch(self.pending_epoch))
        self._try_finish_discovery(t)

    def _try_finish_discovery(self, t: int) -> None:
        if self.discovered or len(self.epoch_acks) < self.quorum:
            return
        self.discovered = True
        self.current_epoch = self.pending_epoch
        self.next_counter = 0
        self.leader_acks = {self.id}
        self._persist_epochs()
        self._announce()
        if self._window:
            # every peer, as the spec's broadcast: a follower that is ahead (not
            # counted in discovery) must still be cut back to this history
            for f in self.peers:
                self._send_sync(f, t)
        else:
            self._broadcast(NewLeader(self.current_epoch, self._history_snapshot()))
        self._try_finish_sync(t)

    def _try_finish_sync(self, t: int) -> None:
        if self.synced or len(self.leader_acks) < self.quorum:
            return
        self.synced = True
        self._announce()
        last = self.last_zxid()
        if last > self.last_committed:
            self.last_committed = last
            self.effects.append(CommitTo(last))
            self._broadcast(Commit(last))

    def _on_new_epoch(self, leader: int, m: NewEpoch, t: int) -> None:
        e = m.epoch
        if e > self.accepted_epoch or (e == self.accepted_epoch and self.epoch_leader == leader):
            if e > self.accepted_epoch:
                self.in_sync = False
            changed = self.accepted_epoch != e or self.epoch_leader != leader
            self.accepted_epoch = e
            self.epoch_leader = leader
            self._follow(leader, t)
            self._announce()
            if changed:
                self._persist_epochs()
            if self._window:
                self._send(leader, self.sync_info())
            self._send(leader, AckEpoch(e, self.current_epoch, self.last_zxid()))

    def _on_ack_epoch(self, f: int, m: AckEpoch, t: int) -> None:
        if self.role != LEADING or m.epoch != self.pending_epoch:
            return
        if self.discovered:
            self.last_heard[f] = t
            if self._window:
                self._send_sync(f, t)
            else:
                self._send(f, NewLeader(self.current_epoch, self._history_snapshot()))
        elif (m.current_epoch, m.last_zxid) <= (self.current_epoch, self.last_zxid()):
            self.last_heard[f] = t
            if f in self.voter_ids:
                self.epoch_acks.add(f)
                self._try_finish_discovery(t)

    def _on_new_leader(self, leader: int, m: NewLeader, t: int) -> None:
        e = m.epoch
        if e < self.accepted_epoch:
            return
        self.accepted_epoch = e
        self.epoch_leader = leader
        self.current_epoch = e
        self.history = list(m.history)
        # History first, then epochs, then the acknowledgement: a quorum-wide
        # crash after AckLeader must find the history on disk (ZOOKEEPER-4643).
        self.effects.append(ReplaceHistory(m.history))
        self._changes = _scan_changes(self.history)
        self._take_membership(t)
        self._persist_epochs()
        self._follow(leader, t)
        self.in_sync = True
        self._announce()
        self._send(leader, AckLeader(e))

    def _on_ack_leader(self, f: int, m: AckLeader, t: int) -> None:
        if self.role != LEADING or not self.discovered or m.epoch != self.current_epoch:
            return
        self.last_heard[f] = t
        if f in self.voter_ids:
            self.leader_acks.add(f)
        if self._window:
            sent = self.syncing.pop(f, None)
            if sent is not None:
                # f now holds this leader's history up to what the sync carried,
                # with nothing lost since: no resync is due, and a later plan
                # for f starts from there rather than from its old report
                self.needs_sync.discard(f)
                self.infos[f] = SyncInfo(sent[2], ())
        if self.synced:
            self._send(f, Commit(self.last_committed))
        else:
            self._try_finish_sync(t)

    # -------------------------------------------------------------- broadcast

    def propose(self, payload: bytes, t: int) -> int:
        """Leader only (Leading and synced): order ``payload``; returns its zxid."""
        if not (self.role == LEADING and self.synced):
            raise NotLeader(f"node {self.id} is not a synced leader")
        if payload.startswith(MEMBERSHIP_MAGIC):
            raise ValueError("a payload may not begin like a membership change: use propose_membership")
        return self._propose(payload, t)

    def propose_membership(self, new: Membership, t: int) -> int:
        """Leader only: change the membership to ``new`` (one voter more or
        fewer, any observers; zabd.protocol.membership), once every earlier
        change is committed. Returns the change's zxid; it is in effect here
        at once, and on each node as soon as that node holds it."""
        if not (self.role == LEADING and self.synced):
            raise NotLeader(f"node {self.id} is not a synced leader")
        if self._changes and self._changes[-1][0] > self.last_committed:
            pending = self._changes[-1][0]
            raise MembershipError(f"the change at {zx.fmt(pending)} is not committed yet; {ONE_AT_A_TIME}")
        check_change(self.membership, new)
        return self._propose(encode_membership(new), t)

    def _propose(self, payload: bytes, t: int) -> int:
        self.next_counter += 1
        if self.next_counter > zx.U32_MAX:
            raise zx.CounterOverflow(f"counter {self.next_counter} in epoch {self.current_epoch} does not fit in u32")
        z = (self.current_epoch << 32) | self.next_counter
        txn = _make(Txn, (z, payload))
        self.history.append(txn)
        self.ack_set[z] = {self.id} if self.voting else set()
        change = payload.startswith(MEMBERSHIP_MAGIC)
        if self._batching and not change:
            self._propose_batched(txn)
        else:
            if self._batch is not None:
                self._close_batch()
            self.effects.append(_make(AppendTxn, (txn,)))
            self._broadcast(_make(Propose, (txn,)))
        if change:
            before = self.membership
            self._appended_change(txn, t)
            for f in sorted(before.members - self.membership.members - {self.id}):
                if f not in self.guests:  # a guest is a peer: the broadcast reaches it
                    self._send(f, Propose(txn))  # a removed member learns it was removed
        self._try_commit(z, t)
        return z

    def _propose_batched(self, txn: Txn) -> None:
        """Into the open batch while its Broadcast is still the last effect
        (nothing was said since), the append before that Broadcast; or a new
        batch. One txn goes as a plain Propose; more as one ProposeMany."""
        effects = self.effects
        batch = self._batch
        at = self._batch_at
        if batch is not None and at == len(effects) - 1:
            effects.insert(at, _make(AppendTxn, (txn,)))
            at += 1
            self._batch_at = at
            batch.append(txn)  # _close_batch turns the Propose into a ProposeMany of them all
            return
        if batch is not None:
            self._close_batch()
        effects.append(_make(AppendTxn, (txn,)))
        self._batch = [txn]
        self._batch_at = len(effects)
        effects.append(_make(Broadcast, (_make(Propose, (txn,)),)))

    def _close_batch(self) -> None:
        """No more txns join the open batch: a batch of more than one txn
        becomes one ProposeMany. Every exit from the effects list (take,
        transition, another proposal) comes through here."""
        batch = self._batch
        if batch is not None and len(batch) > 1:
            self.effects[self._batch_at] = _make(Broadcast, (_make(ProposeMany, (tuple(batch),)),))
        self._batch = None

    def read_barrier(self, token: int, t: int) -> None:
        """Begin a linearizable read (server variant, like Raft's ReadIndex):
        ``ReadReady(token, zxid)`` follows once a quorum has answered a ping
        sent after this call, so no newer leader can have committed anything
        this one lacks; ``ReadFailed(token)`` if leadership ends first."""
        if not (self.role == LEADING and self.synced):
            raise NotLeader(f"node {self.id} is not a synced leader")
        if self.quorum == 1 and self.voting:
            self.effects.append(ReadReady(token, self.last_committed))
            return
        self._read_seq += 1
        self.barriers[self._read_seq] = (token, self.last_committed, {self.id} if self.voting else set())
        self._broadcast(ReadPing(self._read_seq))

    def _on_read_ping(self, leader: int, m: ReadPing, t: int) -> None:
        if self.role == FOLLOWING and self.leader == leader and self.in_sync and not self.observing:
            self._send(leader, ReadPong(m.seq))

    def _on_read_pong(self, f: int, m: ReadPong, t: int) -> None:
        if self.role != LEADING or not self.barriers or f not in self.voter_ids:
            return
        self.last_heard[f] = t
        done = []
        # pings are FIFO: an answer to ping k answers every earlier one too
        for seq, (token, zxid, acks) in self.barriers.items():
            if seq > m.seq:
                break
            acks.add(f)
            if len(acks) >= self.quorum:
                done.append(seq)
                self.effects.append(ReadReady(token, zxid))
        for seq in done:
            del self.barriers[seq]

    def _try_commit(self, z: int, t: int) -> None:
        acks = self.ack_set.get(z)
        if z <= self.last_committed or acks is None or len(acks) < self.quorum:
            return
        self.last_committed = z
        # ack_set is filled in zxid order (propose is the only writer), so the
        # entries at or below z are a prefix: stop at the first one above it.
        ack_set = self.ack_set
        done = []
        for pending in ack_set:
            if pending > z:
                break
            done.append(pending)
        for pending in done:
            del ack_set[pending]
        self.effects.append(_make(CommitTo, (z,)))
        self._broadcast(_make(Commit, (z,)))
        if self._window and len(self.history) >= self._trim_at:
            self._trim()
        if self._changes and not self.voting and self._changes[-1][0] <= z:
            # the change that removed this leader from the voters is committed: hand over
            self.start_election(t, "no longer a voter")

    def _on_propose(self, leader: int, m: Propose, t: int) -> None:
        if self.role == FOLLOWING and self.leader == leader and self.in_sync:
            txn = m.txn
            z = txn.zxid
            succ = self.successor()
            if z == succ:
                self.history.append(txn)
                self.reset_deadline(t)
                self.effects.append(_make(AppendTxn, (txn,)))
                if txn.payload.startswith(MEMBERSHIP_MAGIC):
                    self._appended_change(txn, t)
                if not self.observing:
                    self._send(leader, _make(Ack, (z,)))
            elif z > succ:
                self.start_election(t, "gap in proposals")

    def _on_propose_many(self, leader: int, m: ProposeMany, t: int) -> None:
        """The Proposes of ``m.txns`` in order. With cumulative acks, one Ack
        for the last txn appended answers the run of txns before it, and a
        membership change is answered as its own Propose would be (it can
        change whether this node votes)."""
        if not (self.role == FOLLOWING and self.leader == leader and self.in_sync):
            return
        if not self._cumulative_acks:
            for txn in m.txns:
                self._on_propose(leader, _make(Propose, (txn,)), t)
            return
        history = self.history
        effects = self.effects
        unacked = 0
        succ = self.successor()
        for txn in m.txns:
            z = txn.zxid
            if z != succ:
                if z > succ:
                    self.start_election(t, "gap in proposals")
                    return
                continue
            if txn.payload.startswith(MEMBERSHIP_MAGIC):
                if unacked and not self.observing:
                    self._send(leader, _make(Ack, (unacked,)))
                unacked = 0
                self._on_propose(leader, _make(Propose, (txn,)), t)
                succ = self.successor()
                continue
            history.append(txn)
            effects.append(_make(AppendTxn, (txn,)))
            unacked = z
            succ = z + 1  # the next counter in the same epoch
        if unacked:
            self.reset_deadline(t)
            if not self.observing:
                self._send(leader, _make(Ack, (unacked,)))

    def _on_ack(self, f: int, m: Ack, t: int) -> None:
        if self.role != LEADING:
            return
        self.last_heard[f] = t
        if self._cumulative_acks:
            if f not in self.voter_ids:
                return
            z = m.zxid
            top = 0
            # ack_set holds the proposals not committed yet, in zxid order
            for pending, acked in self.ack_set.items():
                if pending > z:
                    break
                acked.add(f)
                if len(acked) >= self.quorum:
                    top = pending
            if top:
                self._try_commit(top, t)
            return
        acks = self.ack_set.get(m.zxid)
        if acks is not None and f in self.voter_ids:
            acks.add(f)
            self._try_commit(m.zxid, t)

    def _on_commit(self, leader: int, m: Commit, t: int) -> None:
        if self.role == FOLLOWING and self.leader == leader and self.in_sync:
            z = m.zxid
            last = self.last_zxid()
            if z > last:
                self.start_election(t, "gap in commits")
                return
            self.reset_deadline(t)
            if z <= self.last_committed:
                if not self.observing:
                    self._send(leader, Ack(last))
            else:
                self.last_committed = z
                self.effects.append(_make(CommitTo, (z,)))
                if self._window and len(self.history) >= self._trim_at:
                    self._trim()
                if self._changes and leader not in self.voter_ids and self._changes[-1][0] <= z:
                    # the leader's removal is committed: it hands over; elect now
                    self.leader_lost = True
                    self.wake = t

    # ------------------------------------------ windowed history (server variant)

    def sync_info(self) -> SyncInfo:
        """What this node holds, for a leader that plans its sync."""
        return SyncInfo(self.base, window_ends(self.history))

    def _trim(self) -> None:
        """Let committed txns beyond the window leave memory (they are on the
        driver's disk); trimmed in batches, down to ``window``."""
        h = self.history
        k = min(len(h) - self._window, bisect_right(h, self.last_committed, key=_txn_zxid))
        if k <= 0:
            return
        for end in window_ends(h[:k]):
            self.below_ends[end >> 32] = end
        self.base = h[k - 1].zxid
        del h[:k]
        changes = self._changes
        while changes and changes[0][0] <= self.base:
            self.base_membership_zxid, self.base_membership = changes.pop(0)

    def _send_sync(self, f: int, t: int) -> None:
        """NewLeader(current_epoch, history) for ``f``, as a plan: at most one
        in flight per follower (a repeated request gets no second copy)."""
        if f not in self.syncing:
            self._plan_sync(f, t, retried=False)

    def _plan_sync(self, f: int, t: int, retried: bool) -> None:
        self.syncing[f] = (t, retried, self.last_zxid())
        info = self.infos.get(f, _NOTHING)
        h = self.history
        ends = dict(self.below_ends)
        for end in window_ends(h):
            ends[end >> 32] = end
        shared = shared_prefix(ends, self.log_start, info)
        base = self.base
        if shared is not None and (shared >= base or count_after(ends, shared, base) <= self.options.diff_limit):
            held = info.epoch_ends[-1] if info.epoch_ends else info.base
            mode = TRUNC if held > shared else DIFF
            i = bisect_right(h, shared, key=_txn_zxid)
            upto = base if shared < base else shared
            self.effects.append(SendSync(f, self.current_epoch, mode, shared, shared, upto, tuple(h[i:])))
            return
        # a snapshot of the state at the commit point, then the rest from memory
        lc = self.last_committed
        i = bisect_right(h, lc, key=_txn_zxid)
        # the membership at the point, once any has changed (b"": the initial one, on both sides)
        changed = bool(self._changes) or self.base_membership != self._initial_membership
        at_zxid, at = self._membership_at(lc)
        at_point = encode_membership(at) if changed else b""
        self.effects.append(SendSync(f, self.current_epoch, SNAP, lc, lc, lc, tuple(h[i:]), at_point,
                                     at_zxid if changed else 0))

    def _retry_syncs(self, t: int) -> None:
        retry = self.options.sync_retry
        for f, (sent, retried, _) in list(self.syncing.items()):
            if t - sent < retry:
                continue
            if retried:
                del self.syncing[f]  # given up: the next request starts afresh
            else:
                self._plan_sync(f, t, retried=True)

    def _on_sync_info(self, f: int, m: SyncInfo, t: int) -> None:
        old = self.infos.get(f)
        self.infos[f] = m
        # A follower that reports anew while its sync is in flight could not
        # use what it got (or its state changed): plan again with the news.
        if f in self.syncing and old != m and self.role == LEADING:
            self._plan_sync(f, t, retried=False)

    def _on_sync(self, leader: int, m: Sync, t: int) -> None:
        """NewLeader(e, leader's history), given as a plan (server variant)."""
        e = m.epoch
        if e < self.accepted_epoch:
            return
        h = self.history
        if m.mode == SNAP:
            if m.txns and m.txns[0].zxid <= m.point:
                return
            self.base = m.point
            self.below_ends = {}
            self.history = list(m.txns)
            self.effects.append(InstallSnapshot(m.point))
            self.effects.append(TruncateAppend(m.point, m.txns))
            at_point = decode_membership(m.membership) if m.membership else None
            if at_point is not None:
                self.base_membership = at_point
                self.base_membership_zxid = m.membership_zxid
            self._changes = _scan_changes(self.history)
        else:
            i = bisect_right(h, m.point, key=_txn_zxid)
            holds = m.point == self.base or (i > 0 and h[i - 1].zxid == m.point)
            if not holds or m.point < self.last_committed:
                # a plan made from a stale report: say what we hold, it plans again
                self._send(leader, self.sync_info())
                return
            del h[i:]
            h.extend(m.txns)
            self.effects.append(TruncateAppend(m.point, m.txns))
            changes = self._changes
            while changes and changes[-1][0] > m.point:
                changes.pop()
            changes.extend(_scan_changes(m.txns))
        self.accepted_epoch = e
        self.epoch_leader = leader
        self.current_epoch = e
        self._persist_epochs()
        self._take_membership(t)
        self._follow(leader, t)
        self.in_sync = True
        self._announce()
        if m.mode == SNAP:
            if self.last_committed > m.point:
                # committed here before: re-apply what the snapshot does not cover
                self.effects.append(CommitTo(self.last_committed))
            elif m.point > self.last_committed:
                self.last_committed = m.point
        self._send(leader, AckLeader(e))

    # ------------------------------------------------------------ membership

    def _set_membership(self, m: Membership) -> None:
        self.membership = m
        self.voter_ids = m.voters
        self.voting = self.id in m.voters
        # a node that does not vote (an observer, or not a member) only ever
        # asks who leads, and follows whoever answers
        self.observing = not self.voting
        self._set_peers()
        # the peers whose acknowledgements count
        self.voters: tuple[int, ...] = tuple(sorted(m.voters - {self.id}))
        self.quorum = m.quorum

    def _set_peers(self) -> None:
        """Who a broadcast reaches: the other members, and a leader's guests."""
        self.peers: tuple[int, ...] = tuple(sorted((self.membership.members | self.guests) - {self.id}))

    def _membership_at(self, z: int) -> tuple[int, Membership]:
        """The membership in effect at ``z``, and the zxid of its change."""
        at = self.base_membership_zxid, self.base_membership
        for change in self._changes:
            if change[0] > z:
                break
            at = change
        return at

    def _appended_change(self, txn: Txn, t: int) -> None:
        m = decode_membership(txn.payload)
        if m is not None:
            self._changes.append((txn.zxid, m))
            self._take_membership(t)

    def _take_membership(self, t: int) -> None:
        """The membership in effect is the last change the history holds."""
        zxid, m = self._changes[-1] if self._changes else (self.base_membership_zxid, self.base_membership)
        # set even for the same members: a SNAP or a restart may tell this node which change made them
        self.membership_zxid = zxid
        if m == self.membership:
            return
        old = self.membership
        self._set_membership(m)
        self.effects.append(MembershipChanged(m, zxid))
        if self.role == LEADING:
            self._leader_membership(old, t)

    def _leader_membership(self, old: Membership, t: int) -> None:
        """Quorums are counted in the new membership from now on; a new member
        is brought up to date, a removed one forgotten, or kept as a guest
        (Options.keep_removed): it goes on following, counted nowhere."""
        voter_ids = self.voter_ids
        for acks in self.ack_set.values():
            acks &= voter_ids
        self.epoch_acks &= voter_ids
        self.leader_acks &= voter_ids
        keep = self.options.keep_removed
        for f in old.members - self.membership.members:
            self.last_heard.pop(f, None)
            if keep and f != self.id:
                self.guests.add(f)  # its sync in flight, or the one due, still goes
                continue
            self.syncing.pop(f, None)
            self.needs_sync.discard(f)
        for f in self.membership.members - old.members - {self.id}:
            self.guests.discard(f)  # a member again; resynced all the same (cheap if it holds everything)
            self.last_heard[f] = t
            # synced at the next heartbeat, not in this handler: a commit made
            # here may let the driver purge the log a plan made now reads from
            self.needs_sync.add(f)
        if keep:
            self._set_peers()
        # fewer voters may make a quorum of what was proposed already
        for z in reversed(self.ack_set):
            if len(self.ack_set[z]) >= self.quorum:
                self._try_commit(z, t)
                break

    # --------------------------------------------------------------- dispatch

    def on_message(self, src: int, msg: Message, t: int) -> None:
        # a chain of type tests, most frequent first, rather than a dict of
        # functions: compiled, each branch is a direct native call
        cls = type(msg)
        if cls is Ack:
            self._on_ack(src, msg, t)  # type: ignore[arg-type]
        elif cls is Propose:
            self._on_propose(src, msg, t)  # type: ignore[arg-type]
        elif cls is Commit:
            self._on_commit(src, msg, t)  # type: ignore[arg-type]
        elif cls is ProposeMany:
            self._on_propose_many(src, msg, t)  # type: ignore[arg-type]
        elif cls is ReadPing:
            self._on_read_ping(src, msg, t)  # type: ignore[arg-type]
        elif cls is ReadPong:
            self._on_read_pong(src, msg, t)  # type: ignore[arg-type]
        else:
            _HANDLERS[cls](self, src, msg, t)


# the rarer messages (elections, syncs); on_message tests for the frequent ones
_HANDLERS: dict[type, Callable[[Node, int, Any, int], None]] = {
    LookForLeader: Node._on_look_for_leader,
    Vote: Node._on_vote_msg,
    NewEpoch: Node._on_new_epoch,
    AckEpoch: Node._on_ack_epoch,
    NewLeader: Node._on_new_leader,
    AckLeader: Node._on_ack_leader,
    SyncInfo: Node._on_sync_info,
    Sync: Node._on_sync,
}

_NOTHING = SyncInfo(0, ())


def _txn_zxid(txn: Txn) -> int:
    return txn.zxid


def _scan_changes(txns: Sequence[Txn]) -> list[tuple[int, Membership]]:
    out = []
    for txn in txns:
        if txn.payload.startswith(MEMBERSHIP_MAGIC):
            m = decode_membership(txn.payload)
            if m is not None:
                out.append((txn.zxid, m))
    return out

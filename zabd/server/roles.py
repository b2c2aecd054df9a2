"""What a role change means to the rest of the server, and to its operator.

The core announces each change of role, leader, epoch or phase
(``RoleChanged``); here it is logged with why an election started and how
long it took, counted for ``/metrics``, remembered for ``status``, and the
proposal path is told which waiting writes it can no longer answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from zabd.codec.members import decode_addresses
from zabd.protocol import zxid as zx
from zabd.protocol.effects import PHASE_BROADCAST, MembershipChanged, RoleChanged
from zabd.protocol.node import FOLLOWING, LEADING, LOOKING, ROLE_NAMES, Node
from zabd.server.metrics import Counters
from zabd.server.proposals import ProposalPath

PHASE_NAMES = ("none", "sync", "broadcast")


class RoleTracker:
    def __init__(
        self,
        node: Node,
        proposals: ProposalPath,
        counters: Counters,
        log: Any,
        members: Callable[[dict[int, str]], None] | None = None,
    ) -> None:
        """``members``: told the members' addresses after a membership change."""
        self.node = node
        self.members = members
        self.proposals = proposals
        self.counters = counters
        self.log = log
        self.announced = (LOOKING, 0, 0, 0)  # role, leader, epoch, phase as last carried out
        self._looking_since: float | None = time.monotonic()
        self._election_since: float | None = self._looking_since  # until the leader is known
        self._sync_since: float | None = None  # a follower's sync with its leader, until it serves
        # when the current role (this epoch's) began, and when it began to serve: ZooKeeper's
        # uptime and leader_uptime, whose server objects are made anew at each election
        self.role_since = time.monotonic()
        self.serving_since: float | None = None

    def changed(self, change: RoleChanged) -> None:
        old_role, old_leader, old_epoch, old_phase = self.announced
        self.announced = (change.role, change.leader, change.epoch, change.phase)
        now = time.monotonic()
        if change.role == LOOKING and old_role != LOOKING:
            self._looking_since = self._election_since = now
            self.counters.elections += 1
            self.log.info("election started", reason=self.node.election_reason, was=ROLE_NAMES[old_role])
        if (change.role, change.epoch) != (old_role, old_epoch):
            self.role_since, self.serving_since = now, None
        if change.role != LOOKING and self._election_since is not None:
            self.counters.zk.observe("election_time", int((now - self._election_since) * 1000))
            self._election_since = None
            self._sync_since = now if change.role == FOLLOWING else None
        if change.phase == PHASE_BROADCAST and self.serving_since is None:
            self.serving_since = now
            if self._sync_since is not None and change.role == FOLLOWING:
                self.counters.zk.observe("follower_sync_time", int((now - self._sync_since) * 1000))
            self._sync_since = None
        self.log.info("role changed", new_role=ROLE_NAMES[change.role], leader=change.leader,
                      phase=PHASE_NAMES[change.phase], epoch=change.epoch)
        if change.phase == PHASE_BROADCAST and self._looking_since is not None:
            took = now - self._looking_since
            self._looking_since = None
            self.counters.last_election_s = took
            self.log.info("serving again", role=ROLE_NAMES[change.role], leader=change.leader,
                          election_ms=round(took * 1000, 1))
        was_serving = old_role == LEADING and old_phase == PHASE_BROADCAST
        if was_serving and (change.role != LEADING or change.epoch != old_epoch or change.phase != PHASE_BROADCAST):
            self.proposals.leadership_lost()
        if old_role == FOLLOWING and (change.role != FOLLOWING or change.leader != old_leader):
            self.proposals.leader_changed("the leader changed before the commit")
            if change.role == LOOKING and self.node.id not in self.node.membership.members:
                # a removed node that followed as a guest lost its leader: no
                # new leader knows it, so it will hear of no more commits
                self.proposals.left_ensemble()

    def membership_changed(self, change: MembershipChanged) -> None:
        m = change.membership
        try:
            addresses = decode_addresses(m.extra)
        except ValueError as exc:  # a change made elsewhere without addresses: links stay as they are
            self.log.error("membership change without member addresses", error=str(exc), zxid=zx.fmt(change.zxid))
            return
        member = "voter" if self.node.id in m.voters else "observer" if self.node.id in m.observers else "none"
        self.log.info("membership changed", membership=m.describe(), zxid=zx.fmt(change.zxid), this_node=member)
        if self.members is not None and addresses:
            self.members(addresses)
        # A leader leads on until its removal commits; a follower follows on as
        # its leader's guest (Options.keep_removed) and serves its clients, and
        # leaves when it loses that leader (``changed``).
        if member == "none" and self.node.role == LOOKING:
            self.proposals.left_ensemble()

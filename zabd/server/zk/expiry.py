"""Keeping ZooKeeper sessions alive, and ending them: ZooKeeper's learner
"touches" and the leader's ``SessionTracker`` and ``ContainerManager``.

Every ``zk_tick_ms / 2`` a follower sends the leader the ids of the sessions
its clients were heard from since the last report. The leader touches those
and its own, and proposes ``CloseSession`` for a session nobody touched
within its timeout (its ephemerals go in the same txn). A new leader first
applies everything of earlier epochs, then gives every session in the table
a full timeout from now (as ZooKeeper's new leader does). It also deletes
empty containers and expired TTL nodes, every 10 ``zk_tick_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from zabd.codec.framing import frame
from zabd.config import ZkOptions
from zabd.kv.kvmachine import KVMachine
from zabd.machine import StateMachine
from zabd.protocol.node import FOLLOWING, LEADING, Node
from zabd.server import peer_wire as wire
from zabd.server.proposals import Links, ProposalPath
from zabd.server.zk.conn import wire_write
from zabd.server.zk.sessions import ZKSessions
from zabd.zk.jaas import load_users
from zabd.zk.records import CloseSession, DeleteContainer, SessionResult
from zabd.zk.sessions import ExpiryTracker
from zabd.zk.tree import Applied

CLEANUP_TICKS = 10


def wall_ms() -> int:
    """Wall-clock milliseconds: ZooKeeper's session clock and txn times."""
    return int(time.time() * 1000)


def zookeeper_layer(options: ZkOptions, node: Node, machine: StateMachine, proposals: ProposalPath,
                    links: Links, log: Any) -> tuple[ZKSessions | None, SessionKeeper | None]:
    """The ZooKeeper session layer and its keeper, for a server whose state
    machine holds the tree (none for ``state_machine = "none"``)."""
    if not isinstance(machine, KVMachine):
        return None, None
    o = options
    sessions = ZKSessions(machine, proposals, o.server_id, o.tick_ms, o.super_digest, wall_ms, log,
                          lambda: serving(node), o.read_only, load_users(o.sasl_jaas) if o.sasl_jaas else None,
                          o.sasl_super_user, electing=lambda: electing(node))
    keeper = SessionKeeper(node, machine, sessions, proposals, links, o.tick_ms, wall_ms, log)
    return sessions, keeper


def serving(node: Node) -> bool:
    """Whether this node is part of a working quorum (a leader or a synced follower)."""
    return (node.role == LEADING and node.synced) or (node.role == FOLLOWING and node.in_sync)


def electing(node: Node) -> bool:
    """A member that is not serving: it looks for a leader or syncs with one."""
    return node.id in node.membership.members and not serving(node)


class SessionKeeper:
    def __init__(self, node: Node, machine: KVMachine, sessions: ZKSessions, proposals: ProposalPath,
                 links: Links, tick_ms: int, now_ms: Callable[[], int], log: Any) -> None:
        self.node = node
        self.machine = machine
        self.sessions = sessions
        self.proposals = proposals
        self.links = links
        self.tick_ms = tick_ms
        self.now_ms = now_ms
        self.log = log
        self.tracker = ExpiryTracker()
        self.expired = 0
        self._epoch = -1  # the leadership whose tracker this is
        self._next_report = 0
        self._next_cleanup = 0
        sessions.touch_now = self.touch_now

    def touch_now(self, sid: int) -> None:
        """A session whose client is re-attaching: the leader touches it now, as ZooKeeper's
        touches a session it revalidates (a follower's report would come half a tick later)."""
        node = self.node
        if self._leading():
            self.tracker.touch(sid, self.now_ms())
        elif not (node.role == FOLLOWING and self.links.send_frame(node.leader, frame((wire.TAG_ZK_TOUCH, (sid,))))):
            self.sessions.touched.add(sid)  # with the next report, to this leader or the next

    def _leading(self) -> bool:
        return self.node.role == LEADING and self._epoch == self.node.current_epoch

    def applied(self, zxid: int, applied: Applied) -> None:
        """A ZooKeeper txn applied here: a session it created is tracked (by a
        leader), one it closed forgotten."""
        result = applied.result
        if isinstance(result, SessionResult):
            sid = result.session_id
            session = self.machine.zk.sessions.get(sid)
            if session is None:
                self.tracker.forget(sid)
            elif self._leading():
                self.tracker.track(sid, session.timeout_ms, self.now_ms())

    def on_touch(self, peer: int, touch: wire.ZKTouch) -> None:
        if self._leading():
            now = self.now_ms()
            for sid in touch.sessions:
                self.tracker.touch(sid, now)

    def tick(self) -> None:
        up = serving(self.node)
        # Not only at the tick that saw the change: a node can start serving
        # and stop again before a tick saw it serve (a leader killed just
        # after the election), and the connections it took meanwhile must
        # close all the same. Only read-write ones: none is taken while down.
        if not up and (ended := self.sessions.stopped_serving()):
            self.log.info("no quorum: ZooKeeper connections closed", connections=ended)
        self.sessions.serve_waiting()
        now = self.now_ms()
        if now < self._next_report:
            return
        self._next_report = now + self.tick_ms // 2
        node = self.node
        if self.sessions.read_only_mode and serving(node) and (ended := self.sessions.end_read_only()):
            self.log.info("quorum back: read-only ZooKeeper connections closed", connections=ended)
        if node.role == LEADING and node.synced and self.proposals.machine_ready():
            if self._epoch != node.current_epoch:
                self._start_leading(now)
            for sid in self.sessions.take_touched():
                self.tracker.touch(sid, now)
            for sid in self.tracker.expired(now):
                self.expired += 1
                self.log.info("ZooKeeper session expired", session=f"0x{sid & (2**64 - 1):x}")
                self.proposals.submit_internal(wire_write(sid, (), CloseSession()))
            if now >= self._next_cleanup:
                self._next_cleanup = now + CLEANUP_TICKS * self.tick_ms
                for path in self.machine.zk.cleanup_candidates(now):
                    self.proposals.submit_internal(wire_write(0, (), DeleteContainer(path)))
        elif node.role == FOLLOWING:
            self._epoch = -1
            touched = self.sessions.take_touched()
            if touched and not self.links.send_frame(node.leader, frame((wire.TAG_ZK_TOUCH, tuple(touched)))):
                self.sessions.touched |= touched  # tell the next leader
        else:
            self._epoch = -1

    def _start_leading(self, now: int) -> None:
        self.tracker.clear()
        for sid, session in self.machine.zk.sessions.items():
            self.tracker.track(sid, session.timeout_ms, now)
        self._epoch = self.node.current_epoch
        self._next_cleanup = now + CLEANUP_TICKS * self.tick_ms

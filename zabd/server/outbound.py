"""The core's messages on their way to peer links.

A message becomes frames here: a ``SyncInfo`` becomes its driver frame, a
``SendSync`` the frames of a sync plan (``sync``), a ``ProposeMany`` above
``max_frame`` several ProposeMany frames, a broadcast is encoded once for
every link. A message that finds its link down is lost, and the
core learns that the link broke (spec section 5).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Any, Literal

from zabd.protocol.effects import SendSync
from zabd.protocol.messages import AckLeader, Commit, Message, NewLeader, Propose, ProposeMany, SyncInfo
from zabd.protocol.node import Node
from zabd.server import peer_wire as wire
from zabd.server.sync import SyncService
from zabd.server.transport import Transport
from zabd.server.zk.metrics import ZkMetrics


class Outbound:
    def __init__(
        self,
        node: Node,
        transport: Transport,
        sync: SyncService,
        now: Callable[[], int],
        max_frame: int,
        log: Any,
        metrics: ZkMetrics | None = None,
        crash_after: Literal["", "ack_leader", "snap_piece"] = "",
    ) -> None:
        """``metrics``: where the leader's proposals and commits are counted (ZooKeeper's names);
        ``crash_after``: the config's test hook (``test_crash_after``): "ack_leader" SIGKILLs this
        process right after an AckLeader frame was queued for its socket."""
        self.metrics = metrics
        self.max_frame = max_frame
        self.node = node
        self.transport = transport
        self.sync = sync
        self.now = now
        self.log = log
        self.crash_after = crash_after

    def send(self, peer: int, msg: Message) -> None:
        net = self.transport
        if isinstance(msg, NewLeader):
            sent = net.send_frames(peer, wire.encode_new_leader(msg, self.max_frame))
        else:
            sent = net.send_frame(peer, self._encode(msg))
            if type(msg) is AckLeader and self.crash_after == "ack_leader":
                self._crash_soon()
        if not sent:
            self.node.link_failed(peer, self.now())

    def broadcast(self, msg: Message) -> None:
        if isinstance(msg, NewLeader):
            for peer in self.node.peers:
                self.send(peer, msg)
            return
        net = self.transport
        if self.metrics is not None and self.node.peers:  # as ZooKeeper's Leader counts what it sends
            if isinstance(msg, ProposeMany):
                self.metrics.count("proposal_count", len(msg.txns))
            elif isinstance(msg, Propose):
                self.metrics.count("proposal_count")
            elif isinstance(msg, Commit):
                self.metrics.count("commit_count")
        if type(msg) is ProposeMany:
            frames = wire.encode_propose_many(msg, self.max_frame)
            if len(frames) > 1:
                for peer in self.node.peers:
                    if not net.send_frames(peer, frames):
                        self.node.link_failed(peer, self.now())
                return
            data = frames[0]
        else:
            data = self._encode(msg)
        for peer in self.node.peers:
            if not net.send_frame(peer, data):
                self.node.link_failed(peer, self.now())

    def send_sync(self, e: SendSync) -> None:
        if not self.transport.connected(e.dst):
            self.node.link_failed(e.dst, self.now())
            return
        frames = self.sync.frames(e)  # None: its log was purged; the core's retry replans
        if frames is not None:
            net = self.transport
            net.send_frames(e.dst, frames.head)
            if frames.snapshot is not None:
                net.send_stream(e.dst, frames.snapshot)  # everything sent after it waits behind it
            net.send_frames(e.dst, frames.tail)

    def _encode(self, msg: Message) -> bytes:
        return self.sync.info_frame(msg) if isinstance(msg, SyncInfo) else wire.encode_message(msg)

    def _crash_soon(self) -> None:
        self.log.warning("test hook: SIGKILL after AckLeader")
        self.transport.flush()
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGKILL)

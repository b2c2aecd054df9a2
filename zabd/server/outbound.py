"""The core's messages on their way to peer links.

A message becomes frames here: a ``NewLeader`` becomes a sync plan
(``sync``), ``AckEpoch`` and ``LookForLeader`` are preceded by this node's
sync report, a broadcast is encoded once for every link. A message that
finds its link down is lost, and the core learns that the link broke
(spec section 5).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from zabd.codec import peer as wire
from zabd.protocol.messages import AckEpoch, AckLeader, LookForLeader, Message, NewLeader
from zabd.protocol.node import Node
from zabd.server.sync import SyncService
from zabd.server.transport import Transport

# Test hook (not a ZABD_* variable: those are config fields): SIGKILL this
# process right after an AckLeader frame was queued for its socket.
CRASH_ENV = "ZABDTEST_CRASH_AFTER"
__all__ = ["CRASH_ENV", "Outbound"]


class Outbound:
    def __init__(
        self,
        node: Node,
        transport: Transport,
        sync: SyncService,
        peers: Sequence[int],
        now: Callable[[], int],
        log: Any,
    ) -> None:
        self.node = node
        self.transport = transport
        self.sync = sync
        self.peers = peers
        self.now = now
        self.log = log
        self.crash_after = os.environ.get(CRASH_ENV, "")

    def send(self, peer: int, msg: Message) -> None:
        net = self.transport
        cls = type(msg)
        if isinstance(msg, NewLeader):
            sent = net.send_frames(peer, self.sync.new_leader_frames(peer, msg))
        else:
            if cls is AckEpoch or cls is LookForLeader:
                net.send_frame(peer, self.sync.info_frame())
            sent = net.send_frame(peer, wire.encode_message(msg))
            if cls is AckLeader and self.crash_after == "ack_leader":
                self._crash_soon()
        if not sent:
            self.node.link_failed(peer, self.now())

    def broadcast(self, msg: Message) -> None:
        if isinstance(msg, NewLeader):
            for peer in self.peers:
                self.send(peer, msg)
            return
        net = self.transport
        data = wire.encode_message(msg)
        info = self.sync.info_frame() if type(msg) is LookForLeader else None
        for peer in self.peers:
            if info is not None:
                net.send_frame(peer, info)
            if not net.send_frame(peer, data):
                self.node.link_failed(peer, self.now())

    def _crash_soon(self) -> None:
        self.log.warning("test hook: SIGKILL after AckLeader")
        self.transport.flush()
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGKILL)

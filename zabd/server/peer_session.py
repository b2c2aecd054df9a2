"""One peer link as a state machine of bytes, without a socket (as h11 does).

``feed(data)`` turns received bytes into :class:`PeerEvent` values: the
handshake is checked, NewLeader parts and sync frames are put back together,
pings are absorbed. Outgoing frames are queued with ``push`` and taken by the
transport once per loop iteration. The session also knows when its link was
last heard from and last spoken on, for the transport's keep-alive.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from zabd.codec.framing import FrameError, FrameReader, frame, short
from zabd.protocol.messages import Message, NewLeader, Txn
from zabd.server import peer_wire as wire


class IdentityRefused(FrameError):
    """With TLS: a Hello naming a node the link's certificate does not name."""


class MembershipRefused(FrameError):
    """A Hello from a node configured with other observers: two nodes that
    disagree on who votes could each count a different quorum."""


class HandshakeDone(NamedTuple):
    """The link now speaks for ``peer``."""

    peer: int


class SnapPiece(NamedTuple):
    """The next bytes of a SNAP plan's snapshot, as they arrive (the plan
    frame's own, then each SnapData's): the replica builds the state and
    writes the file as they come, never holding the whole snapshot."""

    plan: wire.SyncPlanFrame
    data: bytes


class SyncArrived(NamedTuple):
    """A complete sync plan from the leader: its plan frame and every txn
    that follows (a SNAP's snapshot came before, in ``SnapPiece`` events)."""

    plan: wire.SyncPlanFrame
    txns: tuple[Txn, ...]


# What a session hands the replica: a core message (NewLeader parts already
# joined), a driver frame, or one of the events above.
PeerEvent = Message | HandshakeDone | SnapPiece | SyncArrived | wire.DriverFrame

# A stream's frames (a SNAP's snapshot) are taken this many bytes at a time,
# and no more while the socket holds STREAM_WINDOW unsent: a step of encoding
# between the loop's other work, and a slow reader costs this node a window.
STREAM_STEP = 1 << 20
STREAM_WINDOW = 4 << 20


class PeerSession:
    """``peer`` is known from the start on a link this node dialed; on an
    accepted link the first frame must be a Hello from a lower-id member."""

    def __init__(
        self,
        own_id: int,
        members: frozenset[int],
        peer: int | None,
        max_frame: int,
        now: float,
        observers: tuple[int, ...] | None = (),
        addresses: Mapping[int, str] | None = None,
    ) -> None:
        """``observers``: the configured ones, checked against the peer's while
        neither membership has changed (None: this one's has). ``addresses``:
        the members' quorum addresses, told to a peer whose link this accepts
        (``wire.Members``)."""
        self.own_id = own_id
        self.members = members
        self.addresses = addresses
        self.heard: wire.Members | None = None
        self.observers = tuple(sorted(observers)) if observers is not None else None
        self.peer = peer
        self.dialed = peer is not None
        self.reader = FrameReader(max_frame)
        self.max_frame = max_frame
        self.out: list[bytes] = []
        # a stream being sent, and what was queued behind it (frames, more streams)
        self.stream: Iterator[bytes] | None = None
        self._behind: deque[bytes | Iterator[bytes]] = deque()
        self.behind_bytes = 0  # of the frames in _behind: what a stream keeps this node holding
        self.closed = False
        self.last_rx = self.last_tx = now
        self._parts: list[Txn] = []
        self._parts_epoch = -1
        self._sync: tuple[wire.SyncPlanFrame, list[Txn]] | None = None
        self.on_output: Callable[[], None] | None = None  # told when output appears
        # with TLS: why the verified certificate may not speak for a node (None: it may)
        self.identity: Callable[[int], str | None] | None = None
        # whether a node outside the membership is the leader's guest (it may link)
        self.guest: Callable[[int], bool] | None = None
        if self.dialed:
            hello: tuple[object, ...] = (wire.TAG_HELLO, wire.WIRE_VERSION, own_id)
            if self.observers is None or self.observers:
                hello += (self.observers,)
            self.out.append(frame(hello))

    # ---------------------------------------------------------------- input

    def feed(self, data: bytes, now: float) -> list[PeerEvent]:
        """Events for ``data``; raises FrameError on anything malformed (the
        caller then closes the link: nothing after a bad frame can be trusted)."""
        self.last_rx = now
        events: list[PeerEvent] = []
        for body in self.reader.feed(data):
            got = wire.decode_frame(body)
            if self.peer is None:
                events.append(self._hello(got))
                continue
            cls = type(got)
            if cls is wire.Ping:
                continue
            if isinstance(got, wire.Members):
                self.heard = got  # for the transport (it dials members it did not know), not the replica
                continue
            assemble = _ASSEMBLERS.get(cls)
            if assemble is None:
                events.append(got)
            else:
                whole = assemble(self, got)
                if whole is not None:
                    events.append(whole)
        return events

    def _hello(self, got: wire.PeerFrame) -> HandshakeDone:
        if not isinstance(got, wire.Hello):
            raise FrameError(f"expected Hello first, got {short(got)}")
        if got.version != wire.WIRE_VERSION:
            raise FrameError(f"peer speaks wire version {got.version}; this node speaks {wire.WIRE_VERSION}")
        if got.node >= self.own_id:
            raise FrameError(f"Hello from node {got.node}: not a lower-id member of this ensemble")
        guest = self.guest is not None and self.guest(got.node)
        if got.node not in self.members and not guest:  # not a member (yet, or any more): it may try again
            raise MembershipRefused(f"Hello from node {got.node}: not a member of this ensemble")
        problem = self.identity(got.node) if self.identity is not None else None
        if problem is not None:
            raise IdentityRefused(f"Hello claims node {got.node}, but {problem}")
        theirs = got.observers
        if theirs is not None and self.observers is not None and tuple(sorted(theirs)) != self.observers:
            raise MembershipRefused(f"node {got.node} is configured with observers {sorted(theirs)}, this "
                                    f"node with {list(self.observers)}; every node needs the same list")
        self.peer = got.node
        self._tell_members()
        return HandshakeDone(got.node)

    def members_changed(self, members: frozenset[int], addresses: Mapping[int, str]) -> None:
        """This node's membership changed. A Hello still to come is checked
        against the new one, and the dialer of a link this node accepted hears
        the new addresses now: the link can stay up for as long as the dialer
        is out of the ensemble and back (a removed node's links stay), or have
        come up before a restarted node applied its log's membership, so what
        it heard at the handshake can name none of the members it must dial."""
        self.members = members
        self.addresses = addresses
        if self.peer is not None and not self.dialed:
            self._tell_members()

    def _tell_members(self) -> None:
        if self.addresses:
            self.push(frame((wire.TAG_MEMBERS, tuple(sorted(self.addresses.items())))))

    def _new_leader_part(self, part: wire.NewLeaderPart) -> NewLeader | None:
        if self._parts and part.epoch != self._parts_epoch:
            raise FrameError(f"NewLeader part for epoch {part.epoch} inside one for epoch {self._parts_epoch}")
        self._parts_epoch = part.epoch
        if self._parts and part.txns and part.txns[0].zxid <= self._parts[-1].zxid:
            raise FrameError("NewLeader history is not in ascending zxid order")
        self._parts.extend(part.txns)
        if not part.final:
            return None
        msg = NewLeader(part.epoch, tuple(self._parts))
        self._parts = []
        self._parts_epoch = -1
        return msg

    def _sync_plan(self, plan: wire.SyncPlanFrame) -> SnapPiece | None:
        self._sync = (plan, [])
        return SnapPiece(plan, plan.data) if plan.data is not None else None

    def _snap_data(self, more: wire.SnapData) -> SnapPiece:
        sync = self._sync
        if sync is None or sync[0].epoch != more.epoch or sync[0].data is None or sync[1]:
            raise FrameError("SnapData without its SNAP plan")
        return SnapPiece(sync[0], more.data)

    def _sync_txns(self, part: wire.SyncTxns) -> SyncArrived | None:
        if self._sync is None or self._sync[0].epoch != part.epoch:
            raise FrameError("SyncTxns without its SyncPlan")
        plan, txns = self._sync
        if txns and part.txns and part.txns[0].zxid <= txns[-1].zxid:
            raise FrameError("sync plan txns are not in ascending zxid order")
        txns.extend(part.txns)
        if not part.final:
            return None
        self._sync = None
        return SyncArrived(plan, tuple(txns))

    @property
    def mid_frame(self) -> int:
        """Bytes of an unfinished frame (a link closed now cut a frame)."""
        return self.reader.buffered

    # --------------------------------------------------------------- output

    def push(self, data: bytes) -> None:
        if self.stream is not None:
            self._behind.append(data)
            self.behind_bytes += len(data)
            return
        if not self.out and self.on_output is not None:
            self.on_output()
        self.out.append(data)

    def push_all(self, frames: list[bytes]) -> None:
        if self.stream is not None:
            self._behind.extend(frames)
            self.behind_bytes += sum(len(f) for f in frames)
            return
        if not self.out and self.on_output is not None:
            self.on_output()
        self.out.extend(frames)

    def push_stream(self, frames: Iterator[bytes]) -> None:
        """Frames produced as the link takes them (``take_output``'s
        ``room``), in order with everything pushed before and after."""
        if self.stream is not None:
            self._behind.append(frames)
            return
        self.stream = frames
        if not self.out and self.on_output is not None:
            self.on_output()

    def take_output(self, now: float, room: int = STREAM_STEP) -> list[bytes]:
        """What to write now: everything queued, and of a stream up to
        ``room`` bytes (0 while the socket's buffer is full)."""
        out = self.out
        self.out = []
        while self.stream is not None and room > 0:
            for data in self.stream:
                out.append(data)
                room -= len(data)
                if room <= 0:
                    break
            else:
                self._stream_ended(out)
        if out:
            self.last_tx = now
        return out

    def _stream_ended(self, out: list[bytes]) -> None:
        """The stream is sent: what waited behind it follows, up to the next stream."""
        self.stream = None
        behind = self._behind
        while behind:
            item = behind.popleft()
            if isinstance(item, bytes):
                out.append(item)
                self.behind_bytes -= len(item)
            else:
                self.stream = item
                return

    def keepalive(self, now: float, ping_s: float, silence_s: float) -> bool:
        """Queue a ping on an idle link; False when the link went silent for
        ``silence_s`` and must be closed (a partition that drops packets
        gives no RST, so TCP alone would wait many seconds)."""
        if now - self.last_rx > silence_s:
            return False
        if now - self.last_tx >= ping_s and not self.out and self.stream is None:  # a stream is traffic
            self.push(wire.PING_FRAME)
        return True


_ASSEMBLERS: dict[type, Callable[[PeerSession, Any], PeerEvent | None]] = {
    wire.NewLeaderPart: PeerSession._new_leader_part,
    wire.SyncPlanFrame: PeerSession._sync_plan,
    wire.SnapData: PeerSession._snap_data,
    wire.SyncTxns: PeerSession._sync_txns,
}

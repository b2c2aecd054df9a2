"""The one path every client write takes: raw proposals and KV writes alike.
At the leader a write waits in one admission queue (at most ``max_inflight``
proposals uncommitted at once), is proposed in arrival order, and is answered
once the state machine applied it here. At a follower it is forwarded to the
leader on the peer link, in arrival order, and answered once this replica
applied it too (a client that writes through a node and then reads from it
sees its write). One queue for both kinds keeps a client's requests in order.

Failures say what became of the write: ``no_leader`` when it certainly was
not proposed (safe to retry), ``leader_lost`` when it may or may not commit.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from time import monotonic
from typing import Final, NamedTuple, Protocol

from zabd.codec import client as schema
from zabd.codec.framing import frame
from zabd.kv.kinds import tag_raw
from zabd.kv.kvmachine import KV_MAGIC, KVMachine
from zabd.machine import StateMachine
from zabd.protocol import zxid as zx
from zabd.protocol.membership import Membership, MembershipError
from zabd.protocol.membership import decode as decode_membership
from zabd.protocol.membership import encode as encode_membership
from zabd.protocol.node import FOLLOWING, LEADING, Node, NotLeader
from zabd.protocol.window import txn_zxid
from zabd.server import peer_wire as wire
from zabd.server.client_session import ClientSession, Slot
from zabd.server.metrics import Latency
from zabd.server.payloads import kv_request, zk_prepare

_tnew: Final = tuple.__new__  # not a NamedTuple's own __new__: that one is Python, a frame per call

# a client's raw payload (opaque: the leader tags it raw), (op, key, value, version), a ZooKeeper
# write, or a membership change
Write = wire.Write

RAW = 0
KV = 1
SYNC = 2
ZK = 3  # a ZooKeeper session's write; answered by the ZooKeeper session layer's Answerer
ZK_SYNC = 4  # a ZooKeeper session's sync
ZK_RECONFIG = 5  # a ZooKeeper session's reconfig
ZK_ATTACH = 6  # a ZooKeeper session re-attached: decided once the leader's commit point is applied here


class LocalReply(NamedTuple):
    """A client of this node waits for the answer."""

    session: ClientSession
    slot: Slot
    rid: int
    kind: int  # RAW, KV or SYNC
    start: float  # monotonic seconds when the request arrived


class PeerReply(NamedTuple):
    """A follower forwarded the write; it answers its own client."""

    peer: int
    fid: int


Reply = LocalReply | PeerReply | None  # None: the leader's own write (submit_internal)


class Answerer(Protocol):
    """Encodes the answers of a kind of request this module does not know
    the wire of (the ZooKeeper session layer's)."""

    def ok(self, reply: LocalReply, zxid: int) -> bytes: ...

    def fail(self, reply: LocalReply, code: str, message: str) -> bytes: ...


class Links(Protocol):
    def send_frame(self, peer: int, data: bytes) -> bool:
        """Queue ``data`` on the link to ``peer``; False if it is down."""
        ...

    def now(self) -> int:
        """The core's clock, in ticks."""
        ...


class Applied(Protocol):
    @property
    def applied(self) -> int: ...


class ProposalPath:
    def __init__(
        self,
        node: Node,
        machine: StateMachine,
        links: Links,
        applied: Applied,
        max_inflight: int,
        latency: dict[str, Latency] | None = None,
    ) -> None:
        self.node = node
        latency = latency or {}
        write, sync = latency.get("write"), latency.get("sync")
        # by kind: RAW, KV, SYNC, ZK, ZK_SYNC, ZK_RECONFIG, ZK_ATTACH
        self._latency = (write, write, sync, write, sync, write, sync)
        self.kv = machine if isinstance(machine, KVMachine) else None
        self.links = links
        self.position = applied
        self.max_inflight = max_inflight
        self.admit: deque[tuple[Write, Reply]] = deque()  # leader: not yet proposed
        self.pending: deque[tuple[int, Reply]] = deque()  # leader: proposed, in zxid order
        self.forwarded: dict[int, LocalReply] = {}  # follower: sent to the leader, unanswered
        self.committed_elsewhere: deque[tuple[int, LocalReply]] = deque()  # committed at the leader, not here yet
        self._next_fid = 0
        self._told = 0  # leader: followers' writes up to here were answered at their commit
        self.reads: dict[int, Reply] = {}  # read barrier token -> who waits for it (leader)
        self._next_token = 0
        self._kv_epoch = -1
        self._kv_barrier = 0
        self.stopping = False
        self.answers: dict[int, Answerer] = {}  # kind -> its answers (ZK, ZK_SYNC, ZK_RECONFIG, ZK_ATTACH)

    # ------------------------------------------------------------- entries

    def submit(self, session: ClientSession, rid: int, write: Write) -> None:
        """A client write read from ``session``."""
        kind = RAW if type(write) is bytes else ZK if type(write) is wire.ZKWrite else KV
        reply = _tnew(LocalReply, (session, session.open_slot(), rid, kind, monotonic()))
        if kind != RAW and self.kv is None:
            self._fail(reply, schema.UNSUPPORTED, "this server runs without a KV state machine")
        elif self.stopping:
            self._fail(reply, schema.SHUTTING_DOWN, "server shutting down")
        elif self.node.role == LEADING:
            self._at_leader(write, reply)
        else:
            self._forward(reply, lambda fid: wire.forward_frame(fid, write))

    def submit_internal(self, write: wire.ZKWrite) -> bool:
        """The leader's own write (an expiry, a cleanup); False if not leading."""
        if self.stopping or self.node.role != LEADING or not self.node.synced:
            return False
        if self.admit or len(self.pending) >= self.max_inflight or not self._propose(write, None):
            self.admit.append((write, None))
        return True

    def submit_membership(self, session: ClientSession, rid: int, new: Membership, kind: int = RAW) -> None:
        """A membership change for the leader's core; answered as ``kind`` says once applied here."""
        reply = _tnew(LocalReply, (session, session.open_slot(), rid, kind, monotonic()))
        write = wire.MembershipWrite(encode_membership(new))
        if self.node.role == LEADING:
            self._at_leader(write, reply)
        else:
            self._forward(reply, lambda fid: wire.forward_frame(fid, write))

    def sync(self, session: ClientSession, rid: int, kind: int = SYNC) -> None:
        """Answer once this replica applied the leader's commit point as of
        now, confirmed by a read barrier: a deposed leader that does not know
        it yet cannot answer, so ``sync`` then ``get`` is linearizable."""
        reply = _tnew(LocalReply, (session, session.open_slot(), rid, kind, monotonic()))
        if self.node.role == LEADING:
            self._barrier(reply)
        else:
            self._forward(reply, lambda fid: frame((wire.TAG_SYNC_REQ, fid)))

    def _barrier(self, reply: Reply) -> None:
        self._next_token += 1
        try:
            self.node.read_barrier(self._next_token, self.links.now())
        except NotLeader:
            self._fail(reply, schema.NO_LEADER, "the leader is not ready; retry")
            return
        self.reads[self._next_token] = reply

    def read_ready(self, token: int, zxid: int) -> None:
        reply = self.reads.pop(token, None)
        if reply is None:
            return
        if isinstance(reply, LocalReply) and zxid > self.position.applied:
            self.committed_elsewhere.append((zxid, reply))
        else:
            self._succeed(reply, zxid)

    def read_failed(self, token: int) -> None:
        reply = self.reads.pop(token, None)
        if reply is not None:  # nothing was written: safe to ask again
            self._fail(reply, schema.NO_LEADER, "leadership lost during the sync; retry")

    def on_forward(self, peer: int, fwd: wire.Forward) -> None:
        reply = _tnew(PeerReply, (peer, fwd.fid))
        if self.node.role != LEADING:
            self._fail(reply, schema.NO_LEADER, "this node no longer leads; retry")
        else:
            self._at_leader(fwd.write, reply)

    def on_sync_req(self, peer: int, req: wire.SyncReq) -> None:
        reply = PeerReply(peer, req.fid)
        if self.node.role == LEADING:
            self._barrier(reply)
        else:
            self._fail(reply, schema.NO_LEADER, "this node no longer leads; retry")

    def on_forward_ok(self, ok: wire.ForwardOk) -> None:
        reply = self.forwarded.pop(ok.fid, None)
        if reply is None:
            return
        if ok.zxid <= self.position.applied:
            self._succeed(reply, ok.zxid)
        else:
            self.committed_elsewhere.append((ok.zxid, reply))

    def on_forward_err(self, err: wire.ForwardErr) -> None:
        reply = self.forwarded.pop(err.fid, None)
        if reply is not None:
            # refused before it was proposed: say so; anything else may have committed
            code = err.code if err.code in schema.RETRYABLE or err.code == schema.BAD_REQUEST else schema.LEADER_LOST
            self._fail(reply, code, err.message)

    # ---------------------------------------------------------------- leader

    def _at_leader(self, write: Write, reply: Reply) -> None:
        if not self.node.synced:
            self._fail(reply, schema.NO_LEADER, "the leader is not ready; retry")
        elif self.admit or len(self.pending) >= self.max_inflight or not self._propose(write, reply):
            self.admit.append((write, reply))

    def _propose(self, write: Write, reply: Reply) -> bool:
        """Propose now; False if a KV or ZooKeeper write must wait for the previous epoch."""
        node = self.node
        try:
            if type(write) is bytes:  # whatever its bytes, it is applied as nothing else
                z = node.propose(tag_raw(write), self.links.now())
            elif type(write) is wire.MembershipWrite:
                return self._propose_membership(write.payload, reply)
            elif type(write) is wire.ZKWrite:
                assert self.kv is not None
                if not self._kv_ready():
                    return False
                prepared = zk_prepare(self.kv, write)
                z = node.propose(prepared.payload, self.links.now())
                self.kv.zk_leader.proposed(z, prepared)
            else:
                assert self.kv is not None and not isinstance(write, (bytes, wire.ZKWrite, wire.MembershipWrite))
                if not self._kv_ready():
                    return False
                payload = self.kv.leader.prepare(kv_request(write))
                z = node.propose(KV_MAGIC + payload, self.links.now())
                self.kv.leader.proposed(z, payload)
        except NotLeader:
            self._fail(reply, schema.NO_LEADER, "the leader is not ready; retry")
            return True
        self.pending.append((z, reply))
        return True

    def _propose_membership(self, payload: bytes, reply: Reply) -> bool:
        new = decode_membership(payload)
        try:
            if new is None:
                raise MembershipError("a malformed membership change")
            z = self.node.propose_membership(new, self.links.now())
        except MembershipError as exc:
            self._fail(reply, schema.BAD_REQUEST, str(exc))
        else:
            self.pending.append((z, reply))
        return True

    def machine_ready(self) -> bool:
        """True once this leader's state machine applied every txn of earlier
        epochs: what it decides from now on rests on the whole history."""
        return self.kv is not None and self.node.role == LEADING and self._kv_ready()

    def _kv_ready(self) -> bool:
        # A new leadership forgets the pending view of an earlier one, and
        # decides no condition before every txn of earlier epochs is applied
        # here (the versions they set are what conditions are checked against).
        assert self.kv is not None
        epoch = self.node.current_epoch
        if self._kv_epoch != epoch:
            self.kv.leader.reset()
            self.kv.zk_leader.reset()
            self._kv_epoch = epoch
            h = self.node.history
            i = bisect_left(h, zx.make(epoch, 1), key=txn_zxid)
            self._kv_barrier = h[i - 1].zxid if i else 0
        return self.position.applied >= self._kv_barrier

    def _drain(self) -> None:
        admit = self.admit
        room = self.max_inflight - len(self.pending)
        while admit and room > 0:
            write, reply = admit[0]
            if not self._propose(write, reply):
                return
            admit.popleft()
            room -= 1

    # -------------------------------------------------------------- follower

    def _forward(self, reply: LocalReply, encode: Callable[[int], bytes]) -> None:
        node = self.node
        self._next_fid += 1
        fid = self._next_fid
        # a removed node that follows in sync is its leader's guest: it forwards as a member does
        member = node.id in node.membership.members or node.in_sync
        if node.role == FOLLOWING and member and self.links.send_frame(node.leader, encode(fid)):
            self.forwarded[fid] = reply
        else:
            self._fail(reply, schema.NO_LEADER, "no leader at the moment; retry", node.leader)

    # ------------------------------------------------------------ completion

    def commit_decided(self, z: int) -> None:
        """A leader decided the commit of ``z``: its followers' writes up to
        ``z`` are answered now, ahead of the Commit on the same link, so a
        follower knows which of its writes a txn was when it applies it."""
        told = self._told
        for pz, reply in self.pending:
            if pz > z:
                break
            if pz > told and type(reply) is PeerReply:
                self.links.send_frame(reply.peer, frame((wire.TAG_FORWARD_OK, reply.fid, pz)))
        self._told = max(told, z)

    def answer_applied(self, z: int) -> None:
        """The txn ``z`` is applied here: answer who waited for it and what
        their sessions asked after it, before the next txn changes the state."""
        pending = self.pending
        while pending and pending[0][0] <= z:
            pz, reply = pending.popleft()
            if type(reply) is not PeerReply or pz > self._told:
                self._succeed(reply, pz)
        done = self.committed_elsewhere
        while done and done[0][0] <= z:
            pz, local = done.popleft()
            self._succeed(local, pz)

    def on_applied(self, z: int) -> None:
        """Everything up to ``z`` is applied here: answer who waited for it."""
        self.answer_applied(z)
        if self.admit:
            self._drain()

    def leadership_lost(self) -> None:
        pending, self.pending = self.pending, deque()
        for _, reply in pending:
            self._fail(reply, schema.LEADER_LOST, "leadership lost before the commit; the outcome is unknown")
        admit, self.admit = self.admit, deque()
        for _, reply in admit:  # never proposed: safe to retry
            self._fail(reply, schema.NO_LEADER, "leadership lost before this was proposed; retry")

    def leader_changed(self, why: str) -> None:
        """A follower's leader changed or its link broke: a forwarded write
        not answered yet may or may not commit. One the leader committed
        already stays where it is: it is answered when this replica applies
        it, with its result (a cas the leader turned into ``bad_version`` is
        committed too, and only the applied txn says which it was)."""
        forwarded, self.forwarded = self.forwarded, {}
        for reply in forwarded.values():
            self._fail(reply, schema.LEADER_LOST, f"{why}; the outcome is unknown")

    def shutting_down(self) -> None:
        """Answer everyone: this replica will apply nothing more."""
        self._give_up("server shutting down", schema.SHUTTING_DOWN)

    def left_ensemble(self) -> None:
        """This node is no longer a member and follows no leader: it will hear
        of no more commits."""
        self._give_up("this server left the ensemble", schema.NO_LEADER)

    def _give_up(self, why: str, retry_code: str) -> None:
        self.leadership_lost()
        self.leader_changed(why)
        done, self.committed_elsewhere = self.committed_elsewhere, deque()
        for z, local in done:
            if local.kind == RAW:  # committed on a quorum: that is all a raw write's answer says
                self._succeed(local, z)
            elif local.kind in (SYNC, ZK_SYNC, ZK_ATTACH):  # nothing was written: safe to ask again
                self._fail(local, retry_code, f"{why}; retry")
            else:
                self._fail(local, schema.LEADER_LOST, f"committed, but {why} before it applied the write "
                           "here: its result (ok or a failed condition) is unknown; read the key")

    def _succeed(self, reply: Reply, z: int) -> None:
        if reply is None:
            return
        if isinstance(reply, PeerReply):
            self.links.send_frame(reply.peer, frame((wire.TAG_FORWARD_OK, reply.fid, z)))
            return
        hist = self._latency[reply.kind]
        if hist is not None:
            hist.observe(monotonic() - reply.start)
        answers = self.answers.get(reply.kind)
        if answers is not None:
            reply.session.complete(reply.slot, answers.ok(reply, z))
        elif reply.kind == KV:
            reply.session.complete(reply.slot, self._kv_answer(reply.rid, z))
        else:
            reply.session.complete(reply.slot, schema.ok_zxid_frame(reply.rid, z))

    def _kv_answer(self, rid: int, z: int) -> bytes:
        res = self.kv.result(z) if self.kv is not None else None  # None: a snapshot install replaced it here
        return schema.kv_write_frame(rid, z, None if res is None else res.code, 0 if res is None else res.version)

    def _fail(self, reply: Reply, code: str, message: str, leader: int = 0) -> None:
        if reply is None:
            return
        if isinstance(reply, PeerReply):
            self.links.send_frame(reply.peer, frame((wire.TAG_FORWARD_ERR, reply.fid, code, message)))
        elif reply.kind in self.answers:
            reply.session.complete(reply.slot, self.answers[reply.kind].fail(reply, code, message))
        else:
            reply.session.complete(reply.slot, schema.error_frame(reply.rid, code, message, leader))

    @property
    def in_flight(self) -> int:
        return len(self.pending) + len(self.admit) + len(self.forwarded) + len(self.committed_elsewhere)

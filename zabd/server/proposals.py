"""The one path every client write takes: raw proposals and KV writes alike.
At the leader a write waits in one admission queue (at most ``max_inflight``
proposals uncommitted at once), is proposed in arrival order, and is answered
once the state machine applied it here. At a follower it is forwarded to the
leader on the peer link, in arrival order, and answered once this replica
applied it too (a client that writes through a node and then reads from it
sees its write). One queue for both kinds keeps a client's requests in order.

Each request is one :class:`Request` from where it is read to its answer
(ZooKeeper's ``Request``): it carries its reply path (``Answers``: zabd's
port, the ZooKeeper session layer, a follower's link) and, once proposed or
told by the leader, its zxid. The applier hands the request waiting for a
txn what applying it returned (``answer_applied``), so no result is kept for
later: a request whose txn went by before it knew it was its own (a
snapshot install, a resync) is answered "committed, result unknown".

Failures say what became of the write: ``no_leader`` when it certainly was
not proposed (safe to retry), ``leader_lost`` when it may or may not commit.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from time import monotonic
from typing import Protocol

from zabd.codec import client as schema
from zabd.codec.framing import frame
from zabd.kv.kinds import tag_raw
from zabd.kv.kvmachine import KV_MAGIC, KVMachine
from zabd.kv.store import Result
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

# a client's raw payload (opaque: the leader tags it raw), (op, key, value, version), a ZooKeeper
# write, or a membership change
Write = wire.Write

RAW = 0
KV = 1
SYNC = 2
ZK = 3  # a ZooKeeper session's write; answered by the ZooKeeper session layer
ZK_SYNC = 4  # a ZooKeeper session's sync
ZK_RECONFIG = 5  # a ZooKeeper session's reconfig
ZK_ATTACH = 6  # a ZooKeeper session re-attached: decided once the leader's commit point is applied here
SYNCS = (SYNC, ZK_SYNC, ZK_ATTACH)  # wrote nothing: answered with a commit point once it is applied here


class Answers(Protocol):
    """How one kind of request is answered: the reply path a :class:`Request`
    carries. ``ok`` gets what applying its txn returned (``result``: None
    for a request that wrote nothing, or where the txn was applied before
    this server knew it was this request's)."""

    def ok(self, req: Request, zxid: int, result: object) -> bytes: ...

    def fail(self, req: Request, code: str, message: str, leader: int = 0) -> bytes:
        """``leader``: the leader to try, where this node knows one."""
        ...


class Request:
    """One client request on the write path, from where it is read to its
    answer (ZooKeeper's ``Request``): who asked (a connection and its slot,
    or a follower that forwarded it), how it is answered, and the zxid it
    became. The applier hands it its txn's result; nothing is parked elsewhere."""

    __slots__ = ("session", "slot", "rid", "kind", "start", "answers", "zxid", "peer")

    def __init__(self, session: ClientSession | None, slot: Slot | None, rid: int, kind: int, start: float,
                 answers: Answers, peer: int = 0) -> None:
        self.session = session  # None: a follower's write, answered on its link
        self.slot = slot
        self.rid = rid  # the connection's id for it (a follower's: its forward id)
        self.kind = kind  # RAW, KV, SYNC, ZK, ZK_SYNC, ZK_RECONFIG, ZK_ATTACH
        self.start = start  # monotonic seconds when it was read
        self.answers = answers
        self.zxid = 0  # once proposed (leader), or told by the leader (follower)
        self.peer = peer  # the follower that forwarded it (0: a client of this node)


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
        self.admit: deque[tuple[Write, Request | None]] = deque()  # leader: not yet proposed
        # leader: proposed, in zxid order (None: the leader's own write)
        self.pending: deque[tuple[int, Request | None]] = deque()
        self.forwarded: dict[int, Request] = {}  # follower: sent to the leader, by forward id, unanswered
        self.committed_elsewhere: deque[Request] = deque()  # committed at the leader, not applied here yet
        self._next_fid = 0
        self._told = 0  # leader: followers' writes up to here were answered at their commit
        self.reads: dict[int, Request] = {}  # read barrier token -> who waits for it (leader)
        self._next_token = 0
        self._kv_epoch = -1
        self._kv_barrier = 0
        self.stopping = False
        self.client_answers = ClientAnswers()  # zabd's own port: raw, KV and sync requests
        self.peer_answers = PeerAnswers(links)  # a follower's request, answered on its link

    # ------------------------------------------------------------- entries

    def request(self, session: ClientSession, rid: int, kind: int, answers: Answers | None = None) -> Request:
        """The request just read from ``session``: its answer's place is kept in the connection's order."""
        return Request(session, session.open_slot(), rid, kind, monotonic(),
                       self.client_answers if answers is None else answers)

    def submit(self, session: ClientSession, rid: int, write: Write, answers: Answers | None = None) -> None:
        """A client write read from ``session`` (``answers``: how its kind is answered, if not zabd's own port's)."""
        kind = RAW if type(write) is bytes else ZK if type(write) is wire.ZKWrite else KV
        req = self.request(session, rid, kind, answers)
        if kind != RAW and self.kv is None:
            self._fail(req, schema.UNSUPPORTED, "this server runs without a KV state machine")
        elif self.stopping:
            self._fail(req, schema.SHUTTING_DOWN, "server shutting down")
        elif self.node.role == LEADING:
            self._at_leader(write, req)
        else:
            self._forward(req, lambda fid: wire.forward_frame(fid, write))

    def submit_internal(self, write: wire.ZKWrite) -> bool:
        """The leader's own write (an expiry, a cleanup); False if not leading."""
        if self.stopping or self.node.role != LEADING or not self.node.synced:
            return False
        if self.admit or len(self.pending) >= self.max_inflight or not self._propose(write, None):
            self.admit.append((write, None))
        return True

    def submit_membership(self, session: ClientSession, rid: int, new: Membership, kind: int = RAW,
                          answers: Answers | None = None) -> None:
        """A membership change for the leader's core; answered as ``kind`` says once applied here."""
        req = self.request(session, rid, kind, answers)
        write = wire.MembershipWrite(encode_membership(new))
        if self.node.role == LEADING:
            self._at_leader(write, req)
        else:
            self._forward(req, lambda fid: wire.forward_frame(fid, write))

    def sync(self, session: ClientSession, rid: int, kind: int = SYNC, answers: Answers | None = None) -> None:
        """Answer once this replica applied the leader's commit point as of
        now, confirmed by a read barrier: a deposed leader that does not know
        it yet cannot answer, so ``sync`` then ``get`` is linearizable."""
        req = self.request(session, rid, kind, answers)
        if self.node.role == LEADING:
            self._barrier(req)
        else:
            self._forward(req, lambda fid: frame((wire.TAG_SYNC_REQ, fid)))

    def _barrier(self, req: Request) -> None:
        self._next_token += 1
        try:
            self.node.read_barrier(self._next_token, self.links.now())
        except NotLeader:
            self._fail(req, schema.NO_LEADER, "the leader is not ready; retry")
            return
        self.reads[self._next_token] = req

    def read_ready(self, token: int, zxid: int) -> None:
        req = self.reads.pop(token, None)
        if req is None:
            return
        if req.peer == 0 and zxid > self.position.applied:
            req.zxid = zxid
            self.committed_elsewhere.append(req)
        else:
            self._succeed(req, zxid, None)

    def read_failed(self, token: int) -> None:
        req = self.reads.pop(token, None)
        if req is not None:  # nothing was written: safe to ask again
            self._fail(req, schema.NO_LEADER, "leadership lost during the sync; retry")

    def on_forward(self, peer: int, fwd: wire.Forward) -> None:
        req = Request(None, None, fwd.fid, RAW, 0.0, self.peer_answers, peer)
        if self.node.role != LEADING:
            self._fail(req, schema.NO_LEADER, "this node no longer leads; retry")
        else:
            self._at_leader(fwd.write, req)

    def on_sync_req(self, peer: int, sync: wire.SyncReq) -> None:
        req = Request(None, None, sync.fid, SYNC, 0.0, self.peer_answers, peer)
        if self.node.role == LEADING:
            self._barrier(req)
        else:
            self._fail(req, schema.NO_LEADER, "this node no longer leads; retry")

    def on_forward_ok(self, ok: wire.ForwardOk) -> None:
        req = self.forwarded.pop(ok.fid, None)
        if req is None:
            return
        req.zxid = ok.zxid
        if ok.zxid <= self.position.applied:
            # applied here before the leader's answer came (a resync): the txn went by unrecognised
            self._unseen(req, "the write was applied here before the leader said it was this one")
        else:
            self.committed_elsewhere.append(req)

    def on_forward_err(self, err: wire.ForwardErr) -> None:
        req = self.forwarded.pop(err.fid, None)
        if req is not None:
            # refused before it was proposed: say so; anything else may have committed
            code = err.code if err.code in schema.RETRYABLE or err.code == schema.BAD_REQUEST else schema.LEADER_LOST
            self._fail(req, code, err.message)

    # ---------------------------------------------------------------- leader

    def _at_leader(self, write: Write, req: Request) -> None:
        if not self.node.synced:
            self._fail(req, schema.NO_LEADER, "the leader is not ready; retry")
        elif self.admit or len(self.pending) >= self.max_inflight or not self._propose(write, req):
            self.admit.append((write, req))

    def _propose(self, write: Write, req: Request | None) -> bool:
        """Propose now; False if a KV or ZooKeeper write must wait for the previous epoch."""
        node = self.node
        try:
            if type(write) is bytes:  # whatever its bytes, it is applied as nothing else
                z = node.propose(tag_raw(write), self.links.now())
            elif type(write) is wire.MembershipWrite:
                return self._propose_membership(write.payload, req)
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
            self._fail(req, schema.NO_LEADER, "the leader is not ready; retry")
            return True
        if req is not None:
            req.zxid = z
        self.pending.append((z, req))
        return True

    def _propose_membership(self, payload: bytes, req: Request | None) -> bool:
        new = decode_membership(payload)
        try:
            if new is None:
                raise MembershipError("a malformed membership change")
            z = self.node.propose_membership(new, self.links.now())
        except MembershipError as exc:
            self._fail(req, schema.BAD_REQUEST, str(exc))
        else:
            if req is not None:
                req.zxid = z
            self.pending.append((z, req))
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
            write, req = admit[0]
            if not self._propose(write, req):
                return
            admit.popleft()
            room -= 1

    # -------------------------------------------------------------- follower

    def _forward(self, req: Request, encode: Callable[[int], bytes]) -> None:
        node = self.node
        self._next_fid += 1
        fid = self._next_fid
        # a removed node that follows in sync is its leader's guest: it forwards as a member does
        member = node.id in node.membership.members or node.in_sync
        if node.role == FOLLOWING and member and self.links.send_frame(node.leader, encode(fid)):
            self.forwarded[fid] = req
        else:
            self._fail(req, schema.NO_LEADER, "no leader at the moment; retry", node.leader)

    # ------------------------------------------------------------ completion

    def commit_decided(self, z: int) -> None:
        """A leader decided the commit of ``z``: its followers' writes up to
        ``z`` are answered now, ahead of the Commit on the same link, so a
        follower knows which of its writes a txn was when it applies it."""
        told = self._told
        for pz, req in self.pending:
            if pz > z:
                break
            if pz > told and req is not None and req.peer:
                self.links.send_frame(req.peer, frame((wire.TAG_FORWARD_OK, req.rid, pz)))
        self._told = max(told, z)

    def answer_applied(self, z: int, result: object, seen: bool = True) -> None:
        """The txn ``z`` is applied here, with ``result`` (what the state
        machine returned): answer who waited for it, before the next txn
        changes the state that what their sessions asked after it reads.
        A request waiting for an earlier txn (or, ``seen`` false, for any
        txn up to ``z``) never saw its txn applied: a snapshot replaced it."""
        pending = self.pending
        while pending and pending[0][0] <= z:
            pz, req = pending.popleft()
            if req is None or (req.peer and pz <= self._told):
                continue
            if seen and pz == z:
                self._succeed(req, z, result)
            else:
                self._unseen(req, "the write's txn was replaced here by a snapshot")
        done = self.committed_elsewhere
        while done and done[0].zxid <= z:
            req = done.popleft()
            if seen and req.zxid == z:
                self._succeed(req, z, result)
            else:
                self._unseen(req, "the write's txn was replaced here by a snapshot")

    def on_applied(self, z: int) -> None:
        """Everything up to ``z`` is applied here: what still waits for a txn
        at or below it never saw its txn applied (a snapshot replaced it)."""
        if (self.pending and self.pending[0][0] <= z) or (self.committed_elsewhere
                                                          and self.committed_elsewhere[0].zxid <= z):
            self.answer_applied(z, None, seen=False)
        if self.admit:
            self._drain()

    def _unseen(self, req: Request, why: str) -> None:
        """Committed, but its txn was applied here without this request
        knowing it: what it did (ok or a failed condition) is unknown here."""
        if req.kind == RAW or req.kind in SYNCS:  # their answer says no more than the zxid
            self._succeed(req, req.zxid, None)
        else:
            self._fail(req, schema.LEADER_LOST, f"committed, but {why}: its result (ok or a failed condition) is "
                                                "unknown; read the key")

    def leadership_lost(self) -> None:
        pending, self.pending = self.pending, deque()
        for _, req in pending:
            self._fail(req, schema.LEADER_LOST, "leadership lost before the commit; the outcome is unknown")
        admit, self.admit = self.admit, deque()
        for _, req in admit:  # never proposed: safe to retry
            self._fail(req, schema.NO_LEADER, "leadership lost before this was proposed; retry")

    def leader_changed(self, why: str) -> None:
        """A follower's leader changed or its link broke: a forwarded write
        not answered yet may or may not commit. One the leader committed
        already stays where it is: it is answered when this replica applies
        it, with its result (a cas the leader turned into ``bad_version`` is
        committed too, and only the applied txn says which it was)."""
        forwarded, self.forwarded = self.forwarded, {}
        for req in forwarded.values():
            self._fail(req, schema.LEADER_LOST, f"{why}; the outcome is unknown")

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
        for req in done:
            if req.kind in SYNCS:  # nothing was written: safe to ask again
                self._fail(req, retry_code, f"{why}; retry")
            else:  # a raw write is only "committed"; any other's result is unknown here
                self._unseen(req, f"{why} before it applied the write here")

    def _succeed(self, req: Request | None, z: int, result: object) -> None:
        if req is None:
            return
        data = req.answers.ok(req, z, result)
        session = req.session
        if session is not None and req.slot is not None:
            hist = self._latency[req.kind]
            if hist is not None:
                hist.observe(monotonic() - req.start)
            session.complete(req.slot, data)

    def _fail(self, req: Request | None, code: str, message: str, leader: int = 0) -> None:
        if req is None:
            return
        data = req.answers.fail(req, code, message, leader)
        if req.session is not None and req.slot is not None:
            req.session.complete(req.slot, data)

    @property
    def in_flight(self) -> int:
        return len(self.pending) + len(self.admit) + len(self.forwarded) + len(self.committed_elsewhere)


class ClientAnswers:
    """zabd's own client port: a raw write's or a sync's answer is its zxid,
    a KV write's its result (``zabd.codec.client``)."""

    def ok(self, req: Request, zxid: int, result: object) -> bytes:
        if req.kind == KV:
            res = result if isinstance(result, Result) else None  # None: never OK without a result
            if res is None:
                return schema.error_frame(req.rid, schema.LEADER_LOST, "committed, but its result is unknown here; "
                                                                       "read the key")
            return schema.kv_write_frame(req.rid, zxid, res.code, res.version)
        return schema.ok_zxid_frame(req.rid, zxid)

    def fail(self, req: Request, code: str, message: str, leader: int = 0) -> bytes:
        return schema.error_frame(req.rid, code, message, leader)


class PeerAnswers:
    """A follower's forwarded request: answered on its link, by forward id;
    the follower answers its own client once it applied the txn."""

    def __init__(self, links: Links) -> None:
        self.links = links

    def ok(self, req: Request, zxid: int, result: object) -> bytes:
        self.links.send_frame(req.peer, frame((wire.TAG_FORWARD_OK, req.rid, zxid)))
        return b""

    def fail(self, req: Request, code: str, message: str, leader: int = 0) -> bytes:
        self.links.send_frame(req.peer, frame((wire.TAG_FORWARD_ERR, req.rid, code, message)))
        return b""

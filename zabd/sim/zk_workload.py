"""The simulator's ZooKeeper workload (``--workload zk``; not canonical).

Client requests come from the seed, one per scheduled proposal: sessions
open, write (creates of every mode, deletes, setData, setACL, checks,
multi), close, or are abandoned and left to expire. The leader decides each
one with the server's own ``ZKLeader`` (``zabd.zk.prep``) and proposes the
txn; it also expires sessions with the server's ``ExpiryTracker`` and
deletes empty containers and expired TTL nodes, as ``zabd.server.zk.expiry``
does. Every node applies its committed prefix to its own ``DataTree``.

What the safety checker adds (first failure kept, like its own):

* ``zk-digest``: two replicas whose trees differ after applying the same
  zxid (the per-zxid digest of ZooKeeper 3.6's ``digestEnabled``).
* ``zk-ephemeral``: an ephemeral node whose owner's session is closed.
* ``zk-apply``: a committed ZooKeeper txn a replica could not apply.
* ``zk-false-expiry``: a re-attach answered "expired" for a session whose
  ``CloseSession`` had not committed (a client told so drops its ephemerals,
  locks and leadership while its session lives on).
* ``zk-stale-session``: a re-attach answered with a session whose close had
  committed before the client asked.

Re-attaches: clients also take their sessions (those whose ``CreateSession``
committed: their clients were told of them) to a random node, as a client
that lost its connection does, decided as ``zabd.server.zk.sessions`` decides
them: the node's leader begins a read barrier (``Node.read_barrier``), the
node applies up to the commit point the quorum confirmed, then
``reattach_timeout`` reads its session table. A node that cannot ask (no
leader, a leader that is deposed or crashed before the quorum answered, a
crash of its own) answers nothing. ``local_verdicts`` makes nodes decide
from their own tables at once, as zabd's followers did before issue 37: the
checker must catch it.

Time: one tick is one millisecond of session time, ``ZK_TICK_MS`` ticks are
ZooKeeper's tick, so session timeouts (2 to 20 of them) span a run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from zabd.protocol.effects import CommitTo, Effect, ReadFailed, ReadReady, RoleChanged
from zabd.protocol.messages import Txn
from zabd.protocol.node import FOLLOWING, LEADING, Node, NotLeader
from zabd.zk.acl import ACL, ALL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ, READ_ACL_UNSAFE, Id, digest_id
from zabd.zk.prep import ZKLeader, is_session_owner
from zabd.zk.records import (
    Check,
    CloseSession,
    Create,
    CreateSession,
    Delete,
    DeleteContainer,
    Multi,
    MultiOp,
    SetACL,
    SetData,
    Write,
)
from zabd.zk.sessions import ExpiryTracker, SessionIds, negotiate_timeout, password_digest, reattach_timeout
from zabd.zk.tree import DataTree
from zabd.zk.txn import T_CLOSE_SESSION, T_CREATE_SESSION, ZK_MAGIC

ZK_TICK_MS = 20
START_MS = 1_700_000_000_000
CLEANUP_EVERY = 10 * ZK_TICK_MS
PARENTS = ("/a", "/b", "/a/c")
NAMES = ("n0", "n1")
ALICE = Id("digest", digest_id("alice", "secret"))
ACLS: tuple[tuple[ACL, ...], ...] = (
    OPEN_ACL_UNSAFE, OPEN_ACL_UNSAFE, OPEN_ACL_UNSAFE, CREATOR_ALL_ACL, READ_ACL_UNSAFE, (ACL(ALL ^ READ, ALICE),),
)

Flush = Callable[[Node, int], None]
HistoryOf = Callable[[Node], Sequence[Txn]]


class ZKRequests:
    """The clients: a deterministic request stream from the seed, the same
    whatever the cluster does with it (outcomes only change the txns)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed ^ 0x7A6B_5A4B)
        self.ids = SessionIds(1, START_MS)
        self.alive: list[int] = []  # sessions whose client still runs (and pings)
        self.auth: dict[int, tuple[Id, ...]] = {}
        self.passwords: dict[int, bytes] = {}  # what each client was told (the txn holds the digest)

    def next(self) -> tuple[int, Write]:
        rng = self.rng
        roll = rng.random()
        if not self.alive or roll < 0.10:
            sid = self.ids.next()
            self.alive.append(sid)
            self.auth[sid] = (ALICE,) if rng.random() < 0.3 else ()
            timeout = negotiate_timeout(rng.choice((10, 60, 200, 1000)) * ZK_TICK_MS // 10, ZK_TICK_MS)
            password = self.passwords[sid] = rng.randbytes(16)
            return sid, CreateSession(sid, timeout, password_digest(password))
        sid = rng.choice(self.alive)
        if roll < 0.15:
            self.alive.remove(sid)
            return sid, CloseSession()
        if roll < 0.20:
            self.alive.remove(sid)  # the client dies: its session must expire
            return sid, self._op()
        if roll < 0.30:
            return sid, Multi(tuple(self._op() for _ in range(rng.randint(1, 3))))
        if roll < 0.34:
            return sid, SetACL(self._path(), rng.choice(ACLS), rng.choice((-1, -1, 0, 1)))
        return sid, self._op()

    def _path(self, parents: float = 0.2) -> str:
        rng = self.rng
        if rng.random() < parents:
            return rng.choice(PARENTS)
        return f"{rng.choice(PARENTS)}/{rng.choice(NAMES)}"

    def _op(self) -> MultiOp:
        rng = self.rng
        roll = rng.random()
        version = rng.choice((-1, -1, 0, 1, 2))
        if roll < 0.55:
            path = self._path(0.4)  # parents, or children have nowhere to go
            mode = rng.choice((0, 0, 0, 1, 1, 2, 3, 4, 5, 6))
            ttl = rng.choice((1, 50, 400)) if mode in (5, 6) else -1
            return Create(path, rng.randbytes(rng.randint(0, 8)), rng.choice(ACLS), mode, ttl)
        path = self._path(0.4)
        if roll < 0.65:
            return Delete(path, version)
        if roll < 0.95:
            return SetData(path, rng.randbytes(rng.randint(0, 8)), version)
        return Check(path, version)


class ZKWorkload:
    """Drives the leader's ZooKeeper side and the replicas' trees; records
    the first problem as (tick, node, kind, detail)."""

    def __init__(self, seed: int, nodes: int, history_of: HistoryOf) -> None:
        self.requests = ZKRequests(seed)
        self.history_of = history_of
        self.trees = [DataTree() for _ in range(nodes + 1)]  # by node id; 0 unused
        self.applied = [0] * (nodes + 1)  # txns of the node's history applied to its tree
        self.leaders: dict[int, tuple[int, ZKLeader]] = {}  # node -> (epoch, its preparer)
        self.tracker = ExpiryTracker()
        self.leading: tuple[int, int] | None = None  # (node, epoch) the tracker belongs to
        self.next_cleanup = 0
        self.digest_at: dict[int, int] = {}  # zxid -> tree digest after applying it (first replica to)
        self.sched: dict[int, int] = {}  # zxid -> tick its request was scheduled (commit latency)
        self.problem: tuple[int, int, str, str] | None = None
        self.applied_txns = 0
        self.expired: list[int] = []  # sessions the leader expired, in order
        # re-attaches: their own random stream, so the request stream stays the same
        self.reattach_rng = random.Random(seed ^ 0x2EA7_7AC4)
        self.local_verdicts = False
        self.created: list[int] = []  # sessions whose CreateSession committed, in order
        self.closed: set[int] = set()  # sessions whose CloseSession committed
        self.barriers: dict[tuple[int, int], tuple[int, int, bool]] = {}  # (leader, token) -> (node, sid, closed)
        self.parked: dict[int, list[tuple[int, int, bool]]] = {}  # node -> (commit point, sid, closed) to apply
        self.verdicts = {"attached": 0, "expired": 0, "unanswered": 0}
        self._token = 0
        self._created_set: set[int] = set()
        self._nodes: Sequence[Node] = ()

    # ------------------------------------------------------------- replicas

    def observe(self, t: int, node: Node, effects: list[Effect]) -> None:
        for eff in effects:
            cls = type(eff)
            if cls is CommitTo:
                self._apply_committed(t, node)
            elif cls is RoleChanged:
                if eff.role != LEADING:  # type: ignore[union-attr]
                    # what this leader proposed may be lost: the next one decides
                    self.leaders.pop(node.id, None)
                self._role_changed(node)
            elif cls is ReadReady:
                self._barrier_held(t, node, eff.token, eff.zxid)  # type: ignore[union-attr]
            elif cls is ReadFailed and self.barriers.pop((node.id, eff.token), None) is not None:  # type: ignore[union-attr]
                self.verdicts["unanswered"] += 1

    def _apply_committed(self, t: int, node: Node) -> None:
        history = self.history_of(node)
        lc = node.last_committed
        i = self.applied[node.id]
        tree = self.trees[node.id]
        held = self.leaders.get(node.id)
        leader = held[1] if held is not None else None
        while i < len(history) and history[i].zxid <= lc:
            txn = history[i]
            i += 1
            if txn.payload[:4] != ZK_MAGIC:
                continue
            try:
                applied = tree.apply(txn.zxid, txn.payload)
            except ValueError as exc:
                self._fail(t, node.id, "zk-apply", str(exc))
                continue
            self.applied_txns += 1
            if leader is not None:
                leader.committed(txn.zxid)
            seen = self.digest_at.setdefault(txn.zxid, tree.digest)
            if seen != tree.digest:
                self._fail(t, node.id, "zk-digest",
                           f"tree digest {tree.digest:016x} after zxid {txn.zxid >> 32}:{txn.zxid & 0xFFFFFFFF}, "
                           f"another replica had {seen:016x}")
            if applied.kind == T_CLOSE_SESSION:
                self.closed.add(applied.session)
                self._check_ephemerals(t, node.id, tree)
            elif applied.kind == T_CREATE_SESSION and applied.session not in self._created_set:
                self._created_set.add(applied.session)  # committed: its client was told
                self.created.append(applied.session)
        self.applied[node.id] = i
        if self.parked.get(node.id):
            self._decide_parked(t, node)

    def _check_ephemerals(self, t: int, node: int, tree: DataTree) -> None:
        """Every ephemeral's owner is an open session (a scan of the whole
        tree, not of the index the tree keeps: a sim's tree is small)."""
        for path, znode in tree.nodes.items():
            owner = znode.owner
            if is_session_owner(owner) and owner not in tree.sessions:
                self._fail(t, node, "zk-ephemeral", f"{path} outlives session 0x{owner & (2**64 - 1):x}")
                return

    # ------------------------------------------------------------ re-attach

    def reattach(self, t: int, nodes: Sequence[Node], up: Sequence[bool], flush: Flush) -> None:
        """Maybe a client takes a session to a random node now (called as the leader proposes)."""
        self._nodes = nodes
        rng = self.reattach_rng
        if not self.created or rng.random() >= 0.5:
            return
        sid = rng.choice(self.created)
        node = nodes[rng.randrange(len(nodes))]
        closed = sid in self.closed
        if not up[node.id]:
            self.verdicts["unanswered"] += 1
            return
        if self.local_verdicts:
            self._verdict(t, node.id, sid, closed)
            return
        leader = node if node.role == LEADING else nodes[node.leader - 1] if (
            node.role == FOLLOWING and node.in_sync and node.leader > 0) else None
        if leader is None or not up[leader.id]:
            self.verdicts["unanswered"] += 1
            return
        self._token += 1
        try:
            leader.read_barrier(self._token, t)
        except NotLeader:
            self.verdicts["unanswered"] += 1
            return
        self.barriers[(leader.id, self._token)] = (node.id, sid, closed)
        flush(leader, t)

    def _barrier_held(self, t: int, leader: Node, token: int, zxid: int) -> None:
        asked = self.barriers.pop((leader.id, token), None)
        if asked is None:
            return
        node, sid, closed = asked
        self.parked.setdefault(node, []).append((zxid, sid, closed))
        self._decide_parked(t, self._nodes[node - 1])

    def _role_changed(self, node: Node) -> None:
        """A node that stops serving hangs up its clients: what they asked is never answered."""
        if node.role == LEADING or node.role == FOLLOWING:
            return
        self.verdicts["unanswered"] += len(self.parked.pop(node.id, ()))
        for key in [k for k, v in self.barriers.items() if node.id in (k[0], v[0])]:
            del self.barriers[key]
            self.verdicts["unanswered"] += 1

    def _decide_parked(self, t: int, node: Node) -> None:
        i = self.applied[node.id]
        history = self.history_of(node)
        at = history[i - 1].zxid if i else 0
        waiting = []
        for zxid, sid, closed in self.parked[node.id]:
            if zxid <= at:
                self._verdict(t, node.id, sid, closed)
            else:
                waiting.append((zxid, sid, closed))
        self.parked[node.id] = waiting

    def _verdict(self, t: int, node: int, sid: int, closed: bool) -> None:
        if reattach_timeout(self.trees[node].sessions, sid, self.requests.passwords[sid]) is None:
            self.verdicts["expired"] += 1
            if sid not in self.closed:
                self._fail(t, node, "zk-false-expiry", f"session 0x{sid & (2**64 - 1):x} reported expired; its "
                                                       "close never committed")
        else:
            self.verdicts["attached"] += 1
            if closed:
                self._fail(t, node, "zk-stale-session", f"session 0x{sid & (2**64 - 1):x} re-attached after its "
                                                        "close committed")

    def finish(self, t: int) -> None:
        for node, tree in enumerate(self.trees[1:], 1):
            self._check_ephemerals(t, node, tree)

    def _fail(self, t: int, node: int, kind: str, detail: str) -> None:
        if self.problem is None:
            self.problem = (t, node, kind, detail)

    # --------------------------------------------------------------- leader

    def _ready(self, node: Node) -> ZKLeader | None:
        """The leader's preparer, once its tree holds every txn of earlier
        epochs (its records only cover its own proposals)."""
        history = self.history_of(node)
        i = self.applied[node.id]
        if i < len(history) and history[i].zxid >> 32 != node.current_epoch:
            return None
        held = self.leaders.get(node.id)
        if held is None or held[0] != node.current_epoch:
            held = self.leaders[node.id] = (node.current_epoch, ZKLeader(self.trees[node.id]))
        return held[1]

    def lead(self, node: Node, pending: list[int], t: int, flush: Flush) -> list[int]:
        """A synced leader's turn: expire, clean up, then propose the pending
        requests (the next ones of the stream; each entry is the tick it was
        scheduled at). Returns what is still pending (all of it while the
        leader is not ready)."""
        leader = self._ready(node)
        if leader is None:
            return pending
        now = START_MS + t
        tree = self.trees[node.id]
        if self.leading != (node.id, node.current_epoch):
            # a new leader gives every session a full timeout from now
            self.leading = (node.id, node.current_epoch)
            self.tracker.clear()
            for sid, session in tree.sessions.items():
                self.tracker.track(sid, session.timeout_ms, now)
            self.next_cleanup = now + CLEANUP_EVERY
        for sid in self.requests.alive:
            self.tracker.touch(sid, now)
        for sid in self.tracker.expired(now):
            self.expired.append(sid)
            self._propose(node, leader, sid, (), CloseSession(), t, -1, flush)
        if now >= self.next_cleanup:
            self.next_cleanup = now + CLEANUP_EVERY
            for path in tree.cleanup_candidates(now):
                self._propose(node, leader, 0, (), DeleteContainer(path), t, -1, flush)
        for sched in pending:
            sid, req = self.requests.next()
            self._propose(node, leader, sid, self.requests.auth.get(sid, ()), req, t, sched, flush)
        return []

    def _propose(self, node: Node, leader: ZKLeader, sid: int, auth: tuple[Id, ...], req: Write, t: int,
                 sched: int, flush: Flush) -> None:
        p = leader.prepare(sid, auth, req, START_MS + t)
        z = node.propose(p.payload, t)
        # before the effects run: a quorum of one commits inside propose
        leader.proposed(z, p)
        if isinstance(req, CreateSession):
            self.tracker.track(sid, req.timeout_ms, START_MS + t)
        elif isinstance(req, CloseSession):
            self.tracker.forget(sid)
        else:
            self.tracker.touch(sid, START_MS + t)
        if sched >= 0:
            self.sched[z] = sched
        flush(node, t)

"""The leader's request processor: ZooKeeper's ``PrepRequestProcessor``.

A write is checked against the tree *as it will be once every txn already
proposed commits*: the committed tree plus one record per path changed by a
proposal not committed yet (ZooKeeper's outstanding ``ChangeRecord``s). The
outcome is a txn: the change (with versions, the parent's cversion and the
ephemerals to delete already decided) or the error, so replicas only apply.

Use: ``p = leader.prepare(session, auth, request, now_ms)``, propose
``p.payload``, then ``leader.proposed(zxid, p)``; after the tree applied up
to ``zxid``: ``leader.committed(zxid)``; when leadership ends:
``leader.reset()`` (what was proposed may be lost; the next leader decides).
A leader must not prepare before its tree applied every txn of earlier
epochs: the records only cover its own proposals.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple

from zabd.zk import acl as acls
from zabd.zk import paths
from zabd.zk import txn as tx
from zabd.zk.acl import ACL, Id
from zabd.zk.errors import Code, ZKError
from zabd.zk.records import (
    CONTAINER,
    CONTAINER_OWNER,
    CREATE_MODES,
    EPHEMERAL_MODES,
    MAX_TTL,
    SEQUENTIAL_MODES,
    TTL_MODES,
    TTL_OWNER_BASE,
    Check,
    CloseSession,
    Create,
    CreateSession,
    Delete,
    DeleteContainer,
    Multi,
    SetACL,
    SetData,
    Write,
    ttl_of,
)
from zabd.zk.tree import SPECIAL_PATHS, DataTree

DEFAULT_MAX_DATA = 1 << 20  # ZooKeeper's jute.maxbuffer default (1 MiB)
INT_MAX = (1 << 31) - 1


class Rec:
    """A node as it will be once every proposal commits (exists False: deleted)."""

    __slots__ = ("exists", "version", "cversion", "aversion", "owner", "children", "acl")

    def __init__(self, exists: bool, version: int = 0, cversion: int = 0, aversion: int = 0, owner: int = 0,
                 children: int = 0, acl: tuple[ACL, ...] = ()) -> None:
        self.exists = exists
        self.version = version
        self.cversion = cversion
        self.aversion = aversion
        self.owner = owner
        self.children = children
        self.acl = acl

    def copy(self) -> Rec:
        return Rec(self.exists, self.version, self.cversion, self.aversion, self.owner, self.children, self.acl)


GONE = Rec(False)


class Prepared(NamedTuple):
    payload: bytes  # the txn to propose (zabd.zk.txn)
    nodes: list[tuple[str, Rec]]  # records this txn changes, in order
    sessions: list[tuple[int, bool]]  # sessions it opens (True) or closes (False)


def next_version(current: int, expected: int, path: str) -> int:
    """ZooKeeper's ``checkAndIncVersion``: -1 matches any version; a Java int
    wraps, and skips -1 on the way (ZOOKEEPER-4743)."""
    if expected != -1 and expected != current:
        raise ZKError(Code.BAD_VERSION, path)
    nxt = current + 1
    if nxt > INT_MAX:
        nxt = -(1 << 31)
    return 0 if nxt == -1 else nxt


def is_session_owner(owner: int) -> bool:
    return owner != 0 and owner != CONTAINER_OWNER and not ttl_of(owner)


class _Txn:
    """One prepare in progress: its own records on top of the leader's."""

    def __init__(self, leader: ZKLeader) -> None:
        self.leader = leader
        self.nodes: dict[str, Rec] = {}
        self.sessions: dict[int, bool] = {}

    def rec(self, path: str) -> Rec:
        """The node at ``path`` (ZKError NO_NODE if it will not exist)."""
        r = self.nodes.get(path)
        if r is None:
            r = self.leader.rec(path)
        if not r.exists:
            raise ZKError(Code.NO_NODE, path)
        return r

    def exists(self, path: str) -> bool:
        r = self.nodes.get(path)
        return (r if r is not None else self.leader.rec(path)).exists

    def session_open(self, sid: int) -> bool:
        s = self.sessions.get(sid)
        return s if s is not None else self.leader.session_open(sid)


class ZKLeader:
    def __init__(self, tree: DataTree, max_data: int = DEFAULT_MAX_DATA, ttl_enabled: bool = True) -> None:
        self.tree = tree
        self.max_data = max_data
        self.ttl_enabled = ttl_enabled
        self._nodes: dict[str, Rec] = {}
        self._sessions: dict[int, bool] = {}
        self._order: deque[tuple[int, str | int, Rec | bool]] = deque()  # (zxid, key, record) in proposal order

    # --------------------------------------------------------------- the view

    def rec(self, path: str) -> Rec:
        r = self._nodes.get(path)
        if r is not None:
            return r
        n = self.tree.nodes.get(path)
        if n is None:
            return GONE
        _, _, _, _, _, version, cversion, aversion, owner = n.header()
        return Rec(True, version, cversion, aversion, owner, len(n.children) if n.children else 0, n.acl)

    def session_open(self, sid: int) -> bool:
        s = self._sessions.get(sid)
        return s if s is not None else sid in self.tree.sessions

    @property
    def outstanding(self) -> int:
        return len(self._order)

    # -------------------------------------------------------------- lifecycle

    def prepare(self, session: int, auth: Sequence[Id], req: Write, now_ms: int) -> Prepared:
        t = _Txn(self)
        try:
            if type(req) is SetData:  # most writes: ahead of the isinstance chain
                if not t.session_open(session):
                    raise ZKError(Code.SESSION_EXPIRED)
                body: list[Any] = self._set_data(t, auth, req)
            elif isinstance(req, Multi):
                body = [tx.T_MULTI, self._multi(t, session, auth, req)]
            else:
                body = self._write(t, session, auth, req)
        except ZKError as exc:
            return Prepared(tx.encode(tx.T_ERROR, now_ms, session, int(exc.code)), [], [])
        body[1:1] = (now_ms, session)
        return tuple.__new__(Prepared, (tx.encode_body(body), list(t.nodes.items()), list(t.sessions.items())))

    def proposed(self, zxid: int, p: Prepared) -> None:
        order = self._order
        for path, rec in p.nodes:
            self._nodes[path] = rec
            order.append((zxid, path, rec))
        for sid, is_open in p.sessions:
            self._sessions[sid] = is_open
            order.append((zxid, sid, is_open))

    def committed(self, zxid: int) -> None:
        """The tree applied everything up to ``zxid``: its records are the
        tree's own now (a path stays pending while a later proposal for it
        is not committed)."""
        order = self._order
        while order and order[0][0] <= zxid:
            _, key, rec = order.popleft()
            if isinstance(key, str):
                if self._nodes.get(key) is rec:
                    del self._nodes[key]
            elif self._sessions.get(key) is rec:
                del self._sessions[key]

    def reset(self) -> None:
        self._nodes.clear()
        self._sessions.clear()
        self._order.clear()

    # ----------------------------------------------------------------- writes

    def _multi(self, t: _Txn, session: int, auth: Sequence[Id], req: Multi) -> list[list[Any]]:
        ops: list[list[Any]] = []
        for i, op in enumerate(req.ops):
            try:
                if not isinstance(op, (Create, Delete, SetData, Check)):
                    raise ZKError(Code.BAD_ARGUMENTS)
                ops.append(self._write(t, session, auth, op, in_multi=True))
            except ZKError as exc:
                # ZooKeeper's answer: OK before the failed op, its error,
                # RUNTIME_INCONSISTENCY after; nothing of it is applied
                t.nodes.clear()
                t.sessions.clear()
                codes = [0] * i + [int(exc.code)] + [int(Code.RUNTIME_INCONSISTENCY)] * (len(req.ops) - i - 1)
                return [[tx.T_ERROR, c] for c in codes]
        return ops

    def _write(self, t: _Txn, session: int, auth: Sequence[Id], req: Write, in_multi: bool = False) -> list[Any]:
        if isinstance(req, CreateSession):
            t.sessions[req.session_id] = True
            return [tx.T_CREATE_SESSION, req.timeout_ms, req.password_digest]
        if isinstance(req, DeleteContainer):
            return self._delete_container(t, req.path)
        if not t.session_open(session):
            raise ZKError(Code.SESSION_EXPIRED)
        if isinstance(req, Create):
            return self._create(t, session, auth, req)
        if isinstance(req, Delete):
            return self._delete(t, auth, req)
        if isinstance(req, SetData):
            return self._set_data(t, auth, req)
        if isinstance(req, SetACL):
            paths.validate(req.path)
            fixed = acls.fixup(req.path, auth, req.acl)
            r = t.rec(req.path)
            acls.check(r.acl, acls.ADMIN, auth, req.path)
            aversion = next_version(r.aversion, req.version, req.path)
            n = t.nodes[req.path] = r.copy()
            n.aversion = aversion
            n.acl = fixed
            return [tx.T_SET_ACL, req.path, acls.to_wire(fixed), aversion]
        if isinstance(req, Check):
            if not in_multi:  # ZOOKEEPER-2623 (3.8.5+): check is a multi op only
                raise ZKError(Code.UNIMPLEMENTED, req.path)
            paths.validate(req.path)
            r = t.rec(req.path)
            acls.check(r.acl, acls.READ, auth, req.path)
            next_version(r.version, req.version, req.path)
            return [tx.T_CHECK, req.path]
        if isinstance(req, CloseSession):
            return self._close_session(t, session)
        raise ZKError(Code.UNIMPLEMENTED)

    def _set_data(self, t: _Txn, auth: Sequence[Id], req: SetData) -> list[Any]:
        path = req.path
        try:
            r = t.rec(path)
        except ZKError:
            # ZooKeeper checks the path first (BAD_ARGUMENTS before NO_NODE);
            # a node that exists was created with a valid path, so only a
            # missing one needs the check: setData is the hottest write
            paths.validate(path)
            raise
        acls.check(r.acl, acls.WRITE, auth, path)
        if req.data is not None and len(req.data) > self.max_data:
            raise ZKError(Code.BAD_ARGUMENTS, path)
        version = next_version(r.version, req.version, path)
        n = t.nodes[path] = r.copy()
        n.version = version
        return [tx.T_SET_DATA, path, req.data, version]

    def _create(self, t: _Txn, session: int, auth: Sequence[Id], req: Create) -> list[Any]:
        mode, path = req.mode, req.path
        if mode not in CREATE_MODES:
            raise ZKError(Code.BAD_ARGUMENTS, path)
        if mode in TTL_MODES:
            if not self.ttl_enabled:
                raise ZKError(Code.UNIMPLEMENTED, path)
            if not 0 < req.ttl <= MAX_TTL:
                raise ZKError(Code.BAD_ARGUMENTS, path)
        elif req.ttl >= 0:
            raise ZKError(Code.BAD_ARGUMENTS, path)
        cut = path.rfind("/")
        if cut < 0 or "\0" in path:
            raise ZKError(Code.BAD_ARGUMENTS, path)
        ppath = path[:cut] or "/"
        fixed = acls.fixup(path, auth, req.acl)
        parent = t.rec(ppath)
        acls.check(parent.acl, acls.CREATE, auth, path)
        if mode in SEQUENTIAL_MODES:
            path = f"{path}{parent.cversion:010d}"
        paths.validate(path)
        if t.exists(path):
            raise ZKError(Code.NODE_EXISTS, path)
        if is_session_owner(parent.owner):
            raise ZKError(Code.NO_CHILDREN_FOR_EPHEMERALS, path)
        if req.data is not None and len(req.data) > self.max_data:
            raise ZKError(Code.BAD_ARGUMENTS, path)
        if mode == CONTAINER:
            owner = CONTAINER_OWNER
        elif mode in TTL_MODES:
            owner = TTL_OWNER_BASE | req.ttl
        elif mode in EPHEMERAL_MODES:
            owner = session
        else:
            owner = 0
        cversion = parent.cversion + 1
        if cversion > INT_MAX:  # a Java int: it wraps, and the tree then keeps the old one
            cversion = -(1 << 31)
        p = t.nodes[ppath] = parent.copy()
        p.children += 1
        p.cversion = cversion
        t.nodes[path] = Rec(True, 0, 0, 0, owner, 0, fixed)
        return [tx.T_CREATE, path, req.data, acls.to_wire(fixed), owner, cversion]

    def _parent_for_delete(self, path: str) -> str:
        # ZooKeeper's getParentPathAndValidate: no further path checks here
        cut = path.rfind("/")
        if cut < 0 or "\0" in path or path in SPECIAL_PATHS:
            raise ZKError(Code.BAD_ARGUMENTS, path)
        return path[:cut] or "/"

    def _unlink(self, t: _Txn, path: str, ppath: str, parent: Rec) -> None:
        p = t.nodes[ppath] = parent.copy()
        p.children -= 1
        t.nodes[path] = GONE

    def _delete(self, t: _Txn, auth: Sequence[Id], req: Delete) -> list[Any]:
        path = req.path
        ppath = self._parent_for_delete(path)
        parent = t.rec(ppath)
        acls.check(parent.acl, acls.DELETE, auth, path)
        r = t.rec(path)
        next_version(r.version, req.version, path)
        if r.children > 0:
            raise ZKError(Code.NOT_EMPTY, path)
        self._unlink(t, path, ppath, parent)
        return [tx.T_DELETE, path]

    def _delete_container(self, t: _Txn, path: str) -> list[Any]:
        ppath = self._parent_for_delete(path)
        r = t.rec(path)
        if r.children > 0:
            raise ZKError(Code.NOT_EMPTY, path)
        if r.owner != CONTAINER_OWNER and not ttl_of(r.owner):
            # stricter than ZooKeeper (which refuses only ephemerals): a node
            # re-created at a container's path since is left alone
            raise ZKError(Code.BAD_VERSION, path)
        self._unlink(t, path, ppath, t.rec(ppath))
        return [tx.T_DELETE_CONTAINER, path]

    def _close_session(self, t: _Txn, session: int) -> list[Any]:
        mine = set(self.tree.ephemerals.get(session, ()))
        for path, rec in self._nodes.items():
            if rec.exists and rec.owner == session:
                mine.add(path)
            else:
                mine.discard(path)
        doomed = sorted(mine)
        for path in doomed:
            ppath = paths.parent_of(path)
            self._unlink(t, path, ppath, t.rec(ppath))
        t.sessions[session] = False
        return [tx.T_CLOSE_SESSION, doomed]

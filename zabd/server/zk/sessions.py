"""ZooKeeper sessions on this server: connections, requests, watches. Socket-free.

A connection becomes a ZooKeeper connection with ``connect``: a new session
is proposed (``CreateSession``, its id and password chosen here, the password
told to its client only: the txn carries its digest) and the client is
answered once it is applied here; an existing one is re-attached on any
server, decided as ZooKeeper's learner has its leader revalidate it: the
leader confirms its commit point with a quorum, this replica applies up to
it, and only then does its session table say whether the session lives
(``reattach_timeout``); with no leader to ask the connection closes
unanswered, and "expired" is said only of a session whose close committed.
Requests complete in the order sent (the connection's slots): writes take
the one proposal path and are answered once applied here, with their
result; reads are answered from this replica after every earlier request of
the connection, so they see the session's own writes. Watches are this
server's (``zabd.zk.watches``), fired as each txn is applied here, before
the answer to any later request. ``zabd.server.zk.expiry`` keeps sessions
alive and ends them.

The bytes are a ``ZKWire``'s (zabd's msgpack, or ZooKeeper's jute on its port): only records here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from zabd.codec import client as schema
from zabd.kv.kvmachine import KVMachine
from zabd.server.client_session import ClientSession
from zabd.server.proposals import ZK_ATTACH, ZK_SYNC, ProposalPath, Request
from zabd.server.zk.conn import ZKConn, ZKWire, result_code, wire_write
from zabd.server.zk.reconfig import ZKReconfig
from zabd.zk import acl as acls
from zabd.zk.errors import Code
from zabd.zk.events import EventType, KeeperState
from zabd.zk.reads import serve
from zabd.zk.records import (
    WATCH_PERSISTENT,
    WATCH_PERSISTENT_RECURSIVE,
    AddAuth,
    AddWatch,
    CheckWatches,
    ChildrenResult,
    CloseSession,
    CreateSession,
    DataResult,
    ErrorResult,
    Exists,
    ExistsResult,
    GetChildren,
    GetData,
    MultiRead,
    MultiResult,
    OkResult,
    Ping,
    Read,
    Reconfig,
    RemoveWatches,
    Sasl,
    SaslResult,
    SessionResult,
    SetWatches,
    Sync,
    SyncResult,
    WhoAmI,
    WhoAmIResult,
    Write,
)
from zabd.zk.sasl import DigestMD5Server, SaslError
from zabd.zk.sessions import SessionIds, negotiate_timeout, password_digest, password_matches, reattach_timeout
from zabd.zk.tree import Applied
from zabd.zk.watches import WatchKind, WatchManager

# A member between two leaders holds a new connection this long at most (and
# a third of the session timeout the client asked for at most), waiting to
# serve again, before it closes it unanswered. ZooKeeper closes it at once;
# its elections take a second, zabd's tens of milliseconds, so a client that
# cycles through its servers (go-zookeeper gives up once each refused it)
# would find every one of them between leaders while one removed leader
# hands over, where ZooKeeper's client finds the removed leader still serving.
HOLD_MS = 1000
# A connect held again after a leader refused it is asked anew at most this
# often: the server may still follow the leader that just stepped down, and
# asking it every tick would turn each held connection into a flood of
# forwarded requests for as long as the hold lasts.
RETRY_MS = 50


class ZKSessions:
    def __init__(self, machine: KVMachine, proposals: ProposalPath, server_id: int, tick_ms: int,
                 super_digest: str | None, now_ms: Callable[[], int], log: Any,
                 serving: Callable[[], bool] = lambda: True, read_only_mode: bool = False,
                 sasl_users: Mapping[str, str] | None = None, sasl_super: str | None = None,
                 electing: Callable[[], bool] = lambda: False) -> None:
        self.machine = machine
        self.proposals = proposals
        self.tick_ms = tick_ms
        self.super_digest = super_digest
        # SASL DIGEST-MD5 on ZooKeeper's port: the users of zk_sasl_jaas (None: SASL is refused), and
        # zk_sasl_super_user, the one whose exchange also proves ``super`` (ZooKeeper's zookeeper.superUser)
        self.sasl_users = sasl_users
        self.sasl_super = sasl_super
        self.sasl_succeeded = 0
        self.sasl_failed = 0
        # a failed exchange's log line (the transport's, which does not log each of a flood)
        self.refused: Callable[[str, str, str], None] = lambda event, addr, reason: log.warning(
            event, addr=addr, reason=reason)
        self.now_ms = now_ms
        self.log = log
        self.ids = SessionIds(server_id, now_ms())
        self.conns: dict[ClientSession, ZKConn] = {}
        self.attached: dict[int, ZKConn] = {}  # session id -> the connection that holds it here
        self.touched: set[int] = set()  # sessions heard from since the last report to the leader
        # a re-attaching client's session, told to the leader at once (SessionKeeper sets it): by
        # default only with the next report
        self.touch_now: Callable[[int], None] = lambda sid: self.touched.add(sid)  # take_touched swaps the set
        self.watches = WatchManager()
        # ZooKeeper's readonlymode.enabled: while ``serving()`` is false (no
        # quorum), a client that asks for read-only gets a session of this
        # node alone that reads the local tree
        self.serving = serving
        self.read_only_mode = read_only_mode
        self.electing = electing  # a member without a leader now: it may serve again soon
        # connects held while electing: connection -> (until, not asked again before, the connect's arguments)
        self.waiting: dict[ClientSession, tuple[int, int, tuple[Any, ...]]] = {}
        self.reconfig = ZKReconfig(machine, proposals)
        self._sync_paths: dict[tuple[int, int], str] = {}
        # connects being decided (a CreateSession proposed, a re-attach asked of the leader): connection ->
        # (held until, the connect's arguments), so that one the leader change failed waits and is tried again
        self.deciding: dict[ClientSession, tuple[int, tuple[Any, ...]]] = {}
        machine.answer_only(self.attached)  # no Stat built for other sessions' setData
        # the reply paths of this layer's requests (zabd.server.proposals.Answers): writes are answered by ok/fail
        self.sync_answers = _Answers(self.synced, self.sync_failed)
        self.attach_answers = _Answers(self.reattached, self.reattach_failed)

    # ------------------------------------------------------------ connecting

    def connect(self, io: ClientSession, wire: ZKWire, rid: int, session: int, password: bytes,
                timeout_ms: int, last_zxid: int, addr: str, read_only: bool = False) -> bool:
        """A client's connect request; False: close the connection after the answer."""
        args = (wire, rid, session, password, timeout_ms, last_zxid, addr, read_only)
        return self._connect(io, args, self.now_ms() + min(HOLD_MS, timeout_ms // 3))

    def _connect(self, io: ClientSession, args: tuple[Any, ...], until: int) -> bool:
        """A connect, first or again; ``until``: how long it may be held without a leader."""
        wire, rid, session, password, timeout_ms, last_zxid, addr, read_only = args
        tree = self.machine.zk
        if io in self.conns:
            io.answer(wire.refused(rid, Code.BAD_ARGUMENTS, "this connection already has a session"))
            return False
        if last_zxid > tree.applied:
            # ZooKeeper's rule: a client never sees time go backwards
            io.answer(wire.refused(rid, Code.CONNECTION_LOSS, f"this server has seen zxid {tree.applied:#x}, the "
                                                              f"client {last_zxid:#x}: try another server"))
            return False
        conn = ZKConn(io, wire, addr)
        if not self.serving():
            if read_only and self.read_only_mode:
                return self._connect_read_only(conn, rid, session, password, timeout_ms)
            if self.electing() and self.now_ms() < until:
                self.waiting[io] = (until, 0, args)
                return True
            # as ZooKeeper: a server without a quorum takes no session (the
            # client goes on to another server, its requests still queued)
            io.answer(wire.refused(rid, Code.CONNECTION_LOSS, "this server has no quorum now: try another"))
            return False
        if session == 0:
            self.conns[io] = conn
            sid = self.ids.next()
            while sid in tree.sessions:
                sid = self.ids.next()
            conn.session = sid
            conn.timeout_ms = negotiate_timeout(timeout_ms, self.tick_ms)
            conn.password = os.urandom(16)
            create = CreateSession(sid, conn.timeout_ms, password_digest(conn.password))
            self.deciding[io] = (until, args)
            self.proposals.submit(io, rid, wire_write(sid, (), create), self)
            return True
        # Decided with the leader's knowledge, never this replica's alone: it
        # may not have applied the CreateSession yet, or the CloseSession a
        # partitioned leader never committed. Its commit point, confirmed by
        # a quorum, is applied here first (ZK_ATTACH); without a leader the
        # connection closes unanswered, as ZooKeeper's does.
        self.conns[io] = conn
        self.deciding[io] = (until, args)
        held = tree.sessions.get(session)
        if held is not None and password_matches(held.password_digest, password):
            # The client is back: ZooKeeper's leader touches a session as it revalidates it. Told
            # now, ahead of the sync on the same link, not with the next report half a tick after
            # the decision, so that a client back within its timeout is not expired meanwhile
            # (10,000 of them moving at once take seconds to decide). Only with its password:
            # knowing a session's id must not be enough to keep it alive.
            self.touch_now(session)
        self.proposals.sync(io, rid, ZK_ATTACH, self.attach_answers)
        return True

    def reattached(self, req: Request, zxid: int, result: object) -> bytes:
        """A re-attach, once this replica applied the leader's commit point as of its request."""
        io = req.session
        if io is None:
            return b""
        _, args = self.deciding.pop(io, (0, (None, 0, 0, b"")))
        session, password = args[2], args[3]
        conn = self.conns.get(io)
        if conn is None or not session:
            return b""
        timeout = reattach_timeout(self.machine.zk.sessions, session, password)
        if timeout is None:
            # its CloseSession committed (or there never was such a session): only now may it say so
            self.conns.pop(conn.io, None)
            conn.io.hang_up()
            return conn.wire.refused(req.rid, Code.SESSION_EXPIRED, f"session 0x{session & (2**64 - 1):x} has "
                                                                     "expired")
        self._attach(conn, session, timeout)
        return conn.wire.connected(req.rid, session, password, timeout)

    def reattach_failed(self, req: Request, code: str, message: str, leader: int = 0) -> bytes:
        """No leader confirmed a commit point: nothing is known, nothing is said."""
        io = req.session
        if io is None:
            return b""
        conn = self.conns.pop(io, None)
        if conn is None:
            self.deciding.pop(io, None)
            return b""
        if self._hold_again(conn.io):
            return b""
        conn.io.hang_up()
        return conn.wire.refused(req.rid, Code.CONNECTION_LOSS, f"{code}: {message}")

    def _hold_again(self, io: ClientSession) -> bool:
        """A connect whose leader went away before it was decided, nothing
        written: held again (a member finds its next leader in tens of ms) and
        tried anew, within the time the first hold had. False: give up."""
        until, args = self.deciding.pop(io, (0, ()))
        if not args or io.closed or self.now_ms() >= until or not (self.serving() or self.electing()):
            return False
        self.waiting[io] = (until, self.now_ms() + RETRY_MS, args)
        return True

    def serve_waiting(self) -> None:
        """Connects held while electing: taken up once this server serves,
        closed unanswered once their time is up or it can no longer serve."""
        if not self.waiting:
            return
        serving, now = self.serving(), self.now_ms()
        electing = not serving and self.electing()
        for io, (until, not_before, args) in list(self.waiting.items()):
            if (electing or (serving and now < not_before)) and now < until and not io.closed:
                continue
            del self.waiting[io]
            wire, rid = args[0], args[1]
            if io.closed:
                continue
            if not serving:
                io.answer(wire.refused(rid, Code.CONNECTION_LOSS, "this server has no quorum now: try another"))
                io.hang_up()
            elif not self._connect(io, args, until):
                io.hang_up()

    def _connect_read_only(self, conn: ZKConn, rid: int, session: int, password: bytes, timeout_ms: int) -> bool:
        known = self.machine.zk.sessions.get(session) if session else None
        if session and (known is None or not password_matches(known.password_digest, password)):
            conn.io.answer(conn.wire.refused(rid, Code.SESSION_EXPIRED, f"session 0x{session & (2**64 - 1):x} has "
                                                                        "expired"))
            return False
        conn.read_only = True
        self.conns[conn.io] = conn
        if known is not None:  # a session of the tree, read here until a quorum is back
            self._attach(conn, session, known.timeout_ms)
        else:
            password = os.urandom(16)
            self._attach(conn, self.ids.next(), negotiate_timeout(timeout_ms, self.tick_ms))
        conn.io.answer(conn.wire.connected(rid, conn.session, password, conn.timeout_ms, read_only=True))
        return True

    def stopped_serving(self) -> int:
        """The node lost its quorum: its read-write connections close, as a
        ZooKeeper server's do, so that clients see the disconnection (kazoo's
        SUSPENDED) and move to a server that serves."""
        ended = [c for c in self.conns.values() if not c.read_only]
        for conn in ended:
            self._hang_up(conn)
        return len(ended)

    def end_read_only(self) -> int:
        """The node serves again: read-only connections close, so that their
        clients reconnect for a read-write session (ZooKeeper closes them too)."""
        ended = [c for c in self.conns.values() if c.read_only]
        for conn in ended:
            self._hang_up(conn)
        return len(ended)

    def _attach(self, conn: ZKConn, session: int, timeout_ms: int) -> None:
        old = self.attached.get(session)
        if old is not None and old is not conn:
            # the client moved to a new connection: the old one is done
            self._hang_up(old)
        conn.session = session
        conn.timeout_ms = timeout_ms
        self.attached[session] = conn
        self.touched.add(session)

    def _hang_up(self, conn: ZKConn) -> None:
        self.watches.drop(conn)
        self.conns.pop(conn.io, None)
        if self.attached.get(conn.session) is conn:
            del self.attached[conn.session]
        conn.io.hang_up()

    def restored(self) -> None:
        """A snapshot replaced the tree: this server's watches may have
        missed changes. Every client reconnects and re-registers them with
        the last zxid it saw, which fires what it missed (as a ZooKeeper
        follower that resyncs drops its clients)."""
        for conn in list(self.conns.values()):
            self._hang_up(conn)

    def closed(self, io: ClientSession) -> None:
        """The connection is gone; its session lives on until it expires."""
        self.waiting.pop(io, None)
        self.deciding.pop(io, None)
        conn = self.conns.pop(io, None)
        if conn is not None:
            self.watches.drop(conn)
            if self.attached.get(conn.session) is conn:
                del self.attached[conn.session]

    # -------------------------------------------------------------- requests

    def reads_more(self, io: ClientSession) -> bool:
        """False once the connection's session is closing: as ZooKeeper's, it answers nothing more."""
        conn = self.conns.get(io)
        return conn is None or not conn.closing

    def request(self, io: ClientSession, xid: int, req: Write | Read | Any) -> bool:
        """One request of a connected client; False: close after the answer."""
        conn = self.conns.get(io)
        if conn is None or conn.session not in self.attached:
            msg = "connect first (zk_connect)" if conn is None else "the session is not open yet"
            io.answer(schema.error_frame(xid, schema.BAD_REQUEST, msg))
            return False
        self.touched.add(conn.session)
        if conn.read_only and not self._allowed_read_only(conn, xid, req):
            return True
        if not conn.read_only and conn.session not in self.machine.zk.sessions:
            io.answer(conn.wire.reply(xid, self.machine.zk.applied, Code.SESSION_EXPIRED, None))
            self._hang_up(conn)
            return True
        if isinstance(req, Read):
            io.open_slot(lambda: self._read(conn, xid, req))
        elif isinstance(req, MultiRead):
            io.open_slot(lambda: self._multi_read(conn, xid, req))
        elif isinstance(req, WhoAmI):
            ids = [(i.scheme, i.id.split(":", 1)[0]) for i in conn.auth]  # a digest's user, an ip
            io.open_slot(lambda: conn.wire.reply(xid, self.machine.zk.applied, Code.OK, WhoAmIResult(ids)))
        elif isinstance(req, Reconfig):
            self.reconfig.request(conn, io, xid, req)
        elif isinstance(req, CloseSession):
            conn.closing = True
            self.proposals.submit(io, xid, wire_write(conn.session, conn.auth, req), self)
        elif isinstance(req, Write):
            if isinstance(req, CreateSession):
                io.answer(conn.wire.reply(xid, 0, Code.BAD_ARGUMENTS, None))
            else:
                self.proposals.submit(io, xid, wire_write(conn.session, conn.auth, req), self)
        elif isinstance(req, Sync):
            self._sync_paths[(id(io), xid)] = req.path
            self.proposals.sync(io, xid, ZK_SYNC, self.sync_answers)
        elif isinstance(req, Ping):
            io.open_slot(lambda: conn.wire.reply(xid, self.machine.zk.applied, Code.OK, OkResult()))
        elif isinstance(req, AddAuth):
            return self._add_auth(conn, xid, req)
        elif isinstance(req, Sasl):
            return self._sasl(conn, xid, req)
        elif isinstance(req, (AddWatch, SetWatches, RemoveWatches, CheckWatches)):
            io.open_slot(lambda: self._watch_op(conn, xid, req))
        else:
            io.answer(conn.wire.reply(xid, 0, Code.UNIMPLEMENTED, None))
        return True

    def _allowed_read_only(self, conn: ZKConn, xid: int, req: Any) -> bool:
        """Whether a read-only session may do ``req``; if not, it is answered here."""
        if isinstance(req, (Read, MultiRead, WhoAmI, Ping, AddWatch, SetWatches, RemoveWatches, CheckWatches, AddAuth,
                            Sasl)):
            return True
        if isinstance(req, CloseSession) and conn.session not in self.machine.zk.sessions:
            # a session of this node alone: nothing to replicate
            conn.io.answer(conn.wire.reply(xid, self.machine.zk.applied, Code.OK, SessionResult(conn.session)))
            self._hang_up(conn)
            return False
        conn.io.answer(conn.wire.reply(xid, self.machine.zk.applied, Code.NOT_READ_ONLY, None))
        return False

    def _read(self, conn: ZKConn, xid: int, req: Read) -> bytes:
        tree = self.machine.zk
        result = serve(tree, req, conn.auth, conn.session)
        watch = getattr(req, "watch", False) and not conn.io.hangup  # a connection that is ending sets none
        if watch:
            if isinstance(req, Exists) and isinstance(result, ExistsResult):
                kind = WatchKind.DATA if result.stat is not None else WatchKind.EXIST
                self.watches.add(conn, req.path, kind)
            elif isinstance(req, GetData) and not isinstance(result, ErrorResult):
                self.watches.add(conn, req.path, WatchKind.DATA)
            elif isinstance(req, GetChildren) and not isinstance(result, ErrorResult):
                self.watches.add(conn, req.path, WatchKind.CHILD)
        body = None if isinstance(result, ErrorResult) else result
        return conn.wire.reply(xid, tree.applied, result_code(result), body)

    def _multi_read(self, conn: ZKConn, xid: int, req: MultiRead) -> bytes:
        # each op on its own, no watches (ZooKeeper's multiRead); one failing op fails nothing else
        tree = self.machine.zk
        results: list[DataResult | ChildrenResult | ErrorResult] = []
        for op in req.ops:
            r = serve(tree, op, conn.auth, conn.session)
            results.append(r if isinstance(r, (DataResult, ChildrenResult, ErrorResult))
                           else ErrorResult(Code.MARSHALLING_ERROR))
        return conn.wire.reply(xid, tree.applied, Code.OK, MultiResult(tuple(results)))

    def _add_auth(self, conn: ZKConn, xid: int, req: AddAuth) -> bool:
        if req.scheme != "digest":
            conn.io.answer(conn.wire.reply(xid, 0, Code.AUTH_FAILED, None))
            return False
        try:
            ids = acls.digest_auth(req.auth.decode("utf-8", "replace"), self.super_digest)
        except Exception:
            conn.io.answer(conn.wire.reply(xid, 0, Code.AUTH_FAILED, None))
            return False
        for i in ids:
            if i not in conn.auth:
                conn.auth.append(i)
        conn.io.answer(conn.wire.reply(xid, 0, Code.OK, OkResult()))
        return True

    def _sasl(self, conn: ZKConn, xid: int, req: Sasl) -> bool:
        """One token of the connection's DIGEST-MD5 exchange (``zabd.zk.sasl``),
        answered at once, as ZooKeeper's processSasl does, in the
        connection's order. A failure is AUTH_FAILED and the connection
        closes; the session lives on (ZooKeeper closes the connection only)."""
        if req.token is None:
            # ZooKeeper's processSasl throws on a null token: the connection closes unanswered
            self.refused("ZooKeeper SASL token rejected; closing the connection", conn.addr, "a null token")
            self.sasl_failed += 1
            return False
        users = self.sasl_users
        if users is None:
            # ZooKeeper without a JAAS Server section answers a null token forever, and every
            # client then fails on its own (kazoo after a loop of empty tokens): the same end, at once
            reason = "SASL is not configured (zk_sasl_jaas)"
        else:
            if conn.sasl is None:
                conn.sasl = DigestMD5Server(users)
            try:
                token = conn.sasl.evaluate(req.token)
            except SaslError as exc:
                reason = str(exc)
            else:
                if conn.sasl.complete:
                    self._sasl_authenticated(conn, conn.sasl.user)
                conn.io.answer(conn.wire.reply(xid, 0, Code.OK, SaslResult(token)))
                return True
        self.sasl_failed += 1
        self.refused("ZooKeeper SASL authentication failed; closing the connection", conn.addr, reason)
        conn.io.answer(conn.wire.reply(xid, 0, Code.AUTH_FAILED, SaslResult(None)))
        return False

    def _sasl_authenticated(self, conn: ZKConn, user: str) -> None:
        self.sasl_succeeded += 1
        ids = [acls.Id("sasl", user)]
        if self.sasl_super is not None and user == self.sasl_super:
            ids.append(acls.SUPER)
        for i in ids:
            if i not in conn.auth:
                conn.auth.append(i)
        self.log.info("ZooKeeper SASL authentication succeeded", addr=conn.addr,
                      session=f"0x{conn.session & (2**64 - 1):x}", user=user, superuser=acls.SUPER in ids)

    def _watch_op(self, conn: ZKConn, xid: int, req: AddWatch | SetWatches | RemoveWatches | CheckWatches) -> bytes:
        tree = self.machine.zk
        err = Code.OK
        if isinstance(req, AddWatch):
            if req.mode == WATCH_PERSISTENT:
                self.watches.add(conn, req.path, WatchKind.PERSISTENT)
            elif req.mode == WATCH_PERSISTENT_RECURSIVE:
                self.watches.add(conn, req.path, WatchKind.PERSISTENT_RECURSIVE)
            else:
                err = Code.BAD_ARGUMENTS
        elif isinstance(req, SetWatches):
            fired = self.watches.set_watches(conn, req.relative_zxid, req.data, req.exist, req.child,
                                             req.persistent, req.persistent_recursive, tree.stat)
            self._notify(fired, tree.applied)
        elif isinstance(req, RemoveWatches):
            # the client library raises the watch-removed events itself (ZooKeeper's server sends none)
            if not self.watches.remove(conn, req.path, req.watcher_type):
                err = Code.NO_WATCHER
        elif not self.watches.contains(conn, req.path, req.watcher_type):
            err = Code.NO_WATCHER
        if conn.io.hangup:  # the connection is ending (hung up before this ran): nothing would drop its watch
            self.watches.drop(conn)
        return conn.wire.reply(xid, tree.applied, err, OkResult() if err == Code.OK else None)

    def _notify(self, fired: list[tuple[Any, EventType, str]], zxid: int) -> None:
        for owner, kind, path in fired:
            conn: ZKConn = owner
            if not conn.io.closed:
                conn.io.push(conn.wire.event(kind, KeeperState.SYNC_CONNECTED, path, zxid))

    # ------------------------------------------------- applied txns, answers

    def applied(self, zxid: int, applied: Applied) -> None:
        """Every ZooKeeper txn this replica applies, in order."""
        if applied.triggers:
            self._notify(self.watches.trigger(applied.triggers, _ids), zxid)
        result = applied.result
        if isinstance(result, SessionResult):
            sid = result.session_id
            if sid in self.machine.zk.sessions:
                return
            conn = self.attached.get(sid)
            if conn is not None and not conn.closing:
                # expired (or closed elsewhere): tell the client, then hang up
                conn.io.push(conn.wire.event(EventType.NONE, KeeperState.EXPIRED, "", zxid))
                self._hang_up(conn)

    def ok(self, req: Request, zxid: int, result: object) -> bytes:
        """The answer to a ZooKeeper write, once applied here: ``result`` is what applying its txn returned."""
        io = req.session
        conn = None if io is None else self.conns.get(io)
        if conn is None:
            return b""
        wire_ = conn.wire
        if not isinstance(result, Applied) or result.result is None:
            # its txn was applied here before it was known to be this write's (a snapshot install):
            # the client cannot be told what it did; it learns by reconnecting
            return self.fail(req, schema.LEADER_LOST, "committed, result unknown here")
        reply = result.result
        if isinstance(reply, SessionResult) and conn.session == reply.session_id and not conn.closing:
            self.deciding.pop(conn.io, None)
            session = self.machine.zk.sessions.get(reply.session_id)
            if session is None:
                return wire_.refused(req.rid, Code.SESSION_EXPIRED, "the session ended as it was created")
            self._attach(conn, reply.session_id, session.timeout_ms)
            return wire_.connected(req.rid, reply.session_id, conn.password, session.timeout_ms)
        if isinstance(reply, SessionResult):  # this connection's close
            self._hang_up(conn)
            return wire_.reply(req.rid, zxid, Code.OK, OkResult())
        return wire_.reply(req.rid, zxid, result_code(reply), None if isinstance(reply, ErrorResult) else reply)

    def fail(self, req: Request, code: str, message: str, leader: int = 0) -> bytes:
        io = req.session
        conn = None if io is None else self.conns.get(io)
        if conn is None:
            return b""
        if conn.session not in self.attached:  # a connect whose CreateSession failed
            self.conns.pop(conn.io, None)
            if code == schema.NO_LEADER and self._hold_again(conn.io):  # certainly not proposed: ask again
                return b""
            self.deciding.pop(conn.io, None)
            conn.io.hang_up()
            return conn.wire.refused(req.rid, Code.CONNECTION_LOSS, f"{code}: {message}")
        # the write's fate is unknown (no leader, a leader change): ZooKeeper
        # never answers ConnectionLoss, its client raises it when the
        # connection drops, and re-sends nothing
        self._hang_up(conn)
        return b""

    def synced(self, req: Request, zxid: int, result: object) -> bytes:
        conn = None if req.session is None else self.conns.get(req.session)
        path = self._sync_paths.pop((id(req.session), req.rid), "/")
        if conn is None:
            return b""
        return conn.wire.reply(req.rid, zxid, Code.OK, SyncResult(path))

    def sync_failed(self, req: Request, code: str, message: str, leader: int = 0) -> bytes:
        self._sync_paths.pop((id(req.session), req.rid), None)
        return self.fail(req, code, message)

    def take_touched(self) -> set[int]:
        touched, self.touched = self.touched, set()
        return touched


def _ids(conn: ZKConn) -> list[acls.Id]:
    """A watch owner's ids: an event reaches it only with READ on the changed node (ZooKeeper 3.8.4+)."""
    return conn.auth


class _Answers:
    """One kind of request's reply path (``zabd.server.proposals.Answers``), by two of the session layer's methods."""

    def __init__(self, ok: Callable[[Request, int, object], bytes],
                 fail: Callable[[Request, str, str, int], bytes]) -> None:
        self.on_ok = ok
        self.on_fail = fail

    def ok(self, req: Request, zxid: int, result: object) -> bytes:
        return self.on_ok(req, zxid, result)

    def fail(self, req: Request, code: str, message: str, leader: int = 0) -> bytes:
        return self.on_fail(req, code, message, leader)

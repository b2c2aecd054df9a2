"""What a client may ask, and where each request goes. Socket-free.

Requests are validated with the pydantic schema (``zabd.codec.client``),
except ``propose``, whose hot-path check accepts exactly what the schema
accepts. Writes take the proposal path; reads (``status``, ``read``,
``get``) are answered from this replica in their turn, after every earlier
request of the connection (a read pipelined after a write sees it).

What a client may ask is its role's (``zabd.server.auth``): the log read and
watch hand ZooKeeper txns to ``admin`` only (a ZooKeeper txn may hold data
that only some sessions may read, through ZooKeeper's ACLs), and with
authentication on only ``admin`` changes the membership.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from zabd.codec import client as schema
from zabd.codec.framing import frame
from zabd.kv.kvmachine import KVMachine
from zabd.machine import StateMachine
from zabd.protocol.node import LEADING
from zabd.server.applier import Applier, Watches, visible
from zabd.server.auth import Authenticator
from zabd.server.client_session import ClientSession
from zabd.server.proposals import ProposalPath
from zabd.server.reconfig import ReconfigError, node_ids, requested
from zabd.server.zk.sessions import ZKSessions
from zabd.storage.base import PurgedError
from zabd.tokens import ADMIN, RO, RW
from zabd.zk.msgpack_wire import MsgpackWire, decode_request


class ClientService:
    def __init__(
        self,
        proposals: ProposalPath,
        applier: Applier,
        watches: Watches,
        machine: StateMachine,
        status: Callable[[], dict[str, Any]],
        log: Any,
        auth: Authenticator | None = None,
        zk: ZKSessions | None = None,
    ) -> None:
        self.auth = auth or Authenticator(None)
        self.proposals = proposals
        self.applier = applier
        self.watches = watches
        self.kv = machine if isinstance(machine, KVMachine) else None
        self.status = status
        self.log = log
        self.zk = zk
        self._zk_wire = MsgpackWire()
        self._addr = ""
        self._routes: dict[type, Callable[[ClientSession, Any], None]] = {
            schema.ProposeRequest: lambda s, r: proposals.submit(s, r.id, r.payload),
            schema.PutRequest: lambda s, r: proposals.submit(s, r.id, ("put", r.key, r.value, 0)),
            schema.CasRequest: lambda s, r: proposals.submit(s, r.id, ("cas", r.key, r.value, r.version)),
            schema.DeleteRequest: lambda s, r: proposals.submit(s, r.id, ("delete", r.key, b"", r.version)),
            schema.SyncRequest: lambda s, r: proposals.sync(s, r.id),
            schema.StatusRequest: self._status,
            schema.ReadRequest: self._read,
            schema.GetRequest: self._get,
            schema.WatchRequest: self._watch,
            schema.AuthRequest: self._authenticate,
            schema.ZKConnectRequest: self._zk_connect,
            schema.ZKRequest: self._zk_request,
            schema.ReconfigRequest: self._reconfig,
        }

    def handle(self, session: ClientSession, bodies: list[Any], addr: str) -> bool:
        """Serve the request bodies read from ``session``; False when the
        connection must be closed once its answers are out (a bad request)."""
        fast = schema.fast_propose
        submit = self.proposals.submit
        for body in bodies:
            if session.closed:
                return True
            if session.hangup:  # its ZooKeeper session ended (closeSession, expiry): it reads no more
                return False
            if self.zk is not None and not self.zk.reads_more(session):  # a closeSession's answer is the last
                return True
            got = fast(body) if session.role == RW else None
            if got is not None and not session.watching:
                submit(session, got[0], got[1])
                continue
            try:
                req = schema.REQUEST_ADAPTER.validate_python(body)
            except ValidationError as exc:
                err = exc.errors(include_url=False)[0]
                where = ".".join(str(p) for p in err["loc"]) or "request"
                text = f"{where}: {err['msg']}"
                rid = body.get("id", 0) if isinstance(body, dict) else 0
                self.log.error("bad client request; closing the connection", addr=addr, error=text)
                session.answer(schema.error_frame(rid if isinstance(rid, int) else 0, schema.BAD_REQUEST, text))
                return False
            if session.role is None and not isinstance(req, schema.AuthRequest):
                self.log.warning("unauthenticated client request refused; closing the connection", addr=addr)
                session.answer(schema.error_frame(req.id, schema.UNAUTHORIZED, "authenticate first (a token)"))
                return False
            if session.role == RO and not isinstance(req, schema.READ_ONLY_TYPES):
                session.answer(schema.error_frame(req.id, schema.FORBIDDEN, "this token may only read"))
                continue
            if type(req) is schema.ReconfigRequest and self.auth.required and session.role != ADMIN:
                session.answer(schema.error_frame(req.id, schema.FORBIDDEN, "membership changes need the admin role"))
                continue
            if session.watching:
                session.answer(schema.error_frame(req.id, schema.BAD_REQUEST, "this connection is a watch stream"))
                continue
            self._addr = addr
            self._routes[type(req)](session, req)
            if session.role is None:  # a failed authentication
                self.log.warning("client authentication failed; closing the connection", addr=addr)
                return False
        return True

    def _zk_connect(self, session: ClientSession, req: schema.ZKConnectRequest) -> None:
        if self.zk is None:
            session.answer(schema.error_frame(req.id, schema.UNSUPPORTED, "this server runs without a state machine"))
            return
        if not self.zk.connect(session, self._zk_wire, req.id, req.session, req.password, req.timeout,
                               req.last_zxid, self._addr):
            session.hang_up()

    def _zk_request(self, session: ClientSession, req: schema.ZKRequest) -> None:
        if self.zk is None:
            session.answer(schema.error_frame(req.id, schema.UNSUPPORTED, "this server runs without a state machine"))
            return
        try:
            op = decode_request(req.req)
        except ValueError as exc:
            self.log.error("bad ZooKeeper request; closing the connection", addr=self._addr, error=str(exc))
            session.answer(schema.error_frame(req.id, schema.BAD_REQUEST, f"req: {exc}"))
            session.hang_up()
            return
        if not self.zk.request(session, req.id, op):
            session.hang_up()

    def _reconfig(self, session: ClientSession, req: schema.ReconfigRequest) -> None:
        node = self.proposals.node
        if node.role != LEADING:  # zabd's client moves on to the leader (a forwarded removal of the
            # leader would be answered "outcome unknown" by a follower that elects before it hears back)
            session.answer(schema.error_frame(req.id, schema.NO_LEADER, "membership changes are made at the leader",
                                              node.leader))  # fmt: skip
            return
        try:
            new = requested(node.membership, node_ids(req.add), node_ids(req.observe), req.remove)
        except ReconfigError as exc:
            session.answer(schema.error_frame(req.id, schema.BAD_REQUEST, str(exc)))
            return
        self.proposals.submit_membership(session, req.id, new)

    def _authenticate(self, session: ClientSession, req: schema.AuthRequest) -> None:
        role = self.auth.role_of(req.token) if self.auth.required else RW
        session.role = role
        session.frames_upto(0)
        if role is None:
            session.answer(schema.error_frame(req.id, schema.UNAUTHORIZED, "unknown token"))
        else:
            session.answer(frame({"v": 1, "id": req.id, "ok": True, "role": role}))

    def _status(self, session: ClientSession, req: schema.StatusRequest) -> None:
        session.open_slot(lambda: frame({"v": 1, "id": req.id, "ok": True, "status": self.status()}))

    def _read(self, session: ClientSession, req: schema.ReadRequest) -> None:
        def answer() -> bytes:
            try:
                txns = self.applier.read(req.from_zxid, req.limit)
            except PurgedError as exc:
                return schema.error_frame(req.id, schema.PURGED, str(exc))
            # "next": where the following page starts, past what this role may not see
            after = txns[-1][0] + 1 if txns else req.from_zxid
            return frame({"v": 1, "id": req.id, "ok": True, "txns": visible(txns, session.role), "next": after,
                          "last_committed": self.applier.applied})

        session.open_slot(answer)

    def _get(self, session: ClientSession, req: schema.GetRequest) -> None:
        if self.kv is None:
            msg = "this server runs without a KV state machine"
            session.answer(schema.error_frame(req.id, schema.UNSUPPORTED, msg))
            return

        def answer() -> bytes:
            assert self.kv is not None
            res = self.kv.store.get(req.key)
            body = {"v": 1, "id": req.id, "ok": True, "value": res.value, "version": res.version}
            body["zxid"] = self.applier.applied
            return frame(body)

        session.open_slot(answer)

    def _watch(self, session: ClientSession, req: schema.WatchRequest) -> None:
        if session.outstanding:
            msg = "watch on a connection with requests in flight"
            session.answer(schema.error_frame(req.id, schema.BAD_REQUEST, msg))
            return
        self.watches.start(session, req.id, req.from_zxid)

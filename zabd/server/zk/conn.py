"""One ZooKeeper client connection as the session layer sees it, and its wire.

``ZKConn`` is a connection's state (its session, the ids it proved, whether
it is read-only); ``ZKWire`` the encoding of what the session layer says to
it: zabd's msgpack frames (``zabd.zk.msgpack_wire.MsgpackWire``) or
ZooKeeper's jute (``zabd.server.zk.port.JuteWire``).
"""

from __future__ import annotations

from typing import Any, Protocol

from zabd.server import peer_wire as wire
from zabd.server.client_session import ClientSession
from zabd.zk import acl as acls
from zabd.zk.errors import Code
from zabd.zk.events import EventType, KeeperState
from zabd.zk.records import ErrorResult, MultiResult, Write
from zabd.zk.sasl import DigestMD5Server

Result = Any  # a zabd.zk.msgpack_wire.Result


class ZKWire(Protocol):
    """A connection's encoding of what the session layer says."""

    def connected(self, rid: int, session: int, password: bytes, timeout_ms: int, read_only: bool = False) -> bytes:
        ...

    def refused(self, rid: int, code: Code, message: str) -> bytes: ...

    def reply(self, xid: int, zxid: int, err: Code, result: Result | None) -> bytes: ...

    def event(self, kind: EventType, state: KeeperState, path: str, zxid: int) -> bytes: ...


class ZKConn:
    """One client connection that speaks ZooKeeper."""

    __slots__ = ("io", "wire", "session", "password", "timeout_ms", "auth", "addr", "closing", "read_only", "sasl")

    def __init__(self, io: ClientSession, wire: ZKWire, addr: str) -> None:
        self.io = io
        self.wire = wire
        self.session = 0  # 0 until the session is created or re-attached
        self.password = b""  # a session this connection creates: told to its client, never replicated
        self.timeout_ms = 0
        host = addr.rsplit(":", 1)[0].strip("[]")
        self.auth: list[acls.Id] = [acls.Id("ip", host)]
        self.addr = addr
        self.closing = False  # a closeSession is under way
        self.read_only = False  # served while this node has no quorum: reads only
        self.sasl: DigestMD5Server | None = None  # its SASL exchange, from its first token on


def result_code(result: Result) -> Code:
    """The error code a reply header carries for ``result``."""
    if isinstance(result, ErrorResult):
        return result.code
    if isinstance(result, MultiResult) and result.failed:
        return next(r.code for r in result.results if isinstance(r, ErrorResult) and r.code != Code.OK)
    return Code.OK


def wire_write(session: int, auth: tuple[acls.Id, ...] | list[acls.Id], req: Write) -> wire.ZKWrite:
    return wire.ZKWrite(session, tuple((a.scheme, a.id) for a in auth), req)  # encoded if forwarded

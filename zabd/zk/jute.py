"""ZooKeeper's client wire protocol (jute), socket-free, so kazoo, zkCli and
the Java client talk to zabd unchanged.

Jute is big-endian: an int is 4 bytes, a long 8, a boolean 1 (any non-zero
byte reads true, as Java's ``readBoolean``), a buffer or ustring an int
length (-1: null) then the bytes (UTF-8 for a ustring), a vector an int count
(-1: null) then its items, and a record its fields in order. On TCP every
message is a frame: a 4-byte big-endian length, then the body.

A client's first frame is a ``ConnectRequest`` (``decode_connect``); every
later one a ``RequestHeader{xid, type}`` and the record of that opcode
(``decode_request``). Answers are ``ReplyHeader{xid, zxid, err}`` and, when
err is 0, the response record of the request's opcode (``encode_reply``);
watch events are a reply of xid -1 with a ``WatcherEvent`` (``encode_event``).

Requests decode to the records of ``zabd.zk.records``, the same values
the msgpack codec (``zk_msgpack``) produces, so the session layer serves both
ports alike. Where the two differ, ZooKeeper's rules are followed:

- a null ustring where a path or name is expected reads as ``""`` (kazoo
  sends an empty string as null; the session layer then refuses the path as
  ZooKeeper does), a null buffer as ``b""`` and a null vector as empty;
- invalid UTF-8 reads with U+FFFD in place, as Java's ``new String(b, UTF_8)``;
- bytes after a complete record are ignored, as ZooKeeper ignores them;
- zxids (a connect's lastZxidSeen, setWatches' relativeZxid, a reply's
  zxid) read as zabd's unsigned 64-bit values; every long is written from
  either a signed or an unsigned 64-bit value (wrapped to Java's signed);
- a length or count below -1, or larger than what is left of the body, is
  malformed (``JuteError``), as is any truncated field.

Decoding raises ``JuteError`` (a ValueError) and nothing else, whatever the
bytes. Encoding takes trusted values; a value a field cannot hold raises
``JuteError`` too, and a result of the wrong kind for the opcode TypeError.
The client-side halves (``encode_connect``, ``encode_request``,
``decode_reply``, ...) exist for tests and load generators.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from zabd.zk.acl import ACL, Id
from zabd.zk.errors import Code
from zabd.zk.records import (
    CONTAINER,
    TTL_MODES,
    ACLResult,
    AddAuth,
    AddWatch,
    Check,
    CheckResult,
    CheckWatches,
    ChildrenResult,
    CloseSession,
    CountResult,
    Create,
    CreateResult,
    DataResult,
    Delete,
    DeleteResult,
    ErrorResult,
    Exists,
    ExistsResult,
    GetACL,
    GetAllChildrenNumber,
    GetChildren,
    GetData,
    GetEphemerals,
    Multi,
    MultiRead,
    MultiResult,
    OkResult,
    PathsResult,
    Ping,
    Reconfig,
    RemoveWatches,
    Sasl,
    SaslResult,
    SetACL,
    SetData,
    SetWatches,
    Stat,
    StatResult,
    Sync,
    SyncResult,
    WhoAmI,
    WhoAmIResult,
)

# ------------------------------------------------------------------ opcodes
# ZooDefs.OpCode, ZooKeeper's numbers

OP_NOTIFICATION = 0
OP_CREATE = 1
OP_DELETE = 2
OP_EXISTS = 3
OP_GET_DATA = 4
OP_SET_DATA = 5
OP_GET_ACL = 6
OP_SET_ACL = 7
OP_GET_CHILDREN = 8
OP_SYNC = 9
OP_PING = 11
OP_GET_CHILDREN2 = 12
OP_CHECK = 13
OP_MULTI = 14
OP_CREATE2 = 15
OP_RECONFIG = 16
OP_CHECK_WATCHES = 17
OP_REMOVE_WATCHES = 18
OP_CREATE_CONTAINER = 19
OP_DELETE_CONTAINER = 20
OP_CREATE_TTL = 21
OP_MULTI_READ = 22
OP_AUTH = 100
OP_SET_WATCHES = 101
OP_SASL = 102
OP_GET_EPHEMERALS = 103
OP_GET_ALL_CHILDREN_NUMBER = 104
OP_SET_WATCHES2 = 105
OP_ADD_WATCH = 106
OP_WHO_AM_I = 107
OP_CREATE_SESSION = -10
OP_CLOSE_SESSION = -11
OP_ERROR = -1

# the xids ZooKeeper reserves (ClientCnxn)
XID_NOTIFICATION = -1
XID_PING = -2
XID_AUTH = -4
XID_SET_WATCHES = -8

# ZooKeeper's NoNode, for an ``exists`` of a missing node (zabd.zk.errors.Code.NO_NODE)
_NO_NODE = -101

# A Stat for results whose response carries none (CreateResponse: the path only).
NO_STAT = Stat(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)

_CREATE_OPS = frozenset({OP_CREATE, OP_CREATE2, OP_CREATE_CONTAINER, OP_CREATE_TTL})
_MULTI_WRITE_OPS = frozenset({*_CREATE_OPS, OP_DELETE, OP_SET_DATA, OP_CHECK})
_MULTI_READ_OPS = frozenset({OP_GET_DATA, OP_GET_CHILDREN})


class JuteError(ValueError):
    """Bytes that are not what the protocol allows (or a value a field cannot hold)."""


@dataclass(frozen=True, slots=True)
class Unknown:
    """A well-formed request of an opcode this codec does not serve
    (deleteContainer, createSession, ...): answer it ZooKeeper's Unimplemented."""

    op: int


@dataclass(frozen=True, slots=True)
class ConnectRequest:
    protocol_version: int
    last_zxid_seen: int
    timeout_ms: int
    session_id: int
    password: bytes
    read_only: bool
    # True when the client sent no readOnly byte (ZooKeeper 3.3 and older):
    # its ConnectResponse must then omit the byte too (``legacy=True``)
    legacy: bool = False


# tuple.__new__ directly: a NamedTuple's own __new__ is Python (a frame per
# call, even from compiled code); the hot requests are built with it
_tnew: Final = tuple.__new__


class Request(NamedTuple):  # a tuple: built for every request read, a frozen dataclass costs twice as much
    xid: int
    op: int
    record: Any  # (not object: mypyc cannot build a NamedTuple field typed object)
    # a multi's per-op opcodes as ZooKeeper reckons them (createTTL for a TTL
    # mode, createContainer for CONTAINER, else the op's header type): pass
    # them to ``encode_reply`` so create results carry a Stat exactly when
    # ZooKeeper's do
    multi_ops: tuple[int, ...] = ()


# ------------------------------------------------------------------- frames

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_REPLY_HEADER = struct.Struct(">iqi")
_MULTI_HEADER = struct.Struct(">iBi")
_STAT = struct.Struct(">qqqqiiiqiiq")
# a whole framed setData answer (length, ReplyHeader, Stat): the hottest write's reply in one pack
_STAT_REPLY = struct.Struct(">iiqiqqqqiiiqiiq")

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_U64 = (1 << 64) - 1


def frame(body: bytes) -> bytes:
    """``body`` behind its 4-byte big-endian length."""
    return _I32.pack(len(body)) + body


class FrameReader:
    """Splits a byte stream into frame bodies, many per read, h11-style.

    JuteError on a negative length or one above ``max_frame`` (checked from
    the header, before the body is buffered); after that the stream is lost."""

    __slots__ = ("_buf", "max_frame")

    def __init__(self, max_frame: int) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame

    @property
    def buffered(self) -> int:
        """Bytes held of a frame not yet complete."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        out: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (n,) = _I32.unpack_from(buf, pos)
            if n < 0:
                raise JuteError(f"negative frame length {n}")
            if n > self.max_frame:
                raise JuteError(f"frame of {n} bytes exceeds the {self.max_frame}-byte limit")
            if end - pos - 4 < n:
                break
            out.append(bytes(buf[pos + 4 : pos + 4 + n]))
            pos += 4 + n
        if pos:
            del buf[:pos]
        return out


# --------------------------------------------------------------- decoding


class _Reader:
    """A cursor over one body; every read checks what is left."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)

    def _take(self, n: int) -> int:
        p = self.pos
        if self.end - p < n:
            raise JuteError(f"truncated: {n} bytes needed at offset {p}, {self.end - p} left")
        self.pos = p + n
        return p

    def left(self) -> int:
        return self.end - self.pos

    def i32(self) -> int:
        v: int = _I32.unpack_from(self.buf, self._take(4))[0]
        return v

    def i64(self) -> int:
        v: int = _I64.unpack_from(self.buf, self._take(8))[0]
        return v

    def zxid(self) -> int:
        """A zxid: Java's signed long read as zabd's unsigned 64-bit value."""
        return self.i64() & _U64

    def boolean(self) -> bool:
        return self.buf[self._take(1)] != 0

    def _length(self, what: str) -> int | None:
        n = self.i32()
        if n == -1:
            return None
        if n < 0:
            raise JuteError(f"{what} of length {n}")
        if n > self.end - self.pos:
            raise JuteError(f"{what} of length {n} with {self.end - self.pos} bytes left")
        return n

    def buffer(self) -> bytes | None:
        n = self._length("buffer")
        if n is None:
            return None
        p = self._take(n)
        return bytes(self.buf[p : p + n])

    def ustring(self) -> str | None:
        n = self._length("ustring")
        if n is None:
            return None
        p = self._take(n)
        return bytes(self.buf[p : p + n]).decode("utf-8", "replace")

    def data(self) -> bytes:
        return self.buffer() or b""

    def text(self) -> str:
        return self.ustring() or ""

    def count(self) -> int:
        """A vector's count (0 for null); each item takes at least one byte."""
        n = self._length("vector")
        return 0 if n is None else n

    def strings(self) -> tuple[str, ...]:
        return tuple(self.text() for _ in range(self.count()))

    def acl(self) -> tuple[ACL, ...]:
        return tuple(ACL(self.i32(), Id(self.text(), self.text())) for _ in range(self.count()))

    def stat(self) -> Stat:
        return Stat._make(_STAT.unpack_from(self.buf, self._take(_STAT.size)))


def decode_connect(body: bytes) -> ConnectRequest:
    """A ConnectRequest; its readOnly byte is optional (clients up to 3.3
    omit it: read_only False, legacy True); a null password reads as b""."""
    r = _Reader(body)
    protocol_version = r.i32()
    last_zxid = r.zxid()
    timeout = r.i32()
    session_id = r.i64()
    password = r.data()
    if r.left() == 0:
        return ConnectRequest(protocol_version, last_zxid, timeout, session_id, password, False, legacy=True)
    return ConnectRequest(protocol_version, last_zxid, timeout, session_id, password, r.boolean())


def _create(r: _Reader, op: int) -> Create:
    path, data, acl, flags = r.text(), r.buffer(), r.acl(), r.i32()  # null data stays None
    ttl = r.i64() if op == OP_CREATE_TTL else -1
    return Create(path, data, acl, flags, ttl)


def _effective_create_op(op: int, mode: int) -> int:
    # ZooKeeper's Op.Create.getOpcode: the mode decides before the header type
    if mode in TTL_MODES:
        return OP_CREATE_TTL
    return OP_CREATE_CONTAINER if mode == CONTAINER else op


def _multi(r: _Reader, read: bool) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    allowed = _MULTI_READ_OPS if read else _MULTI_WRITE_OPS
    ops: list[Any] = []
    types: list[int] = []
    while True:
        t, done, _err = r.i32(), r.boolean(), r.i32()
        if done:
            return tuple(ops), tuple(types)
        if t not in allowed:
            kind = "multiRead" if read else "multi"
            raise JuteError(f"opcode {t} in a {kind}")
        op = _DECODERS[t](r)  # the op's record is the one of its own request
        if isinstance(op, Create):
            t = _effective_create_op(t, op.mode)
        elif isinstance(op, (GetData, GetChildren)):
            op = type(op)(op.path)  # ZooKeeper's Op.getData/getChildren drop the watch flag
        ops.append(op)
        types.append(t)


def _set_watches(r: _Reader, v2: bool) -> SetWatches:
    zxid, data, exist, child = r.zxid(), r.strings(), r.strings(), r.strings()
    if not v2:
        return SetWatches(zxid, data, exist, child)
    return SetWatches(zxid, data, exist, child, r.strings(), r.strings())


def _auth(r: _Reader) -> AddAuth:
    r.i32()  # AuthPacket.type: unused by ZooKeeper
    return AddAuth(r.text(), r.data())


_DECODERS: dict[int, Callable[[_Reader], object]] = {
    OP_CREATE: lambda r: _create(r, OP_CREATE),
    OP_CREATE2: lambda r: _create(r, OP_CREATE2),
    OP_CREATE_CONTAINER: lambda r: _create(r, OP_CREATE_CONTAINER),
    OP_CREATE_TTL: lambda r: _create(r, OP_CREATE_TTL),
    OP_DELETE: lambda r: Delete(r.text(), r.i32()),
    OP_EXISTS: lambda r: Exists(r.text(), r.boolean()),
    OP_GET_DATA: lambda r: GetData(r.text(), r.boolean()),
    OP_SET_DATA: lambda r: SetData(r.text(), r.buffer(), r.i32()),
    OP_GET_ACL: lambda r: GetACL(r.text()),
    OP_SET_ACL: lambda r: SetACL(r.text(), r.acl(), r.i32()),
    OP_GET_CHILDREN: lambda r: GetChildren(r.text(), r.boolean(), False),
    OP_GET_CHILDREN2: lambda r: GetChildren(r.text(), r.boolean(), True),
    OP_SYNC: lambda r: Sync(r.text()),
    OP_PING: lambda r: Ping(),
    OP_CHECK: lambda r: Check(r.text(), r.i32()),
    OP_AUTH: _auth,
    OP_SET_WATCHES: lambda r: _set_watches(r, False),
    OP_SET_WATCHES2: lambda r: _set_watches(r, True),
    OP_ADD_WATCH: lambda r: AddWatch(r.text(), r.i32()),
    OP_REMOVE_WATCHES: lambda r: RemoveWatches(r.text(), r.i32()),
    OP_CHECK_WATCHES: lambda r: CheckWatches(r.text(), r.i32()),
    # a null or empty prefix is every ephemeral, as ZooKeeper reads it
    OP_GET_EPHEMERALS: lambda r: GetEphemerals(r.ustring() or "/"),
    OP_GET_ALL_CHILDREN_NUMBER: lambda r: GetAllChildrenNumber(r.text()),
    OP_WHO_AM_I: lambda r: WhoAmI(),
    OP_CLOSE_SESSION: lambda r: CloseSession(),
    OP_RECONFIG: lambda r: Reconfig(r.ustring(), r.ustring(), r.ustring(), r.i64()),
    OP_SASL: lambda r: Sasl(r.buffer()),  # a null token stays None: ZooKeeper closes the connection on it
}


_HEAD_AND_LENGTH = struct.Struct(">iii")  # xid, opcode, the first field's length


def _hot(body: bytes) -> Request | None:
    """setData and getData, the load of most clients, read without a cursor;
    None for anything else or anything short (the general path reports it)."""
    end = len(body)
    if end < 13:
        return None
    xid, op, n = _HEAD_AND_LENGTH.unpack_from(body)
    q = 12 + n
    if op == OP_GET_DATA and n >= 0 and q < end:
        return _tnew(Request, (xid, op, GetData(bytes(body[12:q]).decode("utf-8", "replace"), body[q] != 0), ()))
    if op != OP_SET_DATA or n < 0 or q + 4 > end:
        return None
    (size,) = _I32.unpack_from(body, q)
    q += 4
    if size == -1:
        data = None
    elif 0 <= size <= end - q - 4:
        data = bytes(body[q : q + size])
        q += size
    else:
        return None
    if q + 4 > end:
        return None
    record = SetData(bytes(body[12 : 12 + n]).decode("utf-8", "replace"), data, _I32.unpack_from(body, q)[0])
    return _tnew(Request, (xid, op, record, ()))


def decode_request(body: bytes) -> Request:
    """A RequestHeader and its record; ``Unknown(op)`` for an opcode not served."""
    hot = _hot(body)
    return hot if hot is not None else _general(body)


def _general(body: bytes) -> Request:
    r = _Reader(body)
    xid, op = r.i32(), r.i32()
    if op == OP_MULTI:
        ops, types = _multi(r, read=False)
        return Request(xid, op, Multi(ops), types)
    if op == OP_MULTI_READ:
        ops, types = _multi(r, read=True)
        return Request(xid, op, MultiRead(ops), types)
    decode = _DECODERS.get(op)
    if decode is None:
        return Request(xid, op, Unknown(op))
    return Request(xid, op, decode(r))


# --------------------------------------------------------------- encoding


def _int(v: int) -> int:
    if not _INT_MIN <= v <= _INT_MAX:
        raise JuteError(f"{v} does not fit a jute int")
    return v


def _long(v: int) -> int:
    """A long; zabd's unsigned 64-bit values (zxids) wrap to Java's signed ones."""
    if _LONG_MIN <= v <= _LONG_MAX:
        return v
    if _LONG_MAX < v < (1 << 64):
        return v - (1 << 64)
    raise JuteError(f"{v} does not fit a jute long")


class _Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def i32(self, v: int) -> None:
        self.out += _I32.pack(_int(v))

    def i64(self, v: int) -> None:
        self.out += _I64.pack(_long(v))

    def boolean(self, v: bool) -> None:
        self.out.append(1 if v else 0)

    def buffer(self, b: bytes | None) -> None:
        if b is None:
            self.out += _I32.pack(-1)
        else:
            self.out += _I32.pack(len(b))
            self.out += b

    def ustring(self, s: str | None) -> None:
        # Java's getBytes(UTF_8) writes '?' for what UTF-8 cannot hold (lone surrogates)
        self.buffer(None if s is None else s.encode("utf-8", "replace"))

    def strings(self, items: Sequence[str]) -> None:
        self.i32(len(items))
        for s in items:
            self.ustring(s)

    def acl(self, acl: Sequence[ACL]) -> None:
        self.i32(len(acl))
        for a in acl:
            self.i32(a.perms)
            self.ustring(a.id.scheme)
            self.ustring(a.id.id)

    def stat(self, st: Stat) -> None:
        try:
            self.out += _STAT.pack(*st)
        except struct.error:
            c, m, ct, mt, v, cv, av, eo, dl, nc, pz = st
            self.out += _STAT.pack(_long(c), _long(m), _long(ct), _long(mt), _int(v), _int(cv), _int(av),
                                   _long(eo), _int(dl), _int(nc), _long(pz))

    def multi_header(self, op: int, done: bool, err: int) -> None:
        self.out += _MULTI_HEADER.pack(_int(op), 1 if done else 0, _int(err))

    def framed(self) -> bytes:
        return frame(bytes(self.out))


def encode_connect_response(timeout_ms: int, session_id: int, password: bytes, read_only: bool,
                            protocol_version: int = 0, *, legacy: bool = False) -> bytes:
    """A framed ConnectResponse (``legacy``: without the readOnly byte, for a
    client whose ConnectRequest had none)."""
    w = _Writer()
    w.i32(protocol_version)
    w.i32(timeout_ms)
    w.i64(session_id)
    w.buffer(password)
    if not legacy:
        w.boolean(read_only)
    return w.framed()


def encode_connect_refused(*, legacy: bool = False) -> bytes:
    """ZooKeeper's answer to a connect for an expired or unknown session:
    timeout 0, session 0, a password of 16 zero bytes."""
    return encode_connect_response(0, 0, bytes(16), False, legacy=legacy)


def _expect(result: object, kind: type | tuple[type, ...], op: int) -> Any:
    if not isinstance(result, kind):
        raise TypeError(f"{type(result).__name__} is not a result of opcode {op}")
    return result


def _children(w: _Writer, result: object, op: int, with_stat: bool) -> None:
    res: ChildrenResult = _expect(result, ChildrenResult, op)
    w.strings(res.children)
    if with_stat:
        if res.stat is None:
            raise TypeError("getChildren2's result needs a Stat")
        w.stat(res.stat)


def _multi_response(w: _Writer, result: MultiResult, ops: Sequence[int]) -> None:
    for i, r in enumerate(result.results):
        hint = ops[i] if i < len(ops) else OP_CREATE
        res: object = r
        if isinstance(res, ErrorResult):
            w.multi_header(OP_ERROR, False, int(res.code))
            w.i32(int(res.code))
        elif isinstance(res, CreateResult):
            # ZooKeeper: create answers the path; create2, createTTL and
            # createContainer the path and the Stat (as a create2 result)
            if hint in (OP_CREATE2, OP_CREATE_TTL, OP_CREATE_CONTAINER):
                w.multi_header(OP_CREATE2, False, 0)
                w.ustring(res.path)
                w.stat(res.stat)
            else:
                w.multi_header(OP_CREATE, False, 0)
                w.ustring(res.path)
        elif isinstance(res, DeleteResult):
            w.multi_header(OP_DELETE, False, 0)
        elif isinstance(res, CheckResult):
            w.multi_header(OP_CHECK, False, 0)
        elif isinstance(res, StatResult):
            w.multi_header(OP_SET_DATA, False, 0)
            w.stat(res.stat)
        elif isinstance(res, DataResult):
            w.multi_header(OP_GET_DATA, False, 0)
            w.buffer(res.data)
            w.stat(res.stat)
        elif isinstance(res, ChildrenResult):
            w.multi_header(OP_GET_CHILDREN, False, 0)
            w.strings(res.children)
        else:
            raise TypeError(f"{type(res).__name__} is not a result of a multi")
    w.multi_header(-1, True, -1)


def _body(w: _Writer, op: int, result: object) -> None:
    if op == OP_CREATE:
        w.ustring(_expect(result, CreateResult, op).path)
    elif op in (OP_CREATE2, OP_CREATE_CONTAINER, OP_CREATE_TTL):
        cr: CreateResult = _expect(result, CreateResult, op)
        w.ustring(cr.path)
        w.stat(cr.stat)
    elif op == OP_EXISTS:
        w.stat(_expect(result, ExistsResult, op).stat)
    elif op in (OP_GET_DATA, OP_RECONFIG):  # reconfig answers a GetDataResponse: the new config
        dr: DataResult = _expect(result, DataResult, op)
        w.buffer(dr.data)
        w.stat(dr.stat)
    elif op in (OP_SET_DATA, OP_SET_ACL):
        w.stat(_expect(result, StatResult, op).stat)
    elif op == OP_GET_ACL:
        ar: ACLResult = _expect(result, ACLResult, op)
        w.acl(ar.acl)
        w.stat(ar.stat)
    elif op in (OP_GET_CHILDREN, OP_GET_CHILDREN2):
        _children(w, result, op, op == OP_GET_CHILDREN2)
    elif op == OP_SYNC:
        w.ustring(_expect(result, SyncResult, op).path)
    elif op == OP_GET_EPHEMERALS:
        w.strings(_expect(result, PathsResult, op).paths)
    elif op == OP_GET_ALL_CHILDREN_NUMBER:
        w.i32(_expect(result, CountResult, op).number)
    elif op == OP_WHO_AM_I:
        ids: list[tuple[str, str]] = _expect(result, WhoAmIResult, op).ids
        w.i32(len(ids))
        for scheme, user in ids:
            w.ustring(scheme)
            w.ustring(user)
    elif op == OP_ADD_WATCH:
        w.i32(0)  # ZooKeeper answers addWatch with an ErrorResponse of 0
    elif op == OP_SASL:
        w.buffer(_expect(result, SaslResult, op).token)
    # delete, check, ping, auth, setWatches(2), removeWatches, checkWatches,
    # closeSession and anything else: the header alone


def encode_reply(xid: int, zxid: int, err: int, op: int, result: object | None,
                 *, multi_ops: Sequence[int] = ()) -> bytes:
    """A framed ReplyHeader and, when err is 0, the response record of ``op``.

    ZooKeeper's exceptions to that rule, applied here:

    - a multi or multiRead answered with a ``MultiResult`` always carries the
      per-op results, and its header's err is 0 even when an op failed (the
      error is in the results: ZooKeeper's FinalRequestProcessor never sets
      it, and clients read a non-zero err as a failure of the whole request);
      ``multi_ops`` (``Request.multi_ops``) says which create ops answer a Stat;
    - an ``exists`` of a missing node (``ExistsResult(None)``) is the error
      NoNode with no body;
    - addWatch answers an ErrorResponse of 0;
    - a sasl answer carries its SetSASLResponse even with an error (ZooKeeper
      sends a null token behind AUTH_FAILED).
    """
    if isinstance(result, MultiResult) and op in (OP_MULTI, OP_MULTI_READ):
        w = _Writer()
        w.out += _REPLY_HEADER.pack(_int(xid), _long(zxid), 0)
        _multi_response(w, result, multi_ops)
        return w.framed()
    if op == OP_SET_DATA and err == 0 and type(result) is StatResult:
        try:
            return _STAT_REPLY.pack(_STAT_REPLY.size - 4, xid, zxid, 0, *result.stat)
        except struct.error:  # a value out of a Java int's or long's range: the general path wraps it
            pass
    if op == OP_EXISTS and err == 0 and isinstance(result, ExistsResult) and result.stat is None:
        err = _NO_NODE
    w = _Writer()
    w.out += _REPLY_HEADER.pack(_int(xid), _long(zxid), _int(err))
    if result is not None and (err == 0 or op == OP_SASL):
        _body(w, op, result)
    return w.framed()


def encode_event(event_type: int, state: int, path: str, zxid: int) -> bytes:
    """A framed watch event: ReplyHeader(-1, zxid, 0) and a WatcherEvent
    (ZooKeeper 3.6+ puts the event's zxid in the header)."""
    w = _Writer()
    w.out += _REPLY_HEADER.pack(XID_NOTIFICATION, _long(zxid), 0)
    w.i32(event_type)
    w.i32(state)
    w.ustring(path)
    return w.framed()


# ------------------------------------------------------------- client side


def encode_connect(req: ConnectRequest) -> bytes:
    """A framed ConnectRequest (without readOnly when ``req.legacy``)."""
    w = _Writer()
    w.i32(req.protocol_version)
    w.i64(req.last_zxid_seen)
    w.i32(req.timeout_ms)
    w.i64(req.session_id)
    w.buffer(req.password)
    if not req.legacy:
        w.boolean(req.read_only)
    return w.framed()


def decode_connect_response(body: bytes) -> tuple[int, int, int, bytes, bool]:
    """(protocol_version, timeout_ms, session_id, password, read_only)."""
    r = _Reader(body)
    version, timeout, session_id, password = r.i32(), r.i32(), r.i64(), r.data()
    read_only = r.boolean() if r.left() else False
    return version, timeout, session_id, password, read_only


def _create_request(w: _Writer, op: int, c: Create) -> None:
    w.ustring(c.path)
    w.buffer(c.data)
    w.acl(c.acl)
    w.i32(c.mode)
    if op == OP_CREATE_TTL:
        w.i64(c.ttl)


def _multi_request(w: _Writer, ops: Sequence[object], types: Sequence[int]) -> None:
    for i, op in enumerate(ops):
        if isinstance(op, Create):
            t = types[i] if i < len(types) else _effective_create_op(OP_CREATE, op.mode)
        elif type(op) in _MULTI_OP_CODES:
            t = _MULTI_OP_CODES[type(op)]
        else:
            raise TypeError(f"{type(op).__name__} cannot be in a multi")
        w.multi_header(t, False, -1)
        _request_body(w, t, op, ())  # each op's body is its own request's
    w.multi_header(-1, True, -1)


_MULTI_OP_CODES: dict[type, int] = {Delete: OP_DELETE, SetData: OP_SET_DATA, Check: OP_CHECK, GetData: OP_GET_DATA,
                                     GetChildren: OP_GET_CHILDREN}


def _request_body(w: _Writer, op: int, record: object, multi_ops: Sequence[int]) -> None:
    rec: Any = record
    if op in _CREATE_OPS:
        _create_request(w, op, _expect(rec, Create, op))
    elif op == OP_DELETE:
        _expect(rec, Delete, op)
        w.ustring(rec.path)
        w.i32(rec.version)
    elif op in (OP_EXISTS, OP_GET_DATA, OP_GET_CHILDREN, OP_GET_CHILDREN2):
        _expect(rec, (Exists, GetData, GetChildren), op)
        w.ustring(rec.path)
        w.boolean(rec.watch)
    elif op == OP_SET_DATA:
        _expect(rec, SetData, op)
        w.ustring(rec.path)
        w.buffer(rec.data)
        w.i32(rec.version)
    elif op in (OP_GET_ACL, OP_SYNC, OP_GET_ALL_CHILDREN_NUMBER):
        _expect(rec, (GetACL, Sync, GetAllChildrenNumber), op)
        w.ustring(rec.path)
    elif op == OP_SET_ACL:
        _expect(rec, SetACL, op)
        w.ustring(rec.path)
        w.acl(rec.acl)
        w.i32(rec.version)
    elif op == OP_CHECK:
        _expect(rec, Check, op)
        w.ustring(rec.path)
        w.i32(rec.version)
    elif op in (OP_MULTI, OP_MULTI_READ):
        _multi_request(w, _expect(rec, (Multi, MultiRead), op).ops, multi_ops)
    elif op == OP_AUTH:
        _expect(rec, AddAuth, op)
        w.i32(0)
        w.ustring(rec.scheme)
        w.buffer(rec.auth)
    elif op in (OP_SET_WATCHES, OP_SET_WATCHES2):
        sw: SetWatches = _expect(rec, SetWatches, op)
        w.i64(sw.relative_zxid)
        lists = (sw.data, sw.exist, sw.child)
        for paths in (*lists, sw.persistent, sw.persistent_recursive) if op == OP_SET_WATCHES2 else lists:
            w.strings(paths)
    elif op == OP_ADD_WATCH:
        _expect(rec, AddWatch, op)
        w.ustring(rec.path)
        w.i32(rec.mode)
    elif op in (OP_REMOVE_WATCHES, OP_CHECK_WATCHES):
        _expect(rec, (RemoveWatches, CheckWatches), op)
        w.ustring(rec.path)
        w.i32(rec.watcher_type)
    elif op == OP_GET_EPHEMERALS:
        w.ustring(_expect(rec, GetEphemerals, op).prefix)
    elif op == OP_SASL:
        w.buffer(_expect(rec, Sasl, op).token)
    elif op == OP_RECONFIG:
        rc: Reconfig = _expect(rec, Reconfig, op)
        w.ustring(rc.joining)
        w.ustring(rc.leaving)
        w.ustring(rc.new_members)
        w.i64(rc.cur_config_id)
    # ping, whoAmI, closeSession, Unknown: the header alone


def encode_request(xid: int, op: int, record: object, *, multi_ops: Sequence[int] = ()) -> bytes:
    """A framed RequestHeader and ``record`` as the request of ``op``
    (``multi_ops``: a multi's per-op header types, else derived from each op)."""
    w = _Writer()
    w.i32(xid)
    w.i32(op)
    _request_body(w, op, record, multi_ops)
    return w.framed()


def _multi_results(r: _Reader) -> MultiResult:
    out: list[Any] = []
    while True:
        t, done, _err = r.i32(), r.boolean(), r.i32()
        if done:
            return MultiResult(tuple(out))
        if t == OP_CREATE:
            out.append(CreateResult(r.text(), NO_STAT))
        elif t == OP_CREATE2:
            out.append(CreateResult(r.text(), r.stat()))
        elif t == OP_DELETE:
            out.append(DeleteResult())
        elif t == OP_CHECK:
            out.append(CheckResult())
        elif t == OP_SET_DATA:
            out.append(StatResult(r.stat()))
        elif t == OP_GET_DATA:
            out.append(DataResult(r.buffer(), r.stat()))
        elif t == OP_GET_CHILDREN:
            out.append(ChildrenResult(list(r.strings()), None))
        elif t == OP_ERROR:
            out.append(ErrorResult(_code(r.i32())))
        else:
            raise JuteError(f"opcode {t} in a multi response")


def _code(v: int) -> Any:
    # a zabd Code where it names one, else the bare int (a newer server's code)
    try:
        return Code(v)
    except ValueError:
        return v


_REPLY_DECODERS: dict[int, Callable[[_Reader], object]] = {
    OP_CREATE: lambda r: CreateResult(r.text(), NO_STAT),
    OP_CREATE2: lambda r: CreateResult(r.text(), r.stat()),
    OP_CREATE_CONTAINER: lambda r: CreateResult(r.text(), r.stat()),
    OP_CREATE_TTL: lambda r: CreateResult(r.text(), r.stat()),
    OP_EXISTS: lambda r: ExistsResult(r.stat()),
    OP_GET_DATA: lambda r: DataResult(r.buffer(), r.stat()),
    OP_RECONFIG: lambda r: DataResult(r.data(), r.stat()),
    OP_SET_DATA: lambda r: StatResult(r.stat()),
    OP_SET_ACL: lambda r: StatResult(r.stat()),
    OP_GET_ACL: lambda r: ACLResult(r.acl(), r.stat()),
    OP_GET_CHILDREN: lambda r: ChildrenResult(list(r.strings()), None),
    OP_GET_CHILDREN2: lambda r: ChildrenResult(list(r.strings()), r.stat()),
    OP_SYNC: lambda r: SyncResult(r.text()),
    OP_GET_EPHEMERALS: lambda r: PathsResult(list(r.strings())),
    OP_GET_ALL_CHILDREN_NUMBER: lambda r: CountResult(r.i32()),
    OP_WHO_AM_I: lambda r: WhoAmIResult([(r.text(), r.text()) for _ in range(r.count())]),
    OP_ADD_WATCH: lambda r: (r.i32(), OkResult())[1],
    OP_DELETE: lambda r: DeleteResult(),
    OP_CHECK: lambda r: CheckResult(),
    OP_MULTI: _multi_results,
    OP_MULTI_READ: _multi_results,
    OP_SASL: lambda r: SaslResult(r.buffer()),
}

_HEADER_ONLY = frozenset({OP_PING, OP_AUTH, OP_SET_WATCHES, OP_SET_WATCHES2, OP_REMOVE_WATCHES,
                          OP_CHECK_WATCHES, OP_CLOSE_SESSION})


def decode_reply(body: bytes, op: int) -> tuple[int, int, int, object | None]:
    """(xid, zxid, err, result) of a reply to a request of ``op``: None when
    err is not 0 (a multi's results come with err 0; a sasl answer's token
    is read when it is there); ``OkResult()`` for the
    opcodes answered by the header alone; a create's CreateResponse carries
    no Stat (``NO_STAT``). None for an opcode this codec does not know."""
    r = _Reader(body)
    xid, zxid, err = r.i32(), r.zxid(), r.i32()
    if err != 0:
        # ZooKeeper's failed sasl answer carries its (null) token: read when there
        return xid, zxid, err, SaslResult(r.buffer()) if op == OP_SASL and r.left() else None
    if op in _HEADER_ONLY:
        return xid, zxid, err, OkResult()
    decode = _REPLY_DECODERS.get(op)
    return xid, zxid, err, None if decode is None else decode(r)


def decode_event(body: bytes) -> tuple[int, int, str]:
    """(type, state, path) of a watch event (a reply of xid -1)."""
    r = _Reader(body)
    xid, _zxid, _err = r.i32(), r.i64(), r.i32()
    if xid != XID_NOTIFICATION:
        raise JuteError(f"not an event: xid {xid}")
    return r.i32(), r.i32(), r.text()

"""ZooKeeper requests and results in zabd's msgpack encoding.

Used where zabd speaks to itself: a follower forwards a session's write to
the leader in a peer ``Forward`` frame, and zabd's own client port carries
``zk`` requests (the test driver of the ZooKeeper session layer). A request
is ``[op, *fields]``; ``decode_request`` refuses anything malformed with
ValueError, so a bad frame costs one error answer, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

from zabd.codec.framing import frame, pack, short
from zabd.zk.acl import from_wire as unpack_acl
from zabd.zk.acl import to_wire as pack_acl
from zabd.zk.errors import Code
from zabd.zk.records import (
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
    CreateSession,
    DataResult,
    Delete,
    DeleteContainer,
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
    MultiOp,
    MultiResult,
    OkResult,
    PathsResult,
    Ping,
    Read,
    ReadResult,
    RemoveWatches,
    SessionOp,
    SessionResult,
    SetACL,
    SetData,
    SetWatches,
    Stat,
    StatResult,
    Sync,
    SyncResult,
    Write,
    WriteResult,
)

Request = Write | Read | SessionOp
Result = WriteResult | ReadResult | OkResult | SyncResult


def _op(req: Request) -> list[Any]:
    if isinstance(req, Create):
        return ["create", req.path, req.data, pack_acl(req.acl), req.mode, req.ttl]
    if isinstance(req, Delete):
        return ["delete", req.path, req.version]
    if isinstance(req, SetData):
        return ["setData", req.path, req.data, req.version]
    if isinstance(req, SetACL):
        return ["setACL", req.path, pack_acl(req.acl), req.version]
    if isinstance(req, Check):
        return ["check", req.path, req.version]
    if isinstance(req, Multi):
        return ["multi", [_op(op) for op in req.ops]]
    if isinstance(req, CreateSession):
        return ["createSession", req.session_id, req.timeout_ms, req.password_digest]
    if isinstance(req, CloseSession):
        return ["closeSession"]
    if isinstance(req, DeleteContainer):
        return ["deleteContainer", req.path]
    if isinstance(req, GetData):
        return ["getData", req.path, req.watch]
    if isinstance(req, Exists):
        return ["exists", req.path, req.watch]
    if isinstance(req, GetChildren):
        return ["getChildren", req.path, req.watch, req.with_stat]
    if isinstance(req, GetACL):
        return ["getACL", req.path]
    if isinstance(req, GetEphemerals):
        return ["getEphemerals", req.prefix]
    if isinstance(req, GetAllChildrenNumber):
        return ["getAllChildrenNumber", req.path]
    if isinstance(req, Sync):
        return ["sync", req.path]
    if isinstance(req, Ping):
        return ["ping"]
    if isinstance(req, AddAuth):
        return ["addAuth", req.scheme, req.auth]
    if isinstance(req, AddWatch):
        return ["addWatch", req.path, req.mode]
    if isinstance(req, SetWatches):
        return ["setWatches", req.relative_zxid, list(req.data), list(req.exist), list(req.child),
                list(req.persistent), list(req.persistent_recursive)]
    if isinstance(req, RemoveWatches):
        return ["removeWatches", req.path, req.watcher_type]
    if isinstance(req, CheckWatches):
        return ["checkWatches", req.path, req.watcher_type]
    raise TypeError(f"{req!r} is not a ZooKeeper request")


def encode_request(req: Request) -> bytes:
    return pack(_op(req))


def _str(x: Any) -> str:
    if type(x) is not str:
        raise ValueError(f"expected a string, got {type(x).__name__}")
    return x


def _int(x: Any) -> int:
    if type(x) is not int or not -(1 << 63) <= x < (1 << 63):
        raise ValueError(f"expected a 64-bit integer, got {short(x)}")
    return x


def _bytes(x: Any) -> bytes:
    if type(x) is not bytes:
        raise ValueError(f"expected bytes, got {type(x).__name__}")
    return x


def _data(x: Any) -> bytes | None:
    return None if x is None else _bytes(x)  # None: null data


def _bool(x: Any) -> bool:
    if type(x) is not bool:
        raise ValueError(f"expected a boolean, got {short(x)}")
    return x


def _acl(x: Any) -> Any:
    if type(x) not in (list, tuple) or not all(
        type(a) in (list, tuple) and len(a) == 3 and type(a[0]) is int and type(a[1]) is str and type(a[2]) is str
        for a in x
    ):
        raise ValueError("expected an ACL: [[perms, scheme, id], ...]")
    return unpack_acl(x)


def _multi_op(x: Any) -> MultiOp:
    if type(x) in (list, tuple) and x and x[0] == "multi":  # refused before decoding: no recursion
        raise ValueError("a multi holds create, delete, setData and check ops only")
    op = _decode(x)
    if not isinstance(op, (Create, Delete, SetData, Check)):
        raise ValueError("a multi holds create, delete, setData and check ops only")
    return op


_DECODERS: dict[str, tuple[int, Callable[[list[Any]], Request]]] = {
    "create": (6, lambda f: Create(_str(f[1]), _data(f[2]), _acl(f[3]), _int(f[4]), _int(f[5]))),
    "delete": (3, lambda f: Delete(_str(f[1]), _int(f[2]))),
    "setData": (4, lambda f: SetData(_str(f[1]), _data(f[2]), _int(f[3]))),
    "setACL": (4, lambda f: SetACL(_str(f[1]), _acl(f[2]), _int(f[3]))),
    "check": (3, lambda f: Check(_str(f[1]), _int(f[2]))),
    "multi": (2, lambda f: Multi(tuple(_multi_op(op) for op in _list(f[1])))),
    "createSession": (4, lambda f: CreateSession(_int(f[1]), _int(f[2]), _bytes(f[3]))),
    "closeSession": (1, lambda f: CloseSession()),
    "deleteContainer": (2, lambda f: DeleteContainer(_str(f[1]))),
    "getData": (3, lambda f: GetData(_str(f[1]), _bool(f[2]))),
    "exists": (3, lambda f: Exists(_str(f[1]), _bool(f[2]))),
    "getChildren": (4, lambda f: GetChildren(_str(f[1]), _bool(f[2]), _bool(f[3]))),
    "getACL": (2, lambda f: GetACL(_str(f[1]))),
    "getEphemerals": (2, lambda f: GetEphemerals(_str(f[1]))),
    "getAllChildrenNumber": (2, lambda f: GetAllChildrenNumber(_str(f[1]))),
    "sync": (2, lambda f: Sync(_str(f[1]))),
    "ping": (1, lambda f: Ping()),
    "addAuth": (3, lambda f: AddAuth(_str(f[1]), _bytes(f[2]))),
    "addWatch": (3, lambda f: AddWatch(_str(f[1]), _int(f[2]))),
    "setWatches": (7, lambda f: SetWatches(_u64(f[1]), *(tuple(_str(p) for p in _list(x)) for x in f[2:7]))),
    "removeWatches": (3, lambda f: RemoveWatches(_str(f[1]), _int(f[2]))),
    "checkWatches": (3, lambda f: CheckWatches(_str(f[1]), _int(f[2]))),
}


def _u64(x: Any) -> int:
    if type(x) is not int or not 0 <= x < (1 << 64):
        raise ValueError(f"expected a zxid, got {short(x)}")
    return x


def _list(x: Any) -> list[Any]:
    if type(x) is list:
        return x
    if type(x) is not tuple:
        raise ValueError(f"expected an array, got {type(x).__name__}")
    return list(x)


def _decode(x: Any) -> Request:
    f = _list(x)
    if len(f) == 4 and f[0] == "setData":  # the most frequent write, without the table's indirect call
        return SetData(_str(f[1]), _data(f[2]), _int(f[3]))
    if not f or type(f[0]) is not str or f[0] not in _DECODERS:
        raise ValueError(f"unknown ZooKeeper request {short(f[0] if f else None)}")
    n, build = _DECODERS[f[0]]
    if len(f) != n:
        raise ValueError(f"{f[0]} takes {n - 1} fields, got {len(f) - 1}")
    return build(f)


def decode_request(data: bytes) -> Request:
    try:
        raw = msgpack.unpackb(data, raw=False, use_list=True)
    except Exception as exc:
        raise ValueError(f"not msgpack: {exc}") from exc
    return _decode(raw)


def encode_stat(stat: Stat | None) -> list[int] | None:
    return list(stat) if stat is not None else None


def decode_stat(x: Any) -> Stat | None:
    return Stat(*x) if x is not None else None


def encode_result(r: Result) -> list[Any]:
    """``[kind, *fields]``: the answer's record (the error code travels apart)."""
    if isinstance(r, CreateResult):
        return ["create", r.path, list(r.stat)]
    if isinstance(r, StatResult):
        return ["stat", list(r.stat)]
    if isinstance(r, (DeleteResult, CheckResult, OkResult)):
        return ["ok"]
    if isinstance(r, ErrorResult):
        return ["error", int(r.code)]
    if isinstance(r, MultiResult):
        return ["multi", [encode_result(x) for x in r.results]]
    if isinstance(r, SessionResult):
        return ["session", r.session_id]
    if isinstance(r, DataResult):
        return ["data", r.data, list(r.stat)]
    if isinstance(r, ExistsResult):
        return ["exists", encode_stat(r.stat)]
    if isinstance(r, ChildrenResult):
        return ["children", r.children, encode_stat(r.stat)]
    if isinstance(r, ACLResult):
        return ["acl", pack_acl(r.acl), list(r.stat)]
    if isinstance(r, PathsResult):
        return ["paths", r.paths]
    if isinstance(r, CountResult):
        return ["count", r.number]
    if isinstance(r, SyncResult):
        return ["sync", r.path]
    raise TypeError(f"{r!r} is not a ZooKeeper result")


def decode_result(x: Any) -> Result:
    kind, *f = x
    out: Result
    if kind == "create":
        out = CreateResult(f[0], Stat(*f[1]))
    elif kind == "stat":
        out = StatResult(Stat(*f[0]))
    elif kind == "ok":
        out = OkResult()
    elif kind == "error":
        out = ErrorResult(Code(f[0]))
    elif kind == "multi":
        out = MultiResult(tuple(decode_result(r) for r in f[0]))  # type: ignore[misc]
    elif kind == "session":
        out = SessionResult(f[0])
    elif kind == "data":
        out = DataResult(f[0], Stat(*f[1]))
    elif kind == "exists":
        out = ExistsResult(decode_stat(f[0]))
    elif kind == "children":
        out = ChildrenResult(list(f[0]), decode_stat(f[1]))
    elif kind == "acl":
        out = ACLResult(unpack_acl(f[0]), Stat(*f[1]))
    elif kind == "paths":
        out = PathsResult(list(f[0]))
    elif kind == "count":
        out = CountResult(f[0])
    elif kind == "sync":
        out = SyncResult(f[0])
    else:
        raise ValueError(f"unknown ZooKeeper result {kind!r}")
    return out


class MsgpackWire:
    """The session layer's answers as zabd client-port frames (``zk`` requests):
    ``{"id": xid, "ok": true, "zxid", "err", "result"}``, and events as
    ``{"id": 0, "event": [type, state, path], "zxid"}``."""

    def connected(self, rid: int, session: int, password: bytes, timeout_ms: int, read_only: bool = False) -> bytes:
        return frame({"v": 1, "id": rid, "ok": True, "session": session, "password": password, "timeout": timeout_ms,
                      "read_only": read_only})

    def refused(self, rid: int, code: Code, message: str) -> bytes:
        return frame({"v": 1, "id": rid, "ok": False, "error": "zk", "err": int(code), "message": message})

    def reply(self, xid: int, zxid: int, err: Code, result: Result | None) -> bytes:
        body = None if result is None else encode_result(result)
        return frame({"v": 1, "id": xid, "ok": True, "zxid": zxid, "err": int(err), "result": body})

    def event(self, kind: int, state: int, path: str, zxid: int) -> bytes:
        return frame({"v": 1, "id": 0, "event": [int(kind), int(state), path], "zxid": zxid})

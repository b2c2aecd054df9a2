"""ZooKeeper txns in zabd's log: ``ZK_MAGIC`` + a msgpack array.

``[type, time_ms, session_id, *fields]``, ``type`` being ZooKeeper's opcode
(``TxnHeader.type``), ``time_ms`` the leader's wall clock when it decided
(ctime/mtime come from here, so applying is deterministic) and
``session_id`` the requesting session (the owner of an ephemeral):

| type | txn | fields |
| --- | --- | --- |
| 1 | create | path, data, acl, ephemeral owner, parent cversion after |
| 2 | delete | path |
| 5 | setData | path, data, version after |
| 7 | setACL | path, acl, aversion after |
| 13 | check | path |
| 14 | multi | ops: ``[type, *fields]`` each, or ``[-1, code]`` each when it failed |
| 20 | deleteContainer | path |
| -10 | createSession | timeout ms, the password's digest (``zabd.zk.sessions``; older logs: the password) |
| -11 | closeSession | paths of its ephemerals, deleted with it |
| -1 | error | ZooKeeper's error code |

An ACL is a list of ``[perms, scheme, id]`` (``zabd.zk.acl.to_wire``). The txn carries outcomes, not
conditions (versions after, the parent's cversion after, the ephemerals to
delete), so every replica applies it without deciding anything.
"""

from __future__ import annotations

from typing import Any

import msgpack

from zabd.codec.framing import pack

# 0xc1 is never the first byte of a msgpack value (see zabd.kv.kvmachine)
ZK_MAGIC = b"\xc1zk1"

T_ERROR = -1
T_CREATE = 1
T_DELETE = 2
T_SET_DATA = 5
T_SET_ACL = 7
T_CHECK = 13
T_MULTI = 14
T_DELETE_CONTAINER = 20
T_CREATE_SESSION = -10
T_CLOSE_SESSION = -11

TYPE_NAMES = {
    T_ERROR: "error", T_CREATE: "create", T_DELETE: "delete", T_SET_DATA: "setData", T_SET_ACL: "setACL",
    T_CHECK: "check", T_MULTI: "multi", T_DELETE_CONTAINER: "deleteContainer",
    T_CREATE_SESSION: "createSession", T_CLOSE_SESSION: "closeSession",
}


def encode(kind: int, time_ms: int, session: int, *fields: Any) -> bytes:
    return encode_body([kind, time_ms, session, *fields])


def encode_body(txn: list[Any]) -> bytes:
    """``[type, time_ms, session_id, *fields]`` as a txn's payload."""
    return ZK_MAGIC + pack(txn)


def decode(payload: bytes) -> list[Any]:
    """``[type, time_ms, session_id, *fields]`` (ValueError if not a ZK txn)."""
    if payload[:4] != ZK_MAGIC:
        raise ValueError("not a ZooKeeper txn (no ZK magic)")
    txn = msgpack.unpackb(payload[4:], raw=False, use_list=True)
    if type(txn) is not list or len(txn) < 3 or not (
            isinstance(txn[0], int) and isinstance(txn[1], int) and isinstance(txn[2], int)):
        raise ValueError("a ZooKeeper txn is [type, time, session, ...]")
    return txn


def _describe_op(kind: int, fields: list[Any]) -> dict[str, Any]:
    name = TYPE_NAMES.get(kind, f"type {kind}")
    out: dict[str, Any] = {"op": name}
    if kind == T_CREATE:
        path, data, acl, owner, pcv = fields
        out |= {"path": path, "data": data, "acl": acl, "ephemeralOwner": owner, "parentCVersion": pcv}
    elif kind in (T_DELETE, T_CHECK, T_DELETE_CONTAINER):
        out["path"] = fields[0]
    elif kind == T_SET_DATA:
        out |= {"path": fields[0], "data": fields[1], "version": fields[2]}
    elif kind == T_SET_ACL:
        out |= {"path": fields[0], "acl": fields[1], "aversion": fields[2]}
    elif kind == T_ERROR:
        out["err"] = fields[0]
    elif kind == T_CREATE_SESSION:
        out |= {"timeout": fields[0]}
    elif kind == T_CLOSE_SESSION:
        out["deletes"] = fields[0]
    elif kind == T_MULTI:
        out["ops"] = [_describe_op(op[0], op[1:]) for op in fields[0]]
    return out


def describe(payload: bytes) -> dict[str, Any]:
    """A readable form of a ZK txn (``zabd log``, audits), like ZooKeeper's
    ``LogFormatter``; session secrets are never shown."""
    kind, time_ms, session, *fields = decode(payload)
    out = {"session": f"0x{session & 0xFFFFFFFFFFFFFFFF:x}", "time": time_ms}
    return out | _describe_op(kind, fields)

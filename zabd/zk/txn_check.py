"""What a committed ZooKeeper txn must look like for the tree to apply it.

The leader's prepare (``zabd.zk.prep``) only ever makes txns that pass,
but a replica applies whatever was committed, and a txn that raised half way
through an apply would stop every replica, and again at every restart, since
the log replays it. So ``DataTree.apply`` checks a txn whole before it
changes anything: a txn that fails here is refused with the reason
(``MalformedTxn``), the same on every replica (same bytes, same checks), and
the tree stays as it was.

The checks are what the apply relies on: the types it reads, the ranges its
packed fields hold (a znode's versions are int32 as ZooKeeper's, times and
owners int64), paths valid where a node is made, the shapes of a multi's ops.
Extra trailing fields are ignored, as the apply ignores them.
"""

from __future__ import annotations

from typing import Any, Final

from zabd.machine import MalformedTxn
from zabd.zk import txn as tx
from zabd.zk.errors import Code
from zabd.zk.paths import problem as path_problem

I32_MIN: Final = -(1 << 31)
I32_MAX: Final = (1 << 31) - 1
I64_MIN: Final = -(1 << 63)
I64_MAX: Final = (1 << 63) - 1
_CODES: Final = frozenset(int(c) for c in Code)
_MULTI_OPS: Final = frozenset({tx.T_CREATE, tx.T_DELETE, tx.T_SET_DATA, tx.T_CHECK})


def is_i32(x: Any) -> bool:
    return type(x) is int and I32_MIN <= x <= I32_MAX


def is_i64(x: Any) -> bool:
    return type(x) is int and I64_MIN <= x <= I64_MAX


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise MalformedTxn(what)


def _fields(f: list[Any], n: int, name: str) -> None:
    _need(len(f) >= n, f"{name} has {len(f)} fields, needs {n}")


def _data(x: Any) -> None:
    _need(x is None or type(x) is bytes, "data is neither bytes nor null")


def _acl(x: Any) -> None:
    _need(type(x) is list, "an ACL is not a list")
    for entry in x:
        _need(type(entry) is list and len(entry) == 3, "an ACL entry is not [perms, scheme, id]")
        perms, scheme, ident = entry
        _need(is_i32(perms) and type(scheme) is str and type(ident) is str,
              "an ACL entry is not [int32, string, string]")


def _op(kind: Any, f: list[Any]) -> None:
    """One op's fields (``f``: after type, time and session)."""
    if kind == tx.T_SET_DATA:
        _fields(f, 3, "setData")
        _need(type(f[0]) is str, "setData's path is not a string")
        _data(f[1])
        _need(is_i32(f[2]), "setData's version is not an int32")
    elif kind == tx.T_CREATE:
        _fields(f, 5, "create")
        _need(type(f[0]) is str and f[0] != "/" and path_problem(f[0]) is None, "create's path is not valid")
        _data(f[1])
        _acl(f[2])
        _need(is_i64(f[3]), "create's owner is not an int64")
        _need(is_i32(f[4]), "create's parent cversion is not an int32")
    elif kind in (tx.T_DELETE, tx.T_DELETE_CONTAINER, tx.T_CHECK):
        _fields(f, 1, "delete/check")
        _need(type(f[0]) is str, "the path is not a string")
    elif kind == tx.T_SET_ACL:
        _fields(f, 3, "setACL")
        _need(type(f[0]) is str, "setACL's path is not a string")
        _acl(f[1])
        _need(is_i32(f[2]), "setACL's aversion is not an int32")
    elif kind == tx.T_ERROR:
        _fields(f, 1, "error")
        _need(type(f[0]) is int and f[0] in _CODES, "error's code is not one of ZooKeeper's")
    else:
        raise MalformedTxn(f"unknown ZooKeeper txn type {kind!r}")


def check(txn: list[Any]) -> None:
    """MalformedTxn unless the tree can apply ``txn`` (``zk_txn.decode``'s
    ``[type, time_ms, session, *fields]``) whole."""
    kind = txn[0]
    _need(type(kind) is int and is_i64(txn[1]) and is_i64(txn[2]), "type, time or session is not an int64")
    f = txn[3:]
    if kind == tx.T_MULTI:
        _fields(f, 1, "multi")
        ops = f[0]
        _need(type(ops) is list and all(type(op) is list and op and type(op[0]) is int for op in ops),
              "multi's ops are not [type, ...] lists")
        failed = any(op[0] == tx.T_ERROR for op in ops)
        for op in ops:
            if failed:  # decided failed at the leader: every op is [error, code]
                _need(op[0] == tx.T_ERROR, "a failed multi mixes ops with errors")
            else:
                _need(op[0] in _MULTI_OPS, f"a multi holds no op of type {op[0]!r}")
            _op(op[0], op[1:])
    elif kind == tx.T_CREATE_SESSION:
        _fields(f, 2, "createSession")
        _need(type(f[0]) is int and 0 <= f[0] <= I32_MAX, "createSession's timeout is not an int32 >= 0")
        _need(type(f[1]) is bytes, "createSession's secret is not bytes")
    elif kind == tx.T_CLOSE_SESSION:
        _fields(f, 1, "closeSession")
        _need(type(f[0]) is list and all(type(p) is str for p in f[0]), "closeSession's paths are not strings")
    else:
        _op(kind, f)

"""The built-in key-value state machine.

Every key has a value and a version: 0 means "does not exist", a put or a
successful cas sets ``version + 1`` (like ZooKeeper's conditional setData).

Client requests are conditional (``Cas``, ``Delete`` with a version) but the
txns in the log are not: the leader evaluates the condition against its
current state, including txns it proposed that are not committed yet, and
proposes the outcome (LADIS 2008, "ZooKeeper's atomic broadcast", section 1:
idempotent state changes). So ``apply`` never decides anything and applying
a txn twice (a fuzzy snapshot plus a log replay) leaves the same state:

    SET key value version   the key now has exactly this value and version
    DEL key                 the key no longer exists
    ERR code key version    no change; the client's error result, decided by
                            the leader and ordered with the other writes

Payloads are msgpack arrays: ``[1, key, value, version]``, ``[2, key]``,
``[3, code, key, current_version]``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, cast

import msgpack

from zabd.codec.framing import pack
from zabd.machine import MalformedTxn, Restoring, WholeRestore
from zabd.protocol.messages import Txn

OK = "ok"
NO_NODE = "no_node"
BAD_VERSION = "bad_version"
MALFORMED = "malformed"  # a committed txn no replica applies (zabd.kv.kvmachine): never from a leader's prepare
_ERR_CODES = frozenset({NO_NODE, BAD_VERSION})
_U64 = (1 << 64) - 1

_SET = 1
_DEL = 2
_ERR = 3
_SNAP_VERSION = 1


class Put(NamedTuple):
    key: str
    value: bytes


class Cas(NamedTuple):
    """Set ``value`` if the key's version is ``version`` (0: if it does not exist)."""

    key: str
    version: int
    value: bytes


class Delete(NamedTuple):
    key: str
    version: int = -1  # -1: whatever the version


class Get(NamedTuple):
    key: str


Request = Put | Cas | Delete | Get


class Result(NamedTuple):
    code: str  # OK, NO_NODE, BAD_VERSION
    version: int  # the key's version after the op (errors: its current version)
    value: bytes | None = None  # Get only

    @property
    def ok(self) -> bool:
        return self.code == OK


_pack = pack  # a write's payload: the shared Packer (not the snapshot: that runs on its own thread)


def encode_set(key: str, value: bytes, version: int) -> bytes:
    return _pack([_SET, key, value, version])


def encode_del(key: str) -> bytes:
    return _pack([_DEL, key])


def encode_err(code: str, key: str, version: int) -> bytes:
    return _pack([_ERR, code, key, version])


def decode_txn(payload: bytes) -> dict[str, Any]:
    """A readable form of a KV txn (for tools and audits)."""
    op = msgpack.unpackb(payload, raw=False)
    if op[0] == _SET:
        return {"op": "set", "key": op[1], "value": op[2], "version": op[3]}
    if op[0] == _DEL:
        return {"op": "delete", "key": op[1]}
    if op[0] == _ERR:
        return {"op": "error", "code": op[1], "key": op[2], "version": op[3]}
    raise ValueError(f"unknown kv txn type {op[0]!r}")


def prepare(req: Request, version_of: Callable[[str], int]) -> bytes:
    """Turn a client write into an idempotent txn payload, given the leader's
    view of each key's current version (``version_of``, 0 if absent)."""
    if isinstance(req, Put):
        cur = version_of(req.key)
        if cur >= _U64:  # no version after it to set (only a txn no leader made set this one)
            return encode_err(BAD_VERSION, req.key, cur)
        return encode_set(req.key, req.value, cur + 1)
    if isinstance(req, Cas):
        cur = version_of(req.key)
        if cur != req.version or cur >= _U64:
            return encode_err(BAD_VERSION, req.key, cur)
        return encode_set(req.key, req.value, cur + 1)
    if isinstance(req, Delete):
        cur = version_of(req.key)
        if cur == 0:
            return encode_err(NO_NODE, req.key, 0)
        if req.version != -1 and req.version != cur:
            return encode_err(BAD_VERSION, req.key, cur)
        return encode_del(req.key)
    raise TypeError(f"request {req!r} is not a write (Put, Cas or Delete)")


def _is_u64(x: Any) -> bool:
    return type(x) is int and 0 <= x <= _U64


class KVStore:
    """The committed state. ``apply`` is deterministic and idempotent."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[bytes, int]] = {}
        self.applied = 0  # zxid of the last applied txn

    def version(self, key: str) -> int:
        entry = self.data.get(key)
        return entry[1] if entry is not None else 0

    def get(self, key: str) -> Result:
        entry = self.data.get(key)
        if entry is None:
            return Result(NO_NODE, 0)
        return Result(OK, entry[1], entry[0])

    def apply(self, txn: Txn) -> Result:
        """Apply one committed KV txn; MalformedTxn (nothing changed) if it
        is not one of the three, with the types each holds."""
        try:
            op = msgpack.unpackb(txn.payload, raw=False)
        except Exception as exc:  # msgpack raises errors of several kinds
            raise MalformedTxn(f"not a KV txn ({type(exc).__name__}: {exc})") from None
        if type(op) is not list or not op:
            raise MalformedTxn("a KV txn is a non-empty array")
        kind = op[0] if type(op[0]) is int else None  # not True or 1.0, which compare equal to 1
        n = len(op)
        # a set's version is at least 1: 0 means the key does not exist
        if kind == _SET and n == 4 and type(op[1]) is str and type(op[2]) is bytes and _is_u64(op[3]) and op[3]:
            self.applied = txn.zxid
            self.data[op[1]] = (op[2], op[3])
            return Result(OK, op[3])
        if kind == _DEL and n == 2 and type(op[1]) is str:
            self.applied = txn.zxid
            self.data.pop(op[1], None)
            return Result(OK, 0)
        if kind == _ERR and n == 4 and type(op[1]) is str and op[1] in _ERR_CODES and type(op[2]) is str \
                and _is_u64(op[3]):
            self.applied = txn.zxid
            return Result(op[1], op[3])
        raise MalformedTxn(f"not a KV txn: {kind!r} with {n - 1} fields of the wrong kinds")

    # snapshots: sorted, so equal states encode to equal bytes on every node
    def snapshot_view(self) -> object:
        return (self.applied, dict(self.data))

    def encode_view(self, view: object) -> bytes:
        applied, data = cast(tuple[int, dict[str, tuple[bytes, int]]], view)
        items = [[k, v[0], v[1]] for k, v in sorted(data.items())]
        body: bytes = msgpack.packb([_SNAP_VERSION, applied, items])
        return body

    def encode_chunks(self, view: object, size: int) -> Iterator[bytes]:
        yield self.encode_view(view)  # sorted whole: one piece

    def restoring(self) -> Restoring:
        return WholeRestore()

    def restore_from(self, restoring: object) -> None:
        assert isinstance(restoring, WholeRestore)
        self.restore(restoring.data())

    def snapshot(self) -> bytes:
        return self.encode_view(self.snapshot_view())

    def restore(self, data: bytes) -> None:
        fmt, applied, items = msgpack.unpackb(data, raw=False)
        if fmt != _SNAP_VERSION:
            raise ValueError(f"kv snapshot format {fmt} is not {_SNAP_VERSION}")
        self.data = {k: (v, ver) for k, v, ver in items}
        self.applied = int(applied)


class KVLeader:
    """The leader's view for ``prepare``: the committed store plus the
    effect of every txn proposed but not yet committed, so a cas that
    follows an uncommitted put sees the put's version.

    Use: ``payload = leader.prepare(req)``, ``z = node.propose(payload, t)``,
    ``leader.proposed(z, payload)`` (or ``leader.propose(req, fn)``); after the
    store applied up to ``z``: ``leader.committed(z)``; when leadership ends:
    ``leader.reset()`` (the proposals may be lost; the next leader decides).
    """

    def __init__(self, store: KVStore) -> None:
        self.store = store
        self._pending: dict[str, tuple[int, int]] = {}  # key -> (zxid of last proposal, version after it)
        self._order: deque[tuple[int, str]] = deque()  # (zxid, key) in proposal order

    def version(self, key: str) -> int:
        p = self._pending.get(key)
        return p[1] if p is not None else self.store.version(key)

    def prepare(self, req: Request) -> bytes:
        return prepare(req, self.version)

    def proposed(self, zxid: int, payload: bytes) -> None:
        op = msgpack.unpackb(payload, raw=False)
        if op[0] == _SET:
            self._pending[op[1]] = (zxid, op[3])
        elif op[0] == _DEL:
            self._pending[op[1]] = (zxid, 0)
        else:
            return
        self._order.append((zxid, op[1]))

    def propose(self, req: Request, propose: Callable[[bytes], int]) -> int:
        payload = self.prepare(req)
        z = propose(payload)
        self.proposed(z, payload)
        return z

    def committed(self, zxid: int) -> None:
        # O(1) per committed proposal: pop in proposal order; a key stays
        # pending while a later proposal for it is not committed yet.
        order = self._order
        pending = self._pending
        while order and order[0][0] <= zxid:
            z, key = order.popleft()
            p = pending.get(key)
            if p is not None and p[0] == z:
                del pending[key]

    def reset(self) -> None:
        self._pending.clear()
        self._order.clear()

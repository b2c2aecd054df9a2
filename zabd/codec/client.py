"""The client protocol, version 1: msgpack maps in ``u32 length`` frames.

Every request carries ``v`` (schema version), ``type`` (the discriminator: a
key-value state machine adds its own request types here later) and ``id``
(echoed in the response). Responses come back in request order on a
connection; ``watch`` turns its connection into a stream of ``WatchEvent``.

The server validates requests with these models, except ``propose``, whose
hot-path check (:func:`fast_propose`) accepts exactly what the model accepts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from zabd.codec.framing import frame, pack, pack_header

VERSION = 1
U64 = 2**64 - 1

# error codes
NO_LEADER = "no_leader"  # retryable: nothing was proposed
LEADER_LOST = "leader_lost"  # retryable, outcome unknown: the proposal may or may not commit
BAD_REQUEST = "bad_request"  # not retryable: the connection is closed after it
UNSUPPORTED = "unsupported"  # not retryable: unknown version or request type
OVERLOADED = "overloaded"  # retryable
SHUTTING_DOWN = "shutting_down"  # retryable
UNAUTHORIZED = "unauthorized"  # not retryable: a wrong or missing token; the connection is closed after it
FORBIDDEN = "forbidden"  # not retryable: a read-only identity asked to write
PURGED = "purged"  # not retryable: a read below what the log still holds (the message names the oldest zxid)
RETRYABLE = frozenset({NO_LEADER, LEADER_LOST, OVERLOADED, SHUTTING_DOWN})
# KV results decided by the leader (not retryable as they are: the condition failed)
BAD_VERSION = "bad_version"  # cas/delete: the key's version differs ("version" holds the current one)
NO_NODE = "no_node"  # delete: the key does not exist
MALFORMED = "malformed"  # a committed txn no replica could apply (zabd.kv.store; never from a leader's prepare)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    v: Literal[1] = 1
    id: int = Field(ge=0, le=U64)


class ProposeRequest(_Request):
    type: Literal["propose"] = "propose"
    payload: bytes


class AuthRequest(_Request):
    """First on a connection to a server that asks for a token."""

    type: Literal["auth"] = "auth"
    token: str = Field(min_length=1, max_length=4096)


class StatusRequest(_Request):
    type: Literal["status"] = "status"


class ReadRequest(_Request):
    type: Literal["read"] = "read"
    from_zxid: int = Field(default=0, ge=0, le=U64)
    limit: int = Field(default=1000, ge=1, le=100_000)


class WatchRequest(_Request):
    type: Literal["watch"] = "watch"
    from_zxid: int = Field(default=0, ge=0, le=U64)


# Key-value state machine (zabd/kv): writes are ordered through the leader,
# ``get`` is served by the replica the client talks to; ``sync`` first makes
# that replica catch up with the leader's commit point (read-your-writes
# across servers, as in ZooKeeper).
KEY_MAX = 4096


class PutRequest(_Request):
    type: Literal["put"] = "put"
    key: str = Field(min_length=1, max_length=KEY_MAX)
    value: bytes


class CasRequest(_Request):
    """Set ``value`` if the key's version is ``version`` (0: only if absent)."""

    type: Literal["cas"] = "cas"
    key: str = Field(min_length=1, max_length=KEY_MAX)
    version: int = Field(ge=0, le=U64)
    value: bytes


class DeleteRequest(_Request):
    type: Literal["delete"] = "delete"
    key: str = Field(min_length=1, max_length=KEY_MAX)
    version: int = Field(default=-1, ge=-1, le=U64)  # -1: whatever the version


class GetRequest(_Request):
    type: Literal["get"] = "get"
    key: str = Field(min_length=1, max_length=KEY_MAX)


class SyncRequest(_Request):
    type: Literal["sync"] = "sync"


# ZooKeeper sessions over zabd's client port (the test driver of the session
# layer; ZooKeeper's own wire is a separate port): ``zk_connect`` makes the
# connection a ZooKeeper connection, then each ``zk`` request carries one
# ``zabd.zk.msgpack_wire`` request, ``id`` being its xid.
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


class ZKConnectRequest(_Request):
    type: Literal["zk_connect"] = "zk_connect"
    session: int = Field(default=0, ge=I64_MIN, le=I64_MAX)  # 0: a new session
    password: bytes = b""
    timeout: int = Field(default=30_000, ge=0, le=2**31 - 1)  # ms, negotiated by the server
    last_zxid: int = Field(default=0, ge=0, le=U64)  # the last zxid the client saw


class ZKRequest(_Request):
    type: Literal["zk"] = "zk"
    req: bytes


class ReconfigRequest(_Request):
    """A membership change: ``add`` makes nodes voters, ``observe`` observers
    (node id as a decimal string -> quorum host:port, "" for a member's own),
    ``remove`` takes nodes out. The leader's core allows one voter more or
    fewer per change (zabd.protocol.membership)."""

    type: Literal["reconfig"] = "reconfig"
    add: dict[str, str] = {}
    observe: dict[str, str] = {}
    remove: list[int] = []


KVRequest = PutRequest | CasRequest | DeleteRequest | GetRequest | SyncRequest
KV_REQUEST_TYPES = (PutRequest, CasRequest, DeleteRequest, GetRequest, SyncRequest)
AnyRequest = (
    ProposeRequest | StatusRequest | ReadRequest | WatchRequest | KVRequest | AuthRequest | ZKConnectRequest | ZKRequest
    | ReconfigRequest
)
# what a read-only identity may ask
READ_ONLY_TYPES = (StatusRequest, ReadRequest, WatchRequest, GetRequest, SyncRequest, AuthRequest)
Request = Annotated[AnyRequest, Field(discriminator="type")]
REQUEST_ADAPTER: TypeAdapter[AnyRequest] = TypeAdapter(Request)

_PROPOSE_KEYS = frozenset({"v", "type", "id", "payload"})


def fast_propose(body: Any) -> tuple[int, bytes] | None:
    """``(id, payload)`` if ``body`` is a valid propose request, else None
    (the caller then validates with :data:`REQUEST_ADAPTER` for the error)."""
    if type(body) is dict and len(body) == 4 and body.keys() == _PROPOSE_KEYS:
        rid = body["id"]
        payload = body["payload"]
        if (
            body["type"] == "propose"
            and body["v"] == VERSION
            and type(body["v"]) is int
            and type(rid) is int
            and 0 <= rid <= U64
            and type(payload) is bytes
        ):
            return rid, payload
    return None


# ----------------------------------------------------------------- responses


class _Response(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    v: int = VERSION
    id: int
    ok: bool


class ProposeResult(_Response):
    ok: bool = True
    zxid: int


class NodeStatus(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    id: int
    role: str
    phase: str
    leader: int
    current_epoch: int
    accepted_epoch: int
    last_zxid: int
    last_committed: int
    peers: list[int]
    peers_connected: list[int]
    storage: str
    client_connections: int


class StatusResult(_Response):
    ok: bool = True
    status: NodeStatus


class ReadResult(_Response):
    ok: bool = True
    txns: list[tuple[int, bytes]]
    last_committed: int


class WatchEvent(_Response):
    ok: bool = True
    txns: list[tuple[int, bytes]]


class KVWriteResult(_Response):
    ok: bool = True
    zxid: int
    version: int  # the key's version after the write (0 after a delete)


class GetResult(_Response):
    ok: bool = True
    value: bytes | None  # None: the key does not exist
    version: int  # 0: absent
    zxid: int  # the replica's commit point the answer reflects


class SyncResult(_Response):
    ok: bool = True
    zxid: int  # the leader's commit point at the call; this replica has applied it


class ErrorResult(_Response):
    ok: bool = False
    error: str
    message: str
    retryable: bool
    leader: int = 0


def error_body(rid: int, code: str, message: str, leader: int = 0) -> dict[str, Any]:
    return {
        "v": VERSION,
        "id": rid,
        "ok": False,
        "error": code,
        "message": message,
        "retryable": code in RETRYABLE,
        "leader": leader,
    }


def error_frame(rid: int, code: str, message: str, leader: int = 0) -> bytes:
    return frame(error_body(rid, code, message, leader))


_packb = msgpack.packb
_OK_ZXID_A = b"\x84" + _packb("v") + _packb(1) + _packb("id")
_OK_ZXID_B = _packb("ok") + _packb(True) + _packb("zxid") + b"\xcf"


def ok_zxid_frame(rid: int, zxid: int) -> bytes:
    """The frame of {"v": 1, "id": rid, "ok": true, "zxid": zxid}, built
    without msgpack's encoder: it answers most requests (propose, sync)."""
    body: bytes = _OK_ZXID_A + pack(rid) + _OK_ZXID_B + zxid.to_bytes(8, "big")
    return pack_header(len(body)) + body


def kv_write_frame(rid: int, zxid: int, code: str | None, version: int) -> bytes:
    """The answer to a KV write committed at ``zxid``: ``code`` "ok" with the
    key's version, a failed condition's code, or None when its result is not
    known on this server (a snapshot replaced its state past ``zxid``)."""
    if code == "ok":
        return frame({"v": VERSION, "id": rid, "ok": True, "zxid": zxid, "version": version})
    if code is None:  # never "ok" for what may have been a failed condition
        body = error_body(rid, LEADER_LOST, "committed, but its result (ok or a failed condition) "
                          "is not known on this server (a snapshot replaced its state); read the key")
        body["zxid"] = zxid
        return frame(body)
    message = ("committed, but no replica could apply it: nothing changed" if code == MALFORMED
               else f"condition failed: {code} (version {version})")
    body = error_body(rid, code, message)
    body["zxid"] = zxid
    body["version"] = version
    return frame(body)

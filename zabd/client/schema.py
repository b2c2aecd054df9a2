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

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

VERSION = 1
U64 = 2**64 - 1

# error codes
NO_LEADER = "no_leader"  # retryable: nothing was proposed
LEADER_LOST = "leader_lost"  # retryable, outcome unknown: the proposal may or may not commit
BAD_REQUEST = "bad_request"  # not retryable: the connection is closed after it
UNSUPPORTED = "unsupported"  # not retryable: unknown version or request type
OVERLOADED = "overloaded"  # retryable
SHUTTING_DOWN = "shutting_down"  # retryable
RETRYABLE = frozenset({NO_LEADER, LEADER_LOST, OVERLOADED, SHUTTING_DOWN})


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    v: Literal[1] = 1
    id: int = Field(ge=0, le=U64)


class ProposeRequest(_Request):
    type: Literal["propose"] = "propose"
    payload: bytes


class StatusRequest(_Request):
    type: Literal["status"] = "status"


class ReadRequest(_Request):
    type: Literal["read"] = "read"
    from_zxid: int = Field(default=0, ge=0, le=U64)
    limit: int = Field(default=1000, ge=1, le=100_000)


class WatchRequest(_Request):
    type: Literal["watch"] = "watch"
    from_zxid: int = Field(default=0, ge=0, le=U64)


Request = Annotated[ProposeRequest | StatusRequest | ReadRequest | WatchRequest, Field(discriminator="type")]
REQUEST_ADAPTER: TypeAdapter[ProposeRequest | StatusRequest | ReadRequest | WatchRequest] = TypeAdapter(Request)

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

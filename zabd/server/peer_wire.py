"""The peer port's frames: the core's messages and the driver's own.

A body is a msgpack array ``[tag, *fields]``. Tags 0..8 are the core's
canonical messages (the index in ``MESSAGE_TYPES``), 9 and 10 the read
barrier's ``ReadPing``/``ReadPong``, 11 ``ProposeMany`` (``EXTENDED_TYPES``),
so a message maps 1:1 to a frame, except a ProposeMany above a frame's size,
which goes as consecutive ProposeMany frames.
Tags from 64 up are the driver's frames, which the core never sees:

| tag | frame | direction | fields |
| --- | --- | --- | --- |
| 64 | Hello | dialer -> acceptor, first | wire version, node id[, observers (when configured)] |
| 65 | Forward | follower -> leader | forward id, write (raw bytes; [op, key, value, version]; ZKWrite; membership) |
| 66 | ForwardOk | leader -> follower | forward id, zxid (committed) |
| 67 | ForwardErr | leader -> follower | forward id, error code, message |
| 68 | NewLeader part | leader -> follower | epoch, final (0/1), txns (a NewLeader above one frame) |
| 69 | SyncInfo | follower -> leader | base, last zxid of each epoch after it |
| 70 | SyncPlan | leader -> follower | epoch, mode, truncate_to, snapshot zxid, log base, snapshot or nil[, members] |
| 71 | SyncTxns | leader -> follower | epoch, final (0/1), txns (after a SyncPlan) |
| 73 | SyncReq | follower -> leader | forward id (answered by ForwardOk with the commit point) |
| 74 | SnapData | leader -> follower | epoch, more snapshot bytes (between SyncPlan and SyncTxns) |
| 75 | Ping | both | (none): proves an idle link alive |
| 76 | ZKTouch | follower -> leader | ids of the ZooKeeper sessions its clients kept alive since the last one |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, cast

from zabd.codec.framing import FrameError, frame, is_node, is_u32, is_u64, pack_header, short
from zabd.protocol.messages import (
    EXTENDED_TYPES,
    Ack,
    AckEpoch,
    AckLeader,
    Commit,
    LookForLeader,
    Message,
    NewEpoch,
    NewLeader,
    Propose,
    ProposeMany,
    ReadPing,
    ReadPong,
    Txn,
    Vote,
)
from zabd.zk.msgpack_wire import encode_request
from zabd.zk.records import Write as ZKRequest

# 3: ProposeMany (a node of 2 would drop the link at the first batch); 4: raw txns tagged by the
# leader, membership changes forwarded as their own kind, session passwords never on the wire
WIRE_VERSION = 4

TAG_HELLO = 64
TAG_FORWARD = 65
TAG_FORWARD_OK = 66
TAG_FORWARD_ERR = 67
TAG_NEWLEADER_PART = 68
TAG_SYNC_INFO = 69
TAG_SYNC_PLAN = 70
TAG_SYNC_TXNS = 71
TAG_SYNC_REQ = 73
TAG_SNAP_DATA = 74
TAG_PING = 75
TAG_ZK_TOUCH = 76
TAG_MEMBERS = 77

TAG_OF: dict[type, int] = {cls: i for i, cls in enumerate(EXTENDED_TYPES)}
TAG_PROPOSE_MANY = TAG_OF[ProposeMany]
SYNC_MODES = ("DIFF", "TRUNC", "SNAP")
_MEMBERSHIP = "membership"  # a forwarded MembershipWrite: [_MEMBERSHIP, payload]

# A KV write on the wire: (op, key, value, version), op in put/cas/delete.
KVWrite = tuple[str, str, bytes, int]


class ZKWrite(NamedTuple):
    """A ZooKeeper session's write: ``[session, auth, request]`` (a KV write
    has four fields, a raw one is bytes); the request is ``zabd.zk.msgpack_wire`` bytes, decoded by the leader (a bad
    one becomes the session's error answer, not a broken link). Until it is
    forwarded, the request is the record itself: a leader prepares its own
    sessions' writes without encoding and decoding them."""

    session: int
    auth: tuple[tuple[str, str], ...]  # the ids the session proved: (scheme, id)
    request: bytes | ZKRequest


class MembershipWrite(NamedTuple):
    """A membership change a follower's client asked for: its own kind of
    write, never a raw payload that happens to begin like one."""

    payload: bytes  # zabd.protocol.membership.encode


Write = bytes | KVWrite | ZKWrite | MembershipWrite  # bytes: a client's raw proposal, opaque


class Hello(NamedTuple):
    version: int
    node: int
    # the ensemble's observers as the dialer is configured (sent only when
    # there are any: a Hello without them is one from a node without observers);
    # None: the dialer's membership has changed since, and its log decides
    observers: tuple[int, ...] | None = ()


class Forward(NamedTuple):
    fid: int
    write: Write


class ZKTouch(NamedTuple):
    sessions: tuple[int, ...]


class ForwardOk(NamedTuple):
    fid: int
    zxid: int


class ForwardErr(NamedTuple):
    fid: int
    code: str
    message: str


class NewLeaderPart(NamedTuple):
    epoch: int
    final: bool
    txns: tuple[Txn, ...]


class SyncInfoFrame(NamedTuple):
    base: int
    epoch_ends: tuple[int, ...]


class SyncPlanFrame(NamedTuple):
    epoch: int
    mode: str
    truncate_to: int
    snapshot_zxid: int
    log_base: int
    data: bytes | None
    # SNAP: the membership at the snapshot's point (zabd.protocol.membership), when
    # the leader's differs from the configured one; sent only then, as an 8th element,
    # with the zxid of the change that made it as a 9th
    membership: bytes = b""
    membership_zxid: int = 0


class SyncTxns(NamedTuple):
    epoch: int
    final: bool
    txns: tuple[Txn, ...]


class SyncReq(NamedTuple):
    fid: int


class SnapData(NamedTuple):
    epoch: int
    data: bytes


class Ping(NamedTuple):
    pass


class Members(NamedTuple):
    """Sent by a node that accepted a link, after the Hello and again at each
    membership change: the members it knows and their quorum addresses. The
    lower id of a pair dials, so a node whose log is behind (added back after
    a removal) learns here how to reach members that joined after it last
    heard, the leader among them."""

    addresses: tuple[tuple[int, str], ...]


DriverFrame = (
    Hello | Forward | ForwardOk | ForwardErr | NewLeaderPart | SyncInfoFrame | SyncPlanFrame | SyncTxns | SyncReq
    | SnapData | Ping | ZKTouch | Members
)
PeerFrame = Message | DriverFrame

# --------------------------------------------------------------- encoding

# Ack and Commit are most of the frames: [tag, zxid] with the zxid always as
# msgpack uint64 (any integer encoding decodes the same).
_ACK_PREFIX = pack_header(11) + b"\x92\x07\xcf"
_COMMIT_PREFIX = pack_header(11) + b"\x92\x08\xcf"
PING_FRAME = frame((TAG_PING,))


def encode_message(msg: Message) -> bytes:
    """One peer frame for a core message (NamedTuples pack as arrays)."""
    cls = type(msg)
    if cls is Ack or cls is Commit:
        # exact types (a type check, not isinstance: the hot path); both hold only a zxid
        z = cast("Ack | Commit", msg).zxid
        return (_ACK_PREFIX if cls is Ack else _COMMIT_PREFIX) + z.to_bytes(8, "big")
    return frame((TAG_OF[cls], *msg))


_TXN_OVERHEAD = 16  # msgpack bytes around one txn: array header, zxid, bin header


def txn_chunks(txns: tuple[Txn, ...] | list[Txn], budget: int) -> list[list[Txn]]:
    """``txns`` cut into consecutive runs that each encode in about ``budget``
    bytes (a run holds at least one txn); always at least one run."""
    chunks: list[list[Txn]] = []
    chunk: list[Txn] = []
    size = 32
    for txn in txns:
        need = len(txn.payload) + _TXN_OVERHEAD
        if chunk and size + need > budget:
            chunks.append(chunk)
            chunk = []
            size = 32
        chunk.append(txn)
        size += need
    chunks.append(chunk)
    return chunks


def encode_new_leader(msg: NewLeader, max_frame: int) -> list[bytes]:
    """One NewLeader as one frame, or as consecutive part frames when the
    history would not fit in ``max_frame``; the receiver reassembles them and
    hands the core one NewLeader. Wire-level only: FIFO keeps them together."""
    chunks = txn_chunks(msg.history, max_frame // 2)
    if len(chunks) == 1:
        return [encode_message(msg)]
    last = len(chunks) - 1
    return [frame((TAG_NEWLEADER_PART, msg.epoch, int(k == last), chunk)) for k, chunk in enumerate(chunks)]


def encode_propose_many(msg: ProposeMany, max_frame: int) -> list[bytes]:
    """One ProposeMany as one frame, or as consecutive ProposeMany frames of
    its txns when it would not fit in ``max_frame``: the receiver's core takes
    them one after another as it would the one."""
    chunks = txn_chunks(msg.txns, max_frame // 2)
    if len(chunks) == 1:
        return [encode_message(msg)]
    return [frame((TAG_PROPOSE_MANY, chunk)) for chunk in chunks]


def forward_frame(fid: int, write: Write) -> bytes:
    """The Forward frame of ``write`` (a ZooKeeper record encoded on the way)."""
    if type(write) is MembershipWrite:
        return frame((TAG_FORWARD, fid, (_MEMBERSHIP, write.payload)))
    if type(write) is ZKWrite:
        req = write.request
        if not isinstance(req, bytes):
            write = ZKWrite(write.session, write.auth, encode_request(req))
    return frame((TAG_FORWARD, fid, write))


# --------------------------------------------------------------- decoding

# tuple.__new__ directly: a NamedTuple's own __new__ is a Python-level lambda,
# measurably slow at one call per frame.
_tnew = tuple.__new__


def decode_txn(x: Any) -> Txn:
    if type(x) is tuple and len(x) == 2:
        z, p = x
        if type(z) is int and 0 < z <= 0xFFFF_FFFF_FFFF_FFFF and type(p) is bytes:
            return _tnew(Txn, x)
    raise FrameError(f"bad txn {short(x)}")


def decode_txns(raw: Any, what: str) -> tuple[Txn, ...]:
    """Txns in strictly ascending zxid order, or FrameError."""
    if type(raw) is not tuple:
        raise FrameError(f"malformed {what}: txns are not an array")
    txns = tuple(decode_txn(t) for t in raw)
    last = 0
    for t in txns:
        if t.zxid <= last:
            raise FrameError(f"{what} txns are not in ascending zxid order")
        last = t.zxid
    return txns


def _core(tag: int, body: tuple[Any, ...]) -> Message | None:
    n = len(body)
    if tag == 7:  # Ack: the most frequent frame first
        if n == 2 and is_u64(body[1]):
            return _tnew(Ack, body[1:])
    elif tag == 8:
        if n == 2 and is_u64(body[1]):
            return _tnew(Commit, body[1:])
    elif tag == 6:
        if n == 2:
            return _tnew(Propose, (decode_txn(body[1]),))
    elif tag == 11:
        if n == 2:
            txns = decode_txns(body[1], "ProposeMany")
            if txns:
                return _tnew(ProposeMany, (txns,))
    elif tag == 0:
        if n == 4 and is_u32(body[1]) and is_u64(body[2]) and is_u32(body[3]):
            return LookForLeader(body[1], body[2], body[3])
    elif tag == 1:
        if n == 5 and is_u32(body[1]) and is_u64(body[2]) and is_u32(body[3]) and is_node(body[4]):
            return Vote(body[1], body[2], body[3], body[4])
    elif tag == 2:
        if n == 2 and is_u32(body[1]):
            return NewEpoch(body[1])
    elif tag == 3:
        if n == 4 and is_u32(body[1]) and is_u32(body[2]) and is_u64(body[3]):
            return AckEpoch(body[1], body[2], body[3])
    elif tag == 4:
        if n == 3 and is_u32(body[1]):
            return NewLeader(body[1], decode_txns(body[2], "NewLeader"))
    elif tag == 5 and n == 2 and is_u32(body[1]):
        return AckLeader(body[1])
    elif tag == 9 and n == 2 and is_u64(body[1]):
        return ReadPing(body[1])
    elif tag == 10 and n == 2 and is_u64(body[1]):
        return ReadPong(body[1])
    return None


def decode_message(body: Any) -> Message:
    """A validated core message from a decoded body (tags 0..8 only)."""
    tag = _tag(body)
    if not 0 <= tag < len(EXTENDED_TYPES):
        raise FrameError(f"unknown peer frame tag {short(tag)}")
    msg = _core(tag, body)
    if msg is None:
        raise FrameError(f"malformed {EXTENDED_TYPES[tag].__name__} frame {short(body)}")
    return msg


def _tag(body: Any) -> int:
    if type(body) is not tuple or not body:
        raise FrameError(f"peer frame is not an array: {short(body)}")
    tag = body[0]
    if type(tag) is not int:
        raise FrameError(f"peer frame tag is not an integer: {short(tag)}")
    return tag


def _kv_write(x: Any) -> KVWrite | None:
    if type(x) is tuple and len(x) == 4 and type(x[1]) is str and type(x[2]) is bytes and type(x[3]) is int:
        op, _key, _value, version = x
        if (op == "put" and version == 0) or (op == "cas" and is_u64(version)):
            return x
        if op == "delete" and (version == -1 or is_u64(version)):
            return x
    return None


def _is_i64(x: Any) -> bool:
    return type(x) is int and -(1 << 63) <= x < (1 << 63)


def _zk_write(x: Any) -> ZKWrite | None:
    if type(x) is tuple and len(x) == 3 and _is_i64(x[0]) and type(x[2]) is bytes:
        auth = x[1]
        if type(auth) is tuple and all(
            type(a) is tuple and len(a) == 2 and type(a[0]) is str and type(a[1]) is str for a in auth
        ):
            return _tnew(ZKWrite, x)
    return None


def _zk_touch(b: tuple[Any, ...]) -> ZKTouch | None:
    if len(b) == 2 and type(b[1]) is tuple and all(_is_i64(s) for s in b[1]):
        return ZKTouch(b[1])
    return None


def _hello(b: tuple[Any, ...]) -> Hello | None:
    if not (3 <= len(b) <= 4 and type(b[1]) is int and is_node(b[2])):
        return None
    if len(b) == 3:
        return Hello(b[1], b[2])
    observers = b[3]
    if observers is not None and (type(observers) is not tuple or not all(is_node(o) for o in observers)):
        return None
    return Hello(b[1], b[2], observers)


def _membership_write(x: Any) -> MembershipWrite | None:
    if type(x) is tuple and len(x) == 2 and x[0] == _MEMBERSHIP and type(x[1]) is bytes:
        return MembershipWrite(x[1])
    return None


def _forward(b: tuple[Any, ...]) -> Forward | None:
    if len(b) == 3 and is_u64(b[1]):
        w = b[2]
        write: Write | None = w if type(w) is bytes else _kv_write(w)
        if write is None:
            write = _zk_write(w)
        if write is None:
            write = _membership_write(w)
        if write is not None:
            return _tnew(Forward, (b[1], write))
    return None


def _forward_ok(b: tuple[Any, ...]) -> ForwardOk | None:
    return ForwardOk(b[1], b[2]) if len(b) == 3 and is_u64(b[1]) and is_u64(b[2]) else None


def _forward_err(b: tuple[Any, ...]) -> ForwardErr | None:
    ok = len(b) == 4 and is_u64(b[1]) and type(b[2]) is str and type(b[3]) is str
    return ForwardErr(b[1], b[2], b[3]) if ok else None


def _new_leader_part(b: tuple[Any, ...]) -> NewLeaderPart | None:
    if len(b) == 4 and is_u32(b[1]) and b[2] in (0, 1):
        return NewLeaderPart(b[1], b[2] == 1, decode_txns(b[3], "NewLeader part"))
    return None


def _sync_info(b: tuple[Any, ...]) -> SyncInfoFrame | None:
    if len(b) == 3 and is_u64(b[1]) and type(b[2]) is tuple and all(is_u64(e) for e in b[2]):
        return SyncInfoFrame(b[1], b[2])
    return None


def _sync_plan(b: tuple[Any, ...]) -> SyncPlanFrame | None:
    if (
        len(b) in (7, 8, 9)
        and is_u32(b[1])
        and b[2] in SYNC_MODES
        and all(is_u64(x) for x in b[3:6])
        and (b[6] is None or type(b[6]) is bytes)
        and (len(b) == 7 or type(b[7]) is bytes)
        and (len(b) < 9 or is_u64(b[8]))
    ):
        return SyncPlanFrame(b[1], b[2], b[3], b[4], b[5], b[6], b[7] if len(b) >= 8 else b"",
                             b[8] if len(b) == 9 else 0)
    return None


def _sync_txns(b: tuple[Any, ...]) -> SyncTxns | None:
    if len(b) == 4 and is_u32(b[1]) and b[2] in (0, 1):
        return SyncTxns(b[1], b[2] == 1, decode_txns(b[3], "SyncTxns"))
    return None


def _sync_req(b: tuple[Any, ...]) -> SyncReq | None:
    return SyncReq(b[1]) if len(b) == 2 and is_u64(b[1]) else None


def _snap_data(b: tuple[Any, ...]) -> SnapData | None:
    return SnapData(b[1], b[2]) if len(b) == 3 and is_u32(b[1]) and type(b[2]) is bytes else None


def _ping(b: tuple[Any, ...]) -> Ping | None:
    return Ping() if len(b) == 1 else None


def _members(b: tuple[Any, ...]) -> Members | None:
    if len(b) == 2 and type(b[1]) is tuple and all(
        type(m) is tuple and len(m) == 2 and is_node(m[0]) and type(m[1]) is str and len(m[1]) <= 300 for m in b[1]
    ):
        return Members(b[1])
    return None


_DRIVER: dict[int, tuple[str, Callable[[tuple[Any, ...]], DriverFrame | None]]] = {
    TAG_HELLO: ("Hello", _hello),
    TAG_FORWARD: ("Forward", _forward),
    TAG_FORWARD_OK: ("ForwardOk", _forward_ok),
    TAG_FORWARD_ERR: ("ForwardErr", _forward_err),
    TAG_NEWLEADER_PART: ("NewLeader part", _new_leader_part),
    TAG_SYNC_INFO: ("SyncInfo", _sync_info),
    TAG_SYNC_PLAN: ("SyncPlan", _sync_plan),
    TAG_SYNC_TXNS: ("SyncTxns", _sync_txns),
    TAG_SYNC_REQ: ("SyncReq", _sync_req),
    TAG_SNAP_DATA: ("SnapData", _snap_data),
    TAG_PING: ("Ping", _ping),
    TAG_MEMBERS: ("Members", _members),
    TAG_ZK_TOUCH: ("ZKTouch", _zk_touch),
}


def decode_frame(body: Any) -> PeerFrame:
    """A validated core message or driver frame; FrameError otherwise."""
    tag = _tag(body)
    if 0 <= tag < len(EXTENDED_TYPES):
        msg = _core(tag, body)
        if msg is None:
            raise FrameError(f"malformed {EXTENDED_TYPES[tag].__name__} frame {short(body)}")
        return msg
    entry = _DRIVER.get(tag)
    if entry is None:
        raise FrameError(f"unknown peer frame tag {tag}")
    name, decode = entry
    got = decode(body)
    if got is None:
        raise FrameError(f"malformed {name} frame {short(body)}")
    return got

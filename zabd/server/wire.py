"""Frames on both ports: ``u32 big-endian length + msgpack body``.

Peer bodies are msgpack arrays ``[tag, *fields]``: tags 0..8 are the core's
messages (``MESSAGE_TYPES`` index), so a message maps 1:1 to a frame. Tags
from 64 up are the driver's own frames (hello, follower->leader forwarding);
the core never sees them.

Decoding validates shape and integer ranges by hand, not with pydantic: this
is the hot path (several frames per committed proposal).
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from zabd.protocol.messages import (
    MESSAGE_TYPES,
    Ack,
    AckEpoch,
    AckLeader,
    Commit,
    LookForLeader,
    Message,
    NewEpoch,
    NewLeader,
    Propose,
    Txn,
    Vote,
)

U32 = 0xFFFF_FFFF
U64 = 0xFFFF_FFFF_FFFF_FFFF
NODE_MAX = 255

TAG_HELLO = 64  # [64, WIRE_VERSION, node_id]
TAG_FORWARD = 65  # [65, fwd_id, payload]          follower -> leader
TAG_FORWARD_OK = 66  # [66, fwd_id, zxid]           leader -> follower, after commit
TAG_FORWARD_ERR = 67  # [67, fwd_id, code, message]  leader -> follower
TAG_PING = 75  # [75]  on an idle link: proves the link alive to the other end
WIRE_VERSION = 1

_HEADER = struct.Struct(">I")
_unpack_header = _HEADER.unpack_from
_pack_header = _HEADER.pack
_packb = msgpack.packb
_unpackb = msgpack.unpackb

TAG_OF: dict[type, int] = {cls: i for i, cls in enumerate(MESSAGE_TYPES)}


class FrameError(Exception):
    """A frame that cannot be accepted: the connection carrying it is closed."""


def frame(obj: Any) -> bytes:
    body: bytes = _packb(obj)
    return _pack_header(len(body)) + body


# Ack and Commit are most of the frames: [tag, zxid] with the zxid always as
# msgpack uint64 (any integer encoding decodes the same).
_ACK_PREFIX = _pack_header(11) + b"\x92\x07\xcf"
_COMMIT_PREFIX = _pack_header(11) + b"\x92\x08\xcf"


def encode_message(msg: Message) -> bytes:
    """One peer frame for a core message (NamedTuples pack as arrays)."""
    cls = type(msg)
    if cls is Ack or cls is Commit:
        z: int = msg[0]  # type: ignore[assignment]
        return (_ACK_PREFIX if cls is Ack else _COMMIT_PREFIX) + z.to_bytes(8, "big")
    return frame((TAG_OF[cls], *msg))


_OK_ZXID_A = b"\x84" + _packb("v") + _packb(1) + _packb("id")
_OK_ZXID_B = _packb("ok") + _packb(True) + _packb("zxid") + b"\xcf"


def ok_zxid_frame(rid: int, zxid: int) -> bytes:
    """The client frame {"v": 1, "id": rid, "ok": true, "zxid": zxid}."""
    body: bytes = _OK_ZXID_A + _packb(rid) + _OK_ZXID_B + zxid.to_bytes(8, "big")
    return _pack_header(len(body)) + body


class FrameReader:
    """Splits a byte stream into msgpack bodies, many per read.

    Raises :class:`FrameError` on a frame above ``max_frame`` (checked from the
    header, before the body is buffered) or one whose body is not msgpack.
    """

    __slots__ = ("_buf", "max_frame", "use_list")

    def __init__(self, max_frame: int, *, use_list: bool = False) -> None:
        self._buf = bytearray()
        self.max_frame = max_frame
        self.use_list = use_list

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[Any]:
        buf = self._buf
        buf += data
        out: list[Any] = []
        pos = 0
        end = len(buf)
        max_frame = self.max_frame
        use_list = self.use_list
        with memoryview(buf) as view:
            while end - pos >= 4:
                (n,) = _unpack_header(view, pos)
                if n > max_frame:
                    raise FrameError(f"frame of {n} bytes exceeds the {max_frame}-byte limit")
                if end - pos - 4 < n:
                    break
                start = pos + 4
                pos = start + n
                try:
                    out.append(_unpackb(view[start:pos], use_list=use_list, raw=False, strict_map_key=True))
                except Exception as exc:
                    raise FrameError(f"undecodable frame body ({type(exc).__name__}: {exc})") from None
        if pos:
            del buf[:pos]
        return out


# ------------------------------------------------------------- peer decoding


def _u32(x: Any) -> bool:
    return type(x) is int and 0 <= x <= U32


def _u64(x: Any) -> bool:
    return type(x) is int and 0 <= x <= U64


def _node(x: Any) -> bool:
    return type(x) is int and 0 <= x <= NODE_MAX


# tuple.__new__ directly: a NamedTuple's own __new__ is a Python-level lambda,
# measurably slow at one call per frame.
_tnew = tuple.__new__


def _txn(x: Any) -> Txn:
    if type(x) is tuple and len(x) == 2:
        z, p = x
        if type(z) is int and 0 < z <= U64 and type(p) is bytes:
            return _tnew(Txn, x)
    raise FrameError(f"bad txn {_short(x)}")


def _short(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 80 else r[:77] + "..."


def decode_message(body: Any) -> Message:
    """A validated core message from a decoded body (tags 0..8 only)."""
    if type(body) is not tuple or not body:
        raise FrameError(f"peer frame is not an array: {_short(body)}")
    tag = body[0]
    if type(tag) is not int:
        raise FrameError(f"peer frame tag is not an integer: {_short(tag)}")
    n = len(body)
    if tag == 7:  # Ack: the most frequent frame first
        if n == 2 and _u64(body[1]):
            return _tnew(Ack, body[1:])
    elif tag == 8:
        if n == 2 and _u64(body[1]):
            return _tnew(Commit, body[1:])
    elif tag == 6:
        if n == 2:
            return _tnew(Propose, (_txn(body[1]),))
    elif tag == 0:
        if n == 4 and _u32(body[1]) and _u64(body[2]) and _u32(body[3]):
            return LookForLeader(body[1], body[2], body[3])
    elif tag == 1:
        if n == 5 and _u32(body[1]) and _u64(body[2]) and _u32(body[3]) and _node(body[4]):
            return Vote(body[1], body[2], body[3], body[4])
    elif tag == 2:
        if n == 2 and _u32(body[1]):
            return NewEpoch(body[1])
    elif tag == 3:
        if n == 4 and _u32(body[1]) and _u32(body[2]) and _u64(body[3]):
            return AckEpoch(body[1], body[2], body[3])
    elif tag == 4:
        if n == 3 and _u32(body[1]) and type(body[2]) is tuple:
            history = tuple(_txn(t) for t in body[2])
            last = 0
            for t in history:
                if t.zxid <= last:
                    raise FrameError("NewLeader history is not in ascending zxid order")
                last = t.zxid
            return NewLeader(body[1], history)
    elif tag == 5:
        if n == 2 and _u32(body[1]):
            return AckLeader(body[1])
    else:
        raise FrameError(f"unknown peer frame tag {_short(tag)}")
    raise FrameError(f"malformed {MESSAGE_TYPES[tag].__name__} frame {_short(body)}")


# ------------------------------------------- NewLeader larger than one frame

TAG_NEWLEADER_PART = 68  # [68, epoch, final (0|1), ((zxid, payload), ...)]
_TXN_OVERHEAD = 16  # msgpack bytes around one txn: array header, zxid, bin header


def encode_new_leader(msg: NewLeader, max_frame: int) -> list[bytes]:
    """One NewLeader as one frame, or as consecutive part frames when the
    history would not fit in ``max_frame``; the receiver reassembles them and
    hands the core one NewLeader. Wire-level only: FIFO keeps them together."""
    history = msg.history
    budget = max_frame // 2
    total = 32
    for txn in history:
        total += len(txn.payload) + _TXN_OVERHEAD
        if total > budget:
            break
    else:
        return [encode_message(msg)]
    frames: list[bytes] = []
    chunk: list[Txn] = []
    size = 32
    for txn in history:
        need = len(txn.payload) + _TXN_OVERHEAD
        if chunk and size + need > budget:
            frames.append(frame((TAG_NEWLEADER_PART, msg.epoch, 0, chunk)))
            chunk = []
            size = 32
        chunk.append(txn)
        size += need
    frames.append(frame((TAG_NEWLEADER_PART, msg.epoch, 1, chunk)))
    return frames


class NewLeaderAssembler:
    """Collects NewLeader part frames from one connection."""

    __slots__ = ("epoch", "txns")

    def __init__(self) -> None:
        self.epoch = -1
        self.txns: list[Txn] = []

    def add(self, body: tuple[Any, ...]) -> NewLeader | None:
        if len(body) != 4 or not _u32(body[1]) or not _u32(body[2]) or body[2] > 1 or type(body[3]) is not tuple:
            raise FrameError(f"malformed NewLeader part {_short(body)}")
        epoch = body[1]
        if self.txns and epoch != self.epoch:
            raise FrameError(f"NewLeader part for epoch {epoch} inside one for epoch {self.epoch}")
        self.epoch = epoch
        last = self.txns[-1].zxid if self.txns else 0
        for raw in body[3]:
            txn = _txn(raw)
            if txn.zxid <= last:
                raise FrameError("NewLeader history is not in ascending zxid order")
            last = txn.zxid
            self.txns.append(txn)
        if body[2] != 1:
            return None
        msg = NewLeader(epoch, tuple(self.txns))
        self.txns = []
        self.epoch = -1
        return msg

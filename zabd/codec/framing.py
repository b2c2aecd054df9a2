"""Frames on both ports: ``u32 big-endian length + msgpack body``.

Decoding validates by hand, not with pydantic, on the peer port: it is the
hot path (several frames per committed proposal).
"""

from __future__ import annotations

import contextlib
import socket
import struct
from typing import Any

import msgpack

U32 = 0xFFFF_FFFF
U64 = 0xFFFF_FFFF_FFFF_FFFF
NODE_MAX = 255

_HEADER = struct.Struct(">I")
unpack_header = _HEADER.unpack_from
pack_header = _HEADER.pack
_unpackb = msgpack.unpackb

# msgpack.packb builds a Packer, with a 256 KiB buffer of its own, for every
# call: half the cost of packing a 1 KiB txn. One shared Packer instead
# (packing plain values runs no Python code, so the GIL keeps it to one
# caller at a time), replaced after a frame that grew its buffer past the
# initial size, so that it never keeps a big one.
_KEEP_BUFFER = 0x40000  # a Packer's initial buffer
_packer = msgpack.Packer()


class FrameError(Exception):
    """A frame that cannot be accepted: the connection carrying it is closed."""


def no_delay(transport: Any) -> None:
    """TCP_NODELAY on an asyncio transport's socket: frames are small and
    latency-bound, and Nagle's algorithm would hold each one back for an ACK."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def pack(obj: Any) -> bytes:
    """``msgpack.packb(obj)``, the same bytes, without a Packer per call."""
    global _packer
    body: bytes = _packer.pack(obj)
    if len(body) > _KEEP_BUFFER:
        _packer = msgpack.Packer()
    return body


def frame(obj: Any) -> bytes:
    body = pack(obj)
    return pack_header(len(body)) + body


def is_u32(x: Any) -> bool:
    return type(x) is int and 0 <= x <= U32


def is_u64(x: Any) -> bool:
    return type(x) is int and 0 <= x <= U64


def is_node(x: Any) -> bool:
    return type(x) is int and 0 <= x <= NODE_MAX


def short(x: Any) -> str:
    """``repr`` cut to one short line, for error messages about bad input."""
    try:
        r = repr(x)
    except RecursionError:  # msgpack decodes arrays and maps nested up to 1024 deep
        return f"<{type(x).__name__} nested too deeply>"
    return r if len(r) <= 80 else r[:77] + "..."


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
                (n,) = unpack_header(view, pos)
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

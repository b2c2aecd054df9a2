"""A connection's socket end, under every link the transport keeps (peers,
zabd's clients, ZooKeeper's clients)."""

from __future__ import annotations

import asyncio
from typing import cast

from zabd.codec.framing import no_delay


def _peername(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else "?"


class Link(asyncio.Protocol):
    """One connection's socket end: its address, TLS or not, writes and
    the write buffer; what is written comes from ``take_output``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.addr = "?"
        self.closed = False
        self.tls = False
        self.max_queued = 1 << 62  # bytes written and not sent beyond which the link is closed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        no_delay(transport)
        self.addr = _peername(transport)
        self.tls = transport.get_extra_info("ssl_object") is not None

    def forget(self) -> None:
        """Drop the references that make a closed link a cycle (its session's
        output callback names it; its transport and it name each other). The
        server freezes what survives a collection (``status.freeze_survivors``)
        and frozen cycles are never collected: a link is freed by reference
        counting alone, with its buffers, or never."""
        self.transport = None

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()

    def write(self, frames: list[bytes]) -> None:
        t = self.transport
        if frames and t is not None and not self.closed:
            if self.tls:
                # one TLS record per element otherwise: each small frame its
                # own encryption, header and (at the reader) decryption call
                t.write(b"".join(frames))
            else:
                t.writelines(frames)

    def buffered(self) -> int:
        t = self.transport
        return t.get_write_buffer_size() if t is not None and not self.closed else 0

    def take_output(self, now: float) -> list[bytes]:
        raise NotImplementedError

    def held(self) -> int:
        """Bytes queued for this link outside its socket's buffer (behind a stream)."""
        return 0

    def more_output(self) -> bool:
        """Something is left to take at the loop's next turn (a stream)."""
        return False

"""One client connection as a state machine of bytes, without a socket.

Requests are answered in the order they arrived (FIFO client order, as
ZooKeeper guarantees), however their answers are computed: each request gets
a :class:`Slot`, answers leave only from the head of the queue. A slot may be
*deferred*: its answer is computed only when every earlier one has been
answered (a ``get`` pipelined after a ``put`` sees the put). A watch turns
the connection into a stream of committed transactions.

A client that does not read its answers is paced: deferred answers are
computed at most ``ANSWER_BUDGET`` bytes ahead of what the transport took,
none while its socket buffer is full (``writing_paused``), and while it is
full the connection's requests are not read either; so what it costs stays
near the socket's high-water mark however many reads it has queued
(``zabd.server.limits``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from zabd.codec.framing import FrameReader
from zabd.tokens import RW

MAX_OUTSTANDING = 4096  # requests in flight on one connection before reading pauses
# deferred answers computed ahead of the transport, per connection: a batch of reads
# is answered across loop iterations, not all at once
ANSWER_BUDGET = 256 << 10


class Slot:
    __slots__ = ("data", "resolve")

    def __init__(self, resolve: Callable[[], bytes] | None = None) -> None:
        self.data: bytes | None = None
        self.resolve = resolve


class BodyReader(Protocol):
    """Frames in, bodies out (FrameError-like on a bad frame)."""

    max_frame: int

    def feed(self, data: bytes) -> list[Any]: ...

    @property
    def buffered(self) -> int: ...


class ClientSession:
    def __init__(self, max_frame: int, reader: BodyReader | None = None) -> None:
        # zabd's msgpack frames, or another protocol's (ZooKeeper's jute port)
        self.reader: BodyReader = reader if reader is not None else FrameReader(max_frame, use_list=True)
        self.max_frame = max_frame
        self.slots: deque[Slot] = deque()
        self.out: list[bytes] = []
        self.closed = False
        self.reading_paused = False
        self.writing_paused = False  # its socket does not drain: deferred answers wait
        self.out_bytes = 0  # in ``out`` now
        self.held = False  # deferred answers wait for the transport to take what is out
        self.watch_id: int | None = None
        self.watch_next = 0  # first zxid the watcher has not been sent
        self.role: str | None = RW  # None until a client proves who it is (zabd.server.auth)
        self.hangup = False  # close once what is queued is out (a ZooKeeper session ended)
        # told when output appears, so that a transport writes only the
        # connections that have something to say
        self.on_output: Callable[[], None] | None = None

    def feed(self, data: bytes) -> list[Any]:
        """Request bodies (FrameError on a bad frame: close the connection)."""
        return self.reader.feed(data)

    @property
    def mid_frame(self) -> int:
        return self.reader.buffered

    def frames_upto(self, limit: int) -> None:
        """Read no frame longer than ``limit`` (0: ``max_frame``): a connection
        that must authenticate first may send nothing bigger than a token."""
        self.reader.max_frame = min(limit, self.max_frame) if limit else self.max_frame

    # -------------------------------------------------------------- answers

    def open_slot(self, resolve: Callable[[], bytes] | None = None) -> Slot:
        """A place for the answer of the request just read. With ``resolve``,
        the answer is ``resolve()``, called when every earlier answer is out."""
        slot = Slot(resolve)
        self.slots.append(slot)
        if resolve is not None and len(self.slots) == 1:
            self._drain()
        return slot

    def answer(self, frame: bytes) -> None:
        """Answer the request just read, in its turn."""
        slot = Slot()
        self.slots.append(slot)
        self.complete(slot, frame)

    def complete(self, slot: Slot, frame: bytes) -> None:
        if self.closed:
            return
        slot.data = frame
        if self.slots and self.slots[0] is slot:
            self._drain()

    def _drain(self) -> None:
        slots = self.slots
        out = self.out
        was_empty = not out
        while slots:
            head = slots[0]
            if head.data is None:
                if head.resolve is None:
                    break
                if self.writing_paused or self.out_bytes >= ANSWER_BUDGET:
                    self.held = True
                    break
                head.data = head.resolve()
            if not head.data and self.hangup:
                # no answer (its connection ended first): nothing after it may
                # go either, or the client would read answers out of order
                slots.clear()
                break
            out.append(head.data)
            self.out_bytes += len(head.data)
            slots.popleft()
        if was_empty and out and self.on_output is not None:
            self.on_output()

    @property
    def outstanding(self) -> int:
        return len(self.slots)

    def wants_pause(self) -> bool:
        """Too many requests in flight, or answers not read: stop reading until some are answered."""
        return not self.reading_paused and (self.writing_paused or len(self.slots) > MAX_OUTSTANDING)

    def wants_resume(self) -> bool:
        return self.reading_paused and not self.writing_paused and len(self.slots) <= MAX_OUTSTANDING // 2

    def drained(self) -> None:
        """Its socket drains again: compute the answers that waited."""
        self.writing_paused = False
        if self.held:
            self.held = False
            self._drain()

    # ---------------------------------------------------------------- watch

    def start_watch(self, watch_id: int, from_zxid: int) -> None:
        self.watch_id = watch_id
        self.watch_next = from_zxid

    @property
    def watching(self) -> bool:
        return self.watch_id is not None

    # --------------------------------------------------------------- output

    def push(self, frame: bytes) -> None:
        if not self.out and self.on_output is not None:
            self.on_output()
        self.out.append(frame)

    def hang_up(self) -> None:
        """Close the connection once what is queued now is written."""
        self.hangup = True
        if self.on_output is not None:
            self.on_output()

    def take_output(self) -> list[bytes]:
        out = self.out
        if out:
            self.out = []
            self.out_bytes = 0
        if self.held and not self.writing_paused:
            # the next answers, for the next write (told by on_output)
            self.held = False
            self._drain()
        return out

    def close(self) -> None:
        self.closed = True
        self.slots.clear()

"""The one interface committed transactions are applied to.

``apply`` must be deterministic: every replica applies the same txns in the
same order and must reach the same state, and re-applying a txn a snapshot
already covers (a snapshot taken while commits go on) must not change that
state, so txns are idempotent (the leader resolves conditions when it
proposes). The snapshot methods let a server snapshot the state without
stopping commits and send it to a follower that is too far behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from zabd.protocol.membership import MAGIC as MEMBERSHIP_MAGIC
from zabd.protocol.messages import Txn


class MalformedTxn(ValueError):
    """A committed txn a state machine will not apply: it changed nothing,
    and every replica refuses it alike (same bytes, same checks)."""


class Restoring(Protocol):
    def feed(self, data: bytes | memoryview) -> None:
        """The snapshot's next bytes; ValueError if they cannot be one's."""
        ...

    def check(self) -> None:
        """ValueError unless what was fed is a whole, valid snapshot."""
        ...


class StateMachine(Protocol):
    def apply(self, txn: Txn) -> object:
        """Apply one committed txn (in zxid order); returns the client's result."""
        ...

    def snapshot(self) -> bytes:
        """The whole state, encoded (= ``encode_view(snapshot_view())``)."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a ``snapshot()``."""
        ...

    def snapshot_view(self) -> object:
        """A cheap immutable copy of the state, taken on the applying thread
        between two applies; encoded later on another thread."""
        ...

    def encode_view(self, view: object) -> bytes:
        """Encode a ``snapshot_view()``; safe on any thread."""
        ...

    def encode_chunks(self, view: object, size: int) -> Iterator[bytes]:
        """``encode_view(view)`` in pieces of about ``size`` bytes, each a
        bounded step of work: a SNAP streamed between a leader's other work,
        a snapshot written without holding the interpreter for its length."""
        ...

    def restoring(self) -> Restoring:
        """A restore fed piece by piece (``restore`` is one piece)."""
        ...

    def restore_from(self, restoring: object) -> None:
        """Replace the whole state with what a ``restoring()`` was fed
        (ValueError, nothing replaced, if that was not a whole snapshot)."""
        ...

    @property
    def membership_changes(self) -> list[tuple[int, bytes]]:
        """Every membership change applied, (zxid, payload), in order: part of
        the state, so a snapshot says what the membership was at its point."""
        ...


class NullMachine:
    """No state besides the log itself (``state_machine = "none"``): nothing
    to apply, and a snapshot of it is empty. A server running it keeps its
    whole log (a purge would lose the state)."""

    def __init__(self) -> None:
        # the log is the whole state here (no snapshots): a replay sees every change
        self.membership_changes: list[tuple[int, bytes]] = []

    def apply(self, txn: Txn) -> object:
        if txn.payload.startswith(MEMBERSHIP_MAGIC):
            record_change(self.membership_changes, txn)
        return None

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass

    def snapshot_view(self) -> object:
        return None

    def encode_view(self, view: object) -> bytes:
        return b""

    def encode_chunks(self, view: object, size: int) -> Iterator[bytes]:
        yield b""

    def restoring(self) -> Restoring:
        return NothingToRestore()

    def restore_from(self, restoring: object) -> None:
        pass


class WholeRestore:
    """The restore of a state machine that decodes its snapshot in one go:
    the pieces are kept until ``restore_from`` has them all."""

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, data: bytes | memoryview) -> None:
        self._data += data

    def check(self) -> None:
        pass  # decoded by restore_from, all at once

    def data(self) -> bytes:
        return bytes(self._data)


class NothingToRestore:
    def feed(self, data: bytes | memoryview) -> None:
        if data:
            raise ValueError(f"a snapshot of {len(data)} bytes for a server without a state machine")

    def check(self) -> None:
        pass


def record_change(changes: list[tuple[int, bytes]], txn: Txn) -> None:
    """Append a membership change once (a replay may apply it again)."""
    if not changes or changes[-1][0] < txn.zxid:
        changes.append((txn.zxid, txn.payload))


def membership_at(changes: list[tuple[int, bytes]], zxid: int) -> tuple[int, bytes] | None:
    """The last change at or below ``zxid``: its zxid and payload (None: none)."""
    found = None
    for change in changes:
        if change[0] > zxid:
            break
        found = change
    return found

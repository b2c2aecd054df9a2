"""The one interface committed transactions are applied to.

``apply`` must be deterministic: every replica applies the same txns in the
same order and must reach the same state, and re-applying a txn a snapshot
already covers (a snapshot taken while commits go on) must not change that
state, so txns are idempotent (the leader resolves conditions when it
proposes). The snapshot methods let a server snapshot the state without
stopping commits and send it to a follower that is too far behind.
"""

from __future__ import annotations

from typing import Protocol

from zabd.protocol.messages import Txn


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


class NullMachine:
    """No state besides the log itself (``state_machine = "none"``): nothing
    to apply, and a snapshot of it is empty. A server running it keeps its
    whole log (a purge would lose the state)."""

    def apply(self, txn: Txn) -> object:
        return None

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass

    def snapshot_view(self) -> object:
        return None

    def encode_view(self, view: object) -> bytes:
        return b""

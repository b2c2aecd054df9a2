"""The hook committed transactions are applied to, in zxid order."""

from __future__ import annotations

from typing import Protocol

from zabd.protocol.messages import Txn


class StateMachine(Protocol):
    def apply(self, txn: Txn) -> object:
        """Apply one committed transaction; the result is not (yet) returned
        to clients. Called exactly once per committed zxid, in order, on every
        node, after the commit is durable here."""
        ...


class NullStateMachine:
    """The default: the log is the state."""

    def apply(self, txn: Txn) -> object:
        return None

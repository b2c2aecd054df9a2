"""Effects the core asks its driver to carry out, in order.

A driver executes them in the order emitted. Every ``Send``/``Broadcast`` that
follows a persist effect (``PersistEpochs``, ``AppendTxn``, ``ReplaceHistory``)
must wait until that persist is durable: this is what keeps an acknowledgement
from leaving before the state it acknowledges (ZOOKEEPER-3911/4643/4646).
"""

from __future__ import annotations

from typing import Final, NamedTuple

from zabd.protocol.membership import Membership
from zabd.protocol.messages import History, Message, Txn


class Send(NamedTuple):
    dst: int
    msg: Message


class Broadcast(NamedTuple):
    """Send ``msg`` to every peer in ascending id order (never to the sender)."""

    msg: Message


class PersistEpochs(NamedTuple):
    """Write all three together, atomically: accepted_epoch never falls below
    current_epoch on disk (ZOOKEEPER-2307)."""

    accepted_epoch: int
    epoch_leader: int
    current_epoch: int


class AppendTxn(NamedTuple):
    txn: Txn


class ReplaceHistory(NamedTuple):
    history: History


class SendSync(NamedTuple):
    """Send ``dst`` a :class:`~zabd.protocol.messages.Sync` whose txns are the
    ones in the log after ``read_after`` up to ``read_upto`` (read by the
    driver from storage: they left the core's memory; none if equal), then
    ``txns``. For SNAP, the snapshot is the state at ``point`` (the leader's
    commit point: everything up to it is applied when this is carried out)."""

    dst: int
    epoch: int
    mode: int
    point: int
    read_after: int
    read_upto: int
    txns: History
    membership: bytes = b""  # SNAP: the membership at ``point`` (its encoding; zabd.protocol.membership)
    membership_zxid: int = 0  # ... and the zxid of the change that made it


class MembershipChanged(NamedTuple):
    """The membership in effect here changed (zabd.protocol.membership): the
    history gained or lost a change. ``zxid``: the change's txn (0: the one
    the node started with)."""

    membership: Membership
    zxid: int


class InstallSnapshot(NamedTuple):
    """The snapshot received with a SNAP sync, taken at ``zxid``, replaces the
    state machine and the log, which restarts after ``zxid``."""

    zxid: int


class TruncateAppend(NamedTuple):
    """Keep the log up to ``after``, drop what follows, append ``txns``."""

    after: int
    txns: History


class ReadReady(NamedTuple):
    """The read barrier ``token`` holds: a quorum still followed this leader
    after it began, so state applied up to ``zxid`` is current (a
    linearizable ``sync``)."""

    token: int
    zxid: int


class ReadFailed(NamedTuple):
    """The read barrier ``token`` cannot complete: leadership ended."""

    token: int


class CommitTo(NamedTuple):
    """Everything in the history up to and including ``zxid`` is committed."""

    zxid: int


class RoleChanged(NamedTuple):
    role: int
    leader: int  # 0 when there is none
    epoch: int  # current_epoch at the time of the change
    phase: int  # PHASE_* below


Effect = (
    Send | Broadcast | PersistEpochs | AppendTxn | ReplaceHistory | CommitTo | RoleChanged | SendSync
    | InstallSnapshot | TruncateAppend | ReadReady | ReadFailed | MembershipChanged
)

PERSIST_EFFECTS: tuple[type[Effect], ...] = (PersistEpochs, AppendTxn, ReplaceHistory, InstallSnapshot, TruncateAppend)

# Phases reported in RoleChanged. A Leading node is *established* from
# PHASE_SYNC on (discovery finished); it accepts proposals in PHASE_BROADCAST.
PHASE_NONE: Final = 0
PHASE_SYNC: Final = 1
PHASE_BROADCAST: Final = 2

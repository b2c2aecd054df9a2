"""Peer messages (spec section 5).

NamedTuples: immutable values (a receiver cannot reach into the sender's state),
cheap to build on the hot path, and they map 1:1 onto msgpack arrays on the wire.
Zxids are packed integers (see :mod:`zabd.protocol.zxid`).
"""

from __future__ import annotations

from typing import Final, NamedTuple


class Txn(NamedTuple):
    zxid: int
    payload: bytes


History = tuple[Txn, ...]


class LookForLeader(NamedTuple):
    epoch: int
    last_zxid: int
    accepted: int


class Vote(NamedTuple):
    epoch: int
    last_zxid: int
    accepted: int
    leader: int


class NewEpoch(NamedTuple):
    epoch: int


class AckEpoch(NamedTuple):
    epoch: int
    current_epoch: int
    last_zxid: int


class NewLeader(NamedTuple):
    epoch: int
    history: History


class AckLeader(NamedTuple):
    epoch: int


class Propose(NamedTuple):
    txn: Txn


class Ack(NamedTuple):
    zxid: int


class Commit(NamedTuple):
    zxid: int


# Sync plans (the server's protocol variant, ``Options.windowed``; the
# canonical spec has neither). A follower reports what it holds; the leader
# answers with what it lacks instead of a whole NewLeader.

DIFF: Final = 0  # keep your txns up to ``point``; append ``txns`` (point: your last zxid)
TRUNC: Final = 1  # the same, but you hold txns after ``point`` the leader never had: drop them
SNAP: Final = 2  # install the leader's state at ``point`` (a snapshot), then append ``txns``
SYNC_MODES = ("DIFF", "TRUNC", "SNAP")


class SyncInfo(NamedTuple):
    """Follower -> leader: everything up to ``base`` is committed and held;
    ``epoch_ends`` is the last zxid of each epoch after it, ascending."""

    base: int
    epoch_ends: tuple[int, ...]


class Sync(NamedTuple):
    """Leader -> follower: NewLeader(epoch, leader's history) as a plan."""

    epoch: int
    mode: int
    point: int
    txns: History
    membership: bytes = b""  # SNAP: the membership at ``point`` (encoded); b"": the receiver's own
    membership_zxid: int = 0  # ... and the zxid of the change that made it (its version)


class ReadPing(NamedTuple):
    """Leader -> follower: do you still follow me? (a read barrier, server variant)"""

    seq: int


class ReadPong(NamedTuple):
    """Follower -> leader: yes, as of your ping ``seq``."""

    seq: int


class ProposeMany(NamedTuple):
    """Leader -> followers: consecutive proposals, as the Proposes of each
    ``txns`` in order would say (server variant, ``Options.batch_proposals``)."""

    txns: History


Message = (
    LookForLeader | Vote | NewEpoch | AckEpoch | NewLeader | AckLeader | Propose | Ack | Commit | SyncInfo | Sync
    | ReadPing | ReadPong | ProposeMany
)

# Stable wire tags: the index of each type in this tuple. Append only. The
# canonical spec has exactly these nine; the server's variant adds more
# (EXTENDED_TYPES), and SyncInfo and Sync travel as driver frames.
MESSAGE_TYPES: tuple[type[Message], ...] = (
    LookForLeader,
    Vote,
    NewEpoch,
    AckEpoch,
    NewLeader,
    AckLeader,
    Propose,
    Ack,
    Commit,
)

EXTENDED_TYPES: tuple[type[Message], ...] = (*MESSAGE_TYPES, ReadPing, ReadPong, ProposeMany)

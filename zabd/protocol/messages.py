"""Peer messages (spec section 5).

NamedTuples: immutable values (a receiver cannot reach into the sender's state),
cheap to build on the hot path, and they map 1:1 onto msgpack arrays on the wire.
Zxids are packed integers (see :mod:`zabd.protocol.zxid`).
"""

from __future__ import annotations

from typing import NamedTuple


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


Message = LookForLeader | Vote | NewEpoch | AckEpoch | NewLeader | AckLeader | Propose | Ack | Commit

# Stable wire tags: the index of each type in this tuple. Append only.
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

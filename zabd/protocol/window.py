"""Pure helpers for a history that lives partly outside the core's memory.

In the server's protocol variant (``Options.windowed``) a node keeps only a
window of its history in memory: the txns after ``base``. Everything up to
``base`` is committed, and on disk (until a snapshot lets it be purged).
Deciding how to sync a follower then needs only the last zxid of each epoch
of the leader's history, which is tiny, never the txns themselves:

* in ZAB, the txns of epoch ``e`` in any history are ``(e,1)..(e,c)`` (after
  a base: ``(e,s)..(e,c)``), since one leader proposes each epoch's txns with
  counters 1, 2, 3, ...;
* two histories that both hold a zxid agree on every txn up to it.

So the follower and the leader share the prefix up to the largest zxid both
hold, found by intersecting the follower's epoch ranges with the leader's
epoch ends. (With leader [(1,1),(1,2),(3,1)] and follower [(1,1),(2,1),(2,2)]
the shared prefix ends at (1,1): (1,2) is the leader's, never the follower's.)
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Final

from zabd.protocol.messages import SyncInfo, Txn

U32_MAX: Final = 0xFFFF_FFFF


def epoch_ends(txns: Iterable[Txn]) -> dict[int, int]:
    """Epoch -> the last zxid of that epoch among ``txns`` (ascending zxids)."""
    ends: dict[int, int] = {}
    for t in txns:
        ends[t.zxid >> 32] = t.zxid
    return ends


def txn_zxid(txn: Txn) -> int:
    """The bisect key of a history (``bisect_left(history, z, key=txn_zxid)``)."""
    return txn.zxid


def window_ends(history: Sequence[Txn]) -> tuple[int, ...]:
    """The last zxid of each epoch in ``history``, ascending: a few bisects
    instead of a pass over every txn (epochs are contiguous runs)."""
    out: list[int] = []
    i = 0
    n = len(history)
    while i < n:
        epoch = history[i].zxid >> 32
        # the first index of a later epoch
        i = bisect_left(history, (epoch + 1) << 32, i, n, key=txn_zxid)
        out.append(history[i - 1].zxid)
    return tuple(out)


def shared_prefix(leader_ends: dict[int, int], log_start: int, info: SyncInfo) -> int | None:
    """The end of the prefix the leader and the follower share, or None when
    it lies below ``log_start``, where the leader's log was purged: only a
    snapshot can sync that follower.

    ``info.base`` is committed and therefore in the leader's history too.
    ``leader_ends`` may lack epochs whose txns were all purged: an overlap
    there would be below ``log_start`` anyway, and by the second property a
    later overlap implies the earlier txns agree."""
    shared = info.base
    start = info.base
    for end in info.epoch_ends:
        epoch = end >> 32
        first = start + 1 if (start >> 32) == epoch else (epoch << 32) | 1
        theirs = leader_ends.get(epoch)
        if theirs is not None:
            top = min(end, theirs)
            if top >= first and top > shared:
                shared = top
        start = end
    return None if shared < log_start else shared


def count_after(leader_ends: dict[int, int], after: int, upto: int) -> int:
    """How many txns the leader's history holds in ``(after, upto]``."""
    total = 0
    for epoch, end in leader_ends.items():
        top = min(end, upto)
        if top <= after or (top >> 32) != epoch:
            continue
        first = (after & U32_MAX) + 1 if (after >> 32) == epoch else 1
        total += (top & U32_MAX) - first + 1
    return total

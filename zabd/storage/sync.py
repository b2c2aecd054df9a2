"""Follower synchronization without sending the whole history (pure, no I/O).

The simulator's leader sends ``NewLeader(epoch, full history)``. A server
leader sends only what the follower lacks, and the follower must end with
exactly the history the full ``NewLeader`` would have given it:

* ``DIFF``: the follower's history is a prefix of the leader's; send the
  leader's txns after the follower's last zxid.
* ``TRUNC`` (+ diff): the follower holds txns the leader never had; it cuts
  its history after the last txn both share, then takes the leader's txns
  after that point.
* ``SNAP``: the shared prefix ends before the leader's oldest retained log
  record; the follower installs the leader's snapshot and its whole retained
  log.

What the follower reports (:class:`SyncInfo`) is its base (everything up to
it is committed state, held by its snapshot) and the last zxid of every epoch
in its history after the base. Its last zxid alone is not enough: with
leader [(1,1),(1,2),(3,1)] and follower [(1,1),(2,1),(2,2)], "truncate to
the leader's largest zxid below (2,2)" gives (1,2), which the follower never
had, and the diff after it would lose (1,2).

Why the epoch ends suffice: in ZAB a history is a prefix of the history of
the leader of its last txn's epoch, and one leader proposes each epoch's txns
with counters 1, 2, 3, ... So (a) the txns of epoch e in any history are
(e,1)..(e,c) (after the base: (e,s)..(e,c)), a range the epoch end
describes, and (b) two histories that both hold zxid z agree on every txn up
to z. The shared prefix therefore ends at the largest zxid both hold, which
the leader finds by intersecting each reported epoch range with its own txns
of that epoch: a few bisects per epoch, no history transfer.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Any, NamedTuple

from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn

DIFF = "DIFF"
TRUNC = "TRUNC"
SNAP = "SNAP"


class SyncError(ValueError):
    """The sync inputs contradict each other (a stale report or a bug)."""


class SyncInfo(NamedTuple):
    """What a joining follower tells its leader (msgpack: ``[base, [ends...]]``)."""

    base: int  # every txn up to this zxid is committed state held by the follower's snapshot (0: none)
    epoch_ends: tuple[int, ...]  # last zxid of each epoch in the history after ``base``, ascending


class SyncPlan(NamedTuple):
    mode: str  # DIFF, TRUNC or SNAP
    truncate_to: int  # DIFF/TRUNC: the follower keeps its txns up to this zxid (the shared prefix)
    snapshot_zxid: int  # SNAP: the leader's snapshot covers up to here; else 0
    log_base: int  # SNAP: the follower's log restarts after this zxid (<= snapshot_zxid); else 0
    txns: tuple[Txn, ...]  # DIFF/TRUNC: leader's txns after truncate_to; SNAP: after log_base


class _Zxids(Sequence[int]):
    __slots__ = ("_h",)

    def __init__(self, h: Sequence[Txn]) -> None:
        self._h = h

    def __len__(self) -> int:
        return len(self._h)

    def __getitem__(self, i: Any) -> Any:
        return self._h[i].zxid


def sync_info(history: Sequence[Txn], base: int = 0) -> SyncInfo:
    """The follower's report. ``history`` may include txns at or below ``base``
    (retained log records a snapshot covers); they are not reported."""
    zs = _Zxids(history)
    start = bisect_right(zs, base)
    ends: list[int] = []
    i = len(history)
    # Walk epochs from the newest down: one bisect per epoch.
    while i > start:
        last = history[i - 1].zxid
        ends.append(last)
        i = max(start, bisect_left(zs, (last >> 32) << 32, start, i))
    ends.reverse()
    return SyncInfo(base, tuple(ends))


def _holds(info: SyncInfo, z: int) -> bool:
    """True if the follower's history (as reported) contains zxid ``z``."""
    if z <= info.base:
        return True  # committed and covered by its snapshot
    e = z >> 32
    for end in info.epoch_ends:
        if end >> 32 == e:
            return z <= end
    return False


def shared_prefix_end(leader_log: Sequence[Txn], info: SyncInfo, log_base: int = 0) -> int:
    """The largest zxid both histories hold (or ``info.base``). ``leader_log``
    holds the leader's txns after ``log_base``, ascending."""
    zs = _Zxids(leader_log)
    last = leader_log[-1].zxid if leader_log else log_base
    if info.base > last:
        raise SyncError(f"follower base {zx.fmt(info.base)} is above the leader's last zxid {zx.fmt(last)}")
    best = info.base
    if log_base > best and _holds(info, log_base):
        best = log_base
    prev_epoch = info.base >> 32
    for end in info.epoch_ends:
        e = end >> 32
        if end <= info.base or e < prev_epoch:
            raise SyncError(f"follower epoch ends are not ascending above its base at {zx.fmt(end)}")
        prev_epoch = e + 1
        lo_z = info.base + 1 if e == info.base >> 32 else zx.make(e, 1)
        # the leader's largest txn of epoch e within the follower's range lo_z..end
        i = bisect_right(zs, end)
        if i > 0:
            z = leader_log[i - 1].zxid
            if z >= lo_z and z >> 32 == e and z > best:
                best = z
    return best


def plan_sync(
    leader_log: Sequence[Txn],
    info: SyncInfo,
    *,
    log_base: int = 0,
    snapshot_zxid: int | None = None,
) -> SyncPlan:
    """The leader's side. ``leader_log``: its retained history (txns after
    ``log_base``, ascending); ``snapshot_zxid``: its newest snapshot (needed
    only when the follower is older than the retained log)."""
    p = shared_prefix_end(leader_log, info, log_base)
    if p < log_base:
        if snapshot_zxid is None or snapshot_zxid < log_base:
            raise SyncError(
                f"follower needs txns before {zx.fmt(log_base)} but the leader has no snapshot covering them"
            )
        return SyncPlan(SNAP, 0, snapshot_zxid, log_base, tuple(leader_log))
    i = bisect_right(_Zxids(leader_log), p)
    follower_last = info.epoch_ends[-1] if info.epoch_ends else info.base
    mode = TRUNC if follower_last > p else DIFF
    return SyncPlan(mode, p, 0, 0, tuple(leader_log[i:]))


def apply_plan(history: Sequence[Txn], plan: SyncPlan, base: int = 0) -> list[Txn]:
    """The follower's side, DIFF/TRUNC: its new (retained) history. For SNAP
    the follower first installs the snapshot (``DiskStorage.install_snapshot(
    plan.snapshot_zxid, data, plan.log_base)`` and the state machine's
    ``restore``); its history is then ``plan.txns``, returned here."""
    if plan.mode == SNAP:
        return list(plan.txns)
    p = plan.truncate_to
    zs = _Zxids(history)
    i = bisect_right(zs, p)
    if p > base and (i == 0 or history[i - 1].zxid != p):
        raise SyncError(f"plan keeps up to {zx.fmt(p)}, which this follower does not hold (stale sync info)")
    # A DIFF that finds txns after p (the follower appended after it
    # reported) cuts them too: the shared prefix is still p.
    out = list(history[:i])
    out.extend(plan.txns)
    return out

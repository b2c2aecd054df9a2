"""What a starting server rebuilds from its storage before it joins.

The state machine gets the newest snapshot and then every committed txn
after it; then the core gets the persistent state (epochs, the retained
history, the commit point) and the membership in effect at the start of that
history, which the machine's membership changes say (the history itself holds
any later ones). Storage warnings (a torn tail cut, say) are logged here.
"""

from __future__ import annotations

import gc
import time
from bisect import bisect_right
from itertools import islice
from operator import attrgetter
from typing import Any, NamedTuple

from zabd.machine import StateMachine, membership_at
from zabd.protocol import zxid as zx
from zabd.protocol.membership import decode as decode_membership
from zabd.protocol.node import Node
from zabd.storage.base import PersistentState, Storage


class Recovered(NamedTuple):
    applied: int  # the commit point the state machine now reflects
    base: int  # the retained history starts right after this zxid
    seconds: float
    snapshot_seconds: float | None = None  # loading the snapshot (None: there was none)
    replayed: int = 0  # txns applied from the log after it
    replay_seconds: float = 0.0
    load_seconds: float = 0.0  # reading the storage (snapshot file, log scan) before any of the above


REPLAY_PAGE = 16 << 20  # bytes of log read at a time while replaying
_zxid = attrgetter("zxid")


def _replay(state: PersistentState, storage: Storage, machine: StateMachine) -> int:
    """Apply every committed txn after the snapshot: the restart costs the log
    since the snapshot, not the whole history. The window (``state.history``,
    the txns after ``window_base``) was read by the load already, so the log is
    read only below it, a page at a time. Returns how many were applied."""
    after = state.snapshot_zxid
    commit = state.last_committed
    history = state.history
    apply = machine.apply
    replayed = 0
    from_log = min(commit, state.window_base) if history else commit
    while True:
        while after < from_log:
            page = storage.read_range(after, from_log, REPLAY_PAGE)
            if not page:
                break
            for txn in page:
                apply(txn)
            replayed += len(page)
            after = page[-1].zxid
        if after >= commit or from_log == commit:
            return replayed
        if after >= state.window_base:
            start = bisect_right(history, after, key=_zxid)
            stop = bisect_right(history, commit, key=_zxid)
            for txn in islice(history, start, stop):
                apply(txn)
            return replayed + stop - start
        from_log = commit  # the log ended below the window (it cannot): read on as before, to the commit point


def recover(
    state: PersistentState, storage: Storage, node: Node, machine: StateMachine, log: Any, warnings: list[str],
    load_seconds: float = 0.0,
) -> Recovered:
    t0 = time.monotonic()
    snapshot_s = None
    # The restore makes an object or more per znode, and all of them live on:
    # the cyclic GC would walk the growing heap again and again for nothing (9
    # full collections and ~0.5-1.5 s of the 1M-znode restore's CPU here), and
    # the replay's short-lived results die by reference counting. So collection
    # waits, and what recovery built goes to the permanent generation, where the
    # server's collections never walk it (``status.freeze_survivors`` does so
    # with what survives later).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if state.snapshot is not None:
            machine.restore(state.snapshot)
            snapshot_s = time.monotonic() - t0
        t1 = time.monotonic()
        replayed = _replay(state, storage, machine)
        replay_s = time.monotonic() - t1
    finally:
        if gc_was_enabled:
            gc.freeze()
            gc.enable()
    if state.history or state.current_epoch or state.accepted_epoch or state.window_base:
        at_base = membership_at(machine.membership_changes, state.window_base)
        node.restore(
            current_epoch=state.current_epoch,
            accepted_epoch=state.accepted_epoch,
            epoch_leader=state.epoch_leader,
            history=state.history,
            last_committed=state.last_committed,
            base=state.window_base,
            below_ends=state.below_ends,
            log_start=state.log_base,
            base_membership=decode_membership(at_base[1]) if at_base is not None else None,
            base_membership_zxid=at_base[0] if at_base is not None else 0,
        )
    for w in warnings:
        log.warning("storage recovery", detail=w)
    took = time.monotonic() - t0
    log.info(
        "recovered",
        snapshot=zx.fmt(state.snapshot_zxid) if state.snapshot is not None else None,
        log_after=zx.fmt(state.log_base),
        window_after=zx.fmt(state.window_base),
        last_zxid=zx.fmt(node.last_zxid()),
        replayed=replayed,
        committed=zx.fmt(state.last_committed),
        seconds=round(took, 3),
        load_seconds=round(load_seconds, 3),
        restore_seconds=round(snapshot_s, 3) if snapshot_s is not None else None,
        replay_seconds=round(replay_s, 3),
    )
    return Recovered(state.last_committed, state.log_base, took, snapshot_s, replayed, replay_s, load_seconds)

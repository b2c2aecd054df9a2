"""What a starting server rebuilds from its storage before it joins.

The core gets the persistent state (epochs, the retained history, the commit
point); the state machine gets the newest snapshot and then every committed
txn after it. Storage warnings (a torn tail cut, say) are logged here.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import Any, NamedTuple

from zabd.kv.machine import StateMachine
from zabd.protocol import zxid as zx
from zabd.protocol.node import Node
from zabd.server.proposals import txn_zxid
from zabd.storage.base import PersistentState


class Recovered(NamedTuple):
    applied: int  # the commit point the state machine now reflects
    base: int  # the retained history starts right after this zxid
    seconds: float


def recover(state: PersistentState, node: Node, machine: StateMachine, log: Any, warnings: list[str]) -> Recovered:
    t0 = time.monotonic()
    if state.history or state.current_epoch or state.accepted_epoch:
        node.restore(
            current_epoch=state.current_epoch,
            accepted_epoch=state.accepted_epoch,
            epoch_leader=state.epoch_leader,
            history=state.history,
            last_committed=state.last_committed,
        )
    if state.snapshot is not None:
        machine.restore(state.snapshot)
    h = state.history
    i = bisect_left(h, state.snapshot_zxid + 1, key=txn_zxid)
    replayed = 0
    apply = machine.apply
    for txn in h[i:]:
        if txn.zxid > state.last_committed:
            break
        apply(txn)
        replayed += 1
    for w in warnings:
        log.warning("storage recovery", detail=w)
    took = time.monotonic() - t0
    log.info(
        "recovered",
        snapshot=zx.fmt(state.snapshot_zxid) if state.snapshot is not None else None,
        log_from=zx.fmt(h[0].zxid) if h else None,
        log_to=zx.fmt(h[-1].zxid) if h else None,
        replayed=replayed,
        committed=zx.fmt(state.last_committed),
        seconds=round(took, 3),
    )
    return Recovered(state.last_committed, state.log_base, took)

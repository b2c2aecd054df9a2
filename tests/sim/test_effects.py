"""The effect stream is complete: a store fed only with persist effects ends
with exactly the core's persistent state. The server's storage relies on it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.vectors import REPO_VECTORS, config_of, load
from zabd.protocol import AppendTxn, CommitTo, Effect, Node, PersistEpochs, ReplaceHistory
from zabd.sim import Simulator

VECTORS = [v for v in load(REPO_VECTORS) if v["nodes"] >= 3 and v["proposals"] > 0][:30]


class Mirror:
    def __init__(self) -> None:
        self.state: dict[int, dict[str, Any]] = {}

    def observe(self, tick: int, node: Node, effects: list[Effect]) -> None:
        s = self.state.setdefault(node.id, {"epochs": (0, 0, 0), "history": [], "committed": 0})
        for e in effects:
            if isinstance(e, PersistEpochs):
                s["epochs"] = (e.accepted_epoch, e.epoch_leader, e.current_epoch)
            elif isinstance(e, AppendTxn):
                s["history"].append(e.txn)
            elif isinstance(e, ReplaceHistory):
                s["history"] = list(e.history)
            elif isinstance(e, CommitTo):
                assert e.zxid > s["committed"]
                s["committed"] = e.zxid


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_persist_effects_reproduce_persistent_state(vector: dict[str, Any]) -> None:
    mirror = Mirror()
    nodes = Simulator(config_of(vector), observer=mirror.observe).run()
    for node in nodes:
        s = mirror.state.get(node.id, {"epochs": (0, 0, 0), "history": [], "committed": 0})
        assert s["epochs"] == (node.accepted_epoch, node.epoch_leader, node.current_epoch)
        assert s["history"] == node.history
        assert s["committed"] == node.last_committed

"""Section 5 says the driver calls link_failed(dst) "right after the drop".
With effects, a send is carried out after the handler returned. That is the
same thing only if (role == Leading and discovered), the one condition
link_failed reads, never changes between a send and the end of its handler.
This checks that claim on every send of many runs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.vectors import REPO_VECTORS, config_of, load
from zabd.protocol import Effect, Message, Node
from zabd.protocol.node import LEADING
from zabd.sim import SimConfig, Simulator, random_faults

VECTORS = [v for v in load(REPO_VECTORS) if "faults" in v or "partition" in v]


class RecordingNode(Node):
    """Remembers, per emitted send, what link_failed would have seen then."""

    __slots__ = ("seen",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen: list[bool] = []

    def _send(self, dst: int, msg: Message) -> None:
        self.seen.append(self.role == LEADING and self.discovered)
        super()._send(dst, msg)

    def _broadcast(self, msg: Message) -> None:
        if self.peers:
            self.seen.append(self.role == LEADING and self.discovered)
        super()._broadcast(msg)


def run_and_compare(config: SimConfig) -> int:
    sim = Simulator(config)
    sim.nodes = [RecordingNode(n.id, n.peers, config.seed) for n in sim.nodes]
    checked = 0

    def observe(tick: int, node: Node, effects: list[Effect]) -> None:
        nonlocal checked
        assert isinstance(node, RecordingNode)
        now = node.role == LEADING and node.discovered
        for at_send in node.seen:
            assert at_send == now, f"tick {tick} node {node.id}: state changed after a send"
            checked += 1
        node.seen.clear()

    sim.observer = observe
    sim.run()
    return checked


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_deferred_link_failed_sees_the_state_at_the_drop(vector: dict[str, Any]) -> None:
    assert run_and_compare(config_of(vector)) > 0


@pytest.mark.parametrize("seed", range(20))
def test_deferred_link_failed_on_random_fault_runs(seed: int) -> None:
    faults = tuple(random_faults(seed, 5, 3000, 20, max_down=5))
    assert run_and_compare(SimConfig(seed, 5, 3000, 60, frozenset(), faults)) > 0

"""Section 5 says the driver calls link_failed(dst) "right after the drop", in
the middle of the sender's handler. A driver of effects learns of the drop
only after the handler returned, and reports it with ``Node.send_dropped``.

This runs every fault vector and many random fault schedules twice: once as
the simulator does it, and once with nodes that see the network and call
``link_failed`` at the very moment a send is dropped, as the spec reads. The
two must agree on the digest and, after every tick, on every node's
``leader_lost`` and ``needs_sync``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.vectors import SHARED_VECTORS, config_of, load
from zabd.protocol import Message, Node
from zabd.sim import SimConfig, Simulator, digest, dump, random_faults

VECTORS = [v for v in load(SHARED_VECTORS) if "faults" in v or "partition" in v] if SHARED_VECTORS.exists() else []


class ImmediateNode(Node):
    """Calls link_failed inside the handler, at the drop."""

    __slots__ = ("sim",)

    def __init__(self, sim: Simulator, *args: Any) -> None:
        super().__init__(*args)
        self.sim = sim

    def _dropped(self, dst: int) -> bool:
        sim, t = self.sim, self.sim.tick
        return sim.blocked[self.id][dst] or not sim.up[dst] or sim._cut(self.id, dst, t)

    def _send(self, dst: int, msg: Message) -> None:
        super()._send(dst, msg)
        if self._dropped(dst):
            self.link_failed(dst, self.sim.tick)

    def _broadcast(self, msg: Message) -> None:
        super()._broadcast(msg)
        for dst in self.peers:
            if self._dropped(dst):
                self.link_failed(dst, self.sim.tick)

    def send_dropped(self, index: int, peer: int, t: int) -> None:
        pass  # already reported at the drop


def trace(sim: Simulator) -> tuple[str, list[tuple[int, int, bool, tuple[int, ...]]]]:
    states: list[tuple[int, int, bool, tuple[int, ...]]] = []

    def after_tick(t: int, nodes: list[Node]) -> None:
        for n in nodes:
            states.append((t, n.id, n.leader_lost, tuple(sorted(n.needs_sync))))

    sim.after_tick = after_tick
    return digest(dump(sim.run())), states


def compare(config: SimConfig) -> int:
    deferred = Simulator(config, skip_idle=False)
    immediate = Simulator(config, skip_idle=False)
    immediate.nodes = [ImmediateNode(immediate, n.id, n.peers, config.seed) for n in immediate.nodes]
    d1, s1 = trace(deferred)
    d2, s2 = trace(immediate)
    for a, b in zip(s1, s2, strict=True):
        assert a == b, f"tick {a[0]} node {a[1]}: deferred {a[2:]} != at the drop {b[2:]}"
    assert d1 == d2
    return deferred.stats.messages_dropped


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_send_dropped_equals_link_failed_at_the_drop_on_vectors(vector: dict[str, Any]) -> None:
    config = config_of(vector)
    if config.rounds > 20_000:
        config = SimConfig(config.seed, config.nodes, 20_000, config.proposals, config.partition, config.faults)
    compare(config)


def test_the_vectors_drop_sends_in_every_role() -> None:
    """The comparison above is not vacuous: the vectors drop many sends."""
    dropped = sum(compare(config_of(v)) for v in VECTORS if v["rounds"] <= 5_000)
    assert dropped > 1_000


@pytest.mark.parametrize("seed", range(20))
def test_send_dropped_equals_link_failed_at_the_drop_on_random_faults(seed: int) -> None:
    faults = tuple(random_faults(seed, 5, 3000, 20, max_down=5))
    assert compare(SimConfig(seed, 5, 3000, 60, frozenset(), faults)) > 0

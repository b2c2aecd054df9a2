"""Liveness properties of spec v1.4 worth knowing (none of them is a safety matter).

v1.4 made failover fast. A crash resets every peer's link to the crashed node,
so the followers of a crashed leader start an election at their next tick
(``leader_lost``) instead of waiting out their timers; and a Looking node
answers a ``LookForLeader`` from a node it does not vote for with its own
``Vote``, so a node that starts looking late learns what the others chose.
Measured here with seeds 0..199 (ticks from the fault to the first established
leader, at ``tick_ms = 10`` one tick is 10 ms):

| case | v1.4 median / max | v1.3 answer rule, median / max |
| --- | ---: | ---: |
| leader crash, 3 nodes | 7 / 12 | 7 / 12 |
| leader crash, 5 nodes | 7 / 273 | 7 / 294 |
| leader isolated (no crash), 3 nodes | 256 / 548 | 410 / 556 |
| leader isolated (no crash), 5 nodes | 238 / 520 | 402 / 558 |

Two gaps remain in the spec as written, each pinned below by one seed: a
Looking node that decides to follow because of a ``LookForLeader`` does not
tell its new leader (it is no longer Looking when the answer rule runs), and
with 5 nodes a node can follow a candidate on a partial view while that
candidate moves on. Both end at the next timeout.

The first gap is common on real servers: the two followers of a killed leader
see their sockets close a few milliseconds apart, and the earlier one follows
the later one without telling it (2 of 12 leader kills took about 2 s). The
server therefore runs ``Options.vote_on_follow`` (``zabd.protocol.options``):
over the same seeds, isolated leader, 3 nodes: median 217, max 263 ticks; the
simulator runs it with ``--variant server`` and the checker finds it safe.
"""

from __future__ import annotations

from typing import Any

from zabd.protocol.effects import PHASE_SYNC, Effect, RoleChanged
from zabd.protocol.messages import LookForLeader
from zabd.protocol.node import LEADING, LOOKING, Node
from zabd.protocol.options import SERVER
from zabd.sim import SimConfig, Simulator, parse_faults
from zabd.sim.checker import SafetyChecker

FAULT_AT = 1001
ONE_TIMEOUT = 300 + 10  # the longest election timeout plus a few message delays


class V13Node(Node):
    """A Looking node that never answers a LookForLeader (the v1.3 rule)."""

    __slots__ = ()

    def on_message(self, src: int, msg: Any, t: int) -> None:
        if type(msg) is LookForLeader and self.role == LOOKING:
            self._on_vote(src, msg.epoch, msg.last_zxid, msg.accepted, src, t)
            return
        super().on_message(src, msg, t)


class ServerNode(Node):
    """The protocol variant the server runs."""

    __slots__ = ()

    def __init__(self, node_id: int, peers: Any, seed: int) -> None:
        super().__init__(node_id, peers, seed, SERVER)


def reelection_ticks(seed: int, nodes: int, fault: str, node_class: type[Node] = Node) -> int:
    """Ticks from the fault to the first leader established by another node."""
    probe = Simulator(SimConfig(seed, nodes, FAULT_AT, 0)).run()
    leader = next(n.id for n in probe if n.role == LEADING and n.synced)
    if fault == "crash":
        spec = f"crash:{leader}@{FAULT_AT}"
    else:  # the leader is cut off both ways, and stays up
        spec = ",".join(f"cut:{leader}-{p}@{FAULT_AT}-4000" for p in range(1, nodes + 1) if p != leader)
    established: list[int] = []
    checker = SafetyChecker()

    def observe(t: int, node: Node, effects: list[Effect]) -> None:
        checker.observe(t, node, effects)
        for e in effects:
            if isinstance(e, RoleChanged) and e.role == LEADING and e.phase == PHASE_SYNC and node.id != leader:
                established.append(t)

    sim = Simulator(SimConfig(seed, nodes, 4000, 0, faults=tuple(parse_faults(spec, nodes))), observer=observe)
    sim.nodes = [node_class(n.id, n.peers, seed) for n in sim.nodes]
    sim.run()
    assert checker.ok
    return established[0] - FAULT_AT


def test_a_leader_crash_costs_a_few_ticks_on_three_nodes() -> None:
    ticks = sorted(reelection_ticks(seed, 3, "crash") for seed in range(100))
    assert ticks[-1] <= 15, ticks  # measured: median 7, max 12 over seeds 0..199
    assert ticks[50] <= 10


def test_the_answer_rule_spares_a_second_timeout_when_the_leader_is_isolated() -> None:
    # Seed 3: the first follower to time out votes for itself while the other
    # still follows; the second one ranks lower. Answered, it joins at once.
    assert reelection_ticks(3, 3, "isolate") <= ONE_TIMEOUT  # 232 ticks
    assert reelection_ticks(3, 3, "isolate", V13Node) > ONE_TIMEOUT + 100  # 516 ticks


def test_gap_a_node_that_follows_on_a_look_for_leader_does_not_tell_the_leader() -> None:
    # Seed 27: node 1 votes for 3 while 3 still follows the isolated leader
    # (3 ignores the Vote). When 3 starts looking, 1 follows it on 3's
    # LookForLeader but sends nothing, and 3 waits for a quorum until 1's timer
    # fires again.
    assert reelection_ticks(27, 3, "isolate") > ONE_TIMEOUT + 200  # 548 ticks
    # the server's variant closes it: 1 tells 3 it follows it
    assert reelection_ticks(27, 3, "isolate", ServerNode) <= ONE_TIMEOUT  # 258 ticks


def test_gap_five_nodes_can_follow_a_candidate_that_moved_on() -> None:
    # Seed 191: nodes 1 and 2 follow 3 on a partial view while 3 already votes
    # for 4; the election ends at 2's next timeout.
    assert reelection_ticks(191, 5, "crash") > 150  # 273 ticks

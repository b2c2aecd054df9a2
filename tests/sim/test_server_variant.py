"""The server's protocol variant in the simulator (``--variant server``): a
window of 8 txns in memory, snapshots and purges, sync plans (DIFF, TRUNC,
SNAP), all under the safety checker, which also checks that each node's
window is the tail of its log."""

from __future__ import annotations

import random

import pytest

from zabd.protocol.effects import Effect, SendSync
from zabd.protocol.messages import SYNC_MODES
from zabd.protocol.node import LEADING, Node
from zabd.protocol.options import SERVER
from zabd.sim import SimConfig, Simulator, parse_faults, random_faults
from zabd.sim.checker import SafetyChecker
from zabd.sim.run import run_scenario


@pytest.mark.parametrize("seed", range(40))
def test_random_fault_schedules_are_safe(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([3, 5, 7])
    rounds = rng.randint(500, 4000)
    faults = tuple(random_faults(rng.getrandbits(64), n, rounds, rng.randint(0, 20), max_down=rng.choice([n // 2, n])))
    config = SimConfig(rng.getrandbits(64), n, rounds, rng.randint(10, 300), frozenset(), faults, SERVER)
    result = run_scenario(config)
    assert result.violation is None, f"{result.violation.describe()}\n{result.reproducer}"


def run_counting(config: SimConfig) -> tuple[dict[str, int], int]:
    """Sync modes sent, and how many syncs read from the log, under the checker."""
    sim = Simulator(config)
    disks = sim.disks
    assert disks is not None
    checker = SafetyChecker(config.command(), lambda node: disks.logs[node.id])
    reads = 0

    def observe(t: int, node: Node, effects: list[Effect]) -> None:
        nonlocal reads
        checker.observe(t, node, effects)
        reads += sum(1 for e in effects if isinstance(e, SendSync) and e.read_upto > e.read_after)

    sim.observer = observe
    sim.run()
    assert checker.ok, checker.violation
    assert sim.window_problem is None, sim.window_problem
    return disks.syncs_sent, reads


def test_every_sync_mode_happens() -> None:
    """DIFF (with log reads), TRUNC and SNAP all occur in a few scenarios
    (these seeds were picked for their TRUNC, the rarest mode)."""
    seen = {"DIFF": 0, "TRUNC": 0, "SNAP": 0}
    reads = 0
    for seed, n, rounds, k, fseed, nf in (
        (8390177215286507592, 3, 3625, 84, 456123483246460824, 6),
        (10151278866263497551, 3, 1152, 162, 14171406747157265630, 6),
        (5941368797401811114, 3, 1048, 225, 6554996884312557595, 5),
    ):
        config = SimConfig(seed, n, rounds, k, frozenset(), tuple(random_faults(fseed, n, rounds, nf)), SERVER)
        sent, r = run_counting(config)
        reads += r
        for mode, count in sent.items():
            seen[mode] += count
    assert all(seen.values()), seen
    assert reads > 0, "no DIFF read from the log"


def syncs_to(fault_spec: str, target: str, nodes: int = 3) -> tuple[int, list[str]]:
    """Run 3000 ticks with one fault; count the syncs sent to the node the
    fault hit, after the fault ends (``target``: 'follower' or 'leader')."""
    probe = Simulator(SimConfig(5, nodes, 1000, 0, options=SERVER)).run()
    leader = next(x.id for x in probe if x.role == LEADING and x.synced)
    follower = next(i for i in range(1, nodes + 1) if i != leader)
    who = follower if target == "follower" else leader
    spec = fault_spec.format(node=who, leader=leader, follower=follower)
    sent: list[str] = []
    heal_at = int(spec.rsplit("@", 1)[1].split("-")[-1])

    def observe(t: int, node: Node, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, SendSync) and e.dst == who and t >= heal_at:
                sent.append(SYNC_MODES[e.mode])

    config = SimConfig(5, nodes, 3000, 60, faults=tuple(parse_faults(spec, nodes)), options=SERVER)
    sim = Simulator(config, observer=observe)
    sim.run()
    return who, sent


def test_an_ordinary_rejoin_gets_exactly_one_sync() -> None:
    _, sent = syncs_to("crash:{node}@1200,restart:{node}@1500", "follower")
    assert len(sent) == 1, sent


def test_a_healed_partition_gets_exactly_one_sync() -> None:
    _, sent = syncs_to("cut:{node}-{leader}@1200-1700", "follower")
    assert len(sent) == 1, sent

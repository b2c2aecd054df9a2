"""Membership changes in the core (zabd.protocol.membership), through the
simulator and its safety checker: voters added and removed one at a time,
the leader removed, observers added, promoted and removed, changes while
nodes are down or cut off, and planted bugs the checker must catch."""

from __future__ import annotations

import random

import pytest

import zabd.protocol.node as core
from zabd.protocol.membership import MAGIC, Membership, MembershipError, check_change, decode, encode
from zabd.protocol.messages import Ack, Propose
from zabd.protocol.node import FOLLOWING, LEADING, Node, NotLeader
from zabd.protocol.options import CANONICAL, SERVER, Options
from zabd.sim import SimConfig, Simulator, parse_faults, random_faults
from zabd.sim.faults import Cut, FaultEvent, random_changes
from zabd.sim.run import committed_length, run_scenario

VARIANTS = pytest.mark.parametrize("options", [CANONICAL, SERVER], ids=["canonical", "server"])


def m(voters: set[int], observers: set[int] = frozenset()) -> Membership:  # type: ignore[assignment]
    return Membership(frozenset(voters), frozenset(observers))


def run(config: SimConfig) -> tuple[list[Node], Simulator]:
    result = run_scenario(config)
    assert result.violation is None, f"{result.violation.describe()}\n{result.reproducer}"
    sim = Simulator(config)
    return sim.run(), sim


def held(sim: Simulator, node: Node) -> int:
    return committed_length(node, sim.disks.logs[node.id] if sim.disks is not None else None)


def test_a_change_round_trips_and_the_rules_hold() -> None:
    a = Membership(frozenset({1, 2, 3}), frozenset({4}), b"1=h:1;2=h:2")
    assert decode(encode(a)) == a and encode(a).startswith(MAGIC)
    assert decode(b"zab-1") is None and decode(MAGIC + b"garbage") is None and decode(MAGIC + b";;") is None
    check_change(a, m({1, 2, 3, 4}))  # promote one
    check_change(a, m({1, 2}, {3, 4, 5, 6}))  # demote one, observers freely
    with pytest.raises(MembershipError, match="changes 2 voters at once"):
        check_change(a, m({1, 2, 3, 4, 5}))
    with pytest.raises(MembershipError, match="changes 2 voters at once"):
        check_change(a, m({1, 2, 5}))  # a swap is two changes
    with pytest.raises(MembershipError, match="at least one voter"):
        check_change(m({1}), m(set(), {1}))


@VARIANTS
def test_three_to_seven_and_back_to_three_voters_removing_the_leader(options: Options) -> None:
    """The acceptance path of issue 19 in the simulator: 3 -> 5 -> 7 -> 3
    voters one change at a time, the first leader removed on the way down."""
    spec = "add:4@800,add:5@1600,add:6@2400,add:7@3200,remove:1@4000,remove:2@4800,remove:3@5600,remove:4@6400"
    config = SimConfig(3, 7, 12000, 300, faults=tuple(parse_faults(spec, 7)), options=options, spares=4)
    nodes, sim = run(config)
    assert sim.stats.changes_proposed == 8 and sim.stats.changes_skipped == 0
    leader = next(n for n in nodes if n.role == LEADING)
    assert leader.id in (5, 6, 7) and leader.membership == m({5, 6, 7})
    for n in nodes[4:]:
        assert n.membership == m({5, 6, 7}) and held(sim, n) == 300 + 8
    for n in nodes[:4]:  # removed: they know it (the leader told them) and lead nothing
        assert n.id not in n.membership.members and n.role != LEADING


@VARIANTS
def test_an_observer_is_added_promoted_and_removed(options: Options) -> None:
    spec = "observe:4@800,add:4@2000,crash:1@3000,remove:4@5000"
    config = SimConfig(5, 4, 8000, 200, faults=tuple(parse_faults(spec, 4)), options=options, spares=1)
    nodes, sim = run(config)
    assert sim.stats.changes_proposed == 3
    final = [n for n in nodes if n.id in (2, 3)]
    assert all(n.membership == m({1, 2, 3}) for n in final)
    # 1 went down after 4 became a voter: {2, 3, 4} of {1..4} went on; after 4 left, {2, 3} of {1, 2, 3}
    assert max(held(sim, n) for n in final) == 200 + 3


def test_an_observer_counts_toward_nothing_until_promoted() -> None:
    """Voters 1, 2; node 3 an observer. With 2 down nothing commits (an
    observer's presence is no quorum); after 3 is promoted, 2 going down
    leaves 1 and 3, a majority of three, and writes go on."""
    faults = parse_faults("crash:2@1500,restart:2@2500,add:3@3000,crash:2@4000", 3)
    nodes, sim = run(SimConfig(7, 3, 8000, 300, faults=tuple(faults), observers=1))
    assert sim.stats.changes_proposed == 1
    assert max(held(sim, n) for n in nodes) == 300 + 1
    leader = next(n for n in nodes if n.role == LEADING)
    assert leader.id in (1, 3) and leader.membership == m({1, 2, 3})


@VARIANTS
def test_a_change_while_a_voter_is_down_or_cut_off_completes_or_is_refused(options: Options) -> None:
    spec = "crash:3@600,add:4@900,remove:3@1500,cut:1-2@2000-2600,add:5@2100,restart:3@3000,observe:3@3500"
    nodes, sim = run(SimConfig(11, 5, 9000, 200, faults=tuple(parse_faults(spec, 5)), options=options, spares=2))
    assert sim.stats.changes_proposed + sim.stats.changes_skipped == 4
    leader = next(n for n in nodes if n.role == LEADING)
    assert leader.id in leader.membership.voters
    assert all(held(sim, n) == held(sim, leader) for n in nodes if n.id in leader.membership.members)


def test_the_core_refuses_what_the_rules_forbid() -> None:
    config = SimConfig(1, 3, 1000, 0)
    nodes = Simulator(config).run()
    leader = next(n for n in nodes if n.role == LEADING)
    follower = next(n for n in nodes if n.role == FOLLOWING)
    with pytest.raises(NotLeader):
        follower.propose_membership(m({1, 2}), 1000)
    with pytest.raises(MembershipError, match="2 voters at once"):
        leader.propose_membership(m({1}), 1000)
    with pytest.raises(ValueError, match="membership change"):
        leader.propose(encode(m({1, 2})), 1000)  # a client payload may not pose as one
    leader.propose_membership(m({1, 2, 3}, {4}), 1000)
    with pytest.raises(MembershipError, match="not committed yet"):
        leader.propose_membership(m({1, 2, 3}), 1000)


def _random_config(seed: int) -> SimConfig:
    rng = random.Random(seed)
    n = rng.choice([3, 4, 5, 7])
    spares = rng.randint(0, n - 1)
    observers = rng.randint(0, n - 1 - spares)
    rounds = rng.randint(1000, 6000)
    faults = random_faults(rng.getrandbits(64), n, rounds, rng.randint(0, 20), max_down=rng.choice([n // 2, n]))
    changes = random_changes(rng.getrandbits(64), n, rounds, rng.randint(1, 12))
    events: tuple[FaultEvent, ...] = tuple(
        sorted((*faults, *changes), key=lambda e: e.start if isinstance(e, Cut) else e.at)
    )
    return SimConfig(rng.getrandbits(64), n, rounds, rng.randint(10, 300), frozenset(), events,
                     rng.choice([CANONICAL, SERVER]), observers=observers, spares=spares)  # fmt: skip


@pytest.mark.parametrize("seed", range(60))
def test_random_changes_under_random_faults_are_safe(seed: int) -> None:
    result = run_scenario(_random_config(seed))
    assert result.violation is None, f"{result.violation.describe()}\n{result.reproducer}"


class ObserversAckAndCount(Node):
    """A planted bug: non-voters acknowledge proposals and the leader counts them."""

    def _on_propose(self, leader: int, msg: Propose, t: int) -> None:
        if self.role == FOLLOWING and self.leader == leader and self.in_sync and msg.txn.zxid == self.successor():
            self.history.append(msg.txn)
            self.reset_deadline(t)
            self.effects.append(core.AppendTxn(msg.txn))
            if msg.txn.payload.startswith(MAGIC):
                self._appended_change(msg.txn, t)
            self._send(leader, Ack(msg.txn.zxid))

    def _on_ack(self, f: int, msg: Ack, t: int) -> None:
        acks = self.ack_set.get(msg.zxid) if self.role == LEADING else None
        if acks is not None:
            self.last_heard[f] = t
            acks.add(f)
            self._try_commit(msg.zxid, t)


def test_the_checker_catches_a_core_that_counts_non_voters() -> None:
    # seeds where random schedules expose it (found by running seeds 0.. with this bug planted)
    found = [run_scenario(_random_config(seed), node_class=ObserversAckAndCount).violation for seed in (862, 889)]
    assert all(v is not None and v.kind == "lost-commit" for v in found), found


def test_every_node_names_the_change_that_made_its_membership() -> None:
    """``membership_zxid`` (the version in status and /zookeeper/config) is
    the zxid of the change that made the membership in effect, also on a node
    that got it inside a SNAP or after its window moved past the change."""
    proposed = snaps = 0
    for seed in range(40):
        config = _random_config(seed)
        # the server's variant: its tiny window makes SNAPs and trims
        sim = _run_checking_versions(SimConfig(config.seed, config.nodes, config.rounds, config.proposals,
                                               config.partition, config.faults, SERVER, observers=config.observers,
                                               spares=config.spares))
        proposed += sim.stats.changes_proposed
        snaps += sim.disks.syncs_sent["SNAP"] if sim.disks is not None else 0
    assert proposed > 50 and snaps > 50, (proposed, snaps)


def _run_checking_versions(config: SimConfig) -> Simulator:
    initial = config.initial_membership()
    payloads: dict[int, bytes] = {}  # every change ever appended anywhere, by zxid

    def observe(t: int, node: Node, effects: list[core.Effect]) -> None:
        for e in effects:
            txns = (e.txn,) if isinstance(e, core.AppendTxn) else e.txns if isinstance(e, core.TruncateAppend) else ()
            payloads.update((x.zxid, x.payload) for x in txns if x.payload.startswith(MAGIC))

    def check(t: int, nodes: list[Node]) -> None:
        for node in nodes:
            z = node.membership_zxid
            held = initial if z == 0 else decode(payloads[z])
            assert held is not None and (held.voters, held.observers) == (
                node.membership.voters, node.membership.observers), f"tick {t} node {node.id}: version {z:#x}"

    sim = Simulator(config, observer=observe, after_tick=check)
    sim.run()
    return sim

"""One simulated scenario, end to end: the API behind ``zabd sim`` and the
Spark sweeps. Returns the canonical digest plus what a sweep wants to know."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zabd.protocol.effects import PHASE_SYNC, AppendTxn, CommitTo, Effect, RoleChanged
from zabd.protocol.messages import Txn
from zabd.protocol.node import LEADING, Node
from zabd.sim.checker import SafetyChecker, Violation
from zabd.sim.dump import digest, dump
from zabd.sim.simulator import SimConfig, Simulator, schedule_tick


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    config: SimConfig
    digest: str
    violation: Violation | None
    committed: int  # length of the longest committed prefix at the end
    elections: int  # leaders established (discovery finished)
    first_leader_tick: int  # -1 if no leader was ever established
    commit_latency_p50: int  # ticks from a payload's schedule tick to its commit at the leader; -1 if none
    commit_latency_p99: int
    messages_sent: int
    messages_dropped: int
    deliveries: int
    ticks_visited: int
    dump: bytes | None = None
    # the pipeline variant's streamed SNAPs (zabd.sim.simulator.SimStats)
    snap_transfers: int = 0
    snaps_cut_sender: int = 0
    snaps_cut_receiver: int = 0
    snaps_cut_link: int = 0
    installs: int = 0
    installs_cut: int = 0
    snaps_long: int = 0
    snaps_long_installed: int = 0

    @property
    def reproducer(self) -> str:
        return self.config.command() + " --check"


class RunMetrics:
    """Observer that measures elections and commit latency from effects."""

    def __init__(self, config: SimConfig, sched_of: dict[int, int] | None = None) -> None:
        """``sched_of``: zxid -> schedule tick, for payloads that are not
        ``zab-N`` (the ZooKeeper workload fills it as its leader proposes)."""
        self.config = config
        self.sched_of = sched_of
        self.elections = 0
        self.first_leader_tick = -1
        self.latencies: list[int] = []
        self._pending: dict[int, list[int]] = {}  # leader id -> zxids proposed, in order
        self._sched: dict[int, int] = {}  # zxid -> schedule tick of its payload

    def observe(self, tick: int, node: Node, effects: list[Effect]) -> None:
        for eff in effects:
            cls = type(eff)
            if cls is AppendTxn and node.role == LEADING:
                txn = eff.txn  # type: ignore[union-attr]
                if txn.payload[:4] == b"zab-":
                    index = int(txn.payload[4:])
                    self._sched[txn.zxid] = schedule_tick(index, self.config.rounds, self.config.proposals)
                elif self.sched_of is not None and txn.zxid in self.sched_of:
                    self._sched[txn.zxid] = self.sched_of.pop(txn.zxid)
                else:
                    continue  # the leader's own (a session expiry): no client waited for it
                self._pending.setdefault(node.id, []).append(txn.zxid)
            elif cls is CommitTo and node.role == LEADING:
                z = eff.zxid  # type: ignore[union-attr]
                queue = self._pending.get(node.id)
                if queue:
                    n = 0
                    for pz in queue:
                        if pz > z:
                            break
                        self.latencies.append(tick - self._sched.pop(pz))
                        n += 1
                    del queue[:n]
            elif cls is RoleChanged:
                rc: RoleChanged = eff  # type: ignore[assignment]
                if rc.role == LEADING and rc.phase == PHASE_SYNC:
                    self.elections += 1
                    if self.first_leader_tick < 0:
                        self.first_leader_tick = tick
                if rc.role != LEADING:
                    self._pending.pop(node.id, None)


def _percentile(values: list[int], q: float) -> int:
    if not values:
        return -1
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def committed_length(node: Node, history: Sequence[Txn] | None = None) -> int:
    """How many txns of the node's (full) history are committed."""
    lc = node.last_committed
    h = node.history if history is None else history
    lo, hi = 0, len(h)
    while lo < hi:
        mid = (lo + hi) // 2
        if h[mid].zxid <= lc:
            lo = mid + 1
        else:
            hi = mid
    return lo


def run_scenario(
    config: SimConfig, check: bool = True, keep_dump: bool = False, node_class: type[Node] = Node
) -> ScenarioResult:
    checker: SafetyChecker | None = None

    def observe(tick: int, node: Node, effects: list[Effect]) -> None:
        if checker is not None:
            checker.observe(tick, node, effects)
        metrics.observe(tick, node, effects)

    sim = Simulator(config, observer=observe, node_class=node_class)
    workload = sim.workload
    metrics = RunMetrics(config, workload.sched if workload is not None else None)
    disks = sim.disks
    if check:
        history_of = (lambda node: disks.logs[node.id]) if disks is not None else None
        checker = SafetyChecker(config.command() + " --check", history_of, config.initial_membership(),
                                released_commits=config.pipeline)
        if config.pipeline:
            sim.on_release = checker.record_released
            sim.on_recovery = checker.record_recovered
            sim.on_propose = checker.record_sent
    nodes = sim.run()
    if checker is not None and sim.window_problem is not None:
        checker.record_window(*sim.window_problem)
    if checker is not None and workload is not None and workload.problem is not None:
        checker.record_state_machine(*workload.problem)
    raw = dump(nodes, disks.logs if disks is not None else None)
    return ScenarioResult(
        config=config,
        digest=digest(raw),
        violation=checker.violation if checker is not None else None,
        committed=max(committed_length(n, disks.logs[n.id] if disks is not None else None) for n in nodes),
        elections=metrics.elections,
        first_leader_tick=metrics.first_leader_tick,
        commit_latency_p50=_percentile(metrics.latencies, 0.50),
        commit_latency_p99=_percentile(metrics.latencies, 0.99),
        messages_sent=sim.stats.messages_sent,
        messages_dropped=sim.stats.messages_dropped,
        deliveries=sim.stats.deliveries,
        ticks_visited=sim.stats.ticks_visited,
        dump=raw if keep_dump else None,
        snap_transfers=sim.stats.snap_transfers,
        snaps_cut_sender=sim.stats.snaps_cut_sender,
        snaps_cut_receiver=sim.stats.snaps_cut_receiver,
        snaps_cut_link=sim.stats.snaps_cut_link,
        installs=sim.stats.installs,
        installs_cut=sim.stats.installs_cut,
        snaps_long=sim.stats.snaps_long,
        snaps_long_installed=sim.stats.snaps_long_installed,
    )

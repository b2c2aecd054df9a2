"""``--variant pipeline``: the server's EffectPipeline in the simulator, over
simulated disks that flush late and lose unflushed writes on a crash, with the
checker's ``acked-lost`` rule and a planted bug it must catch."""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence

from zabd.protocol.messages import SNAP, Message, Sync, Txn
from zabd.protocol.node import FOLLOWING, Node
from zabd.protocol.options import SERVER
from zabd.protocol.rand import deadline_after
from zabd.sim.checker import SafetyChecker
from zabd.sim.disks import SnapshotTransfer
from zabd.sim.dump import dump
from zabd.sim.faults import parse_faults, pipeline_faults
from zabd.sim.pipes import STREAM_BASE_TICKS, PipeOptions, SimStorage
from zabd.sim.run import ScenarioResult, run_scenario
from zabd.sim.simulator import SimConfig, Simulator

E1 = 1 << 32
E2 = 2 << 32


def txn(z: int) -> Txn:
    return Txn(z, b"zab-%d" % (z & 0xFFFF))


def pipeline_config(seed: int, nodes: int = 3, faults: int = 6, plant: str = "") -> SimConfig:
    events = tuple(pipeline_faults(seed, nodes, 1500, faults))
    return SimConfig(seed, nodes, 1500, 60, faults=events, options=SERVER, pipeline=True, plant=plant)


def zabd_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zabd", "sim", *args], capture_output=True, text=True, timeout=60)


# ------------------------------------------------------------------ the disk


def test_a_crash_keeps_what_was_flushed_and_loses_the_rest() -> None:
    disk = SimStorage()
    disk.persist_epochs(1, 1, 1)
    for c in (1, 2, 3):
        disk.append(txn(E1 | c))
    mark = disk.begin_flush()
    disk.append(txn(E1 | 4))  # after the flush began: not covered by it
    disk.complete_flush(mark)
    disk.commit_to(E1 | 3)
    disk.append(txn(E1 | 5))
    disk.crash(0)  # none of the pending writes reached the disk
    state = disk.load()
    assert [t.zxid for t in state.history] == [E1 | 1, E1 | 2, E1 | 3]
    assert (state.accepted_epoch, state.current_epoch, state.last_committed) == (1, 1, 0)
    assert disk.lost == 3 and disk.torn_dropped == 0


def test_a_torn_last_record_is_cut_off_by_recovery() -> None:
    disk = SimStorage()
    disk.append(txn(E1 | 1))
    disk.complete_flush(disk.begin_flush())
    disk.append(txn(E1 | 2))
    disk.append(txn(E1 | 3))
    disk.crash((1 << 32) + 1)  # 2 of 2 pending writes reached the disk (draw % 3), the last torn (bit 32)
    assert disk.torn_tail is not None
    state = disk.load()
    assert [t.zxid for t in state.history] == [E1 | 1, E1 | 2]
    assert disk.torn_tail is None and disk.torn_dropped == 1
    # a prefix of the pending writes, untorn
    disk.append(txn(E1 | 3))
    disk.truncate_append(E1 | 1, [txn(E2 | 1)])
    disk.crash(1)
    assert [t.zxid for t in disk.load().history] == [E1 | 1, E1 | 2, E1 | 3]


# --------------------------------------------------------------- the checker


def test_acked_lost_flags_a_leader_without_an_acknowledged_txn() -> None:
    a, b = txn(E1 | 1), txn(E1 | 2)
    checker = SafetyChecker()
    checker.record_established(0, 1, 1, [])
    checker.record_acknowledged(5, 1, b)
    checker.record_established(9, 2, 2, [a])  # a later leader lacks 1:2
    assert checker.violation is not None and checker.violation.kind == "acked-lost"
    assert "1:2" in checker.violation.detail
    # the other way round: an established leader of a later epoch when the client hears
    checker = SafetyChecker()
    checker.record_history(0, 3, [a], False)
    checker.record_established(1, 3, 2, [a])
    checker.record_acknowledged(2, 1, b)
    assert checker.violation is not None and checker.violation.kind == "acked-lost"
    checker = SafetyChecker()
    checker.record_acknowledged(2, 1, a)
    checker.record_established(3, 2, 2, [a, b])
    assert checker.ok


# ------------------------------------------------------------ the simulation


def test_same_seed_same_run() -> None:
    config = pipeline_config(11, nodes=5)
    first, second = run_scenario(config), run_scenario(config)
    assert first.violation is None and first.digest == second.digest and first.committed > 0
    assert first.digest != run_scenario(pipeline_config(12, nodes=5)).digest


def test_the_pipeline_options_are_drawn_per_node() -> None:
    drawn = [PipeOptions.draw(seed, node) for seed in range(20) for node in (1, 2, 3)]
    for name in ("early_propose", "cumulative_acks", "commits_pass", "pair_commits"):
        assert {getattr(o, name) for o in drawn} == {False, True}, name
    assert len({o.max_flush_ticks for o in drawn}) > 5


def test_without_faults_everything_commits() -> None:
    r = run_scenario(SimConfig(3, 3, 2000, 40, options=SERVER, pipeline=True))
    assert r.violation is None and r.committed == 40


def test_a_whole_cluster_power_loss_keeps_what_clients_were_told() -> None:
    # everyone crashes at once, twice, coming back in different orders
    spec = ("crash:1@700,crash:2@700,crash:3@700,restart:3@705,restart:2@760,restart:1@900,"
            "crash:1@1200,crash:2@1200,crash:3@1200,restart:1@1201,restart:2@1203,restart:3@1400")
    for seed in range(8):
        config = SimConfig(seed, 3, 2000, 60, faults=tuple(parse_faults(spec, 3)), options=SERVER, pipeline=True)
        r = run_scenario(config)
        assert r.violation is None, r.violation
        assert r.committed > 30


def sweep(plant: str, count: int) -> list[ScenarioResult]:
    return [run_scenario(pipeline_config(seed, nodes=3 + 2 * (seed % 2), plant=plant)) for seed in range(count)]


def test_the_planted_bug_is_caught_and_the_clean_pipeline_is_not() -> None:
    """A Send released before the persist it follows is durable (an Ack of a
    txn the follower may lose): in 150 seeded scenarios with power losses the
    checker finds it; the same scenarios without the bug are clean."""
    bugged = sweep("early-send", 150)
    kinds = Counter(r.violation.kind for r in bugged if r.violation is not None)
    assert kinds["acked-lost"] > 0, kinds
    assert all(r.violation is None for r in sweep("", 150))
    # and the first one replays with one command
    found = next(r for r in bugged if r.violation is not None and r.violation.kind == "acked-lost")
    assert "--variant pipeline --plant early-send" in found.reproducer
    proc = zabd_sim(*shlex.split(found.reproducer)[2:])  # after "zabd sim"
    assert proc.returncode == 1 and "acked-lost" in proc.stderr and proc.stdout == found.digest


def test_usage_errors() -> None:
    base = ["--seed", "1", "--nodes", "3", "--rounds", "10", "--proposals", "1"]
    for extra, words in (
        (["--plant", "early-send"], "--plant needs --variant pipeline"),
        (["--variant", "pipeline", "--plant", "late-send"], "not a bug to plant"),
        (["--variant", "pipeline", "--workload", "zk"], "exclude each other"),
    ):
        proc = zabd_sim(*base, *extra)
        assert proc.returncode == 2 and words in proc.stderr and proc.stdout == "", proc.stderr


def test_a_lone_voter_that_loses_its_new_epoch_may_choose_it_again() -> None:
    """Node 1, the only voter, leads epoch 3 and proposes 3:1 before its flush;
    a power loss takes epoch 3 and 3:1 from its disk, and it leads epoch 3
    again with another 3:1. The first never left it: not two leaders."""
    spec = ("crash:1@32,crash:2@32,crash:3@32,restart:3@78,restart:1@101,restart:2@228,observe:3@274,"
            "cut:2>3@411-840,cut:3-1@566-995,add:2@615,remove:2@899,crash:1@976,crash:2@976,crash:3@976,"
            "restart:2@1072,restart:3@1096,observe:1@1139,restart:1@1181,crash:1@1513,remove:2@1627,"
            "cut:1>3@1640-2087,restart:1@1722,crash:3@1789,add:2@1918")
    config = SimConfig(7270075490143084663, 3, 2000, 40, faults=tuple(parse_faults(spec, 3)), options=SERVER,
                       spares=1, pipeline=True)
    r = run_scenario(config)
    assert r.violation is None, r.violation


def test_a_snapshot_below_the_recorded_commit_point_resets_it() -> None:
    """A leader that recovered an older commit point after a power loss SNAPs
    a follower below the follower's own. Recovery must not find the higher
    commit point over a log that ends at the snapshot: the install sets the
    commit point to the snapshot's, as DiskStorage.install_snapshot does
    (tests/storage/test_install_below_commit.py)."""
    disk = SimStorage()
    disk.append(Txn(E1 | 1, b"a"))
    disk.append(Txn(E1 | 2, b"b"))
    disk.commit_to(E1 | 2)
    disk.install(E1 | 1, (Txn(E1 | 1, b"a"),))
    disk.complete_flush(disk.begin_flush())
    assert (disk.last_committed, disk.log, disk.installs_below_commit) == (E1 | 1, [Txn(E1 | 1, b"a")], 1)
    # a run that takes this path: node 1 installs below its commit point (streamed SNAPs, zabd.sim.pipes)
    spec = ("crash:4@143,crash:1@244,crash:2@244,crash:3@244,crash:5@244,restart:1@286,restart:3@302,"
            "restart:2@370,restart:5@370,restart:4@531,crash:1@895,crash:2@895,crash:3@895,crash:4@895,"
            "crash:5@895,restart:3@920,restart:1@940,restart:4@958,restart:2@959,restart:5@972,crash:4@1223,"
            "cut:3-4@1335-1675,crash:1@1435,restart:4@1692")
    config = SimConfig(34, 5, 1500, 60, faults=tuple(parse_faults(spec, 5)), options=SERVER, pipeline=True)
    sim = Simulator(config)
    sim.run()
    assert sim.pipes is not None and sim.pipes[0].storage.installs_below_commit > 0  # the seed takes this path
    assert run_scenario(config).violation is None


# ------------------------------------------------------------ streamed SNAPs


class LinkLog(Simulator):
    """Records what the pipeline sends on each link and when, and what each
    node is handed and when (through the node class below)."""

    def __init__(self, config: SimConfig) -> None:
        self.sent: dict[tuple[int, int], list[tuple[int, object]]] = defaultdict(list)
        self.got: dict[tuple[int, int], list[tuple[int, object]]] = defaultdict(list)
        got = self.got

        class Recorded(Node):
            def on_message(self, src: int, msg: Message, t: int) -> None:
                got[(src, self.id)].append((t, msg))
                super().on_message(src, msg, t)

        super().__init__(config, node_class=Recorded)

    def post(self, node: Node, dsts: Sequence[int], msg: object, key: object) -> None:
        shown = msg.sync if isinstance(msg, SnapshotTransfer) else msg
        for dst in dsts:
            self.sent[(node.id, dst)].append((self.tick, shown))
        super().post(node, dsts, msg, key)


def test_a_snap_takes_many_ticks_and_the_link_stays_fifo() -> None:
    """Every link delivers a subsequence of what was sent on it, in send
    order (a crash or a cut loses a stream and what followed it, never
    reorders); a SNAP arrives tens of ticks after it was sent, and what the
    leader sent that follower after it arrives after it."""
    snaps = 0
    for seed in range(12):
        sim = LinkLog(pipeline_config(seed, nodes=3 + 2 * (seed % 2)))
        sim.run()
        for link, got in sim.got.items():
            sent = iter(sim.sent[link])
            for t, msg in got:
                # the next send on the link that is this message (skipping what was lost)
                sent_at = next(s for s, m in sent if m is msg)
                if isinstance(msg, Sync) and msg.mode == SNAP:
                    snaps += 1
                    assert t - sent_at >= STREAM_BASE_TICKS, (seed, link, sent_at, t)
    assert snaps > 5


def stream_stats(sim: Simulator) -> tuple[int, ...]:
    s = sim.stats
    return (s.snap_transfers, s.snaps_cut_sender, s.snaps_cut_receiver, s.snaps_cut_link, s.installs, s.installs_cut,
            s.snaps_long, s.snaps_long_installed)


def test_streams_visit_every_tick_they_need() -> None:
    """The loop that skips idle ticks visits every tick a streamed SNAP, a
    message behind one, or a cut that breaks one needs: same run as the
    reference that visits every tick."""
    snaps = cut = 0
    for seed in range(30):
        config = pipeline_config(seed, nodes=3 + 2 * (seed % 2))
        fast, slow = Simulator(config), Simulator(config, skip_idle=False)
        assert dump(fast.run(), fast.disks.logs if fast.disks else None) == \
            dump(slow.run(), slow.disks.logs if slow.disks else None), seed
        assert stream_stats(fast) == stream_stats(slow), seed
        snaps += fast.stats.snap_transfers
        cut += fast.stats.snaps_cut_sender + fast.stats.snaps_cut_receiver + fast.stats.snaps_cut_link
    assert snaps > 10 and cut > 0, (snaps, cut)


def test_a_crash_before_the_install_is_durable_keeps_the_old_state() -> None:
    disk = SimStorage()
    disk.append(txn(E1 | 1))
    disk.complete_flush(disk.begin_flush())
    disk.install(E2 | 5, tuple(txn(E2 | c) for c in range(1, 6)))
    disk.append(txn(E2 | 6))  # after the snapshot: in the log that starts at it
    assert disk.installing(disk.begin_flush()) == 5  # the flush covers the install: it takes longer
    disk.crash(2)  # however much of the pending writes the draw keeps, it stops before the install
    state = disk.load()
    assert [t.zxid for t in state.history] == [E1 | 1] and state.last_committed == 0
    assert disk.installs_cut == 1 and disk.lost == 2


def test_streamed_snaps_are_cut_by_crashes_and_the_checker_finds_nothing() -> None:
    """Across a bounded number of seeded scenarios with power losses, SNAP
    transfers are in flight when their sender crashes, when their receiver
    crashes and when a cut breaks their link, crashes cut installs, and the
    checker (acked-lost among its rules) finds no violation."""
    totals: Counter[str] = Counter()
    for r in sweep("", 80):
        assert r.violation is None, r.violation
        for name in ("snap_transfers", "snaps_cut_sender", "snaps_cut_receiver", "snaps_cut_link", "installs",
                     "installs_cut"):
            totals[name] += getattr(r, name)
    assert all(totals[name] > 0 for name in ("snaps_cut_sender", "snaps_cut_receiver", "snaps_cut_link",
                                             "installs_cut")), totals


SEEDS_FOR_LONG_SNAPS = 100


def progress_witness(seed: int, progress: bool = True) -> tuple[int, ScenarioResult]:
    """Runs a scenario (checked) and counts the SNAPs that put a follower in
    sync with its leader although they arrived after the follower's timer,
    as last set by anything but ``sync_progress``, had run out, with no
    election started by the follower or its leader since that setting."""
    set_at: dict[int, int] = {}  # node -> tick its timer was last set other than by sync_progress
    looked: dict[int, int] = defaultdict(lambda: -1)  # node -> tick it last started an election
    witnessed = 0

    class Witness(Node):
        progressing = False

        def sync_progress(self, peer: int, t: int) -> None:
            if progress:
                self.progressing = True
                super().sync_progress(peer, t)
                self.progressing = False

        def reset_deadline(self, t: int) -> None:
            if not self.progressing:
                set_at[self.id] = t
            super().reset_deadline(t)

        def start_election(self, t: int, reason: str = "start") -> None:
            looked[self.id] = t
            super().start_election(t, reason)

        def on_message(self, src: int, msg: Message, t: int) -> None:
            nonlocal witnessed
            waiting = (isinstance(msg, Sync) and msg.mode == SNAP and self.role == FOLLOWING and self.leader == src
                       and not self.in_sync)
            since = set_at.get(self.id, 0)
            super().on_message(src, msg, t)
            if (waiting and self.in_sync and deadline_after(seed, self.id, since) < t
                    and looked[self.id] < since and looked[src] < since):
                witnessed += 1

    # 150 proposals: logs grow past the window and diff_limit fast, so SNAPs are big and many stream long
    nodes = 3 + 2 * (seed % 2)
    config = SimConfig(seed, nodes, 1500, 150, faults=tuple(pipeline_faults(seed, nodes, 1500, 6)), options=SERVER,
                       pipeline=True)
    result = run_scenario(config, node_class=Witness)
    return witnessed, result


def test_a_snap_streaming_past_the_election_timeout_installs_without_an_election() -> None:
    """Both ends of a streamed SNAP tell their core of its pieces (every
    10..60 ticks, drawn), as the server's do: a follower whose leader's
    heartbeats wait behind a SNAP for longer than its election timeout does
    not go looking, and the SNAP installs; the leader does not plan it
    again. Without ``sync_progress`` no such SNAP installs (the witness is
    sound), and the checker finds nothing either way."""
    witnessed = long_installed = 0
    for seed in range(SEEDS_FOR_LONG_SNAPS):
        n, r = progress_witness(seed)
        assert r.violation is None, r.violation
        witnessed += n
        long_installed += r.snaps_long_installed
        assert r.snaps_long_installed <= r.snaps_long <= r.snap_transfers
        n, r = progress_witness(seed, progress=False)
        assert n == 0 and r.violation is None, (seed, r.violation)
    assert witnessed > 0 and long_installed > 0, (witnessed, long_installed)

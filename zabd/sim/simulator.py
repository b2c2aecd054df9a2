"""The deterministic simulator (spec sections 4, 7 and 12) around the core.

The loop visits only ticks where something can happen: the next delivery, the
next scheduled proposal, the next fault event, and the earliest ``wake`` of any
node (a lower bound on when ``on_tick`` can act). Skipped ticks would have been
no-ops, so the digest is the one the tick-by-tick loop of section 7 produces.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple, cast

from mypy_extensions import mypyc_attr

from zabd.protocol import zxid as zx
from zabd.protocol.effects import PHASE_NONE, Broadcast, Effect, RoleChanged, Send, SendSync
from zabd.protocol.membership import Membership, MembershipError
from zabd.protocol.messages import LookForLeader, Message, Propose, ProposeMany, Txn
from zabd.protocol.node import FOLLOWING, LEADING, LOOKING, NO_LEADER, Node, NotLeader
from zabd.protocol.options import CANONICAL, SERVER, VARIANTS, Options
from zabd.protocol.rand import ELECTION_TIMEOUT, MASK64, delivery_delay
from zabd.sim.disks import SimDisks, SnapshotTransfer
from zabd.sim.faults import Change, Crash, Cut, FaultEvent, Restart
from zabd.sim.pipes import NodePipe, effect_index, progress_ticks, stream_ticks

if TYPE_CHECKING:
    from zabd.sim.zk_workload import ZKWorkload


WORKLOADS = ("raw", "zk")
# "pipeline": the server's variant with every node's effects through the
# server's EffectPipeline over a simulated disk (zabd.sim.pipes); not canonical
SIM_VARIANTS = (*VARIANTS, "pipeline")


def variant_options(name: str) -> tuple[Options, bool]:
    """The core's options of a simulator variant, and whether it runs the pipeline."""
    return (SERVER, True) if name == "pipeline" else (VARIANTS[name], False)
_SENDER = itemgetter(0)  # of a message in flight: (src, dst, incarnation, msg)
# the pipeline variant: a message that waits for its tick outside the four
# buckets: (tick due, send order, src, dst, incarnation, msg)
_Later = tuple[int, int, int, int, int, Message | SnapshotTransfer]


class _Stream(NamedTuple):
    """A SNAP in flight on a link (the pipeline variant)."""

    seq: int  # its place in send order: what was sent on the link after it is behind it
    at: int  # the tick it arrives
    breaks: int  # the tick a cut of the link breaks it, or -1
    sent: int  # the tick the pipeline sent it
    start: int  # the tick its first piece goes (the link is free)
    every: int  # both ends tell their core of a piece at start + every, start + 2 * every, ... before at


@dataclass(frozen=True, slots=True)
class SimConfig:
    seed: int
    nodes: int
    rounds: int
    proposals: int
    partition: frozenset[tuple[int, int]] = frozenset()
    faults: tuple[FaultEvent, ...] = ()
    options: Options = CANONICAL  # anything else is not canonical: digests differ from the spec's
    workload: str = "raw"  # "zk": ZooKeeper requests instead of zab-N payloads (zabd.sim.zk_workload)
    # the last ``spares`` node ids start outside the ensemble (a change can add
    # them), and the last ``observers`` members never vote; not canonical either
    observers: int = 0
    spares: int = 0
    # the pipeline variant: effects through the server's EffectPipeline over
    # disks that flush late and lose unflushed writes on a crash (options: SERVER)
    pipeline: bool = False
    plant: str = ""  # a bug planted in the pipeline (zabd.sim.pipes.PLANTS), to see the checker catch it

    @property
    def variant(self) -> str:
        return "pipeline" if self.pipeline else self.options.name

    @property
    def observer_ids(self) -> frozenset[int]:
        members = self.nodes - self.spares
        return frozenset(range(members - self.observers + 1, members + 1))

    def initial_membership(self) -> Membership:
        members = frozenset(range(1, self.nodes - self.spares + 1))
        observers = self.observer_ids
        return Membership(members - observers, observers)

    def command(self) -> str:
        """The one-line ``zabd sim`` command that replays this configuration."""
        parts = [
            f"zabd sim --seed {self.seed} --nodes {self.nodes} --rounds {self.rounds} --proposals {self.proposals}"
        ]
        if self.partition:
            flat = ",".join(f"{s},{d}" for s, d in sorted(self.partition))
            parts.append(f"--partition {flat}")
        if self.faults:
            # quoted: a one-way cut (cut:1>2@...) holds a shell redirection
            import shlex  # here: only a reproducer needs it, not every ``zabd sim``

            parts.append("--faults " + shlex.quote(",".join(str(e) for e in self.faults)))
        if self.options != CANONICAL or self.pipeline:
            parts.append(f"--variant {self.variant}")
        if self.plant:
            parts.append(f"--plant {self.plant}")
        if self.workload != "raw":
            parts.append(f"--workload {self.workload}")
        if self.observers:
            parts.append(f"--observers {self.observers}")
        if self.spares:
            parts.append(f"--spares {self.spares}")
        return " ".join(parts)


@dataclass(slots=True)
class SimStats:
    """What a run did, for sweeps (not part of the canonical dump)."""

    messages_sent: int = 0
    messages_dropped: int = 0
    messages_discarded: int = 0
    elections: int = 0
    first_leader_tick: int = -1
    proposals_submitted: int = 0
    ticks_visited: int = 0
    deliveries: int = 0
    commit_latencies: list[int] = field(default_factory=list)
    changes_proposed: int = 0
    changes_skipped: int = 0
    flushes: int = 0  # the pipeline variant: storage flushes completed
    # the pipeline variant's streamed SNAPs: sent, and in flight when their
    # sender crashed, their receiver crashed, or a cut broke their link
    snap_transfers: int = 0
    snaps_cut_sender: int = 0
    snaps_cut_receiver: int = 0
    snaps_cut_link: int = 0
    installs: int = 0  # flushes that made a received snapshot durable (begun)
    installs_cut: int = 0  # installs a crash came before (nothing of them kept)
    # SNAPs that arrived more than the election timeout after they were sent
    # (the follower heard nothing else from its leader meanwhile), and those
    # of them that put their follower in sync with their sender, neither end
    # having started an election since the send (sync_progress held off the
    # follower's timer and the leader's retry)
    snaps_long: int = 0
    snaps_long_installed: int = 0


# Effects observer: (tick, node, effects). The checker is one.
Observer = Callable[[int, Node, list[Effect]], None]
TickObserver = Callable[[int, list[Node]], None]
# The pipeline variant: (tick, node, zxid) a CommitTo the pipeline released
# (the node answers clients), and (tick, node) a node recovered from its disk
ReleaseObserver = Callable[[int, Node, int], None]
RecoveryObserver = Callable[[int, Node], None]
ProposeObserver = Callable[[int, int, Txn], None]  # (tick, node id, txn): a proposal the pipeline sent


def schedule_tick(i: int, rounds: int, proposals: int) -> int:
    return (i + 1) * rounds // (proposals + 1)


@mypyc_attr(allow_interpreted_subclasses=True)  # tests record links and plant faults in subclasses
class Simulator:
    def __init__(
        self,
        config: SimConfig,
        observer: Observer | None = None,
        after_tick: TickObserver | None = None,
        skip_idle: bool = True,
        node_class: type[Node] = Node,
    ) -> None:
        """``node_class``: the core, or a subclass of it (tests plant bugs in one
        to see the checker catch them)."""
        self.config = config
        n = config.nodes
        ids = list(range(1, n + 1))
        membership = config.initial_membership()
        self.nodes: list[Node] = [
            node_class(i, [p for p in ids if p != i], config.seed, config.options, membership=membership) for i in ids
        ]
        self.up = [True] * (n + 1)
        self.incarnation = [0] * (n + 1)
        self.last_at = [[0] * (n + 1) for _ in range(n + 1)]
        self.blocked = [[False] * (n + 1) for _ in range(n + 1)]
        for s, d in config.partition:
            self.blocked[s][d] = True
        cuts: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for e in config.faults:
            if isinstance(e, Cut):
                cuts.setdefault((e.src, e.dst), []).append((e.start, e.end))
                if e.both:
                    cuts.setdefault((e.dst, e.src), []).append((e.start, e.end))
        self.cuts = cuts
        self.node_events: dict[int, list[Crash | Restart | Change]] = {}
        for e in config.faults:
            if isinstance(e, (Crash, Restart, Change)):
                self.node_events.setdefault(e.at, []).append(e)
        # Messages in flight, by delivery tick: a send at t arrives at t+1..t+3
        # (section 4: t + 1 + mix % 3, never before an earlier one on its link),
        # so four buckets, one per tick mod 4, hold them all. A bucket is in
        # send order; sorted stably by sender it is the (tick, sender, send
        # order) order section 4 delivers in.
        self.buckets: list[list[tuple[int, int, int, Message | SnapshotTransfer]]] = [[], [], [], []]
        self.in_flight = 0
        # the windowed variant keeps each node's disk; the canonical one needs none
        self.disks = SimDisks(n) if config.options.windowed else None
        self.window_problem: tuple[int, int, str] | None = None
        self.workload: ZKWorkload | None = None
        if config.workload == "zk":
            from zabd.sim.zk_workload import ZKWorkload  # the tree's modules: only when asked for

            disks = self.disks
            self.workload = ZKWorkload(
                config.seed, n, (lambda node: disks.logs[node.id]) if disks is not None else _history
            )
        # the pipeline variant: each node's pipeline and disk, and the flushes
        # in progress as (tick done, node, incarnation, writes covered, effects covered)
        self.pipes: list[NodePipe] | None = None
        self.flushes: list[tuple[int, int, int, int, int]] = []
        self.batch: list[Effect] | None = None  # the pipeline variant: the effects being carried out
        self.drops: list[tuple[int, int]] = []  # ... and its sends that failed: (index or -1, dst)
        self.on_release: ReleaseObserver | None = None
        self.on_recovery: RecoveryObserver | None = None
        self.on_propose: ProposeObserver | None = None
        # ... and its streamed SNAPs: what was sent on a link behind one in
        # flight waits here (heap) until its tick, and each link's streams
        self.later: list[_Later] = []
        self.streams: dict[tuple[int, int], list[_Stream]] = {}
        # the last tick each node started an election, and the long streams
        # arriving this tick whose receiver, when the tick began, followed
        # their sender and was not in sync: (src, dst, tick sent)
        self.looked = [-1] * (n + 1)
        self.long_due: list[tuple[int, int, int]] = []
        if config.pipeline:
            if self.workload is not None:
                raise ValueError("the pipeline variant runs the raw workload only")
            initial = config.initial_membership()
            self.pipes = [NodePipe(self, node, config.seed, initial, config.plant) for node in self.nodes]
        self.seq = 0
        self.stats = SimStats()
        self.observer = observer
        self.after_tick = after_tick
        # False: visit every tick and call on_tick on every up node, exactly as
        # section 7 reads (the reference the fast path is tested against).
        self.skip_idle = skip_idle
        self.tick = 0

    # ---------------------------------------------------------------- network

    def _cut(self, src: int, dst: int, t: int) -> bool:
        spans = self.cuts.get((src, dst))
        if spans is not None:
            for start, end in spans:
                if start <= t < end:
                    return True
        return False

    def _flush(self, node: Node, t: int) -> None:
        """Carry out a node's effects: sends go on the heap (section 4, with
        section 12's drops); persist effects are instantaneous here."""
        if not node.effects:
            return
        if self.pipes is not None:
            self._pipe_flush(node, t)
            return
        effects = node.take_effects()
        disks = self.disks
        if disks is not None:
            disks.persist(node, effects)
            if self.window_problem is None:
                problem = disks.check_window(node)
                if problem is not None:
                    self.window_problem = (t, node.id, problem)
        if self.workload is not None:
            self.workload.observe(t, node, effects)
        if self.observer is not None:
            self.observer(t, node, effects)
        src = node.id
        # seed ^ src ^ dst ^ t: all but dst is fixed for this batch
        base = self.config.seed ^ src ^ t
        row = self.last_at[src]
        blocked = self.blocked[src]
        up = self.up
        incarnation = self.incarnation
        buckets = self.buckets
        cuts = self.cuts
        seq = self.seq
        failed: list[tuple[int, int]] | None = None
        for index, eff in enumerate(effects):
            cls = type(eff)
            msg: Message | SnapshotTransfer
            if cls is Broadcast:
                dsts: tuple[int, ...] = node.peers
                msg = eff.msg  # type: ignore[union-attr]
            elif cls is Send:
                dsts = (eff.dst,)  # type: ignore[union-attr]
                msg = eff.msg  # type: ignore[union-attr]
            elif cls is SendSync and disks is not None:
                dsts = (eff.dst,)  # type: ignore[union-attr]
                msg = disks.sync_message(node, eff)  # type: ignore[arg-type]
            else:
                continue
            for dst in dsts:
                if blocked[dst] or not up[dst] or (cuts and self._cut(src, dst, t)):
                    if failed is None:
                        failed = []
                    failed.append((index, dst))
                    continue
                # mix() inlined: this is the hottest line of the simulator
                z = ((base ^ dst) + 0x9E3779B97F4A7C15) & MASK64
                z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E7B5) & MASK64
                z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
                at = t + 1 + (z ^ (z >> 31)) % 3
                if row[dst] > at:
                    at = row[dst]
                row[dst] = at
                buckets[at & 3].append((src, dst, incarnation[dst], msg))
                seq += 1
        self.stats.messages_sent += seq - self.seq
        self.in_flight += seq - self.seq
        self.seq = seq
        if disks is not None:
            disks.purged(node)
        if failed is not None:
            self.stats.messages_dropped += len(failed)
            # Reported after the handler returned; send_dropped makes that
            # equal to calling link_failed at the drop (spec section 5).
            for index, dst in failed:
                node.send_dropped(index, dst, t)

    # ------------------------------------------------------ pipeline variant

    def _pipe_flush(self, node: Node, t: int) -> None:
        """The pipeline variant's ``_flush``: the effects go through the node's
        EffectPipeline, which persists to its SimStorage and says (through
        ``post``) only what is durable; a flush starts if one is needed."""
        assert self.pipes is not None
        pipe = self.pipes[node.id - 1]
        effects = node.take_effects()
        disks = self.disks
        if disks is not None:
            pipe.received = disks.received[node.id]  # InstallSnapshot's prefix, before persist takes it
            disks.persist(node, effects, commits=False)
            if self.window_problem is None:
                problem = disks.check_window(node)
                if problem is not None:
                    self.window_problem = (t, node.id, problem)
        if self.observer is not None:
            self.observer(t, node, effects)
        for eff in effects:
            # every start of an election (a LOOKING node's too) asks who leads
            if type(eff) is Broadcast and type(eff.msg) is LookForLeader:
                self.looked[node.id] = t
        self.tick = t
        self.batch = effects
        pipe.pipeline.run(effects)
        self.batch = None
        self._after_pipeline(pipe, t)

    def _after_pipeline(self, pipe: NodePipe, t: int) -> None:
        node = pipe.node
        if self.disks is not None:
            self.disks.purged(node)
        if pipe.pipeline.unflushed and not pipe.flushing:
            pipe.flushing = True
            mark = pipe.storage.begin_flush()
            delay = pipe.flush_delay()
            installing = pipe.storage.installing(mark)
            if installing >= 0:  # the fsync of a whole snapshot file, and its rename
                self.stats.installs += 1
                delay += pipe.install_delay(installing)
            heapq.heappush(self.flushes, (t + delay, node.id, pipe.incarnation, mark, pipe.pipeline.written))
        if self.drops:
            drops, self.drops = self.drops, []
            self.stats.messages_dropped += len(drops)
            for index, dst in drops:
                if index >= 0:
                    node.send_dropped(index, dst, t)
                else:  # said after the batch that made it: the link fails now
                    node.link_failed(dst, t)

    def _flushes_done(self, t: int) -> None:
        """Flushes that complete at ``t`` release what waited for them."""
        assert self.pipes is not None
        flushes = self.flushes
        while flushes and flushes[0][0] <= t:
            _, nid, incarnation, mark, written = heapq.heappop(flushes)
            pipe = self.pipes[nid - 1]
            if incarnation != pipe.incarnation:
                continue  # the node crashed since: the flush never completed
            self.stats.flushes += 1
            pipe.flushing = False
            pipe.storage.complete_flush(mark)
            self.tick = t
            pipe.pipeline.flushed(written)
            self._after_pipeline(pipe, t)
            if pipe.node.effects:
                self._flush(pipe.node, t)

    def _pipe_crash(self, node: Node, t: int) -> None:
        """A node of the pipeline variant crashed: it comes back from its disk."""
        assert self.pipes is not None
        storage = self.pipes[node.id - 1].storage
        cut = storage.installs_cut
        state = self.pipes[node.id - 1].crash(t)
        self.stats.installs_cut += storage.installs_cut - cut
        self._crash_streams(node.id, t)
        disks = self.disks
        if disks is not None:
            disks.recovered(node.id, state.history, state.last_committed)
            node.log_start = disks.purged_to[node.id]
        if self.on_recovery is not None:
            self.on_recovery(t, node)

    def post(self, node: Node, dsts: Sequence[int], msg: object, key: object) -> None:
        """A send the pipeline said: on the network (section 4's delays), or
        a drop reported to the node once the pipeline returns."""
        t = self.tick
        src = node.id
        if self.on_propose is not None:
            if isinstance(msg, Propose):
                self.on_propose(t, src, msg.txn)
            elif isinstance(msg, ProposeMany):
                for txn in msg.txns:
                    self.on_propose(t, src, txn)
        row = self.last_at[src]
        blocked = self.blocked[src]
        sent = cast("Message | SnapshotTransfer", msg)  # a Message, or a Sync with its snapshot
        for dst in dsts:
            if blocked[dst] or not self.up[dst] or (self.cuts and self._cut(src, dst, t)):
                self.drops.append((effect_index(self.batch, key) if self.batch is not None else -1, dst))
                continue
            streams = self.streams.get((src, dst))
            if isinstance(sent, SnapshotTransfer):
                # streamed: it takes many ticks, and starts when the link is free
                seed = self.config.seed
                start = max(t, row[dst])
                at = start + stream_ticks(seed, src, dst, t, len(sent.prefix))
                if streams is None:
                    streams = self.streams[(src, dst)] = []
                streams.append(_Stream(self.seq, at, self._cut_start(src, dst, t, at), t, start,
                                       progress_ticks(seed, src, dst, t)))
                self.stats.snap_transfers += 1
            else:
                at = t + delivery_delay(self.config.seed, src, dst, t)
                if row[dst] > at:
                    at = row[dst]
            row[dst] = at
            if streams is not None:  # behind a stream (or one): FIFO, however far ahead that is
                heapq.heappush(self.later, (at, self.seq, src, dst, self.incarnation[dst], sent))
            else:
                assert at <= t + 3, "a message due beyond the four buckets"
                self.buckets[at & 3].append((src, dst, self.incarnation[dst], sent))
                self.in_flight += 1
            self.seq += 1
            self.stats.messages_sent += 1

    # ------------------------------------------- the pipeline variant's SNAPs

    def _cut_start(self, src: int, dst: int, t: int, at: int) -> int:
        """The first tick in (t, at) at which a cut of src>dst starts, or -1:
        a stream sent at t and due at ``at`` breaks then."""
        starts = [start for start, _ in self.cuts.get((src, dst), ()) if t < start < at]
        return min(starts) if starts else -1

    def _break_link(self, src: int, dst: int, t: int) -> None:
        """The connection src>dst broke with streams in flight: the first of
        them and everything sent on it after that is lost (the rest of the
        stream is never produced, and what followed it was queued behind it).
        What is left in flight on the link is ahead of it."""
        first = self.streams.pop((src, dst))[0].seq
        kept: list[_Later] = []
        lost = 0
        last = 0
        for e in self.later:
            if e[2] == src and e[3] == dst:
                if e[1] >= first:
                    lost += 1
                    continue
                last = max(last, e[0])
            kept.append(e)
        heapq.heapify(kept)
        self.later = kept
        self.stats.messages_discarded += lost
        # a new connection does not wait for the lost stream (the buckets hold ticks t..t+3 only)
        row = self.last_at[src]
        row[dst] = min(row[dst], max(t + 3, last))

    def _crash_streams(self, node: int, t: int) -> None:
        """``node`` crashed: the streams it was sending or receiving are lost."""
        for src, dst in sorted(self.streams):
            if node in (src, dst):
                n = len(self.streams[(src, dst)])
                if src == node:
                    self.stats.snaps_cut_sender += n
                else:
                    self.stats.snaps_cut_receiver += n
                self._break_link(src, dst, t)

    def _streams_due(self, t: int) -> bool:
        """At the start of tick ``t``, before anything is sent: cuts that start
        now break the streams on their links (both ends learn it, as of a
        closed connection), and messages that waited outside the buckets and
        are due now go first into this tick's bucket (every message already
        there was sent after them); then both ends of each stream a piece of
        which moves now tell their core (``Node.sync_progress``), as the
        server's do. True if a link failed or a core was told of progress.
        """
        acted = False
        for link in sorted(self.streams):
            if any(0 <= s.breaks <= t for s in self.streams[link]):
                src, dst = link
                self.stats.snaps_cut_link += len(self.streams[link])
                self._break_link(src, dst, t)
                for a, b in ((src, dst), (dst, src)):
                    if self.up[a]:
                        node = self.nodes[a - 1]
                        node.link_failed(b, t)
                        if node.effects:
                            self._flush(node, t)
                acted = True
        later = self.later
        if later and later[0][0] <= t:
            assert later[0][0] == t, "a message due at a tick that was not visited"
            due: list[tuple[int, int, int, Message | SnapshotTransfer]] = []
            while later and later[0][0] == t:
                _, _, src, dst, inc, msg = heapq.heappop(later)
                due.append((src, dst, inc, msg))
            self.buckets[t & 3] = due + self.buckets[t & 3]
            self.in_flight += len(due)
        nodes = self.nodes
        for (src, dst), streams in sorted(self.streams.items()):
            # a crash or a cut removed the streams it broke: both ends of these are up
            for s in streams:
                if s.start < t < s.at and (t - s.start) % s.every == 0:
                    for a, b in ((dst, src), (src, dst)):  # a piece arrived; a piece went
                        node = nodes[a - 1]
                        node.sync_progress(b, t)
                        if node.effects:
                            self._flush(node, t)
                    acted = True
                elif s.at == t and s.at - s.sent > ELECTION_TIMEOUT:
                    self.stats.snaps_long += 1
                    node = nodes[dst - 1]
                    if node.role == FOLLOWING and node.leader == src and not node.in_sync:
                        self.long_due.append((src, dst, s.sent))
        for link in [link for link, streams in self.streams.items() if streams[0].at <= t]:
            streams = self.streams[link]
            while streams and streams[0].at <= t:
                del streams[0]  # in this tick's bucket: it arrives (or is discarded) now
            if not streams:
                del self.streams[link]
        return acted

    def _long_arrived(self) -> None:
        """After this tick's deliveries: count the long streams that put their
        follower in sync with their sender with no election started at
        either end since they were sent (the follower's timer and the
        leader's plan outlasted a silence longer than the election timeout)."""
        nodes, looked = self.nodes, self.looked
        for src, dst, sent in self.long_due:
            node = nodes[dst - 1]
            if (node.role == FOLLOWING and node.leader == src and node.in_sync
                    and looked[dst] < sent and looked[src] < sent):
                self.stats.snaps_long_installed += 1
        self.long_due = []

    def _next_stream_event(self, t: int, nxt: int) -> int:
        """The earlier of ``nxt`` and the next tick a waiting message is due,
        a cut breaks a stream, or a stream's ends are told of a piece."""
        if self.later and self.later[0][0] < nxt:
            nxt = self.later[0][0]
        for streams in self.streams.values():
            for s in streams:
                if t < s.breaks < nxt:
                    nxt = s.breaks
                piece = s.start + s.every if t < s.start else t + s.every - (t - s.start) % s.every
                if piece < s.at and piece < nxt:
                    nxt = piece
        return nxt

    def sync_message(self, node: Node, plan: SendSync) -> object:
        assert self.disks is not None
        # read when the pipeline says it, which may be after a later purge: the
        # simulated log is never really cut, and the plan was valid when made
        return self.disks.sync_message(node, plan, strict=False)

    def released(self, node: Node, zxid: int) -> None:
        if self.disks is not None:
            self.disks.committed(node, zxid)
        if self.on_release is not None:
            self.on_release(self.tick, node, zxid)

    def _change(self, ev: Change, t: int) -> None:
        """Ask the leader, if any, for a membership change; count what it refuses."""
        leader = next((n for n in self.nodes if n.role == LEADING and n.synced and self.up[n.id]), None)
        if leader is None:
            self.stats.changes_skipped += 1
            return
        m = leader.membership
        voters, observers = set(m.voters), set(m.observers)
        voters.discard(ev.node)
        observers.discard(ev.node)
        if ev.kind == "add":
            voters.add(ev.node)
        elif ev.kind == "observe":
            observers.add(ev.node)
        try:
            leader.propose_membership(Membership(frozenset(voters), frozenset(observers)), t)
        except (MembershipError, NotLeader):
            self.stats.changes_skipped += 1
            return
        self.stats.changes_proposed += 1
        self._flush(leader, t)

    # ------------------------------------------------------------------- loop

    def run(self) -> list[Node]:
        cfg = self.config
        rounds, k = cfg.rounds, cfg.proposals
        nodes = self.nodes
        up = self.up
        buckets = self.buckets
        stats = self.stats
        pending: list[bytes] = []
        workload = self.workload
        zk_pending: list[int] = []  # the zk workload: schedule ticks of requests not proposed yet
        next_i = 0
        next_sched = schedule_tick(0, rounds, k) if k > 0 else rounds
        fault_ticks = sorted(self.node_events)
        fault_pos = 0
        skip = self.skip_idle
        incarnation = self.incarnation
        min_wake = 0
        t = 0
        while t < rounds:
            self.tick = t
            stats.ticks_visited += 1
            # faults, before step 1
            if fault_pos < len(fault_ticks) and fault_ticks[fault_pos] == t:
                for ev in self.node_events[t]:
                    node = nodes[ev.node - 1]
                    if isinstance(ev, Change):
                        self._change(ev, t)
                    elif isinstance(ev, Crash):
                        up[ev.node] = False
                        node.crash()
                        if self.pipes is not None:
                            self._pipe_crash(node, t)
                        # a crash ends any role; observers see it like a role change
                        ended: list[Effect] = [RoleChanged(LOOKING, NO_LEADER, node.current_epoch, PHASE_NONE)]
                        if self.workload is not None:
                            self.workload.observe(t, node, ended)
                        if self.observer is not None:
                            self.observer(t, node, ended)
                        # v1.4: the crash resets every live peer's connection to it
                        for peer in nodes:
                            if peer is not node and up[peer.id]:
                                peer.link_failed(ev.node, t)
                                if peer.wake < min_wake:
                                    min_wake = peer.wake
                    else:
                        up[ev.node] = True
                        self.incarnation[ev.node] += 1
                        node.restart(t)
                        min_wake = t
                fault_pos += 1
            # the pipeline variant: streams a cut breaks now, and messages that waited behind one
            if (self.later or self.streams) and self._streams_due(t):
                min_wake = t
            # the pipeline variant: flushes that complete now release what waited
            if self.flushes and self.flushes[0][0] <= t:
                self._flushes_done(t)
                for node in nodes:
                    if node.wake < min_wake and up[node.id]:
                        min_wake = node.wake
            # step 1
            while next_i < k and next_sched == t:
                if workload is None:
                    pending.append(b"zab-%d" % next_i)
                else:
                    zk_pending.append(t)
                next_i += 1
                next_sched = schedule_tick(next_i, rounds, k) if next_i < k else rounds
            # step 2
            if pending:
                for node in nodes:
                    if node.role == LEADING and node.synced and up[node.id]:
                        # batch_proposals: what the leader proposes at one tick goes as
                        # one batch, as a server's proposals of one loop turn do
                        batched = node.options.batch_proposals
                        for payload in pending:
                            node.propose(payload, t)
                            if not batched:
                                self._flush(node, t)
                        self._flush(node, t)
                        stats.proposals_submitted += len(pending)
                        pending = []
                        break
            if workload is not None:
                for node in nodes:
                    if node.role == LEADING and node.synced and up[node.id]:
                        before = len(zk_pending)
                        zk_pending = workload.lead(node, zk_pending, t, self._flush)
                        stats.proposals_submitted += before - len(zk_pending)
                        if before > len(zk_pending):
                            workload.reattach(t, nodes, up, self._flush)
                        break
            # step 3
            due = buckets[t & 3]
            if due:
                buckets[t & 3] = []
                self.in_flight -= len(due)
                if len(due) > 1:
                    due.sort(key=_SENDER)  # stable: send order within a sender
            for src, dst, inc, msg in due:
                if not up[dst] or inc != incarnation[dst]:
                    stats.messages_discarded += 1
                    continue
                stats.deliveries += 1
                node = nodes[dst - 1]
                if self.disks is not None:
                    msg = self.disks.deliver(dst, msg)
                node.on_message(src, msg, t)  # type: ignore[arg-type]
                if node.effects:
                    self._flush(node, t)
                    # a dropped send can make a follower tick at t (v1.4)
                    if node.wake < min_wake:
                        min_wake = node.wake
            if self.long_due:
                self._long_arrived()
            # step 4. Handlers at tick t set wakes above t, except a link
            # failure (wake = t); min_wake, taken at the end of the previous
            # visited tick and lowered by restarts and link failures, tells
            # whether any node can act now.
            if t >= min_wake or not skip:
                for node in nodes:
                    if up[node.id] and (t >= node.wake or not skip):
                        node.on_tick(t)
                        if node.effects:
                            self._flush(node, t)
            if self.after_tick is not None:
                self.after_tick(t, nodes)
            if not skip:
                t += 1
                continue
            # next tick where anything can happen
            nxt = next_sched
            if self.in_flight:
                soonest = t + 1 if buckets[(t + 1) & 3] else t + 2 if buckets[(t + 2) & 3] else t + 3
                if soonest < nxt:
                    nxt = soonest
            if fault_pos < len(fault_ticks) and fault_ticks[fault_pos] < nxt:
                nxt = fault_ticks[fault_pos]
            if self.flushes and self.flushes[0][0] < nxt:
                nxt = self.flushes[0][0]
            if self.later or self.streams:
                nxt = self._next_stream_event(t, nxt)
            min_wake = rounds
            for node in nodes:
                if node.wake < min_wake and up[node.id]:
                    min_wake = node.wake
            if min_wake < nxt:
                nxt = min_wake
            if (pending or zk_pending) and nxt > t + 1:
                for node in nodes:
                    if node.role == LEADING and node.synced and up[node.id]:
                        nxt = t + 1
                        break
            t = nxt if nxt > t else t + 1
        if workload is not None:
            workload.finish(t)
        return nodes


def _history(node: Node) -> list[Txn]:
    return node.history


def check_u32(nodes: list[Node]) -> None:
    for node in nodes:
        if node.current_epoch > zx.U32_MAX or node.accepted_epoch > zx.U32_MAX:
            raise zx.CounterOverflow(f"node {node.id}: epoch does not fit in u32")

"""A replica: the protocol core, driven by the clock and the network. This
module wires the parts and runs their life; each part does one job:

| part | job |
| --- | --- |
| ``zabd.protocol.Node`` | every decision: who leads, what is committed |
| ``transport`` | sockets: listeners, dialers, one write per link per iteration |
| ``peer_session`` / ``client_session`` | a link's bytes to events and back (no socket) |
| ``pipeline`` | the core's effects in order: persist before you speak |
| ``outbound`` | the core's messages as frames on the peer links |
| ``proposals`` | the one path of client writes: admission, forwarding, answers |
| ``applier`` | committed txns applied once, in order; reads; watches |
| ``sync`` | DIFF/TRUNC/SNAP instead of whole histories |
| ``recovery``, ``snapshots``, ``status`` | start-up, snapshots, the status answer |

Inputs are handed to the core as they arrive; once per loop iteration ``_process`` takes its
effects to the pipeline, and the transport writes what was queued (and before a commit is
applied). Storage flushes run in one task (group commit), releasing what waited.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from zabd import __version__
from zabd.config import ServerConfig
from zabd.machine import NullMachine, StateMachine
from zabd.protocol import zxid as zx
from zabd.protocol.messages import EXTENDED_TYPES, Commit, Message, Propose, ProposeMany, SyncInfo
from zabd.protocol.node import FOLLOWING, Node, role_name
from zabd.server import peer_wire as wire
from zabd.server.admin import AdminServer
from zabd.server.applier import Applier, Watches
from zabd.server.auth import Authenticator
from zabd.server.client_service import ClientService
from zabd.server.metrics import Counters, ReplicaCollector, registry, zookeeper_exposition
from zabd.server.outbound import Outbound
from zabd.server.peer_session import PeerEvent, SnapPiece, SyncArrived
from zabd.server.proposals import ProposalPath
from zabd.server.recovery import Recovered, recover
from zabd.server.roles import RoleTracker
from zabd.server.snapshots import Snapshotter
from zabd.server.status import GcTimer, StatusReport, freeze_now, freeze_survivors
from zabd.server.storage_factory import initial_membership
from zabd.server.sync import SnapshotRefused, SyncService
from zabd.server.transport import ClientLink, Transport
from zabd.server.zk.expiry import zookeeper_layer
from zabd.server.zk.port import open_zookeeper_port
from zabd.server.zk.words import enabled_words
from zabd.server.zlog import get_logger, set_context
from zabd.storage.base import MemoryStorage, Storage
from zabd.storage.disk import DiskStorage
from zabd.storage.effect_pipeline import EffectPipeline
from zabd.tokens import load_tokens
from zabd.zk.records import SessionResult
from zabd.zk.tree import Applied


class Replica:
    def __init__(self, config: ServerConfig, storage: Storage, machine: StateMachine | None = None) -> None:
        self.config = config
        self.id = config.id
        self.storage = storage
        self.machine: StateMachine = machine or NullMachine()
        self.node = Node(config.id, config.peer_ids, config.seed, config.core_options(),
                         membership=initial_membership(config))
        self.log = get_logger("zabd.server")
        set_context(self._log_context)
        self.disk = storage if isinstance(storage, DiskStorage) else None
        self._loop: asyncio.AbstractEventLoop | None = None
        t0 = time.monotonic()
        state = storage.load()
        load_s = time.monotonic() - t0
        warnings = list(self.disk.warnings) if self.disk is not None else []
        self.recovered = recover(state, storage, self.node, self.machine, self.log, warnings, load_s)
        if self.disk is not None and not self.disk.fsync:
            self.log.warning("fsync = false: acknowledged writes can be lost on a crash (benchmarks only)")
        bare = sorted(n for n in config.peers if config.peer_spec(n).election is None)
        if config.zookeeper_listen and bare:
            self.log.warning("peers given as bare host:port: /zookeeper/config shows their one peer port as both "
                             "ports, which ZooKeeper's parser (Curator, zkCli config) refuses; give "
                             "host:quorumport:electionport;clientport specs (docs/zookeeper.md)", nodes=bare)
        # memory storage keeps nothing; a null machine's state is the whole log
        self.snapshotter = None
        if self.disk is not None and not isinstance(self.machine, NullMachine):
            self.snapshotter = Snapshotter.for_server(
                config.snapshot_options(), self.disk, self.machine, self._snapshot_failed, self._purged,
                self._snapshot_taken,
            )
        self.applier = Applier(
            self.node, storage, self.machine, self.recovered.applied, config.max_frame, self.snapshotter
        )
        self.auth = Authenticator(load_tokens(config.auth_tokens_file) if config.auth_tokens_file else None)
        self.transport = Transport(config, self, self.log, auth_required=self.auth.required)
        self.transport.guest = lambda peer: peer in self.node.guests
        self.counters = Counters()
        self._recovery_observed(self.recovered)
        self.proposals = ProposalPath(
            self.node, self.machine, self, self.applier, config.max_inflight, self.counters.requests
        )
        self.watches = Watches(self.applier.read)
        self.sync = SyncService(self.machine, self.applier, storage, self.snapshotter, config.max_frame, self.log,
                                progress=self._sync_progress)
        self.gc_timer = GcTimer()
        self.roles = RoleTracker(self.node, self.proposals, self.counters, self.log, self.transport.set_members)
        self.role_changed, self.membership_changed = self.roles.changed, self.roles.membership_changed
        self.status = StatusReport(
            config, self.node, self.applier, self.transport, storage, self.sync, self.machine, self.snapshotter,
            self.gc_timer, self.proposals, self.watches, self.roles,
        )
        # the admin port tells no more than the four-letter words anyone may send
        self.admin = AdminServer(self.status, registry(self._collector()), self.log,
                                 enabled_words(config.zk_4lw_whitelist, config.zk_read_only),
                                 zookeeper_exposition(self.status, self.counters, config.zk_read_only))
        # ZooKeeper sessions live beside the KV store in the same machine
        self.zk, self.keeper = zookeeper_layer(config.zk_options(), self.node, self.machine, self.proposals, self,
                                               self.log)
        self.zk_port = open_zookeeper_port(self.transport, self.zk, self.status, self._kick, self.log,
                                           self.counters.zk)
        self.status.zk, self.status.zk_port = self.zk, self.zk_port
        self.status.counters, self.status.keeper = self.counters, self.keeper
        self.clients = ClientService(
            self.proposals, self.applier, self.watches, self.machine, self.status, self.log, self.auth, self.zk
        )
        self.outbound = Outbound(
            self.node, self.transport, self.sync, self.now, config.max_frame, self.log, self.counters.zk,
            crash_after=config.test_crash_after,
        )
        self.send, self.broadcast, self.send_sync = self.outbound.send, self.outbound.broadcast, self.outbound.send_sync
        self.read_ready, self.read_failed = self.proposals.read_ready, self.proposals.read_failed
        self.commit_decided = self.proposals.commit_decided
        self.pipeline = EffectPipeline(storage, self, early_propose=config.leader_early_propose,
                                       cumulative_acks=self.node.options.cumulative_acks, install=self._install)
        self._inline_flush = type(storage) is MemoryStorage
        self._on_peer: dict[type, Callable[[int, Any], None]] = {cls: self._core_message for cls in EXTENDED_TYPES}
        self._on_peer |= {
            SnapPiece: self._snap_piece,
            SyncArrived: self._sync_arrived,
            wire.SyncInfoFrame: lambda p, f: self._core_message(p, SyncInfo(f.base, f.epoch_ends)),
            wire.Forward: self.proposals.on_forward,
            wire.SyncReq: self.proposals.on_sync_req,
            wire.ForwardOk: lambda _, f: self.proposals.on_forward_ok(f),
            wire.ForwardErr: lambda _, f: self.proposals.on_forward_err(f),
        }
        # what a learner is sent, counted as ZooKeeper's Follower counts it
        self._on_peer[Propose] = self._proposed
        self._on_peer[ProposeMany] = self._proposed_many
        self._on_peer[Commit] = self._commit_received
        if self.keeper is not None:
            self._on_peer[wire.ZKTouch] = self.keeper.on_touch
        self._scheduled = False
        self._ticking = False
        self._tick_handle: asyncio.TimerHandle | None = None
        self._keepalive_at = 0.0
        self._flush_wanted: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._stopped: asyncio.Event | None = None
        self.fatal: BaseException | None = None

    def _recovery_observed(self, r: Recovered) -> None:
        zk = self.counters.zk
        zk.observe("dbinittime", int(r.seconds * 1000))
        if r.snapshot_seconds is not None:
            zk.observe("startup_snap_load_time", int(r.snapshot_seconds * 1000))
        zk.observe("startup_txns_loaded", r.replayed)
        zk.observe("startup_txns_load_time", int(r.replay_seconds * 1000))

    def _snapshot_taken(self, seconds: float) -> None:
        """From the snapshot thread: the summaries are the loop's."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.counters.zk.observe, "snapshottime", int(seconds * 1000))

    def _purged(self, snapshots: int, segments: int) -> None:
        """From the snapshot thread, after an autopurge."""
        if self._loop is not None and (snapshots or segments):
            self._loop.call_soon_threadsafe(self._log_purge, snapshots, segments)

    def _log_purge(self, snapshots: int, segments: int) -> None:
        self.node.log_start = self.storage.log_start  # a follower behind it now needs a snapshot
        self.log.info("purged", snapshots=snapshots, log_segments=segments, log_after=zx.fmt(self.node.log_start))

    def _snapshot_failed(self, exc: BaseException) -> None:
        """From the snapshot thread: stop the node (its state on disk is in doubt)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._die, exc)

    def _collector(self) -> ReplicaCollector:
        return ReplicaCollector(self.status, self.counters, self.status.dirs, __version__)

    def _log_context(self) -> dict[str, Any]:
        node = self.node
        return {"node": self.id, "role": role_name(node.role, node.observing), "epoch": node.current_epoch,
                "zxid": zx.fmt(node.last_zxid())}

    def now(self) -> int:
        """The core's clock: monotonic milliseconds in ticks of ``tick_ms``."""
        return int(time.monotonic() * 1000.0 // self.config.tick_ms)

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._flush_wanted = asyncio.Event()
        self._stopped = asyncio.Event()
        await self.transport.start()
        if self.config.admin_addr is not None:
            await self.admin.start(*self.config.admin_addr)
        self._tasks.append(asyncio.create_task(self._flusher(), name="flusher"))
        self._tasks.append(asyncio.create_task(self._start_ticking(), name="grace"))
        self._tasks.append(asyncio.create_task(freeze_survivors(self.counters.loop_lag.observe), name="gc"))
        cfg = self.config
        (host, port), (chost, cport) = cfg.peer_addr(self.id), cfg.client_addr
        election = cfg.election_addr
        self.log.info("server started", peer_port=f"{host}:{port}", client_port=f"{chost}:{cport}",
                      election_port=f"{election[0]}:{election[1]}" if election else None,
                      zookeeper_port=cfg.zookeeper_listen or None, admin_port=cfg.admin or None, peers=cfg.peers,
                      storage=cfg.storage, tick_ms=cfg.tick_ms, version=__version__)

    async def _start_ticking(self) -> None:
        # Give the links a moment to come up: an election started before any
        # peer is connected loses every vote and waits a full timeout.
        deadline = time.monotonic() + self.config.connect_grace_ms / 1000.0
        peers = self.config.peer_ids
        while (not self._ticking and time.monotonic() < deadline
               and not all(self.transport.connected(p) for p in peers)):
            await asyncio.sleep(0.01)
        self._begin_ticking()

    def _begin_ticking(self) -> None:
        """The first tick starts this node's election. A peer's vote that comes
        during the grace is weighed against this node's own position (the core
        holds it from ``restore``), and the grace itself lasts until every peer
        is linked: a quorum that elected as soon as two nodes met would leave
        out a third that holds more (a memory-storage cluster whose two
        restarted nodes came back empty elected an empty tree, and the third,
        in a later epoch, could never join it)."""
        if self._ticking or self._stopping:
            return
        self._ticking = True
        self._on_tick_timer()

    async def wait_stopped(self) -> None:
        assert self._stopped is not None
        await self._stopped.wait()

    async def shutdown(self) -> None:
        """Stop accepting, let what is in progress reach storage, flush, close."""
        if self._stopping:
            return
        self._stopping = True
        self.proposals.stopping = True
        self.log.info("shutting down")
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        for step, action in (("carry out effects", self._process_now), ("flush", self._flush_all)):
            if step == "carry out effects" and self.fatal is not None:
                continue
            try:
                await action()
            except Exception as exc:  # logged: a shutdown goes on, but never silently
                self.log.error("shutdown step failed", step=step, error=f"{type(exc).__name__}: {exc}")
        self.proposals.shutting_down()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
            except Exception as exc:
                self.log.error("task failed", task=task.get_name(), error=f"{type(exc).__name__}: {exc}")
        await self.transport.close()
        await self.admin.close()
        if self.snapshotter is not None:
            try:
                self.snapshotter.wait(30.0)
            except Exception as exc:
                self.log.error("snapshot failed", error=str(exc))
        try:
            self.storage.close()
        except Exception as exc:  # a writer that failed says so again here: the stop must still end
            self.log.error("storage close failed", error=f"{type(exc).__name__}: {exc}")
        self.gc_timer.close()
        self.log.info("stopped")
        assert self._stopped is not None
        self._stopped.set()

    async def _process_now(self) -> None:
        self._process()

    async def _flush_all(self) -> None:
        while self.pipeline.unflushed:
            target = self.pipeline.written
            await self.storage.flush()
            self.pipeline.flushed(target)

    def _die(self, exc: BaseException) -> None:
        if self.fatal is not None or self._stopping:
            return
        self.log.error("fatal error; stopping", error=f"{type(exc).__name__}: {exc}")
        self.fatal = exc
        asyncio.get_running_loop().create_task(self.shutdown())

    # ------------------------------------------------------------------ time

    def _on_tick_timer(self) -> None:
        if self._stopping:
            return
        try:
            self._tick()
            mono = time.monotonic()
            if mono >= self._keepalive_at:
                self._keepalive_at = mono + self.config.peer_ping_ms / 2000.0
                self.transport.keepalive()
                self._kick()
        except Exception as exc:
            # A core that raised mid-handler is in a state nobody decided:
            # stop loudly (exit status 1) rather than tick on or go half-alive.
            self.log.exception("error in the tick timer")
            self._die(exc)
            return
        loop = asyncio.get_running_loop()
        next_at = (self.now() + 1) * self.config.tick_ms / 1000.0
        self._tick_handle = loop.call_at(loop.time() + max(0.0, next_at - time.monotonic()), self._on_tick_timer)

    def _tick(self) -> None:
        t = self.now()
        if t >= self.node.wake:
            self.node.on_tick(t)
            if self.node.effects:
                self._kick()
        if self.keeper is not None:
            self.keeper.tick()

    def _tick_soon(self) -> None:
        """A follower that lost its leader elects at its next tick (spec
        v1.4): run it now rather than at the next timer."""
        if self._ticking and self.node.wake <= self.now():
            asyncio.get_running_loop().call_soon(self._guarded, self._tick)

    def _guarded(self, fn: Callable[[], None]) -> None:
        if self._stopping:
            return
        try:
            fn()
        except Exception as exc:
            self.log.exception("error while driving the core")
            self._die(exc)

    # ------------------------------------------------------- effect pipeline

    def _kick(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._guarded, self._process)

    def output_pending(self) -> None:
        self._kick()

    def _process(self) -> None:
        self._scheduled = False
        effects = self.node.take_effects()
        if effects:
            self.pipeline.run(effects)
        if self.pipeline.unflushed:
            if self._inline_flush:
                self._flush_inline()
            elif self._flush_wanted is not None:
                self._flush_wanted.set()
        if (self.watches.behind and self.watches.pump()) or self.node.effects:  # pages; writes just admitted
            self._kick()
        self.transport.flush()

    def _flush_inline(self) -> None:
        # MemoryStorage.flush() never suspends: run it to completion here
        # instead of a hop through the flusher task.
        target = self.pipeline.written
        coro = self.storage.flush()
        try:
            coro.send(None)
        except StopIteration:
            self.pipeline.flushed(target)
            return
        coro.close()
        raise RuntimeError("an inline storage flush suspended")

    async def _flusher(self) -> None:
        assert self._flush_wanted is not None
        wanted = self._flush_wanted
        while True:
            await wanted.wait()
            wanted.clear()
            while self.pipeline.unflushed and not self._stopping:  # shutdown flushes the rest itself
                target = self.pipeline.written
                t0 = time.monotonic()
                try:
                    await self.storage.flush()
                except Exception as exc:
                    # nothing after this persist may be said: stop the node
                    self.log.exception("storage flush failed")
                    self._die(exc)
                    return
                took = time.monotonic() - t0
                if self.counters.flushed(took, self.config.slow_fsync_ms):
                    self.log.warning("slow storage flush", took_ms=round(took * 1000, 1))
                self._guarded(partial(self.pipeline.flushed, target))  # what waited is said: failing stops the node
                self._guarded(self._process)  # what the core emitted while we waited

    # ------------------------------------------- the pipeline's speaker side

    def committed(self, zxid: int) -> None:
        self.transport.flush()  # a leader's Commit and a follower's Acks leave before this node applies
        new = self.applier.commit_to(zxid, self._applied_one)
        self.proposals.on_applied(self.applier.applied)
        self.watches.applied(new)

    def _applied_one(self, zxid: int, result: object) -> None:
        """One txn applied: ZooKeeper's watches and sessions hear of it, then
        the request that waited for it gets its result."""
        if type(result) is Applied:  # a ZooKeeper txn's, or a reconfig's config node
            if self.zk is not None:
                self.zk.applied(zxid, result)
            if self.keeper is not None and type(result.result) is SessionResult:  # a session made or ended
                self.keeper.applied(zxid, result)
        self.proposals.answer_applied(zxid, result)

    def _install(self, zxid: int) -> None:
        """The core's InstallSnapshot: the received state replaces ours, and
        ZooKeeper's clients reconnect (their watches may have missed changes)."""
        self.sync.install(zxid)
        if self.zk is not None:
            self.zk.restored()

    # --------------------------------------------- the transport's handler side

    def send_frame(self, peer: int, data: bytes) -> bool:
        return self.transport.send_frame(peer, data)

    def peer_up(self, peer: int) -> None:
        # what this node holds: a leader plans a resync with it
        self.transport.send_frame(peer, self.sync.info_frame(self.node.sync_info()))
        if self._ticking:
            # A Looking node tells the peer its vote: a node cut off by a
            # healed partition rejoins now, not at its next election timeout.
            self._guarded(lambda: self.node.link_up(peer, self.now()))
        self._kick()

    def peer_down(self, peer: int) -> None:
        self.sync.abandon(peer)  # a snapshot it was sending will not come whole
        lost_leader = self.node.role == FOLLOWING and self.node.leader == peer
        self.node.link_failed(peer, self.now())
        if lost_leader:
            self.proposals.leader_changed("lost the connection to the leader")
        self._tick_soon()
        self._kick()

    def peer_events(self, peer: int, events: list[PeerEvent]) -> None:
        on_peer = self._on_peer
        try:
            for event in events:
                on_peer[type(event)](peer, event)
        except SnapshotRefused:
            pass  # its link is closed: nothing after the refused snapshot counts
        except Exception as exc:
            self.log.exception("error while handling a peer frame", peer=peer)
            self._die(exc)
        self._kick()

    def _core_message(self, peer: int, msg: Message) -> None:
        self.node.on_message(peer, msg, self.now())

    def _proposed(self, peer: int, msg: Propose) -> None:
        self.counters.zk.count("learner_proposal_received_count")
        self.node.on_message(peer, msg, self.now())

    def _proposed_many(self, peer: int, msg: ProposeMany) -> None:
        self.counters.zk.count("learner_proposal_received_count", len(msg.txns))
        self.node.on_message(peer, msg, self.now())

    def _commit_received(self, peer: int, msg: Commit) -> None:
        self.counters.zk.count("learner_commit_received_count")
        self.node.on_message(peer, msg, self.now())

    def _snap_piece(self, peer: int, piece: SnapPiece) -> None:
        try:
            self.sync.snap_piece(peer, piece)
        except SnapshotRefused as exc:
            self.transport.drop_peer(peer, str(exc))
            raise
        freeze_now()
        self._sync_progress(peer)
        if self.config.test_crash_after == "snap_piece" and self.sync.arriving:
            self.log.warning("test hook: SIGKILL after a snapshot piece")
            os.kill(os.getpid(), signal.SIGKILL)

    def _sync_progress(self, peer: int) -> None:
        """A piece of a SNAP went to or came from ``peer``: the core holds off
        the timers a long stream would run out (``Node.sync_progress``)."""
        self.node.sync_progress(peer, self.now())

    def _sync_arrived(self, peer: int, got: SyncArrived) -> None:
        try:
            msg = self.sync.arrived(peer, got)
        except SnapshotRefused as exc:  # the core never hears of the plan; the leader plans again
            self.transport.drop_peer(peer, str(exc))
            raise
        self.node.on_message(peer, msg, self.now())

    def client_requests(self, link: ClientLink, bodies: list[Any]) -> None:
        if not self.clients.handle(link.session, bodies, link.addr):
            link.close_after_output()
        link.pace()
        self._kick()

    def client_closed(self, link: ClientLink) -> None:
        self.watches.stop(link.session)
        if self.zk is not None:
            self.zk.closed(link.session)

    def client_stalled(self, link: ClientLink, stalled: bool) -> None:
        if stalled:
            self.watches.stall(link.session)
        else:
            self.watches.drained(link.session)
            self._kick()

"""The ``pipeline`` variant's parts: the server's EffectPipeline on a simulated disk.

Each node's effects go through a real :class:`~zabd.storage.effect_pipeline.EffectPipeline`
(the one the server runs) over a :class:`SimStorage`, whose flush completes a
seeded number of ticks after it starts and which, on a crash, keeps only what
was flushed plus a seeded prefix of what was not, the last record of which
may be torn. The node then restarts from what recovery reads, as a server
does. What the pipeline says goes to a :class:`NodePipe` (its Speaker), which
hands it to the simulator (:class:`Host`): sends to the simulated network,
released commits to the checker (what a server would answer its clients).

The pipeline's options (``leader_early_propose``, cumulative acks, whether a
commit passes held proposals, whether a leader's CommitTo and Commit go as
one step) and each node's flush delay are drawn from the seed per node.

A SNAP is streamed, as the server streams it: the transfer takes
:func:`stream_ticks` to arrive (the simulator keeps the link FIFO behind it),
and the flush that makes its install durable takes :meth:`NodePipe.install_delay`
more than a flush of appends. A crash before that flush completes keeps
nothing of the install (the received snapshot is a temp file until the
install renames it) nor anything written after it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

from zabd.protocol.effects import (
    AppendTxn,
    Effect,
    MembershipChanged,
    PersistEpochs,
    ReplaceHistory,
    RoleChanged,
    SendSync,
    TruncateAppend,
)
from zabd.protocol.membership import Membership
from zabd.protocol.messages import Message, Txn
from zabd.protocol.node import Node
from zabd.protocol.rand import mix
from zabd.storage.base import DiscardedSnapshot, PersistentState, SnapshotSink, StorageStats, read_from
from zabd.storage.effect_pipeline import EffectPipeline

PLANTS: Final = ("early-send",)  # bugs the variant can plant, to show the checker catches them
MAX_FLUSH_TICKS: Final = 40  # a node's flushes take 1..its drawn maximum (at most this) ticks

# salts: each draw from the seed is its own stream
_OPTIONS_SALT: Final = 0x9F1E_0001
_FLUSH_SALT: Final = 0x9F1E_0002
_CRASH_SALT: Final = 0x9F1E_0003
_STREAM_SALT: Final = 0x9F1E_0004
_INSTALL_SALT: Final = 0x9F1E_0005
_PROGRESS_SALT: Final = 0x9F1E_0006

# A streamed SNAP of n txns takes STREAM_BASE_TICKS + n * (1..3) + 0..39 ticks
# to arrive, at most MAX_STREAM_TICKS: some take longer than the follower's
# election timeout (150 ticks of silence from its leader, which is behind the
# stream). As the server does, both ends tell the core of the stream's
# pieces (Node.sync_progress) every 10..60 ticks (drawn per stream: some
# gaps are long), which holds off the follower's timer and the leader's retry.
STREAM_BASE_TICKS: Final = 20
MAX_STREAM_TICKS: Final = 200
MIN_PROGRESS_TICKS: Final = 10
MAX_PROGRESS_TICKS: Final = 60
# Making a received snapshot durable (fsync of the whole file, rename) takes
# INSTALL_BASE_TICKS + n + 0..29 ticks on top of the flush it rides with.
INSTALL_BASE_TICKS: Final = 30


def stream_ticks(seed: int, src: int, dst: int, t: int, txns: int) -> int:
    """Ticks a snapshot of ``txns`` txns sent at ``t`` takes from ``src`` to ``dst`` (drawn)."""
    r = mix(seed ^ _STREAM_SALT ^ (src << 40) ^ (dst << 48) ^ t)
    return min(MAX_STREAM_TICKS, STREAM_BASE_TICKS + txns * (1 + r % 3) + (r >> 8) % 40)


def progress_ticks(seed: int, src: int, dst: int, t: int) -> int:
    """Ticks between the pieces of a stream sent at ``t`` from ``src`` to
    ``dst`` that both ends tell their core of (drawn)."""
    r = mix(seed ^ _PROGRESS_SALT ^ (src << 40) ^ (dst << 48) ^ t)
    return MIN_PROGRESS_TICKS + r % (MAX_PROGRESS_TICKS - MIN_PROGRESS_TICKS + 1)



class _Install(NamedTuple):
    zxid: int
    prefix: tuple[Txn, ...]


class _Commit(NamedTuple):
    zxid: int


# a pending write: the persist effect it carries out, or a snapshot or a commit point
_Op = PersistEpochs | AppendTxn | ReplaceHistory | TruncateAppend | _Install | _Commit


def _zxid(txn: Txn) -> int:
    return txn.zxid


class SimStorage:
    """A disk that buffers writes until a flush completes.

    ``begin_flush`` marks the writes a flush covers; ``complete_flush`` (some
    ticks later, called by the simulator) makes them durable. ``crash`` keeps
    the durable state plus a drawn prefix of the pending writes (the OS wrote
    some pages before the power went), and may tear the last record it kept:
    its bytes are cut short, and ``load`` (recovery) finds it and drops it, as
    ``DiskStorage`` cuts a torn tail. The log is the node's whole logical
    history (snapshots in the simulator are markers, ``zabd.sim.disks``).
    """

    def __init__(self) -> None:
        self.stats = StorageStats()
        self.current_epoch = 0
        self.accepted_epoch = 0
        self.epoch_leader = 0
        self.log: list[Txn] = []
        self.last_committed = 0
        self.torn_tail: bytes | None = None  # a record cut short by a crash, after ``log``
        self.torn_dropped = 0  # torn records recovery cut off
        self.lost = 0  # pending writes crashes lost
        self.installs_cut = 0  # installs a crash came before (they were not durable: nothing of them kept)
        # SNAPs installed below the recorded commit point: a leader that recovered an
        # older commit point (the commit file is not a barrier) snapshots at it; a
        # regression test's witness that its seed still takes this path
        self.installs_below_commit = 0
        self.pending: list[_Op] = []

    # ------------------------------------------------------ Storage interface

    def load(self) -> PersistentState:
        """Recovery: drop a torn tail record, then read what is durable."""
        if self.torn_tail is not None:
            self.torn_tail = None
            self.torn_dropped += 1
        return PersistentState(self.current_epoch, self.accepted_epoch, self.epoch_leader, list(self.log),
                               self.last_committed)

    def persist_epochs(self, accepted_epoch: int, epoch_leader: int, current_epoch: int) -> None:
        self.pending.append(PersistEpochs(accepted_epoch, epoch_leader, current_epoch))

    def append(self, txn: Txn) -> None:
        self.pending.append(AppendTxn(txn))

    def replace_history(self, history: Sequence[Txn]) -> None:
        self.pending.append(ReplaceHistory(tuple(history)))

    def truncate_append(self, after: int, txns: Sequence[Txn]) -> None:
        self.pending.append(TruncateAppend(after, tuple(txns)))

    def receive_snapshot(self, zxid: int) -> SnapshotSink:
        return DiscardedSnapshot()

    def install_snapshot(self, zxid: int, data: bytes | SnapshotSink, log_base: int | None = None) -> None:
        # the simulator installs with install(): its snapshot is the leader's committed prefix
        self.install(zxid, ())

    def install(self, zxid: int, prefix: Sequence[Txn]) -> None:
        """A snapshot at ``zxid`` received as the committed prefix it stands for."""
        self.pending.append(_Install(zxid, tuple(prefix)))

    def read_range(self, after: int, upto: int, max_bytes: int = 0) -> list[Txn]:
        return read_from(self.log, after, upto, max_bytes)

    @property
    def log_start(self) -> int:
        return 0

    def commit_to(self, zxid: int) -> None:
        self.pending.append(_Commit(zxid))

    @property
    def dirty(self) -> bool:
        return bool(self.pending)

    async def flush(self) -> None:
        self.complete_flush(self.begin_flush())

    def close(self) -> None:
        pass

    # --------------------------------------------------------- the simulator

    def begin_flush(self) -> int:
        """A flush starts: it covers the writes pending now."""
        self.stats.flushes += 1
        return len(self.pending)

    def installing(self, mark: int) -> int:
        """Txns of the snapshots the first ``mark`` pending writes install
        (-1 if none): a flush that covers an install takes longer."""
        n = -1
        for op in self.pending[:mark]:
            if isinstance(op, _Install):
                n = max(n, 0) + len(op.prefix)
        return n

    def complete_flush(self, mark: int) -> None:
        """The flush begun when ``mark`` writes were pending is durable."""
        self.stats.syncs += 1
        self._apply(self.pending[:mark])
        del self.pending[:mark]

    def crash(self, draw: int) -> None:
        """Power loss: a drawn prefix of the pending writes reached the disk;
        the last of them, if it wrote a record, may be torn. The prefix ends
        before the first install: a snapshot is installed by a rename after
        its fsync, so until its flush completed the disk holds the old state,
        and what was written after it went to a log that starts at the
        snapshot (nothing is half-installed)."""
        pending = self.pending
        kept = draw % (len(pending) + 1)
        installs = [i for i, op in enumerate(pending) if isinstance(op, _Install)]
        self.installs_cut += len(installs)
        if installs:
            kept = min(kept, installs[0])
        self._apply(pending[:kept])
        self.lost += len(pending) - kept
        last_op = pending[kept - 1] if kept else None
        wrote = isinstance(last_op, AppendTxn) or (isinstance(last_op, TruncateAppend) and bool(last_op.txns))
        if wrote and (draw >> 32) & 1:
            # the record's bytes are cut short: recovery no longer reads a record there
            torn = self.log.pop()
            self.torn_tail = torn.payload[: len(torn.payload) // 2]
        pending.clear()

    def _apply(self, ops: list[_Op]) -> None:
        log = self.log
        for op in ops:
            if isinstance(op, AppendTxn):
                log.append(op.txn)
                self.stats.records_synced += 1
            elif isinstance(op, _Commit):
                self.last_committed = op.zxid
            elif isinstance(op, PersistEpochs):
                self.accepted_epoch, self.epoch_leader, self.current_epoch = (
                    op.accepted_epoch, op.epoch_leader, op.current_epoch)
            elif isinstance(op, TruncateAppend):
                del log[bisect_right(log, op.after, key=_zxid) :]
                log.extend(op.txns)
            elif isinstance(op, ReplaceHistory):
                log[:] = op.history
            else:
                # as DiskStorage.install_snapshot: the commit point becomes the
                # snapshot's, even below the one recorded (the txns above it
                # follow in the same sync and are committed again)
                if op.zxid < self.last_committed:
                    self.installs_below_commit += 1
                log[:] = op.prefix
                self.last_committed = op.zxid


@dataclass(frozen=True, slots=True)
class PipeOptions:
    """One node's pipeline, as drawn from the seed."""

    early_propose: bool
    cumulative_acks: bool
    commits_pass: bool
    pair_commits: bool
    max_flush_ticks: int

    @classmethod
    def draw(cls, seed: int, node_id: int) -> PipeOptions:
        r = mix(seed ^ _OPTIONS_SALT ^ (node_id << 40))
        return cls(bool(r & 1), bool(r & 2), bool(r & 4), bool(r & 8), 1 + (r >> 8) % MAX_FLUSH_TICKS)


class Host(Protocol):
    """What a node's pipeline needs of the simulator."""

    def post(self, node: Node, dsts: Sequence[int], msg: object, key: object) -> None:
        """Put ``msg`` on the network to ``dsts``; ``key`` finds the effect
        in the batch being carried out, for a drop's ``send_dropped``."""
        ...

    def sync_message(self, node: Node, plan: SendSync) -> object: ...

    def released(self, node: Node, zxid: int) -> None:
        """The pipeline released ``CommitTo(zxid)``: the node applies and answers clients."""
        ...


class NodePipe:
    """One node's pipeline and storage, and the pipeline's Speaker."""

    def __init__(self, host: Host, node: Node, seed: int, initial: Membership, plant: str = "") -> None:
        self.host = host
        self.node = node
        self.seed = seed
        self.initial = initial
        self.plant = plant
        self.options = PipeOptions.draw(seed, node.id)
        self.storage = SimStorage()
        self.incarnation = 0
        self.flushes = 0
        self.flushing = False
        self.received: tuple[Txn, ...] | None = None  # a SNAP's prefix, for InstallSnapshot
        self.pipeline = self._new_pipeline()

    def _new_pipeline(self) -> EffectPipeline:
        o = self.options
        return EffectPipeline(self.storage, self, early_propose=o.early_propose, cumulative_acks=o.cumulative_acks,
                              install=self._install, commits_pass=o.commits_pass, pair_commits=o.pair_commits,
                              early_sends=self.plant == "early-send")

    def _install(self, zxid: int) -> None:
        prefix = self.received or ()
        self.received = None
        self.storage.install(zxid, prefix)

    def flush_delay(self) -> int:
        """Ticks the next flush takes (drawn)."""
        self.flushes += 1
        return 1 + mix(self.seed ^ _FLUSH_SALT ^ (self.node.id << 40) ^ self.flushes) % self.options.max_flush_ticks

    def install_delay(self, txns: int) -> int:
        """Ticks a flush that installs a snapshot of ``txns`` txns takes on
        top of its drawn delay (drawn)."""
        r = mix(self.seed ^ _INSTALL_SALT ^ (self.node.id << 40) ^ self.flushes)
        return INSTALL_BASE_TICKS + txns + r % 30

    def crash(self, t: int) -> PersistentState:
        """The node lost power at ``t``: the disk keeps what it keeps, the
        pipeline's held effects are gone, and the core restarts from what
        recovery reads (with the membership it was configured with: the
        history holds every later change)."""
        self.incarnation += 1
        self.flushing = False
        self.received = None
        self.storage.crash(mix(self.seed ^ _CRASH_SALT ^ (self.node.id << 40) ^ t))
        state = self.storage.load()
        node = self.node
        node.crash()
        node.restore(current_epoch=state.current_epoch, accepted_epoch=state.accepted_epoch,
                     epoch_leader=state.epoch_leader, history=state.history, last_committed=state.last_committed,
                     base_membership=self.initial, base_membership_zxid=0)
        node.take_effects()  # restore's MembershipChanged: nothing to tell while down
        self.pipeline = self._new_pipeline()
        return state

    # ----------------------------------------------------------------- Speaker

    def send(self, peer: int, msg: Message) -> None:
        self.host.post(self.node, (peer,), msg, msg)

    def broadcast(self, msg: Message) -> None:
        self.host.post(self.node, self.node.peers, msg, msg)

    def send_sync(self, plan: SendSync) -> None:
        self.host.post(self.node, (plan.dst,), self.host.sync_message(self.node, plan), plan)

    def read_ready(self, token: int, zxid: int) -> None:
        pass

    def read_failed(self, token: int) -> None:
        pass

    def commit_decided(self, zxid: int) -> None:
        pass

    def committed(self, zxid: int) -> None:
        self.storage.commit_to(zxid)
        self.host.released(self.node, zxid)

    def role_changed(self, change: RoleChanged) -> None:
        pass

    def membership_changed(self, change: MembershipChanged) -> None:
        pass


def effect_index(effects: list[Effect], key: object) -> int:
    """Where in ``effects`` the effect said with ``key`` (its message, or
    itself for a SendSync) is; -1 if it is not there."""
    for i, e in enumerate(effects):
        if e is key or getattr(e, "msg", None) is key:
            return i
    return -1

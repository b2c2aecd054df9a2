"""The core's effects carried out in order: persist before you speak.

Shared by both drivers: the server (``zabd.server.replica``, over
``DiskStorage`` or ``MemoryStorage``) and the simulator's ``pipeline``
variant (``zabd.sim.pipes``, over a simulated disk that flushes some ticks
later and loses what was not flushed on a crash), so the checker sees the
ordering the server really uses.

Socket-free: persist effects go to a :class:`~zabd.storage.base.Storage` at
once (buffered); every other effect that follows a persist not yet durable
waits, in order, until ``flushed`` reports the flush that covers it. What the
pipeline says goes to a :class:`Speaker` (the replica: sockets, the applier,
logs). Client answers (``CommitTo``) and role changes wait in the same queue
as sends, so nothing leaves ahead of what it depends on (ZOOKEEPER-3911,
-4643, -4646 were acknowledgements that left before their data was durable).

Liberties, none visible to the protocol:

* within one batch of effects only the last ``Broadcast(Commit)`` and the
  last ``CommitTo`` are carried out: a commit covers every zxid below it, and
  a follower that receives ``Commit(z2)`` without ``Commit(z1)`` commits both;
* ``cumulative_acks`` (the core's option of that name): of the Acks one
  flush releases back to back to the same leader, only the last is sent; that
  leader counts Ack(z) for every proposal up to z;
* ``leader_early_propose``: a leader's ``Broadcast(Propose)`` with nothing
  held before it leaves while the leader's own append syncs, as ZooKeeper's
  leader does (a proposal acknowledges nothing; the Commit and CommitTo it
  leads to still wait for that sync);
* a commit of ``z`` (``CommitTo(z)``, ``Broadcast(Commit(z))``) waits only for
  the appends up to ``z``: when those are durable it goes ahead of held
  proposals and Acks of later txns, which it says nothing about. Under load a
  leader's turn both appends new proposals and commits older ones; without
  this every commit waited one more flush, behind appends it does not cover.
  Any other persist or held effect (a role change, a sync) is a barrier: a
  commit never passes it;
* a leader's ``CommitTo(z)`` and the ``Broadcast(Commit(z))`` after it are
  carried out as one step, in the other order: ``commit_decided`` (the
  answers to its followers' forwarded writes), the Commit, then
  ``committed`` (which writes what is queued and applies). The followers
  apply while the leader does, as ZooKeeper's leader sends COMMIT before it
  applies; a follower still hears which txn each of its writes became before
  the Commit that covers it.

``commits_pass`` and ``pair_commits`` (both on in the server) turn the last two
off; the simulator draws them, with ``early_propose`` and ``cumulative_acks``,
from its seed. ``early_sends`` is a planted bug for the simulator's checker and
never set by the server: a ``Send`` (an Ack, an AckEpoch...) leaves at once, before
the persist it follows is durable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from zabd.protocol.effects import (
    AppendTxn,
    Broadcast,
    CommitTo,
    Effect,
    InstallSnapshot,
    MembershipChanged,
    PersistEpochs,
    ReadFailed,
    ReadReady,
    ReplaceHistory,
    RoleChanged,
    Send,
    SendSync,
    TruncateAppend,
)
from zabd.protocol.messages import Ack, Commit, Message, Propose, ProposeMany
from zabd.storage.base import Storage


class Speaker(Protocol):
    def send(self, peer: int, msg: Message) -> None: ...

    def broadcast(self, msg: Message) -> None: ...

    def send_sync(self, plan: SendSync) -> None: ...

    def read_ready(self, token: int, zxid: int) -> None: ...

    def read_failed(self, token: int) -> None: ...

    def commit_decided(self, zxid: int) -> None: ...

    def committed(self, zxid: int) -> None: ...

    def role_changed(self, change: RoleChanged) -> None: ...

    def membership_changed(self, change: MembershipChanged) -> None: ...


class EffectPipeline:
    def __init__(
        self,
        storage: Storage,
        speaker: Speaker,
        *,
        early_propose: bool = False,
        cumulative_acks: bool = False,
        install: Callable[[int], None] | None = None,
        commits_pass: bool = True,
        pair_commits: bool = True,
        early_sends: bool = False,
    ) -> None:
        """``install``: carries out InstallSnapshot (state machine and storage)."""
        self.storage = storage
        self.speaker = speaker
        self.early_propose = early_propose
        self.cumulative_acks = cumulative_acks
        self.commits_pass = commits_pass
        self.pair_commits = pair_commits
        self.early_sends = early_sends  # a planted bug (see the module's docstring)
        self.written = 0  # persist effects handed to storage
        self.durable = 0  # persist effects known durable
        self.held: deque[tuple[int, Effect]] = deque()
        # per run() that appended: (its last persist number, its first zxid);
        # one entry a call, not one a txn: a flush never ends inside a call
        self._appends: deque[tuple[int, int]] = deque()
        self._run_first = 0  # the first zxid this run() appended, while it runs
        self._barrier = 0  # the last persist that is not an append: no commit passes it
        self._blockers = 0  # held effects a commit may not pass
        self._persist: dict[type, Callable[[Any], None]] = {
            AppendTxn: lambda e: storage.append(e.txn),
            PersistEpochs: lambda e: storage.persist_epochs(e.accepted_epoch, e.epoch_leader, e.current_epoch),
            ReplaceHistory: lambda e: storage.replace_history(e.history),
            TruncateAppend: lambda e: storage.truncate_append(e.after, e.txns),
            InstallSnapshot: lambda e: _install(install, e.zxid),
        }
        self._speak: dict[type, Callable[[Any], None]] = {
            Send: lambda e: speaker.send(e.dst, e.msg),
            Broadcast: lambda e: speaker.broadcast(e.msg),
            SendSync: speaker.send_sync,
            ReadReady: lambda e: speaker.read_ready(e.token, e.zxid),
            ReadFailed: lambda e: speaker.read_failed(e.token),
            CommitTo: lambda e: speaker.committed(e.zxid),
            RoleChanged: speaker.role_changed,
            MembershipChanged: speaker.membership_changed,
        }

    @property
    def unflushed(self) -> bool:
        """Something was handed to storage that is not known durable yet."""
        return self.written > self.durable

    def run(self, effects: list[Effect]) -> None:
        persist = self._persist
        held = self.held
        last_commit, last_commit_to = _last_commits(effects)
        paired = False  # the last CommitTo was said with the Commit after it
        for i, e in enumerate(effects):
            cls = type(e)
            do_persist = persist.get(cls)
            if do_persist is not None:
                do_persist(e)
                self.written += 1
                if not isinstance(e, AppendTxn):
                    self._barrier = self.written
                elif not self._run_first:
                    self._run_first = e.txn.zxid
                continue
            if (cls is CommitTo and i != last_commit_to) or (i != last_commit and _is_commit(e)):
                continue  # a later commit in this batch covers it
            if i == last_commit and i == last_commit_to + 1 and paired:
                continue  # said with its CommitTo
            if held or self.written > self.durable:
                early = self.early_propose and not held and isinstance(e, Broadcast) and type(e.msg) in _PROPOSALS
                if early or (self.commits_pass and self._may_pass(e)) or (self.early_sends and cls is Send):
                    paired = self._say(e, effects, i, last_commit)
                else:
                    if not _passable(e):
                        self._blockers += 1
                    held.append((self.written, e))
            else:
                paired = self._say(e, effects, i, last_commit)
        if self._run_first:
            self._appends.append((self.written, self._run_first))
            self._run_first = 0

    def _say(self, e: Effect, effects: list[Effect], i: int, last_commit: int) -> bool:
        """Carry out ``e``; True if it was a CommitTo said together with the
        Commit that follows it (the leader's commit)."""
        if type(e) is CommitTo and last_commit == i + 1 and self.pair_commits:
            self._commit(e.zxid, effects[last_commit])
            return True
        self._speak[type(e)](e)
        return False

    def _commit(self, z: int, commit: Effect) -> None:
        # A leader's followers hear of the commit before it applies the
        # batch itself (as ZooKeeper's leader sends COMMIT, then applies);
        # the answers to their forwarded writes go ahead of the Commit.
        speaker = self.speaker
        speaker.commit_decided(z)
        self._speak[type(commit)](commit)
        speaker.committed(z)

    def _may_pass(self, e: Effect) -> bool:
        """A commit whose appends are all durable, with nothing it must
        follow held before it."""
        if self._blockers or self._barrier > self.durable:
            return False
        if isinstance(e, CommitTo):
            z = e.zxid
        elif isinstance(e, Broadcast) and isinstance(e.msg, Commit):
            z = e.msg.zxid
        else:
            return False
        first = self._appends[0][1] if self._appends else self._run_first
        return not first or first > z

    def flushed(self, upto: int) -> None:
        """Every persist effect up to number ``upto`` is durable: speak what
        waited for it."""
        durable = self.durable = max(self.durable, upto)
        appends = self._appends
        while appends and appends[0][0] <= durable:
            appends.popleft()
        held = self.held
        speak = self._speak
        cumulative = self.cumulative_acks
        while held and held[0][0] <= durable:
            e = held.popleft()[1]
            if not _passable(e):
                self._blockers -= 1
            if cumulative and type(e) is Send and type(e.msg) is Ack and held and held[0][0] <= durable:
                after = held[0][1]
                if type(after) is Send and type(after.msg) is Ack and after.dst == e.dst:
                    continue  # the next Ack, to the same leader, covers this one
            if (self.pair_commits and type(e) is CommitTo and held and held[0][0] <= durable
                    and _is_commit(held[0][1])):
                self._blockers -= 1
                self._commit(e.zxid, held.popleft()[1])
                continue
            speak[type(e)](e)


_PROPOSALS = (Propose, ProposeMany)


def _install(install: Callable[[int], None] | None, zxid: int) -> None:
    if install is None:
        raise RuntimeError("InstallSnapshot without an installer")
    install(zxid)


def _passable(e: Effect) -> bool:
    """Held effects a commit of earlier txns may go ahead of: a proposal of
    later txns, a follower's Ack (a commit is said only once its appends are
    durable, so it never overtakes the proposal or Ack of a txn it covers)."""
    if isinstance(e, Broadcast):
        return type(e.msg) in _PROPOSALS
    return isinstance(e, Send) and type(e.msg) is Ack


def _is_commit(e: Effect) -> bool:
    return isinstance(e, Broadcast) and isinstance(e.msg, Commit)


def _last_commits(effects: list[Effect]) -> tuple[int, int]:
    last_commit = last_commit_to = -1
    for i in range(len(effects) - 1, -1, -1):
        e = effects[i]
        if last_commit_to < 0 and type(e) is CommitTo:
            last_commit_to = i
        elif last_commit < 0 and _is_commit(e):
            last_commit = i
        if last_commit >= 0 and last_commit_to >= 0:
            break
    return last_commit, last_commit_to

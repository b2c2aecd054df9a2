"""Safety checker: watches every node through its effects, after every handler.

Invariants (the first violation is kept, with tick and node):

* ``history-order``: every history has strictly increasing zxids, the first
  txn of each epoch has counter 1 and counters have no gaps within an epoch
  (local primary order: a node that holds a leader's txn holds all that
  leader's earlier txns).
* ``commit-missing``: a node's ``last_committed`` is a txn of its own history.
* ``agreement``: the committed prefixes of any two nodes agree (total order,
  and with ``history-order``, global primary order).
* ``integrity``: a committed txn is one the leader of its epoch proposed, with
  the same payload.
* ``two-leaders``: at most one leader is established (finishes discovery) per
  epoch.
* ``lost-commit``: every txn committed anywhere is in the history of every
  leader established afterwards, and of every established leader of a later
  epoch when the commit happens.
* ``non-voter-led``: a node leads only while its history makes it a voter
  (an observer, or a node outside the membership, never leads).
* ``acked-lost`` (the pipeline variant): nothing acknowledged to a client is
  lost after any crash: a zxid whose CommitTo a node's EffectPipeline released
  (the point where a server applies it and answers the clients waiting on
  it: the leader its own, a follower those it forwarded) is in the history of
  every leader established afterwards, and of every established leader of a
  later epoch when it is acknowledged. There a node's commits count when its
  pipeline releases them, not when its core decides them (a leader decides
  before its own append is durable; a crash can still take that back), and a
  proposal that never left its leader and that a crash took from its disk
  is forgotten (a single voter that loses its new epoch in a crash before the
  flush chooses that epoch again: what it proposed in it no longer exists).
* ``membership-rule``: a leader proposes a membership change only once every
  earlier change it holds is committed, and one that changes at most one
  voter (zabd.protocol.membership), so consecutive majorities intersect.

The ``record_*`` methods are the checker's input and can be driven directly
with hand-made histories; :meth:`observe` adapts the core's effects to them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from zabd.protocol import zxid as zx
from zabd.protocol.effects import (
    PHASE_SYNC,
    AppendTxn,
    CommitTo,
    Effect,
    InstallSnapshot,
    ReplaceHistory,
    RoleChanged,
    Send,
    TruncateAppend,
)
from zabd.protocol.membership import MAGIC as MEMBERSHIP_MAGIC
from zabd.protocol.membership import Membership, MembershipError, check_change
from zabd.protocol.membership import decode as decode_membership
from zabd.protocol.messages import Txn
from zabd.protocol.node import LEADING, Node
from zabd.protocol.window import txn_zxid


@dataclass(frozen=True, slots=True)
class Violation:
    tick: int
    node: int
    kind: str
    detail: str
    reproducer: str

    def describe(self) -> str:
        return f"tick {self.tick}, node {self.node}: {self.kind}: {self.detail}"


class SafetyChecker:
    def __init__(
        self,
        reproducer: str = "",
        history_of: Callable[[Node], Sequence[Txn]] | None = None,
        initial: Membership | None = None,
        released_commits: bool = False,
    ) -> None:
        """``history_of``: a node's full history, when the core keeps only a
        window of it (the windowed variant reads it off the node's disk).
        ``initial``: the membership the run started with (from its
        configuration, not from the nodes); None: every node votes.
        ``released_commits``: commits come from ``record_released`` (the
        pipeline variant), not from the CommitTo effects ``observe`` sees."""
        self.reproducer = reproducer
        self.initial = initial
        self.history_of: Callable[[Node], Sequence[Txn]] = history_of or _in_memory
        self.violation: Violation | None = None
        self.committed: list[Txn] = []  # the global committed sequence
        self.proposed: dict[int, bytes] = {}  # zxid -> payload, as leaders proposed them
        self.epoch_leader: dict[int, int] = {}  # epoch -> established leader id
        self.established: dict[int, int] = {}  # node id -> epoch it leads (established), while it does
        self._histories: dict[int, Sequence[Txn]] = {}
        self._ordered_len: dict[int, int] = {}  # prefix length verified for history-order
        self._agreed_len: dict[int, int] = {}  # prefix length verified against `committed`
        self.released_commits = released_commits
        self.acknowledged: Txn | None = None  # the newest txn acknowledged to a client
        # released_commits: a leader's proposals neither sent nor known durable yet
        self.unsent: dict[int, dict[int, Txn]] = {}

    # ----------------------------------------------------------------- output

    def _fail(self, tick: int, node: int, kind: str, detail: str) -> None:
        if self.violation is None:
            self.violation = Violation(tick, node, kind, detail, self.reproducer)

    @property
    def ok(self) -> bool:
        return self.violation is None

    # ------------------------------------------------------------------ input

    def record_history(self, tick: int, node: int, history: Sequence[Txn], replaced: bool) -> None:
        """The node's history changed: appended to, or replaced."""
        self._histories[node] = history
        if replaced:
            self._ordered_len[node] = 0
            self._agreed_len[node] = 0
        start = self._ordered_len.get(node, 0)
        prev = history[start - 1].zxid if start > 0 else zx.ZERO
        for i in range(start, len(history)):
            z = history[i].zxid
            epoch, counter = z >> 32, z & zx.U32_MAX
            if z <= prev:
                self._fail(tick, node, "history-order", f"zxid {zx.fmt(z)} at index {i} follows {zx.fmt(prev)}")
                return
            want = (prev & zx.U32_MAX) + 1 if (prev >> 32) == epoch else 1
            if counter != want:
                self._fail(tick, node, "history-order", f"zxid {zx.fmt(z)} at index {i}: expected counter {want}")
                return
            prev = z
        self._ordered_len[node] = len(history)

    def record_proposal(self, tick: int, node: int, txn: Txn) -> None:
        known = self.proposed.get(txn.zxid)
        if known is not None and known != txn.payload:
            self._fail(tick, node, "two-leaders", f"zxid {zx.fmt(txn.zxid)} proposed twice with different payloads")
        self.proposed[txn.zxid] = txn.payload

    def record_established(self, tick: int, node: int, epoch: int, history: Sequence[Txn]) -> None:
        """``node`` finished discovery for ``epoch`` with ``history``."""
        other = self.epoch_leader.get(epoch)
        if other is not None and other != node:
            self._fail(tick, node, "two-leaders", f"epoch {epoch} established by node {other} and node {node}")
        self.epoch_leader[epoch] = node
        self.established[node] = epoch
        for txn in history:
            self.proposed.setdefault(txn.zxid, txn.payload)
        acked = self.acknowledged
        if acked is not None and not _holds(history, acked):
            self._fail(tick, node, "acked-lost",
                       f"leader of epoch {epoch} lacks zxid {zx.fmt(acked.zxid)}, acknowledged to a client")
            return
        committed = self.committed
        if len(history) < len(committed) or list(history[: len(committed)]) != committed:
            missing = next(
                (t for i, t in enumerate(committed) if i >= len(history) or history[i] != t), committed[-1]
            )
            self._fail(
                tick,
                node,
                "lost-commit",
                f"leader of epoch {epoch} lacks committed zxid {zx.fmt(missing.zxid)}",
            )

    def record_not_leading(self, node: int) -> None:
        self.established.pop(node, None)

    def record_commit(self, tick: int, node: int, last_committed: int, history: Sequence[Txn]) -> None:
        """The node's ``last_committed`` (or the history under it) changed."""
        if last_committed == zx.ZERO:
            return
        # Commits usually advance a step or two past what was already agreed:
        # scan forward from there (amortised O(1)); bisect after a replace.
        start = self._agreed_len.get(node, 0)
        idx = start - 1 if start > 0 else 0
        n = len(history)
        if start == 0 or idx >= n or history[idx].zxid > last_committed:
            # (the pipeline variant releases commits the core passed already)
            idx = bisect_left(history, last_committed, key=txn_zxid)
        else:
            while idx < n and history[idx].zxid < last_committed:
                idx += 1
        if idx >= n or history[idx].zxid != last_committed:
            self._fail(
                tick, node, "commit-missing", f"last_committed {zx.fmt(last_committed)} is not in the node's history"
            )
            return
        k = idx + 1
        committed = self.committed
        upto = min(k, len(committed))
        for i in range(start, upto):
            if history[i] != committed[i]:
                self._fail(
                    tick,
                    node,
                    "agreement",
                    f"committed position {i} is {zx.fmt(history[i].zxid)} here but {zx.fmt(committed[i].zxid)} "
                    "elsewhere",
                )
                return
        if k > len(committed):
            new = history[len(committed) : k]
            for txn in new:
                proposed = self.proposed.get(txn.zxid)
                if proposed is None or proposed != txn.payload:
                    self._fail(
                        tick, node, "integrity", f"committed zxid {zx.fmt(txn.zxid)} was never proposed as such"
                    )
                    return
            committed.extend(new)
            last_epoch = new[-1].zxid >> 32
            for leader, epoch in self.established.items():
                if epoch > last_epoch:
                    lh = self._histories.get(leader, ())
                    for txn in new:
                        j = bisect_left(lh, txn.zxid, key=txn_zxid)
                        if j >= len(lh) or lh[j] != txn:
                            self._fail(
                                tick,
                                leader,
                                "lost-commit",
                                f"zxid {zx.fmt(txn.zxid)} committed at node {node} but missing from the "
                                f"established leader of epoch {epoch}",
                            )
                            return
        self._agreed_len[node] = k

    def record_acknowledged(self, tick: int, node: int, txn: Txn) -> None:
        """``node`` answered the clients waiting on ``txn`` and every txn before it."""
        if self.acknowledged is not None and txn.zxid <= self.acknowledged.zxid:
            return
        self.acknowledged = txn
        epoch = txn.zxid >> 32
        for leader, led in self.established.items():
            if led > epoch and not _holds(self._histories.get(leader, ()), txn):
                self._fail(tick, leader, "acked-lost", f"zxid {zx.fmt(txn.zxid)} acknowledged at node {node} but "
                           f"missing from the established leader of epoch {led}")
                return

    def record_sent(self, tick: int, node: int, txn: Txn) -> None:
        """The pipeline variant: ``node``'s pipeline sent the proposal of ``txn``."""
        unsent = self.unsent.get(node)
        if unsent:
            unsent.pop(txn.zxid, None)

    def record_released(self, tick: int, node: Node, zxid: int) -> None:
        """The pipeline variant: ``node``'s pipeline released ``CommitTo(zxid)``."""
        if self.violation is not None:
            return
        unsent = self.unsent.get(node.id)
        if unsent:  # durable now: no crash takes them back
            for z in [z for z in unsent if z <= zxid]:
                del unsent[z]
        history = self.history_of(node)
        self.record_commit(tick, node.id, zxid, history)
        if self.violation is None:
            i = bisect_left(history, zxid, key=txn_zxid)
            if i < len(history):
                self.record_acknowledged(tick, node.id, history[i])

    def record_recovered(self, tick: int, node: Node) -> None:
        """The pipeline variant: ``node`` crashed and restarted from its disk."""
        if self.violation is not None:
            return
        history = self.history_of(node)
        for txn in self.unsent.pop(node.id, {}).values():
            if not _holds(history, txn) and self.proposed.get(txn.zxid) == txn.payload:
                del self.proposed[txn.zxid]  # it never left, and the disk lost it
        self.record_history(tick, node.id, history, True)
        self.record_commit(tick, node.id, node.last_committed, history)

    # -------------------------------------------------------- effect adapter

    def observe(self, tick: int, node: Node, effects: list[Effect]) -> None:
        """Simulator observer: called with each batch of a node's effects."""
        if self.violation is not None:
            return
        if len(effects) == 1 and type(effects[0]) is Send:
            return  # the commonest batch: an Ack or a vote; nothing to check
        nid = node.id
        history_changed = replaced = commit_changed = False
        for eff in effects:
            cls = type(eff)
            if cls is AppendTxn:
                history_changed = True
                if node.role == LEADING:
                    txn: Txn = eff.txn  # type: ignore[union-attr]
                    self.record_proposal(tick, nid, txn)
                    if self.released_commits:
                        self.unsent.setdefault(nid, {})[txn.zxid] = txn
                    if txn.payload.startswith(MEMBERSHIP_MAGIC):
                        self._check_change(tick, node, txn)
            elif cls is ReplaceHistory or cls is TruncateAppend or cls is InstallSnapshot:
                history_changed = replaced = commit_changed = True
            elif cls is CommitTo and not self.released_commits:
                commit_changed = True
            elif cls is RoleChanged:
                rc: RoleChanged = eff  # type: ignore[assignment]
                if rc.role == LEADING and self.initial is not None:
                    held = self.history_of(node)
                    at = self._membership(held, len(held))[0]
                    if nid not in at.voters:
                        self._fail(tick, nid, "non-voter-led", f"node {nid} leads epoch {rc.epoch}: {at.describe()}")
                if rc.role == LEADING and rc.phase == PHASE_SYNC:
                    self.record_established(tick, nid, rc.epoch, self.history_of(node))
                elif rc.role != LEADING:
                    self.record_not_leading(nid)
        if history_changed:
            self.record_history(tick, nid, self.history_of(node), replaced)
        if commit_changed:
            self.record_commit(tick, nid, node.last_committed, self.history_of(node))

    def _membership(self, history: Sequence[Txn], end: int) -> tuple[Membership, int]:
        """The membership the first ``end`` txns of a history set, and the
        zxid of the change that set it (0: the initial one)."""
        for i in range(end - 1, -1, -1):
            txn = history[i]
            if txn.payload.startswith(MEMBERSHIP_MAGIC):
                m = decode_membership(txn.payload)
                if m is not None:
                    return m, txn.zxid
        assert self.initial is not None
        return self.initial, 0

    def _check_change(self, tick: int, node: Node, txn: Txn) -> None:
        new = decode_membership(txn.payload)
        if new is None or self.initial is None:
            return
        history = self.history_of(node)
        i = bisect_left(history, txn.zxid, key=txn_zxid)
        before, at = self._membership(history, i)
        if at > node.last_committed:
            what = f"change at {zx.fmt(txn.zxid)} proposed before the change at {zx.fmt(at)} committed"
            self._fail(tick, node.id, "membership-rule", what)
            return
        try:
            check_change(before, new)
        except MembershipError as exc:
            self._fail(tick, node.id, "membership-rule", f"change at {zx.fmt(txn.zxid)}: {exc}")

    def record_window(self, tick: int, node: int, problem: str) -> None:
        """The windowed variant: a node's in-memory window is not its log's tail."""
        self._fail(tick, node, "window", problem)

    def record_state_machine(self, tick: int, node: int, kind: str, detail: str) -> None:
        """The ZooKeeper workload: replicas' trees disagree, or a txn does
        not apply (``zabd.sim.zk_workload``)."""
        self._fail(tick, node, kind, detail)

    def record_crash(self, node: int) -> None:
        self.record_not_leading(node)


def _in_memory(node: Node) -> Sequence[Txn]:
    return node.history


def _holds(history: Sequence[Txn], txn: Txn) -> bool:
    i = bisect_left(history, txn.zxid, key=txn_zxid)
    return i < len(history) and history[i] == txn

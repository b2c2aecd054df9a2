"""Committed transactions, applied once each, in order; reads and watches.

The :class:`Applier` owns the applied position: the highest zxid delivered to
the state machine and to clients. Reads are served up to it, in pages that
fit one frame. :class:`Watches` streams what is applied to the connections
that asked, page by page, and stops feeding a connection whose socket does
not drain (its transport paused writing) until it does. Both hand a client
only the txns its role may see (:func:`visible`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable

from zabd.codec import client as schema
from zabd.codec.framing import frame
from zabd.kv.kinds import ZK, kind_of
from zabd.machine import StateMachine
from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn
from zabd.protocol.node import Node
from zabd.protocol.window import txn_zxid
from zabd.server.client_session import ClientSession
from zabd.server.snapshots import Snapshotter
from zabd.storage.base import PurgedError, Storage
from zabd.tokens import ADMIN

WATCH_PAGE = 1000
READ_PAGE_BYTES = 4 << 20


def visible(txns: list[tuple[int, bytes]], role: str | None) -> list[tuple[int, bytes]]:
    """The txns of a log read that ``role`` may see: ZooKeeper's only to
    ``admin`` (their data may be a znode's that its ACL keeps from most)."""
    if role == ADMIN:
        return txns
    return [t for t in txns if kind_of(t[1]) != ZK]


class Applier:
    def __init__(
        self,
        node: Node,
        storage: Storage,
        machine: StateMachine,
        applied: int,
        max_frame: int,
        snapshotter: Snapshotter | None = None,
    ) -> None:
        self.node = node
        self.storage = storage
        self.machine = machine
        self.applied = applied
        self.snapshotter = snapshotter
        self.page_bytes = max_frame // 2
        # a client's page: well under what a connection may have queued (client_max_queued)
        self.read_bytes = min(self.page_bytes, READ_PAGE_BYTES)
        # The history list only grows until a NewLeader replaces it: keep the
        # applied position's index instead of a bisect per commit.
        self._index = 0
        self._list: list[Txn] = []

    def commit_to(self, z: int, each: Callable[[int, object], None] | None = None) -> list[Txn]:
        """Apply every txn up to ``z`` not applied yet; returns them.
        ``each(zxid, result)`` runs after each one, with what applying it
        returned: its request is answered with it, and what a client asked
        after that write and before the next is answered from the state
        between them."""
        self.storage.commit_to(z)
        applied = self.applied
        if z <= applied:
            return []
        new: list[Txn] = []
        base = self.node.base
        if applied < base:
            # One commit covered more than the core's window (cumulative acks
            # commit a whole batch at once): what left memory before it was
            # applied here comes back from the log, where it is durable.
            upto = min(base, z)
            while applied < upto:
                page = self.storage.read_range(applied, upto, self.page_bytes)
                if not page:
                    raise RuntimeError(f"committed txns after {zx.fmt(applied)} are in neither memory nor the log")
                new += page
                applied = page[-1].zxid
            self._list = []
        history = self.node.history
        i = self._index
        if history is not self._list or i > len(history) or (i and history[i - 1].zxid != applied):
            i = bisect_right(history, applied, key=txn_zxid)
            self._list = history
        j = i
        n = len(history)
        while j < n and history[j].zxid <= z:
            j += 1
        new += history[i:j]
        self._index = j
        apply = self.machine.apply
        for txn in new:
            result = apply(txn)
            if each is not None:
                self.applied = txn.zxid
                each(txn.zxid, result)
        self.applied = z
        if self.snapshotter is not None and new:
            self.snapshotter.applied(z, len(new))
        return new

    def reset_to(self, z: int) -> None:
        """The state machine now holds a snapshot taken at ``z``."""
        self.applied = z
        self._index = 0
        self._list = []

    def read(self, from_zxid: int, limit: int) -> list[tuple[int, bytes]]:
        """Applied txns from ``from_zxid`` on, at most ``limit`` and about
        ``read_bytes`` (at least one: a payload fits in a frame). Below the
        core's window they come from the log on disk; PurgedError if a
        snapshot covers them and their log was purged."""
        base = self.node.base
        if base and from_zxid <= base and from_zxid <= self.applied:
            upto = min(base, self.applied)
            page = self.storage.read_range(max(from_zxid - 1, 0), upto, self.read_bytes)
            return [(t.zxid, t.payload) for t in page[:limit]]
        history = self.node.history
        i = bisect_left(history, from_zxid, key=txn_zxid)
        j = min(bisect_right(history, self.applied, key=txn_zxid), i + limit)
        budget = self.read_bytes
        out: list[tuple[int, bytes]] = []
        for t in history[i:j]:
            budget -= len(t.payload) + 16
            if budget < 0 and out:
                break
            out.append((t.zxid, t.payload))
        return out


class Watches:
    """Connections that stream committed txns (``watch``).

    A connection that is caught up gets each commit as it is applied. One
    that is behind (it just started, or its socket stopped draining) is fed
    from the applied history a few pages per :meth:`pump`, which the replica
    calls after each round of writes, so a slow watcher costs a bounded
    amount of memory instead of the whole backlog."""

    PAGES_PER_PUMP = 4

    def __init__(self, read: Callable[[int, int], list[tuple[int, bytes]]]) -> None:
        self.read = read
        self.sessions: set[ClientSession] = set()
        self.behind: set[ClientSession] = set()
        self.stalled: set[ClientSession] = set()  # their transports paused writing

    def start(self, session: ClientSession, watch_id: int, from_zxid: int) -> None:
        session.start_watch(watch_id, from_zxid)
        self.sessions.add(session)
        self.behind.add(session)

    def stop(self, session: ClientSession) -> None:
        self.sessions.discard(session)
        self.behind.discard(session)
        self.stalled.discard(session)

    def applied(self, new: list[Txn]) -> None:
        if not new or not self.sessions:
            return
        events: list[tuple[int, bytes]] | None = None
        for session in self.sessions:
            if session in self.stalled:
                self.behind.add(session)
            elif session not in self.behind:
                if events is None:
                    events = [(t.zxid, t.payload) for t in new]
                self._send(session, events)

    def stall(self, session: ClientSession) -> None:
        if session in self.sessions:
            self.stalled.add(session)

    def drained(self, session: ClientSession) -> None:
        self.stalled.discard(session)

    def pump(self) -> bool:
        """Feed sessions that are behind; True while some can take more now."""
        more = False
        for session in list(self.behind):
            if session in self.stalled:
                continue
            for _ in range(self.PAGES_PER_PUMP):
                try:
                    page = self.read(session.watch_next, WATCH_PAGE)
                except PurgedError as exc:  # asked for txns that are gone: say so, end the stream
                    session.push(schema.error_frame(session.watch_id or 0, schema.PURGED, str(exc)))
                    self.stop(session)
                    break
                if not page or session.closed:
                    self.behind.discard(session)
                    break
                self._send(session, page)
            else:
                more = True
        return more

    def _send(self, session: ClientSession, txns: list[tuple[int, bytes]]) -> None:
        start = bisect_left(txns, session.watch_next, key=lambda t: t[0])
        if start >= len(txns) or session.closed:
            return
        if start:
            txns = txns[start:]
        shown = visible(txns, session.role)
        if shown:
            session.push(frame({"v": 1, "id": session.watch_id, "ok": True, "txns": shown}))
        session.watch_next = txns[-1][0] + 1

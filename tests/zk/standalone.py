"""A one-replica ZooKeeper, in process: prepare, then apply at once, as a
standalone ZooKeeper server does. For tests, benchmarks and the reference
behaviour the replicated paths are compared with; deterministic (zxids
count from ``epoch << 32``, the clock is a counter unless one is given)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from zabd.zk.acl import Id
from zabd.zk.events import Trigger
from zabd.zk.prep import ZKLeader
from zabd.zk.reads import serve
from zabd.zk.records import CloseSession, CreateSession, Read, ReadResult, SessionResult, Write, WriteResult
from zabd.zk.sessions import SessionIds, password_digest
from zabd.zk.tree import DataTree

START_MS = 1_700_000_000_000


class Standalone:
    def __init__(self, epoch: int = 1, clock_ms: Callable[[], int] | None = None, server_id: int = 1,
                 max_data: int = 1 << 20) -> None:
        self.tree = DataTree()
        self.leader = ZKLeader(self.tree, max_data=max_data)
        self.zxid = epoch << 32
        self._ticks = START_MS
        self.clock_ms = clock_ms or self._counter
        self.ids = SessionIds(server_id, START_MS)
        self.triggers: list[Trigger] = []  # what the last write changed, for watches
        # every (zxid, payload) applied from now on, for a caller that replays
        # them (a list to append to; the tree itself is compiled, not wrapped)
        self.recorded: list[tuple[int, bytes]] | None = None

    def _counter(self) -> int:
        self._ticks += 1
        return self._ticks

    def write(self, session: int, req: Write, auth: Sequence[Id] = ()) -> WriteResult:
        prepared = self.leader.prepare(session, auth, req, self.clock_ms())
        self.zxid += 1
        self.leader.proposed(self.zxid, prepared)
        applied = self.tree.apply(self.zxid, prepared.payload)
        if self.recorded is not None:
            self.recorded.append((self.zxid, prepared.payload))
        self.leader.committed(self.zxid)
        self.triggers = applied.triggers
        assert applied.result is not None  # every session is answered here
        return applied.result

    def read(self, session: int, req: Read, auth: Sequence[Id] = ()) -> ReadResult:
        return serve(self.tree, req, auth, session)

    def session(self, timeout_ms: int = 30_000, password: bytes = b"\0" * 16) -> int:
        sid = self.ids.next()
        result = self.write(sid, CreateSession(sid, timeout_ms, password_digest(password)))
        assert isinstance(result, SessionResult)
        return sid

    def close(self, session: int) -> WriteResult:
        return self.write(session, CloseSession())

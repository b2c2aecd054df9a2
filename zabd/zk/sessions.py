"""Sessions: ids, timeouts and the leader's expiry tracker.

A session is created by the server that holds its connection (it picks the
id and the password, tells the password to its client only, and proposes
``CreateSession`` with the password's digest) and lives in the
replicated session table until a ``CloseSession`` txn. The leader expires
sessions: every server reports which sessions its connections kept alive
(ZooKeeper's learner "touches"), and the leader proposes ``CloseSession`` for
one that nobody touched within its timeout. A new leader gives every session
in its table a full timeout from the moment it starts leading, as ZooKeeper
does, so a leader change never expires a live client.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
from collections.abc import Mapping
from typing import Protocol

MASK64 = (1 << 64) - 1
PASSWORD_DIGEST_SIZE = 32


def password_digest(password: bytes) -> bytes:
    """What the log, the session table and snapshots keep of a session's
    password: its SHA-256, never the password. The password is 16 random
    bytes, so a fast hash is enough (nothing to guess from: a password file's
    slow hash protects passwords people chose), and any server can check a
    client's password against the replicated table."""
    return hashlib.sha256(b"zabd session password\0" + password).digest()


def password_matches(digest: bytes, password: bytes) -> bool:
    return hmac.compare_digest(digest, password_digest(password))


def stored_digest(secret: bytes) -> bytes:
    """A createSession txn's or an older snapshot's secret as the table keeps
    it: logs and snapshots written before passwords left the log hold the
    16-byte password itself."""
    return secret if len(secret) == PASSWORD_DIGEST_SIZE else password_digest(secret)


_JAVA_MULTIPLIER = 0x5DEECE66D
_JAVA_MASK = (1 << 48) - 1
ZOOKEEPER_SUPER_SECRET = 0xB3415C00  # ZooKeeperServer.superSecret


def zookeeper_password(session: int) -> bytes:
    """The password ZooKeeper gave session ``session``: ``generatePasswd``'s
    ``new Random(id ^ superSecret).nextBytes(16)``, java.util.Random's LCG.
    It is a function of the id, which every Stat of the session's ephemerals
    shows: an imported session is exactly as safe as it was on ZooKeeper, and
    only sessions imported from ZooKeeper are checked against it (``zabd
    import-zookeeper`` keeps its digest in the table); zabd's own sessions
    have random passwords."""
    seed = ((session & MASK64) ^ ZOOKEEPER_SUPER_SECRET ^ _JAVA_MULTIPLIER) & _JAVA_MASK
    out = bytearray()
    while len(out) < 16:
        seed = (seed * _JAVA_MULTIPLIER + 0xB) & _JAVA_MASK
        rnd = seed >> 16  # next(32): the low 4 bytes first, as nextBytes takes them
        for _ in range(min(4, 16 - len(out))):
            out.append(rnd & 0xFF)
            rnd >>= 8
    return bytes(out)


class HeldSession(Protocol):
    @property
    def timeout_ms(self) -> int: ...

    @property
    def password_digest(self) -> bytes: ...


def reattach_timeout(table: Mapping[int, HeldSession], session: int, password: bytes) -> int | None:
    """A re-attach's verdict: the session's timeout if ``table`` holds it with
    this password, None if it has expired (or never was).

    Sound only on a table that holds every session change committed before
    the client asked, as ZooKeeper's learner asks its leader to revalidate:
    the client was told of its session once its ``CreateSession`` committed,
    so a table without it that is this current lacks it because its
    ``CloseSession`` committed. A follower's own table may lag (it has not
    applied that ``CreateSession`` yet), so the server first has the leader
    confirm its commit point and applies up to it (``ZK_ATTACH`` in
    ``zabd.server.proposals``); the simulator checks the rule with leaders
    killed while sessions re-attach (``zabd.sim.zk_workload``)."""
    held = table.get(session)
    if held is None or not password_matches(held.password_digest, password):
        return None
    return held.timeout_ms


def negotiate_timeout(requested_ms: int, tick_ms: int) -> int:
    """ZooKeeper's bounds: between 2 and 20 ticks."""
    return max(2 * tick_ms, min(20 * tick_ms, requested_ms))


def _signed(v: int) -> int:
    v &= MASK64
    return v - (1 << 64) if v >> 63 else v


class SessionIds:
    """Unique ids across servers and restarts: the server id in the top byte
    and the start time in ms in the 40 bits below it (ZooKeeper's
    ``initializeNextSessionId``), then a counter."""

    def __init__(self, server_id: int, now_ms: int) -> None:
        if not 0 < server_id < 255:
            raise ValueError(f"server id {server_id} does not fit a session id's top byte (1..254)")
        self._next = ((now_ms << 24) & MASK64) >> 8 | (server_id << 56)

    def next(self) -> int:
        sid = _signed(self._next)
        self._next += 1
        if sid == -(1 << 63):  # that value marks containers (ZooKeeper skips it too)
            return self.next()
        return sid


class ExpiryTracker:
    """The leader's view of when each session was last heard of. ``expired``
    is cheap when nothing is due: a heap of deadlines, stale entries skipped."""

    def __init__(self) -> None:
        self._deadline: dict[int, int] = {}
        self._timeout: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self._deadline)

    def track(self, sid: int, timeout_ms: int, now_ms: int) -> None:
        """A session the table holds (created, or found at leadership start)."""
        self._timeout[sid] = timeout_ms
        self.touch(sid, now_ms)

    def touch(self, sid: int, now_ms: int) -> None:
        timeout = self._timeout.get(sid)
        if timeout is None:
            return
        deadline = now_ms + timeout
        if self._deadline.get(sid, -1) < deadline:
            self._deadline[sid] = deadline
            heapq.heappush(self._heap, (deadline, sid))

    def forget(self, sid: int) -> None:
        self._deadline.pop(sid, None)
        self._timeout.pop(sid, None)

    def expired(self, now_ms: int) -> list[int]:
        """Sessions past their deadline, oldest first; each is reported once
        (forgotten here): the caller proposes its close."""
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            deadline, sid = heapq.heappop(heap)
            if self._deadline.get(sid) == deadline:
                out.append(sid)
                self.forget(sid)
        return out

    def clear(self) -> None:
        self._deadline.clear()
        self._timeout.clear()
        self._heap.clear()

"""A socket-free fuzzer of ZooKeeper's client connection state machine (issue 18).

Why: ``scripts/fuzz_zk_port.py`` fuzzes live servers over TCP, a few hundred
inputs a second; a million inputs through it take days. This drives the
same objects in-process with bytes, h11-style, a thousand times faster, so
``scripts/fuzz_zk_conn.py`` can run a million inputs in minutes and CI can
run a few thousand in seconds (tests/server/test_zk_conn_fuzz.py).

What is real: a whole ``Replica`` built from a one-node configuration
(memory storage, ``state_machine = "kv"``, ZooKeeper's port, read-only mode
on): its ``Node`` elects itself and leads alone, so every write takes the
real path (``ZKPort.handle`` -> ``ZKSessions`` -> ``ProposalPath`` -> the
core's proposal -> ``EffectPipeline`` with an inline memory flush ->
``Applier`` -> ``KVMachine``/``DataTree`` -> the session layer's answer), as
do reads, watches, auth, syncs (a read barrier of a one-node quorum),
re-attaches, four-letter words (``StatusReport``), the ``SessionKeeper``'s
expiry, and every connection's ``ZKClientLink``/``ClientSession``/
``JuteWire``, with ``Transport.mark``/``flush`` writing their output.

What is stood in, and why each is faithful:

- the event loop's scheduling: every entry point (``connection_made``,
  ``data_received``, ``connection_lost``, ``Replica._tick``) runs as a
  callback of a private asyncio loop, which then runs what it queued
  (``call_soon``) until idle. ``Replica._kick`` (which queues ``_process``
  behind a ``_guarded`` that would log an exception and stop the replica)
  sets a flag instead, and ``_process`` runs as the next callback, before
  the next chunk is read, as the loop would run it; so an exception in it
  surfaces with its traceback. A transport the server closed gets
  ``connection_lost(None)`` next;
- the socket: ``FakeTransport`` records what is written, ``close``,
  ``abort`` and ``pause_reading`` (a paused connection gets nothing until
  resumed), and a client's close is ``connection_lost(None)``;
- timers: none run between steps, so a request that waits for one (the
  keepalive's kick, every ``peer_ping_ms / 2``) counts as a hang; a
  ``tick`` step advances the clock ``SessionKeeper.now_ms`` reads, runs
  ``Replica._tick`` (the keeper: sessions expire) and the kick that the
  keepalive would follow it with;
- losing the quorum: ``ZKSessions.serving`` is switched off and on, with
  ``stopped_serving``/``end_read_only`` called at the switch as the keeper
  does, so read-only connects and their sessions run (a one-node ensemble
  cannot lose its quorum for real);
- logging: structlog events are captured, not written; one with a
  traceback (``log.exception``) is a crash.

An input (``Scenario``) is a few connections, each a byte stream: a connect
request (new session, re-attach of a session seen earlier with its password
or a wrong one, read-only, legacy, future zxids, mutated), a four-letter
word, or garbage; then frames: generated requests on a small tree, the jute
codec tests' corpus, mutations and splices of both, random bodies, broken
lengths; now and then a flood of thousands of requests (past what is held
before a session exists and past what one connection may have in flight).
A plan interleaves the connections' chunks (whole, frame by frame, or cut
at random bytes), clock ticks, quorum loss and a client closing mid-stream.

After each input every connection's output must be: a four-letter answer
then a close; or nothing and a close (a bad connect or frame); or a
ConnectResponse that re-encodes to the same bytes, then replies in request
order (xid for xid), each decoding with the client-side codec and
re-encoding to the same bytes, with ZooKeeper's error codes, and watch
events; and either every request answered or the connection closed; and a
connection the server stopped reading must be read again. Then, with every
connection closed, nothing may be left of them (connections, watches,
requests held, syncs, proposals in flight), and no line may have been
logged with a traceback. Every epoch (a fresh replica every ``EPOCH``
inputs) the tree's incremental digest must equal the one recomputed from
its snapshot, and every ephemeral must have a live owner.

The fuzzer keeps a corpus of inputs that reached a new outcome (an opcode
with an error code, a connect outcome, an event, a reason a connection
closed, a log line) and mutates them as often as it makes new ones: outcome
guided, not code-coverage guided (atheris would instrument the whole server
and stop at the first crash; a seeded loop replays exactly).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import random
import signal
import struct
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import structlog

from tests.zk.test_jute import corpus, mutate
from zabd.config import ZK_WORDS, ServerConfig
from zabd.kv.kvmachine import KVMachine
from zabd.server.replica import Replica
from zabd.server.zk.port import ZKClientLink
from zabd.storage.base import MemoryStorage
from zabd.zk import jute
from zabd.zk.acl import ACL, ANYONE, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, Id, digest_id
from zabd.zk.errors import Code
from zabd.zk.events import EventType, KeeperState
from zabd.zk.records import (
    AddAuth,
    AddWatch,
    Check,
    CheckWatches,
    CloseSession,
    Create,
    Delete,
    Exists,
    GetACL,
    GetAllChildrenNumber,
    GetChildren,
    GetData,
    GetEphemerals,
    Multi,
    MultiRead,
    Ping,
    Reconfig,
    RemoveWatches,
    Sasl,
    SetACL,
    SetData,
    SetWatches,
    Sync,
    WhoAmI,
)
from zabd.zk.tree import DataTree

EPOCH = 64  # inputs per fresh replica
ZK_TICK_MS = 10  # session timeouts of 20 to 200 ms on the fake clock
ZK_MAX_DATA = 2048  # small, so that the request-size limit (2047 bytes) is cheap to reach
SUPER = ("super", "secret")
SASL_USERS = {"u": "p", "super": "secret"}  # the SASL DIGEST-MD5 users (zk_sasl_jaas)
FRAME_LIMIT = ZK_MAX_DATA - 1  # ZKClientLink's reader: min(max_frame, zk_max_data - 1)
SETTLE_LIMIT = 10_000
CODES = frozenset(int(c) for c in Code)
OPS = frozenset(v for k, v in vars(jute).items() if k.startswith("OP_") and isinstance(v, int))
EVENT_TYPES = frozenset(int(e) for e in EventType)


class Violation(AssertionError):
    """An invariant broke; ``kind`` names which (a crash's signature)."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


class Hang(Exception):
    """An input ran longer than its time budget."""


# the invariants that say something waits forever: these count as hangs
LIVENESS = frozenset({"no quiescence", "request neither answered nor the connection closed",
                      "connect neither answered nor refused", "the server stopped reading a connection for good"})


def is_hang(exc: BaseException) -> bool:
    return isinstance(exc, Hang) or (isinstance(exc, Violation) and exc.kind in LIVENESS)


# ---------------------------------------------------------------- inputs


@dataclass
class Conn:
    """One client connection: how it opens (a connect request resolved when
    the connection opens, or raw bytes), then frames as sent (length included)."""

    opening: dict[str, Any]
    frames: list[bytes] = field(default_factory=list)


@dataclass
class Scenario:
    """Connections and a plan: ``["send", conn, n, "b"|"f"]`` (the next n
    bytes or frames; n < 0: all the rest), ``["close", conn]`` (the client
    closes), ``["tick", ms]`` (the session clock moves), ``["serving", bool]``
    (the quorum is lost or back). What is left of each stream is sent last."""

    conns: list[Conn]
    plan: list[list[Any]]

    def to_json(self) -> dict[str, Any]:
        return {"conns": [{"opening": c.opening, "frames": [f.hex() for f in c.frames]} for c in self.conns],
                "plan": self.plan}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Scenario:
        return cls([Conn(dict(c["opening"]), [bytes.fromhex(f) for f in c["frames"]]) for c in d["conns"]],
                   [list(s) for s in d["plan"]])


def save_inputs(path: Path, inputs: list[Scenario], note: dict[str, Any]) -> None:
    path.write_text(json.dumps({"note": note, "inputs": [s.to_json() for s in inputs]}, indent=1) + "\n")


def load_inputs(path: Path) -> tuple[list[Scenario], dict[str, Any]]:
    """The inputs of a crash file, and its note (``wait_connect``: how they ran)."""
    d = json.loads(path.read_text())
    return [Scenario.from_json(x) for x in d["inputs"]], dict(d.get("note", {}))


# --------------------------------------------------------- the stand-ins


class FakeTransport:
    """The asyncio transport of one accepted connection, without a socket."""

    def __init__(self, peer: tuple[str, int]) -> None:
        self.peer = peer
        self.out = bytearray()
        self.closed = False
        self.aborted = False
        self.paused = False
        self.late_writes = 0  # writes after close: a bug of the server's

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.peer if name == "peername" else default

    def write(self, data: bytes) -> None:
        if self.closed:
            self.late_writes += 1
        self.out += data

    def writelines(self, frames: list[bytes]) -> None:
        for f in frames:
            self.write(f)

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True


class _Capture:
    """structlog's last processor: keeps (level, event, traceback or "") and drops the line."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str]] = []

    def __call__(self, _: Any, method: str, event: Any) -> Any:
        tb = traceback.format_exc() if event.get("exc_info") else ""
        self.lines.append((method, str(event.get("event", "")), tb))
        raise structlog.DropEvent


@contextlib.contextmanager
def captured_logs() -> Iterator[_Capture]:
    """Every structlog line goes to the capture, for the duration."""
    saved = structlog.get_config()
    cap = _Capture()
    structlog.configure(processors=[cap], wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
                        logger_factory=structlog.ReturnLoggerFactory(), cache_logger_on_first_use=False)
    try:
        yield cap
    finally:
        structlog.configure(**saved)


# -------------------------------------------------------------- harness


class ConnRun:
    """One connection of a running scenario, as its client sees it."""

    def __init__(self, index: int, script: Conn) -> None:
        self.index = index
        self.script = script
        self.link: ZKClientLink | None = None
        self.t = FakeTransport((f"10.0.0.{index + 1}", 40000 + index))
        self.stream = b""
        self.bounds: list[int] = []  # where each frame of the stream ends
        self.pos = 0  # bytes of the stream sent so far
        self.delivered = bytearray()  # what data_received was given
        self.held = bytearray()  # sent while reading was paused
        self.client_closed = False
        self.lost = False  # connection_lost was called
        self.learned = False  # its ConnectResponse was looked at for the session pool
        self.pool_session: tuple[int, bytes] | None = None  # (id, password) of the session it re-attaches


class Harness:
    """A one-node replica and the connections of one input at a time."""

    def __init__(self, logs: _Capture, wait_connect: bool = False) -> None:
        self.logs = logs
        self.wait_connect = wait_connect
        self.cfg = ServerConfig(id=1, peers={1: "127.0.0.1:1"}, client="127.0.0.1:2", zookeeper="127.0.0.1:3",
                                storage="memory", zk_read_only=True, zk_tick_ms=ZK_TICK_MS, zk_4lw_whitelist=["*"],
                                zk_max_data=ZK_MAX_DATA, zk_super_digest=digest_id(*SUPER))
        self.kicked = False
        self.failure: BaseException | None = None
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(self._loop_error)
        self.serving = True
        self.pool: list[tuple[int, bytes]] = []  # sessions seen, with their passwords
        self.last: list[ConnRun] = []  # the connections of the last input
        self.replica = r = Replica(self.cfg, MemoryStorage(), KVMachine(self.cfg.zk_max_data))
        assert r.zk is not None and r.keeper is not None and r.zk_port is not None
        self.zk, self.keeper, self.port = r.zk, r.keeper, r.zk_port
        self.zk.sasl_users = SASL_USERS  # as zk_sasl_jaas would give them
        assert isinstance(r.machine, KVMachine)
        self.kv, self.tree = r.machine, r.machine.zk
        # the event loop: a kick runs _process before the next delivery
        r._kick = self._kick  # type: ignore[method-assign]
        self.port.kick = self._kick
        self.clock = self.keeper.now_ms()
        self.keeper.now_ms = lambda: self.clock
        real_serving = self.zk.serving
        self.zk.serving = lambda: self.serving and real_serving()
        self.call(r.node.start_election, r.now())
        self.settle([])
        assert self.zk.serving(), "the one-node replica did not elect itself"

    def close(self) -> None:
        self.loop.close()
        self.replica.gc_timer.close()  # a gc callback each: they would pile up

    def _kick(self) -> None:
        self.kicked = True

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if self.failure is None:
            self.failure = exc if isinstance(exc, BaseException) else Violation("event loop error",
                                                                                str(context.get("message")))

    def _guard(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # what escapes a protocol callback: a crash
            if self.failure is None:
                self.failure = exc

    def call(self, fn: Any, *args: Any) -> None:
        """``fn(*args)`` as a callback of the event loop, then what it queued there."""
        loop = self.loop
        loop.call_soon(self._guard, fn, *args)
        while loop._ready:  # type: ignore[attr-defined]
            loop.call_soon(loop.stop)
            loop.run_forever()
        if self.failure is not None:
            exc, self.failure = self.failure, None
            raise exc

    def settle(self, conns: list[ConnRun]) -> None:
        """Run what the event loop would run until nothing is left to do."""
        for _ in range(SETTLE_LIMIT):
            if self.kicked:
                self.kicked = False
                self.call(self.replica._process)
                continue
            lost = next((c for c in conns if c.link is not None and c.t.closed and not c.lost), None)
            if lost is not None:
                lost.lost = True
                assert lost.link is not None
                self.call(lost.link.connection_lost, None)
                continue
            self._learn(conns)
            if not any(self._pump(c) for c in conns):
                return
        raise Violation("no quiescence", f"still busy after {SETTLE_LIMIT} rounds")

    def _learn(self, conns: list[ConnRun]) -> None:
        """Sessions granted are remembered: a later connect may re-attach one."""
        for c in conns:
            out = c.t.out
            if c.learned or len(out) < 4:
                continue
            (n,) = struct.unpack_from(">i", out)
            if n < 0 or len(out) < 4 + n:
                continue
            c.learned = True
            with contextlib.suppress(jute.JuteError):
                _, timeout, sid, pw, _ = jute.decode_connect_response(bytes(out[4 : 4 + n]))
                if timeout > 0 and sid != 0 and (sid, pw) not in self.pool:
                    self.pool.append((sid, pw))
                    del self.pool[:-64]

    # ------------------------------------------------------------ steps

    def _open(self, c: ConnRun) -> None:
        c.stream = self._opening_bytes(c)
        ends = [len(c.stream)]
        for f in c.script.frames:
            ends.append(ends[-1] + len(f))
        c.bounds = ends
        c.stream += b"".join(c.script.frames)
        link = ZKClientLink(self.replica.transport, self.port)
        c.link = link
        self.call(link.connection_made, c.t)

    def _opening_bytes(self, c: ConnRun) -> bytes:
        o = c.script.opening
        if o.get("kind") != "connect":
            return bytes.fromhex(str(o.get("hex", "")))
        sid, pw = 0, b""
        kind = o.get("session", "new")
        if kind == "pool" and self.pool:
            sid, pw = self.pool[int(o.get("k", 0)) % len(self.pool)]
            c.pool_session = (sid, pw)
            how = o.get("pw", "right")
            if how == "wrong":
                pw = bytes(b ^ 0x5A for b in pw) or b"x"
            elif how == "empty":
                pw = b""
            elif how == "random":
                pw = random.Random(int(o.get("k", 0))).randbytes(16)
        elif kind == "random":
            sid, pw = int(o.get("sid", 1)), bytes.fromhex(str(o.get("pwhex", "")))
        applied = self.tree.applied
        last = {"zero": 0, "applied": applied, "future": applied + 1, "max": (1 << 64) - 1}.get(str(o.get("last")), 0)
        req = jute.ConnectRequest(int(o.get("version", 0)), last, int(o.get("timeout", 30_000)), sid, pw,
                                  bool(o.get("ro", False)), legacy=bool(o.get("legacy", False)))
        data = jute.encode_connect(req)
        mut = o.get("mut")
        if mut is not None:
            data = jute.frame(mutate(random.Random(int(mut)), data[4:]))
        return data

    def _send(self, c: ConnRun, n: int, unit: str) -> None:
        if c.client_closed:
            return
        if c.link is None:
            self._open(c)
        if n < 0:
            end = len(c.stream)
        elif unit == "f":
            i = bisect.bisect_right(c.bounds, c.pos)  # the first frame end after what was sent
            end = c.bounds[min(i + n, len(c.bounds)) - 1] if i < len(c.bounds) and n > 0 else c.pos
        else:
            end = c.pos + n
        data = c.stream[c.pos : end]
        c.pos += len(data)
        c.held += data
        self._pump(c)

    def _pump(self, c: ConnRun) -> bool:
        """Deliver what the client sent, if the server reads now; True if it did."""
        if not c.held or c.t.paused or c.t.closed or c.client_closed:
            if c.t.closed:
                del c.held[:]  # a closed socket reads nothing more
            return False
        n = len(c.held)
        if self.wait_connect and not c.learned and c.script.opening.get("kind") == "connect":
            # a client that waits for the ConnectResponse (kazoo, ZooKeeper's own)
            n = min(n, max(0, c.bounds[0] - len(c.delivered)))
            if n == 0:
                return False
        data = bytes(c.held[:n])
        del c.held[:n]
        assert c.link is not None
        c.delivered += data
        self.call(c.link.data_received, data)
        return True

    def _client_close(self, c: ConnRun) -> None:
        if c.client_closed or c.lost:
            c.client_closed = True
            return
        if c.link is None:
            self._open(c)
        assert c.link is not None
        c.client_closed = c.lost = True
        self.call(c.link.connection_lost, None)

    def set_serving(self, up: bool, conns: list[ConnRun]) -> None:
        """The quorum is lost or back, as the SessionKeeper sees the change."""
        if up == self.serving:
            return
        self.serving = up
        self.call(self.zk.end_read_only if up else self.zk.stopped_serving)
        self.settle(conns)

    # -------------------------------------------------------------- run

    def run(self, sc: Scenario) -> set[tuple[Any, ...]]:
        """One input; its outcomes (Violation if an invariant broke)."""
        del self.logs.lines[:]
        conns = self.last = [ConnRun(i, s) for i, s in enumerate(sc.conns)]
        for step in sc.plan:
            what = step[0]
            if what == "send" and conns:
                self._send(conns[int(step[1]) % len(conns)], int(step[2]), str(step[3]))
            elif what == "close" and conns:
                self._client_close(conns[int(step[1]) % len(conns)])
            elif what == "tick":
                # the tick timer; the keepalive's kick follows within peer_ping_ms / 2
                self.clock += max(0, int(step[1]))
                self.call(self.replica._tick)
                self._kick()
            elif what == "serving":
                self.set_serving(bool(step[1]), conns)
            self.settle(conns)
        for c in conns:
            self._send(c, -1, "b")
            self.settle(conns)
        outcomes: set[tuple[Any, ...]] = set()
        for c in conns:
            if c.held and not c.t.closed and not c.client_closed:
                raise Violation("the server stopped reading a connection for good",
                                f"{len(c.held)} bytes unread, {c.link.session.outstanding if c.link else 0} "
                                "requests outstanding")
            if c.link is not None:
                outcomes |= check_conn(c, self.cfg.zk_tick_ms)
        for c in conns:
            if c.link is not None:
                self._client_close(c)
        self.set_serving(True, conns)
        self.settle(conns)
        self.check_quiet()
        for level, event, tb in self.logs.lines:
            if tb or level in ("critical", "exception"):
                raise Violation("traceback logged", f"{event}\n{tb}")
            if level in ("warning", "error"):
                outcomes.add(("log", level, event))
        return outcomes

    def check_quiet(self) -> None:
        """Every connection is closed: nothing of them may be left."""
        zk, r = self.zk, self.replica
        left = {"zk connections": len(zk.conns), "attached sessions": len(zk.attached),
                "jute wires": len(self.port.wires), "transport clients": len(r.transport.clients),
                "watches": len(zk.watches), "proposals in flight": r.proposals.in_flight,
                "dirty links": len(r.transport.dirty), "sync paths": len(zk._sync_paths),
                # the port's requests held for a session and its live connection counters, where it has them
                "held requests": len(getattr(self.port, "held", ())),
                "port connection stats": len(getattr(getattr(self.port, "stats", None), "live", ()))}
        leaks = {k: v for k, v in left.items() if v}
        if leaks:
            raise Violation("state left behind by closed connections", str(leaks))

    def check_tree(self) -> None:
        """The tree's incremental digest is the recomputed one; it is sane."""
        tree = self.tree
        if self.kv.errors:
            raise Violation("a committed txn failed to apply", f"errors={self.kv.errors}")
        try:
            again = DataTree.restore(tree.snapshot())
        except ValueError as exc:
            raise Violation("tree digest mismatch", str(exc)) from None
        if again.digest != tree.digest or set(again.nodes) != set(tree.nodes):
            raise Violation("tree digest mismatch", f"{tree.digest:#x} != {again.digest:#x}")
        for path, node in tree.nodes.items():
            if set(node.children or ()) != set(again.nodes[path].children or ()):
                raise Violation("tree children inconsistent", path)
        for sid, paths in tree.ephemerals.items():
            if sid not in tree.sessions or any(p not in tree.nodes for p in paths):
                raise Violation("an ephemeral without a live owner", f"0x{sid & (2**64 - 1):x} {sorted(paths)}")
        if self.replica.applier.applied != self.replica.node.last_committed:
            raise Violation("applied != committed")


# -------------------------------------------------------------- checks


def _frames(out: bytes) -> tuple[list[bytes], int]:
    """Output frames (length included) and the bytes left of a partial one."""
    frames: list[bytes] = []
    pos = 0
    while len(out) - pos >= 4:
        (n,) = struct.unpack_from(">i", out, pos)
        if n < 0:
            raise Violation("output frame of negative length", str(n))
        if len(out) - pos - 4 < n:
            break
        frames.append(out[pos : pos + 4 + n])
        pos += 4 + n
    return frames, len(out) - pos


def _sent(delivered: bytes) -> tuple[list[bytes], bool]:
    """Frame bodies the server read, and whether the stream broke (a bad length)."""
    reader = jute.FrameReader(FRAME_LIMIT)
    bodies: list[bytes] = []
    pos = 0
    # frame by frame: the server's reader throws away a chunk's earlier frames with the error
    while len(delivered) - pos >= 4:
        (n,) = struct.unpack_from(">i", delivered, pos)
        if n < 0 or n > FRAME_LIMIT:
            return bodies, True
        if len(delivered) - pos - 4 < n:
            break
        bodies += reader.feed(delivered[pos : pos + 4 + n])
        pos += 4 + n
    return bodies, False


def _event(f: bytes) -> tuple[int, int] | None:
    """(type, state) if ``f`` is a well-formed watch event."""
    try:
        kind, state, path = jute.decode_event(f[4:])
    except jute.JuteError:
        return None
    (zxid,) = struct.unpack_from(">q", f, 8)
    try:
        again = jute.encode_event(kind, state, path, zxid)
    except jute.JuteError:
        return None
    return (kind, state) if again == f else None


def _reply(f: bytes, req: jute.Request) -> int | None:
    """The error code if ``f`` is a well-formed reply to ``req``."""
    try:
        xid, zxid, err, result = jute.decode_reply(f[4:], req.op)
        again = jute.encode_reply(xid, zxid, err, req.op, result, multi_ops=req.multi_ops)
    except (jute.JuteError, TypeError):
        return None
    return err if again == f and xid == req.xid else None


def check_conn(c: ConnRun, tick_ms: int) -> set[tuple[Any, ...]]:
    """One connection's output against what its client sent (see the module doc)."""
    out = bytes(c.t.out)
    delivered = bytes(c.delivered)
    closed = c.t.closed  # by the server
    still_open = not closed and not c.client_closed
    if c.t.late_writes:
        raise Violation("written after close", f"{c.t.late_writes} writes")
    if len(delivered) < 4:
        if out:
            raise Violation("output before a whole header", repr(out[:40]))
        return {("short",)}
    word = delivered[:4].decode("latin-1")
    if word in ZK_WORDS:  # answered, or refused in text
        try:
            out.decode("utf-8")
        except UnicodeDecodeError:
            raise Violation("four-letter answer is not text", word) from None
        if not closed:
            raise Violation("four-letter word left the connection open", word)
        return {("4lw", word)}
    frames, partial = _frames(out)
    if partial:
        raise Violation("partial frame in the output", f"{partial} bytes left")
    bodies, broken = _sent(delivered)
    if not bodies:
        if frames:
            raise Violation("answer before a connect request", frames[0][:40].hex())
        if broken and not closed and not c.client_closed:
            raise Violation("bad frame length left the connection open")
        return {("no connect", broken)}
    try:
        req = jute.decode_connect(bodies[0])
    except jute.JuteError:
        req = None
    if req is None:
        if frames:
            raise Violation("answer to a malformed connect", frames[0][:40].hex())
        if not closed and not c.client_closed:
            raise Violation("malformed connect left the connection open")
        return {("bad connect",)}
    outcomes: set[tuple[Any, ...]] = set()
    if not frames:
        if still_open:
            raise Violation("connect neither answered nor refused", repr(req))
        return {("connect closed", "ro" if req.read_only else "rw", req.session_id != 0)}
    try:
        version, timeout, sid, pw, ro = jute.decode_connect_response(frames[0][4:])
    except jute.JuteError as exc:
        raise Violation("ConnectResponse does not decode", str(exc)) from None
    if jute.encode_connect_response(timeout, sid, pw, ro, version, legacy=req.legacy) != frames[0]:
        raise Violation("ConnectResponse does not re-encode", frames[0].hex())
    if timeout <= 0:
        if sid != 0 or len(frames) > 1:
            raise Violation("refused connect with a session or replies", f"sid={sid:#x} frames={len(frames)}")
        if still_open:
            raise Violation("refused connect left the connection open")
        return {("connect refused", req.session_id != 0, req.read_only)}
    if sid == 0 or (ro and not req.read_only):
        raise Violation("bad ConnectResponse", f"sid={sid:#x} ro={ro} asked ro={req.read_only}")
    if req.session_id not in (0, sid):
        raise Violation("re-attach answered another session", f"{req.session_id:#x} -> {sid:#x}")
    if req.session_id == 0 and not 2 * tick_ms <= timeout <= 20 * tick_ms:
        raise Violation("timeout not negotiated", f"{timeout} from {req.timeout_ms}")
    exp = c.pool_session
    if exp is not None and exp[0] == sid and (req.password != exp[1] or pw != exp[1]):
        raise Violation("re-attach with a wrong password", f"0x{sid & (2**64 - 1):x}")
    outcomes.add(("connected", ro, req.session_id != 0, req.legacy))
    state = ("ro" if ro else "rw", "re-attached" if req.session_id else "new")
    prev: tuple[Any, ...] = ("connect",)
    expected: list[jute.Request] = []
    stream_ends = broken
    for b in bodies[1:]:
        try:
            expected.append(jute.decode_request(b))
        except jute.JuteError:
            stream_ends = True
            break
    i = 0
    for f in frames[1:]:
        if len(f) < 20:
            raise Violation("reply shorter than its header", f.hex())
        (xid,) = struct.unpack_from(">i", f, 4)
        nxt = expected[i] if i < len(expected) else None
        err = _reply(f, nxt) if nxt is not None and nxt.xid == xid else None
        if err is None and xid == jute.XID_NOTIFICATION:
            ev = _event(f)
            if ev is None or ev[0] not in EVENT_TYPES or ev[1] != KeeperState.SYNC_CONNECTED:
                raise Violation("malformed watch event", f.hex())
            outcomes.add(("event", ev[0]))
            continue
        if nxt is None:
            raise Violation("reply to no request", f.hex()[:80])
        if xid != nxt.xid:
            raise Violation("reply out of request order", f"xid {xid}, expected {nxt.xid} (op {nxt.op})")
        if err is None:
            raise Violation("reply does not decode and re-encode", f"op {nxt.op}: {f.hex()[:200]}")
        if err not in CODES:
            raise Violation("reply with an error code ZooKeeper has not", f"{err} to op {nxt.op}")
        answered = (nxt.op if nxt.op in OPS else "unknown", err)
        outcomes.add(("reply", *answered, *state))
        outcomes.add(("after", *prev, *answered))  # what follows what on a connection
        prev = answered
        i += 1
    if i < len(expected) or stream_ends:
        if still_open:
            what = f"op {expected[i].op} xid {expected[i].xid}" if i < len(expected) else "a malformed frame"
            raise Violation("request neither answered nor the connection closed", what)
        last = (expected[i - 1].op if expected[i - 1].op in OPS else "unknown") if i else "connect"
        outcomes.add(("closed after", last, "malformed" if stream_ends and i == len(expected) else "unanswered"))
    return outcomes


# ------------------------------------------------------------ generator

PATHS = ["/", "/a", "/a/b", "/a/b/c", "/e", "/e/x", "/s", "/s/n-", "/c", "/c/k", "/t", "/zookeeper",
         "/zookeeper/config", "/zookeeper/quota", "", "a", "/a/", "//a", "/a/./b", "/a\x00b", "/\u00fc",
         "/" + "x" * 300]
ACLS: list[tuple[ACL, ...]] = [
    OPEN_ACL_UNSAFE, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, CREATOR_ALL_ACL,
    (ACL(31, Id("digest", digest_id("u", "p"))),), (ACL(31, Id("ip", "10.0.0.0/8")),), (ACL(1, Id("ip", "1.2.3.4")),),
    (ACL(0, ANYONE),), (ACL(99, Id("bogus", "x")),), (), (ACL(31, Id("ip", "not-an-ip")),),
    (ACL(31, Id("world", "someone")),), (ACL(31, Id("digest", "nocolon")),),
]
# a connection's SASL tokens: the first gets the challenge, and any second one fails the exchange
# (it cannot know the nonce), as does a null, an oversized one, or one after that
SASL_TOKENS = [b"", b"", None, b"x", b"a" * 4097, b'username="u",realm="zk-sasl-md5",nonce="n",cnonce="c",nc=00000001,'
               b'qop=auth,digest-uri="zookeeper/zk-sasl-md5",response=00000000000000000000000000000000']
AUTHS = [AddAuth("digest", b"u:p"), AddAuth("digest", f"{SUPER[0]}:{SUPER[1]}".encode()), AddAuth("digest", b"u:q"),
         AddAuth("digest", b"nocolon"), AddAuth("ip", b"1.2.3.4"), AddAuth("", b""), AddAuth("digest", b"\xff\xfe:")]
XIDS = [-1, -2, -4, -8, 0, -(1 << 31), (1 << 31) - 1]
UNKNOWN_OPS = [jute.OP_CREATE_SESSION, jute.OP_DELETE_CONTAINER, 0, 10, 12, 15, 999, -1, 1 << 30]
SEEDS = [b for b, _ in corpus()]


class Generator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def path(self) -> str:
        r = self.rng
        return r.choice(PATHS[:11]) if r.random() < 0.85 else r.choice(PATHS)

    def data(self) -> bytes | None:
        r = self.rng
        x = r.random()
        if x < 0.1:
            return None
        if x < 0.97:
            return r.randbytes(r.choice((0, 1, 3, 12)))
        return b"d" * r.choice((ZK_MAX_DATA - 100, ZK_MAX_DATA, ZK_MAX_DATA + 1))

    def version(self) -> int:
        return self.rng.choice((-1, -1, 0, 0, 1, 2, -2, (1 << 31) - 1))

    def op(self) -> tuple[int, object]:
        """A request as a client library would send it, on a small tree."""
        r = self.rng
        x = r.random()
        p = self.path()
        if x < 0.18:
            mode = r.choice((0, 0, 1, 2, 3, 4, 5, 6, 7, -1))
            ttl = r.choice((-1, 0, 1, 50, 1 << 40)) if mode in (5, 6) or r.random() < 0.1 else -1
            op = jute.OP_CREATE_TTL if mode in (5, 6) and r.random() < 0.8 else r.choice(
                (jute.OP_CREATE, jute.OP_CREATE2, jute.OP_CREATE_CONTAINER))
            return op, Create(p, self.data(), r.choice(ACLS), mode, ttl)
        if x < 0.28:
            return jute.OP_GET_DATA, GetData(p, r.random() < 0.5)
        if x < 0.36:
            return jute.OP_EXISTS, Exists(p, r.random() < 0.5)
        if x < 0.44:
            return jute.OP_SET_DATA, SetData(p, self.data(), self.version())
        if x < 0.51:
            return jute.OP_DELETE, Delete(p, self.version())
        if x < 0.58:
            two = r.random() < 0.5
            return (jute.OP_GET_CHILDREN2 if two else jute.OP_GET_CHILDREN), GetChildren(p, r.random() < 0.5, two)
        if x < 0.64:
            return jute.OP_MULTI, Multi(tuple(self.multi_op() for _ in range(r.randrange(5))))
        if x < 0.67:
            return jute.OP_SYNC, Sync(p)
        if x < 0.71:
            return jute.OP_PING, Ping()
        if x < 0.74:
            return jute.OP_AUTH, r.choice(AUTHS)
        if x < 0.77:
            lists = [tuple(self.path() for _ in range(r.randrange(3))) for _ in range(5)]
            v2 = r.random() < 0.5
            rel = r.choice((0, 1, 1 << 32, (1 << 63) - 1))
            return ((jute.OP_SET_WATCHES2, SetWatches(rel, *lists)) if v2
                    else (jute.OP_SET_WATCHES, SetWatches(rel, *lists[:3])))
        if x < 0.81:
            return jute.OP_ADD_WATCH, AddWatch(p, r.choice((0, 1, 2, -1)))
        if x < 0.83:
            return jute.OP_REMOVE_WATCHES, RemoveWatches(p, r.choice((1, 2, 3, 4, 5, 0, 9)))
        if x < 0.85:
            return jute.OP_CHECK_WATCHES, CheckWatches(p, r.choice((1, 2, 3, 4, 5, 0, 9)))
        if x < 0.87:
            return jute.OP_GET_ACL, GetACL(p)
        if x < 0.90:
            return jute.OP_SET_ACL, SetACL(p, r.choice(ACLS), self.version())
        if x < 0.92:
            return jute.OP_CHECK, Check(p, self.version())
        if x < 0.94:
            return jute.OP_MULTI_READ, MultiRead(tuple(
                r.choice((GetData(self.path()), GetChildren(self.path()))) for _ in range(r.randrange(4))))
        if x < 0.95:
            return jute.OP_GET_EPHEMERALS, GetEphemerals(r.choice(("/", "/e", "", "/a")))
        if x < 0.96:
            return jute.OP_GET_ALL_CHILDREN_NUMBER, GetAllChildrenNumber(p)
        if x < 0.97:
            return jute.OP_WHO_AM_I, WhoAmI()
        if x < 0.975:
            return jute.OP_RECONFIG, Reconfig("server.1=a:1:2", None, None, -1)
        if x < 0.985:
            return jute.OP_CLOSE_SESSION, CloseSession()
        if x < 0.99:
            return jute.OP_SASL, Sasl(r.choice(SASL_TOKENS))
        return r.choice(UNKNOWN_OPS), None

    def multi_op(self) -> object:
        r = self.rng
        p = self.path()
        return r.choice((Create(p, self.data(), r.choice(ACLS), r.choice((0, 1, 2, 4, 5)), r.choice((-1, 10))),
                         Delete(p, self.version()), SetData(p, self.data(), self.version()), Check(p, self.version())))

    def body(self, xid: int) -> bytes:
        r = self.rng
        x = r.random()
        if x < 0.5:
            op, rec = self.op()
            if rec is None:  # an opcode not served: its header alone
                return struct.pack(">ii", xid, op) + r.randbytes(r.choice((0, 0, 4)))
            try:
                return jute.encode_request(xid, op, rec)[4:]
            except (jute.JuteError, TypeError):
                return struct.pack(">ii", xid, op)
        if x < 0.7:
            seed = r.choice(SEEDS)
            return struct.pack(">i", xid) + seed[4:] if r.random() < 0.7 else seed
        if x < 0.9:
            return mutate(r, self.body(xid) if r.random() < 0.5 else r.choice(SEEDS))
        if x < 0.95:
            a, b = self.body(xid), r.choice(SEEDS)
            return a[: r.randrange(len(a) + 1)] + b[r.randrange(len(b) + 1) :]
        return r.randbytes(r.randrange(40))

    def frame(self, xid: int) -> bytes:
        r = self.rng
        body = self.body(xid)
        if r.random() < 0.015:  # a broken length
            bad = r.choice((-1, -(1 << 31), FRAME_LIMIT + 1, (1 << 31) - 1, len(body) + 1, max(0, len(body) - 1)))
            return struct.pack(">i", bad) + body
        return jute.frame(body)

    def opening(self) -> dict[str, Any]:
        r = self.rng
        x = r.random()
        if x < 0.05:
            near = ("RUOK", "ruo", "kill", "\0\0\0\0")
            word = r.choice(sorted(ZK_WORDS)) if r.random() < 0.8 else r.choice(near)
            junk = r.randbytes(r.choice((0, 0, 3, 20)))
            return {"kind": "raw", "hex": (word.encode() + junk).hex()}
        if x < 0.09:
            raw = r.choice((r.randbytes(r.randrange(12)), jute.frame(r.randbytes(r.randrange(40))),
                            struct.pack(">i", r.choice((-1, FRAME_LIMIT + 1))), mutate(r, r.choice(SEEDS))))
            return {"kind": "raw", "hex": raw.hex()}
        y = r.random()
        session = "new" if y < 0.55 else "pool" if y < 0.9 else "random"
        return {"kind": "connect", "session": session, "k": r.randrange(1 << 16),
                "pw": r.choice(("right", "right", "right", "wrong", "empty", "random")),
                "sid": r.choice((1, -1, 1 << 62, r.randrange(1 << 63))), "pwhex": r.randbytes(16).hex(),
                "ro": r.random() < 0.15, "legacy": r.random() < 0.05,
                "timeout": r.choice((30_000, 30_000, 0, 1, 100, -1, (1 << 31) - 1, -(1 << 31))),
                "last": r.choice(("zero",) * 12 + ("applied", "future", "max")),
                "version": r.choice((0,) * 20 + (1, -1)), "mut": r.randrange(1 << 30) if r.random() < 0.04 else None}

    def conn(self) -> Conn:
        r = self.rng
        if r.random() < 0.001:
            return self.flood()
        n = min(int(r.expovariate(1 / 5)), 30)
        xid = r.randrange(1, 100)
        frames = []
        for _ in range(n):
            xid += 1
            frames.append(self.frame(r.choice(XIDS) if r.random() < 0.08 else xid))
        return Conn(self.opening(), frames)

    def flood(self) -> Conn:
        """A client with thousands of requests in flight: past what is held
        before the session exists (zk_port.HELD_FRAMES), past what one
        connection may have outstanding (client_session.MAX_OUTSTANDING)."""
        r = self.rng
        n = r.choice((1030, 2100, 4200, 5000))
        op, rec = r.choice(((jute.OP_GET_DATA, GetData("/")), (jute.OP_PING, Ping()),
                            (jute.OP_SET_DATA, SetData("/", b"x")), (jute.OP_CREATE, Create("/s/n-", b"", mode=2))))
        return Conn(self.opening(), [jute.encode_request(i + 1, op, rec) for i in range(n)])

    def chunks(self, i: int, conn: Conn) -> list[list[Any]]:
        r = self.rng
        x = r.random()
        if x < 0.4:
            return [["send", i, -1, "b"]]
        if x < 0.75:
            return [["send", i, r.choice((1, 1, 2, 3)), "f"] for _ in range(len(conn.frames) + 1)]
        total = 40 + sum(len(f) for f in conn.frames)
        out = []
        while total > 0:
            n = r.choice((1, 2, 3, 4, 5, r.randrange(1, 64)))
            out.append(["send", i, n, "b"])
            total -= n
        return out

    def plan(self, conns: list[Conn]) -> list[list[Any]]:
        r = self.rng
        queues = [self.chunks(i, c) for i, c in enumerate(conns)]
        for i, q in enumerate(queues):
            if r.random() < 0.07:
                q.insert(r.randrange(len(q) + 1), ["close", i])
        plan: list[list[Any]] = []
        while any(queues):
            q = r.choice([q for q in queues if q])
            plan.append(q.pop(0))
        if r.random() < 0.15:
            for _ in range(r.randint(1, 3)):
                plan.insert(r.randrange(len(plan) + 1), ["tick", r.choice((1, 5, 30, 100, 250, 1000))])
        if r.random() < 0.06:
            at = r.randrange(len(plan) + 1)
            plan.insert(at, ["serving", False])
            if r.random() < 0.5:
                plan.insert(r.randrange(at + 1, len(plan) + 1), ["serving", True])
        return plan

    def scenario(self) -> Scenario:
        r = self.rng
        conns = [self.conn() for _ in range(r.choice((1, 1, 1, 1, 2, 2, 3)))]
        return Scenario(conns, self.plan(conns))

    def mutate(self, sc: Scenario, others: list[Scenario]) -> Scenario:
        """A corpus input, changed one to three ways."""
        r = self.rng
        sc = Scenario([Conn(dict(c.opening), list(c.frames)) for c in sc.conns], [list(s) for s in sc.plan])
        for _ in range(r.randint(1, 3)):
            c = r.choice(sc.conns)
            fr = c.frames
            k = r.randrange(len(fr)) if fr else 0
            x = r.random()
            if x < 0.3 and fr:
                f = fr[k]
                fr[k] = jute.frame(mutate(r, f[4:])) if r.random() < 0.9 else mutate(r, f)
            elif x < 0.4:
                fr.insert(k, self.frame(r.randrange(1, 1000)))
            elif x < 0.47 and fr:
                del fr[k]
            elif x < 0.52 and fr:
                fr.insert(k, fr[k])
            elif x < 0.57 and len(fr) > 1:
                j = r.randrange(len(fr))
                fr[k], fr[j] = fr[j], fr[k]
            elif x < 0.65:
                other = r.choice(r.choice(others).conns) if others else self.conn()
                if other.frames:
                    a = r.randrange(len(other.frames))
                    fr[k:k] = other.frames[a : a + r.randint(1, 4)]
            elif x < 0.75:
                fresh = self.opening()
                if c.opening.get("kind") == "connect" and fresh["kind"] == "connect":
                    key = r.choice(("session", "k", "pw", "ro", "legacy", "timeout", "last", "mut"))
                    c.opening[key] = fresh[key]
                else:
                    c.opening = fresh
            elif x < 0.85:
                sc.plan = self.plan(sc.conns)
            elif x < 0.9 and len(sc.conns) < 4:
                sc.conns.append(self.conn())
                sc.plan = self.plan(sc.conns)
            else:
                extra = r.choice((["close", r.randrange(len(sc.conns))], ["tick", r.choice((5, 100, 1000))],
                                  ["serving", r.random() < 0.5]))
                sc.plan.insert(r.randrange(len(sc.plan) + 1), extra)
            del fr[40:]
        return sc


# ------------------------------------------------------------------ loop


@dataclass
class Crash:
    kind: str  # "crash" or "hang"
    signature: str
    detail: str
    inputs: list[Scenario]  # replayed in order on a fresh replica, the last one breaks it


def signature(exc: BaseException) -> str:
    """What a crash is, for telling crashes apart: a violated invariant's
    name, or an exception's type and the innermost line of zabd it came from."""
    if isinstance(exc, Violation):
        return exc.kind
    where = ""
    for fs in traceback.extract_tb(exc.__traceback__):
        if "/zabd/" in fs.filename:
            where = f"{fs.filename.rsplit('/zabd/', 1)[1]}:{fs.lineno}"
    return f"{type(exc).__name__} at {where or 'harness'}"


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang("input ran past its time budget")


class Fuzzer:
    """A seeded, outcome-guided loop: one input at a time, a fresh replica per epoch."""

    def __init__(self, seed: int, logs: _Capture, hang_seconds: float = 2.0, epoch: int = EPOCH,
                 wait_connect: bool = False) -> None:
        self.wait_connect = wait_connect
        self.rng = random.Random(seed)
        self.gen = Generator(self.rng)
        self.logs = logs
        self.hang_seconds = hang_seconds
        self.epoch_size = epoch
        self.corpus: list[Scenario] = []
        self.outcomes: set[tuple[Any, ...]] = set()
        self.inputs = 0
        self.crashes: dict[str, Crash] = {}
        self.crash_count = 0
        self.hangs = 0
        self.harness = Harness(logs, wait_connect)
        self.epoch: list[Scenario] = []

    def next_input(self) -> Scenario:
        if self.corpus and self.rng.random() < 0.5:
            return self.gen.mutate(self.rng.choice(self.corpus), self.corpus)
        return self.gen.scenario()

    def one(self) -> Crash | None:
        sc = self.next_input()
        self.inputs += 1
        self.epoch.append(sc)
        try:
            with self._budget():
                found = self.harness.run(sc)
                if len(self.epoch) >= self.epoch_size:
                    self.harness.check_tree()
        except Exception as exc:
            return self._crashed(exc)
        fresh = found - self.outcomes
        if fresh:
            self.outcomes |= fresh
            if len(self.corpus) < 4000:
                self.corpus.append(sc)
            else:
                self.corpus[self.rng.randrange(len(self.corpus))] = sc
        if len(self.epoch) >= self.epoch_size:
            self.harness.close()
            self.harness = Harness(self.logs, self.wait_connect)
            self.epoch = []
        return None

    @contextlib.contextmanager
    def _budget(self) -> Iterator[None]:
        if self.hang_seconds <= 0:
            yield
            return
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, self.hang_seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    def _crashed(self, exc: Exception) -> Crash:
        kind = "hang" if is_hang(exc) else "crash"
        sig = signature(exc)
        detail = "".join(traceback.format_exception(exc))
        inputs = list(self.epoch)
        # the input alone on a fresh replica, if that breaks it the same way
        again = replay([inputs[-1]], self.logs, self.hang_seconds, self.wait_connect) if len(inputs) > 1 else None
        if again is not None and again[0] == ("hang: " if kind == "hang" else "") + sig:
            inputs = [inputs[-1]]
        if kind == "hang":
            self.hangs += 1
        else:
            self.crash_count += 1
        crash = Crash(kind, sig, detail, inputs)
        self.crashes.setdefault(f"{kind}: {sig}", crash)
        self.harness.close()
        self.harness = Harness(self.logs, self.wait_connect)
        self.epoch = []
        return crash


def replay(inputs: list[Scenario], logs: _Capture, hang_seconds: float = 2.0,
           wait_connect: bool = False) -> tuple[str, str] | None:
    """Run ``inputs`` in order on a fresh replica (and check its tree after
    them): the signature and traceback of the crash they cause, or None."""
    h = Harness(logs, wait_connect)
    old = signal.signal(signal.SIGALRM, _alarm) if hang_seconds > 0 else None
    try:
        if hang_seconds > 0:
            signal.setitimer(signal.ITIMER_REAL, hang_seconds * len(inputs))
        for sc in inputs:
            h.run(sc)
        h.check_tree()
    except Exception as exc:
        return ("hang: " if is_hang(exc) else "") + signature(exc), "".join(traceback.format_exception(exc))
    finally:
        if old is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        h.close()
    return None

"""The ZooKeeper workload of a nemesis run (``zabd nemesis --workload zk``):
kazoo clients on every node's ZooKeeper port, under the same nemeses.

* **Register**: one znode per key (``/reg/k0`` ...), in the model of
  ``zabd.kv.store``'s register, which the linearizability checker knows: the
  model's version is 0 while the znode is absent and ZooKeeper's
  ``dataVersion`` + 1 once it exists (a create makes version 1, each ``set``
  adds one). ``put`` is ``set(path, value, -1)``, or ``create`` when the
  znode is missing (then ``set`` again if another client created it first:
  exactly one of these steps takes effect). ``cas`` naming version ``e`` is
  ``set(path, value, e - 1)``, or ``create`` when it names 0 (absent); a
  ``BadVersion``, ``NodeExists`` or ``NoNode`` answer is a condition the
  leader ordered and found false: ``bad_version`` as the zabd workload
  records it (``NoNode`` saw version 0). A read is ``sync(path)`` then
  ``get(path)`` (``NoNode``: absent, version 0).
* **Appends**: ``create("/appends/<value>-", value, sequence=True)``: the
  sequence number in the returned name is the append's place in the log
  (recorded where the zabd workload records the zxid). After the run every
  node's children of ``/appends``, by sequence number, is its log, checked by
  ``check_appends`` (lost, duplicated, unexpected, misplaced, divergent), and
  in real time: an append called after another was acknowledged has a
  higher sequence number (*reordered*).
* **Ephemerals**: one client per node opens a session, creates an ephemeral
  ``/eph/c<client>-<n>``, and ends the session: three times in four with
  ``close()``, the fourth by SIGKILL of a separate kazoo process, so the
  session expires on its own. After the quiet period (and a session timeout
  more) no ephemeral may be left on any node (``sync`` + ``get_children``).

An operation refused by kazoo before it was sent (a closed client, a session
known to be expired) is a failure; a read that did not answer is a failure
(it changed nothing); a write whose answer did not come (connection loss,
session expiry, the op's timeout) is unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)

from zabd.client.spawn import LocalCluster
from zabd.kv.store import BAD_VERSION
from zabd.nemesis.appends import AppendReport, Entry, check_appends
from zabd.nemesis.history import APPEND, CAS, FAIL, OK, PUT, READ, UNKNOWN, History, Op

SESSION_TIMEOUT = 5.0  # s: between 2 and 20 zk_tick_ms (2 s by default); a nemesis interval is ~3-5 s
OP_TIMEOUT = 3.0  # s: a write not answered by then is unknown
# s after an op that failed: a server that takes sessions but drops each request (one not serving)
# would otherwise get thousands of unknown ops a second, each one more the checker has to place
ERROR_PAUSE = 0.1
CONNECT_WAIT = 0.05  # s between looks at a disconnected client's state
REG, APPENDS, EPH = "/reg", "/appends", "/eph"
# how long the end waits for the ephemerals of ended sessions to go: a session timeout, a tick, and
# the grace of a full timeout a new leader gives every session
EPHEMERAL_WAIT = 3 * SESSION_TIMEOUT + 10
EXPIRE_EVERY = 4  # every 4th ephemeral session ends by SIGKILL of its process (expiry), the rest by close()

T = TypeVar("T")
_REFUSALS = (SessionExpiredError, ConnectionClosedError, AuthFailedError)

# kazoo logs every dropped connection; a nemesis run drops many on purpose
_log = logging.getLogger("zabd.nemesis.kazoo")
_log.addHandler(logging.NullHandler())
_log.propagate = False


class Refused(Exception):
    """kazoo failed the request at once, without sending it (a closed client, an expired session)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


def new_client(addr: str, timeout: float = SESSION_TIMEOUT) -> Any:
    """A KazooClient on one server only, reconnecting every 0.1-1 s for ever."""
    return KazooClient(hosts=addr, timeout=timeout, logger=_log, randomize_hosts=False,
                       connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 1.0})



def _settle(fut: asyncio.Future[Any], ok: bool, result: Any) -> None:
    """Complete ``fut`` once (later outcomes of the same call are ignored)."""
    if fut.done():
        return
    if ok:
        fut.set_result(result)
    else:
        fut.set_exception(result)

async def call(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """``fn``, one of kazoo's ``*_async`` methods, awaited on this loop
    (its callback comes on kazoo's thread). Raises what the server answered,
    or :class:`Refused` when kazoo failed it before sending it."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, result: Any) -> None:
        _settle(fut, ok, result)

    def done(ar: Any) -> None:
        ok = ar.successful()
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, ok, ar.value if ok else ar.exception)

    ar = fn(*args, **kw)
    if ar.ready() and not ar.successful() and isinstance(ar.exception, _REFUSALS):
        # set by kazoo's _call from the client's state, the request never queued (a ConnectionLoss
        # here may be a request sent and lost in the meantime: not a refusal)
        raise Refused(ar.exception)
    ar.rawlink(done)
    return await fut


async def in_thread(fn: Callable[[], T], timeout: float) -> T:
    """``fn()`` on a daemon thread of its own (kazoo's blocking calls: a
    stuck one never holds an executor or the interpreter's exit)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, result: Any) -> None:
        _settle(fut, ok, result)

    def run() -> None:
        try:
            outcome: tuple[bool, Any] = (True, fn())
        except BaseException as exc:
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, daemon=True, name="zk-blocking").start()
    return await asyncio.wait_for(fut, timeout)


async def stop_client(zk: Any) -> None:
    """Close the session (kazoo's ``stop`` sends CloseSession) and free the client."""

    def close() -> None:
        zk.stop()
        zk.close()

    with contextlib.suppress(Exception):
        await in_thread(close, 15)


async def wait_connected(zk: Any, until: Callable[[], bool], timeout: float | None = None) -> bool:
    deadline = None if timeout is None else time.monotonic() + timeout
    while not zk.connected:
        if until() or (deadline is not None and time.monotonic() >= deadline):
            return False
        await asyncio.sleep(CONNECT_WAIT)  # polling kazoo's state, set on its own thread
    return True


def _version(stat: Any) -> int:
    """The register model's version of a znode that exists."""
    return int(stat.version) + 1


def _code(exc: BaseException) -> str:
    if isinstance(exc, Refused):
        exc = exc.cause
    return "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__


@dataclass(slots=True)
class EphSession:
    path: str
    node: int
    ending: str  # "close" or "expire"
    created: str = UNKNOWN  # ok, fail or unknown
    ended: int | None = None  # ns: the close returned, or the process was killed


@dataclass(slots=True)
class ZkResult:
    """What the end of a zk run read back."""

    logs: dict[int, list[Entry]] = field(default_factory=dict)  # node -> (sequence number, value) by number
    data_mismatch: list[str] = field(default_factory=list)  # children whose data is not their value
    left: dict[int, list[str]] = field(default_factory=dict)  # node -> ephemerals still there
    ephemerals_gone_s: float | None = None  # after the workload stopped; None: some never went
    sessions: list[EphSession] = field(default_factory=list)

    def ephemeral_summary(self) -> str:
        made = [s for s in self.sessions if s.created == OK]
        closed = sum(1 for s in made if s.ending == "close")
        expired = len(made) - closed
        left = sorted({p for paths in self.left.values() for p in paths})
        head = (f"{len(made)} ephemerals created ({closed} sessions closed, {expired} expired; "
                f"{sum(1 for s in self.sessions if s.created == UNKNOWN)} of unknown outcome)")
        if left:
            return f"NOT ok: {len(left)} left after their sessions ended: {', '.join(left[:10])}; {head}"
        return f"ok: none left {self.ephemerals_gone_s:.1f} s after the clients stopped; {head}"


def order_violations(appends: Sequence[Op], final: Sequence[Entry]) -> list[str]:
    """Appends placed before one acknowledged before they were called: for
    each append found in ``final`` (acknowledged, or of unknown outcome and
    there), every append acknowledged before its call must have a lower
    sequence number."""
    seq = {p: z for z, p in final}
    placed = [(op, seq[op.value]) for op in appends if op.value in seq and op.outcome in (OK, UNKNOWN)]
    acked = sorted((op.complete, s, op) for op, s in placed if op.outcome == OK and op.complete is not None)
    out: list[str] = []
    best: tuple[int, Op] | None = None  # the highest sequence number acknowledged so far, and by whom
    i = 0
    for op, s in sorted(placed, key=lambda x: x[0].invoke):
        while i < len(acked) and acked[i][0] < op.invoke:
            if best is None or acked[i][1] > best[0]:
                best = (acked[i][1], acked[i][2])
            i += 1
        if best is not None and best[0] >= s:
            out.append(f"op {op.id} {op.value!r} at sequence {s}, called after op {best[1].id} "
                       f"{best[1].value!r} was acknowledged at sequence {best[0]}")
    return out


def check_zk_appends(appends: Sequence[Op], logs: Mapping[int, Sequence[Entry]]) -> tuple[AppendReport, list[str]]:
    report = check_appends(appends, logs)
    final = logs[report.reference] if report.reference is not None else []
    return report, order_violations(appends, final)


_EXPIRING_CLIENT = """
import sys, time, logging
from kazoo.client import KazooClient
logging.disable(logging.CRITICAL)
hosts, path, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
zk = KazooClient(hosts=hosts, timeout=timeout, connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0})
try:
    zk.start(timeout=timeout)
except Exception as exc:
    print("refused", type(exc).__name__, flush=True)
    sys.exit(1)
try:
    zk.create(path, path.encode(), ephemeral=True)
except Exception as exc:
    print("failed", type(exc).__name__, flush=True)
    sys.exit(1)
print("created", flush=True)
time.sleep(3600)
"""


class ZkWorkload:
    """The register, append and ephemeral clients of one run (one asyncio loop)."""

    def __init__(self, cluster: LocalCluster, keys: int, seed: int, history: History) -> None:
        self.cluster = cluster
        self.keys = keys
        self.seed = seed
        self.history = history
        self.stop = asyncio.Event()
        self.write_oks: list[int] = []
        self.sessions: list[EphSession] = []
        self.errors: dict[str, int] = {}  # op errors other than the expected ones, by class
        self.clients: list[Any] = []  # every kazoo client started, stopped at the end
        self.end_retries: dict[str, int] = {}  # reads at the end tried again, by error

    async def setup(self) -> None:
        """The parents of the workload's znodes (not the registers: they start absent)."""
        zk = new_client(self.cluster.zk_hosts)
        try:
            await in_thread(lambda: zk.start(timeout=30), 35)
            for path in (REG, APPENDS, EPH):
                await in_thread(functools.partial(zk.ensure_path, path), 30)
        finally:
            await stop_client(zk)

    def _client(self, node: int) -> Any:
        zk = new_client(self.cluster.zk_addr(node))
        zk.start_async()
        self.clients.append(zk)
        return zk

    # ---------------------------------------------------------------- register

    async def register_client(self, cid: int, node: int) -> None:
        rng = random.Random(self.seed * 1000 + cid)
        seen: dict[str, int] = {}
        zk = self._client(node)
        n = 0
        while not self.stop.is_set():
            if not await wait_connected(zk, self.stop.is_set):
                break
            n += 1
            key = f"k{rng.randrange(self.keys)}"
            kind = rng.choice([PUT, READ, READ, CAS])
            value = None if kind == READ else b"c%d-%d" % (cid, n)
            op = self.history.invoke(cid, kind, key, time.monotonic_ns(), value,
                                     seen.get(key, 0) if kind == CAS else 0)
            await self._register_op(zk, op, seen)

    async def _register_op(self, zk: Any, op: Op, seen: dict[str, int]) -> None:
        path = f"{REG}/{op.key}"
        try:
            async with asyncio.timeout(OP_TIMEOUT):
                if op.kind == READ:
                    try:
                        await call(zk.sync_async, path)
                        data, stat = await call(zk.get_async, path)
                        History.complete(op, time.monotonic_ns(), OK, value=bytes(data), version=_version(stat))
                    except NoNodeError:
                        History.complete(op, time.monotonic_ns(), OK, value=None, version=0)
                elif op.kind == PUT:
                    version = await self._put(zk, path, op.value or b"")
                    if version is None:
                        History.complete(op, time.monotonic_ns(), FAIL, code="NoNode/NodeExists")
                        return
                    self._done(op, version)
                else:
                    try:
                        if op.expect == 0:
                            await call(zk.create_async, path, op.value or b"")
                            self._done(op, 1)
                        else:
                            self._done(op, _version(await call(zk.set_async, path, op.value or b"", op.expect - 1)))
                    except (BadVersionError, NodeExistsError):
                        # ordered by the leader and found false; which version it saw is not said
                        History.complete(op, time.monotonic_ns(), OK, code=BAD_VERSION)
                        return
                    except NoNodeError:
                        History.complete(op, time.monotonic_ns(), OK, code=BAD_VERSION, version=0)
                        seen[op.key] = 0
                        return
        except Exception as exc:
            certain = op.kind == READ or isinstance(exc, Refused)
            if not isinstance(exc, Refused | TimeoutError) and type(exc).__name__ not in (
                    "ConnectionLoss", "SessionExpiredError", "OperationTimeoutError", "ConnectionClosedError"):
                self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
            History.complete(op, time.monotonic_ns(), FAIL if certain else UNKNOWN, code=_code(exc))
            await asyncio.sleep(ERROR_PAUSE)
            return
        seen[op.key] = op.version

    @staticmethod
    async def _put(zk: Any, path: str, value: bytes) -> int | None:
        """set, or create when missing: the register's version after it,
        None if it did nothing (every step found the other case)."""
        for _ in range(3):
            try:
                return _version(await call(zk.set_async, path, value, -1))
            except NoNodeError:
                pass
            try:
                await call(zk.create_async, path, value)
                return 1
            except NodeExistsError:
                pass
        return None

    def _done(self, op: Op, version: int, seq: int | None = None) -> None:
        now = time.monotonic_ns()
        History.complete(op, now, OK, version=version, zxid=seq)
        self.write_oks.append(now)

    # ----------------------------------------------------------------- appends

    async def append_client(self, cid: int, node: int) -> None:
        zk = self._client(node)
        n = 0
        while not self.stop.is_set():
            if not await wait_connected(zk, self.stop.is_set):
                break
            n += 1
            value = b"ap-%d-%d" % (cid, n)
            op = self.history.invoke(cid, APPEND, "log", time.monotonic_ns(), value)
            try:
                async with asyncio.timeout(OP_TIMEOUT):
                    name = await call(zk.create_async, f"{APPENDS}/{value.decode()}-", value, sequence=True)
                self._done(op, -1, int(name[-10:]))
            except Exception as exc:
                History.complete(op, time.monotonic_ns(), FAIL if isinstance(exc, Refused) else UNKNOWN,
                                 code=_code(exc))
                await asyncio.sleep(ERROR_PAUSE)

    # -------------------------------------------------------------- ephemerals

    async def ephemeral_client(self, cid: int, node: int) -> None:
        rng = random.Random(self.seed * 1000 + cid)
        n = 0
        while not self.stop.is_set():
            n += 1
            s = EphSession(f"{EPH}/c{cid}-{n}", node, "expire" if n % EXPIRE_EVERY == 0 else "close")
            self.sessions.append(s)
            if s.ending == "close":
                await self._closed_session(s)
            else:
                await self._expired_session(s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), rng.uniform(0.2, 0.6))  # a pace, not a synchronisation

    async def _closed_session(self, s: EphSession) -> None:
        zk = new_client(self.cluster.zk_addr(s.node))
        zk.start_async()
        try:
            if not await wait_connected(zk, self.stop.is_set, SESSION_TIMEOUT):
                s.created = FAIL
                return
            try:
                async with asyncio.timeout(OP_TIMEOUT):
                    await call(zk.create_async, s.path, s.path.encode(), ephemeral=True)
                s.created = OK
            except Exception as exc:
                s.created = FAIL if isinstance(exc, Refused) else UNKNOWN
            await asyncio.sleep(0.1)
        finally:
            await stop_client(zk)
            s.ended = time.monotonic_ns()

    async def _expired_session(self, s: EphSession) -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _EXPIRING_CLIENT, self.cluster.zk_addr(s.node), s.path, str(SESSION_TIMEOUT),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, stdin=asyncio.subprocess.DEVNULL)
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), SESSION_TIMEOUT + OP_TIMEOUT + 5)
            s.created = OK if line.startswith(b"created") else FAIL if line.startswith(b"refused") else UNKNOWN
            if s.created == OK:
                await asyncio.sleep(0.1)
        except TimeoutError:
            s.created = UNKNOWN
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)  # no CloseSession: the session must expire
            await proc.wait()
            s.ended = time.monotonic_ns()

    # -------------------------------------------------------------------- end

    async def close(self) -> None:
        await asyncio.gather(*(stop_client(zk) for zk in self.clients))
        self.clients.clear()

    async def _read(self, zk: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """A read at the end, tried again on a connection lost (a server that
        rejoins drops its clients), for up to a minute."""
        deadline = time.monotonic() + 60
        while True:
            try:
                await wait_connected(zk, lambda: False, max(0.0, deadline - time.monotonic()))
                async with asyncio.timeout(10):
                    return await call(fn, *args)
            except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, TimeoutError, Refused) as exc:
                self.end_retries[_code(exc)] = self.end_retries.get(_code(exc), 0) + 1
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.2)

    async def read_back(self, nodes: int, log: Callable[[str], object],
                        wait_ephemerals: float = EPHEMERAL_WAIT) -> ZkResult:
        """Every node's appends and leftover ephemerals, once the run is healed."""
        res = ZkResult(sessions=list(self.sessions))
        stopped = time.monotonic()
        clients = {i: new_client(self.cluster.zk_addr(i), 10.0) for i in range(1, nodes + 1)}
        try:
            await asyncio.gather(*(in_thread(functools.partial(zk.start, timeout=30), 35) for zk in clients.values()))
            # ephemerals: poll every node until none is left, or the wait is over
            deadline = stopped + wait_ephemerals
            while True:
                res.left = {}
                for i, zk in clients.items():
                    await self._read(zk, zk.sync_async, EPH)
                    children = await self._read(zk, zk.get_children_async, EPH)
                    if children:
                        res.left[i] = sorted(f"{EPH}/{c}" for c in children)
                if not res.left:
                    res.ephemerals_gone_s = time.monotonic() - stopped
                    break
                if time.monotonic() >= deadline:
                    log(f"ephemerals left after {wait_ephemerals:.0f} s: "
                        + "; ".join(f"node {i}: {len(p)}" for i, p in res.left.items()))
                    break
                await asyncio.sleep(0.5)  # polling for the sessions' expiry on the server's clock
            for i, zk in clients.items():
                await self._read(zk, zk.sync_async, APPENDS)
                children = await self._read(zk, zk.get_children_async, APPENDS)
                entries = []
                for c in children:
                    value, _, seq = c.rpartition("-")
                    entries.append((int(seq), value.encode()))
                res.logs[i] = sorted(entries)
            # the data of each child is its value (read on node 1, many at a time)
            zk = clients[1]
            names = [f"{APPENDS}/{p.decode()}-{z:010d}" for z, p in res.logs[1]]
            for at in range(0, len(names), 500):
                batch = names[at:at + 500]
                got: Sequence[Any] = await asyncio.gather(*(self._read(zk, zk.get_async, p) for p in batch))
                for p, (data, _) in zip(batch, got, strict=True):
                    if bytes(data) != p[len(APPENDS) + 1:].rsplit("-", 1)[0].encode():
                        res.data_mismatch.append(f"{p}: {bytes(data)!r}")
        finally:
            await asyncio.gather(*(stop_client(zk) for zk in clients.values()))
        return res

"""asyncio client for a zabd cluster.

    client = await Client.connect(["127.0.0.1:7001", "127.0.0.1:7002"])
    zxid = await client.propose(b"hello")
    st = await client.status()
    txns = await client.read(from_zxid=0, limit=100)
    async for txn in client.watch(from_zxid=0): ...
    await client.close()

Requests are pipelined on one connection: call ``propose`` from many tasks
and the frames written in one loop iteration leave in one write. Responses
arrive in request order.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any, NamedTuple, cast

from zabd.codec import client as schema
from zabd.codec.framing import FrameError, FrameReader, frame, no_delay
from zabd.kv.kinds import RAW, kind_of, raw_body
from zabd.tls import describe_error

DEFAULT_MAX_FRAME = 64 * 1024 * 1024


class LogEntry(NamedTuple):
    """A committed txn as the log read gives it. ``kind`` says which path of
    the server made it (``zabd.kv.kinds``: raw, kv, zk or membership), never
    its bytes; ``payload`` is a raw proposal's bytes as they were proposed,
    and any other txn as the log holds it (``zabd.kv.txnfmt`` reads those)."""

    zxid: int
    payload: bytes
    kind: str


def _entry(z: Any, p: Any) -> LogEntry:
    payload = bytes(p)
    kind = kind_of(payload)
    return LogEntry(int(z), raw_body(payload) if kind == RAW else payload, kind)


class ZabdError(Exception):
    """An error from the cluster (``code`` is one of the schema's codes, or
    ``connection_lost`` / ``timeout`` from this library).

    ``retryable``: trying again can succeed. ``applied`` says what became of
    a write: False when it certainly did not happen (safe to send again),
    None when nobody can know (:class:`OutcomeUnknown`), True never here."""

    def __init__(
        self, code: str, message: str, retryable: bool = False, leader: int = 0, applied: bool | None = False
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.leader = leader
        self.applied = applied
        self.version = -1  # a failed condition (bad_version, no_node): the key's version the leader saw
        self.zxid = 0  # ... and the zxid at which that failure was ordered


class ConnectionLost(ZabdError):
    """No answer will come on this connection (closed, reset, unreachable)."""

    def __init__(self, message: str) -> None:
        super().__init__("connection_lost", message, retryable=True, applied=None)


class RequestTimeout(ZabdError):
    def __init__(self, seconds: float) -> None:
        super().__init__("timeout", f"no answer within {seconds:g} s", retryable=True, applied=None)


class OutcomeUnknown(ZabdError):
    """A write was sent and its fate is unknown: the leader or the connection
    was lost before the answer. It may or may not commit. The library never
    retries it on its own: a retry could apply it twice."""

    def __init__(self, cause: ZabdError) -> None:
        super().__init__(
            cause.code, f"{cause.message} (the write may or may not have been applied)", True, cause.leader, None
        )
        self.__cause__ = cause


# Error codes after which a request certainly did nothing: safe to send again.
NOT_APPLIED = frozenset({schema.NO_LEADER, schema.OVERLOADED, schema.SHUTTING_DOWN})
RETRY_BACKOFF_MIN = 0.005
RETRY_BACKOFF_MAX = 0.2
DEFAULT_READ_RETRY = 10.0


def parse_servers(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"server {item!r}: expected host:port")
        out.append((host or "127.0.0.1", int(port)))
    if not out:
        raise ValueError("no server given; expected host:port[,host:port...]")
    return out


class _Proto(asyncio.Protocol):
    def __init__(self, max_frame: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader(max_frame, use_list=True)
        self.waiters: deque[asyncio.Future[dict[str, Any]]] = deque()
        self.stream: asyncio.Queue[dict[str, Any] | BaseException] | None = None
        self.out: list[bytes] = []
        self.flush_scheduled = False
        self.error: BaseException | None = None
        self.answered = False  # a frame came back on this connection
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        no_delay(transport)

    def data_received(self, data: bytes) -> None:
        self.answered = True
        try:
            bodies = self.reader.feed(data)
        except FrameError as exc:
            self._fail(ConnectionLost(f"bad frame from server: {exc}"))
            if self.transport is not None:
                self.transport.abort()
            return
        for body in bodies:
            if self.stream is not None:
                self.stream.put_nowait(body)
            elif self.waiters:
                fut = self.waiters.popleft()
                if not fut.done():
                    fut.set_result(body)

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ssl.SSLError) and not self.answered:
            # the server refused this client's certificate (TLS 1.3 says so
            # after the handshake): nothing was served, and a retry fails alike
            self._fail(ZabdError("tls", f"the server refused the connection: {describe_error(exc)}"))
            return
        t = self.transport
        tls = t is not None and t.get_extra_info("ssl_object") is not None
        if tls and not self.answered and (exc is None or isinstance(exc, ConnectionError)):
            # a server that refuses a client certificate just closes (the
            # alert is not flushed; a reset when our request was unread):
            # say what it likely means
            how = f"closed ({exc})" if exc else "closed by the server"
            self._fail(ConnectionLost(f"connection {how} before any answer (TLS: was this client's certificate "
                                      "refused? the server's log says)"))
            return
        if not tls and not self.answered and (exc is None or isinstance(exc, ConnectionError)):
            # a TLS port closes a plaintext connection without a word (its
            # handshake failed on our first frame): say what it likely means
            how = f"closed ({exc})" if exc else "closed by the server"
            self._fail(ConnectionLost(f"connection {how} before any answer (does the server run TLS? then give "
                                      "--ca, and --cert/--key if it asks for a client certificate)"))
            return
        self._fail(ConnectionLost(f"connection closed ({exc})" if exc else "connection closed by the server"))

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_exception(exc)
        if self.stream is not None:
            self.stream.put_nowait(exc)

    def send(self, body: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        if self.error is not None:
            raise self.error
        fut: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.waiters.append(fut)
        self.out.append(frame(body))
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        self.flush_scheduled = False
        out = self.out
        self.out = []
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))


async def _open(
    host: str, port: int, timeout: float, max_frame: int, tls: ssl.SSLContext | None = None, token: str | None = None
) -> _Proto:
    """A connection, authenticated with ``token`` first when one is given
    (a refused token raises the server's ``unauthorized`` ZabdError)."""
    loop = asyncio.get_running_loop()
    _, proto = await asyncio.wait_for(
        loop.create_connection(lambda: _Proto(max_frame), host, port, ssl=tls), timeout
    )
    if token is not None:
        try:
            _check(await asyncio.wait_for(proto.send({"v": 1, "type": "auth", "id": 0, "token": token}), timeout))
        except BaseException:
            if proto.transport is not None:
                proto.transport.abort()
            raise
    return proto


def _unreachable(what: str, errors: list[str], tls_errors: list[str]) -> ZabdError:
    if tls_errors and len(tls_errors) == len(errors):
        # every server refused the TLS handshake: a retry cannot help
        return ZabdError("tls", "TLS handshake failed (" + "; ".join(tls_errors) + ")")
    return ConnectionLost(f"no server reachable{what} (" + "; ".join(errors) + ")")


def _check(body: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ZabdError("bad_response", f"unexpected response {body!r:.80}")
    if not body.get("ok"):
        code = str(body.get("error", "error"))
        exc = ZabdError(
            code,
            str(body.get("message", "")),
            bool(body.get("retryable", False)),
            int(body.get("leader", 0) or 0),
            applied=False if code in NOT_APPLIED or not body.get("retryable") else None,
        )
        exc.version = int(body.get("version", -1))
        exc.zxid = int(body.get("zxid", 0))
        raise exc
    return body


class Client:
    """A connection to one server of the cluster at a time.

    Calls that change nothing (``status``, ``get``, ``sync``, ``read``,
    ``watch``) ride a failover: when the server goes away, times out or has no
    leader, they are sent again, to the next server on a lost connection,
    for up to ``read_retry`` seconds. Writes (``propose``, ``put``, ``cas``,
    ``delete``) are sent again only when they certainly did nothing (no
    leader, overloaded, shutting down, or no connection could be opened), and
    only for their ``retry_for`` seconds (default 0: fail fast with a
    retryable :class:`ZabdError`). A write whose fate is unknown raises
    :class:`OutcomeUnknown` at once: never a success it cannot vouch for.
    """

    def __init__(
        self,
        servers: list[tuple[str, int]],
        timeout: float,
        max_frame: int,
        read_retry: float,
        tls: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> None:
        self.servers = servers
        self.tls = tls
        self.token = token
        self.timeout = timeout
        self.max_frame = max_frame
        self.read_retry = read_retry
        self.proto: _Proto | None = None
        self.server: tuple[str, int] | None = None
        self._next_server = 0
        self._ids = itertools.count(1)

    @classmethod
    async def connect(
        cls,
        servers: str | Sequence[str],
        timeout: float = 5.0,
        max_frame: int = DEFAULT_MAX_FRAME,
        read_retry: float = DEFAULT_READ_RETRY,
        tls: ssl.SSLContext | None = None,
        token: str | None = None,
    ) -> Client:
        """``tls``: connect with TLS (:func:`zabd.tls.client_tls` makes the
        context); ``token``: authenticate every connection with it first."""
        client = cls(parse_servers(servers), timeout, max_frame, read_retry, tls, token)
        try:
            await client._reconnect()
        except ConnectionLost as exc:
            exc.applied = False  # nothing was sent
            raise
        return client

    async def _reconnect(self) -> None:
        self.proto, self.server = await self._open_next("")

    async def _open_next(self, what: str) -> tuple[_Proto, tuple[str, int]]:
        """A connection to the next server in the list that answers, starting
        after the one used last (a failed server is tried last)."""
        errors: list[str] = []
        tls_errors: list[str] = []
        n = len(self.servers)
        for k in range(n):
            host, port = self.servers[(self._next_server + k) % n]
            try:
                proto = await _open(host, port, self.timeout, self.max_frame, self.tls, self.token)
            except ConnectionLost as exc:
                errors.append(f"{host}:{port}: {exc.message}")
                continue
            except (OSError, TimeoutError) as exc:
                errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
                if isinstance(exc, ssl.SSLError):
                    tls_errors.append(f"{host}:{port}: {describe_error(exc)}")
                continue
            self._next_server = (self._next_server + k + 1) % n
            return proto, (host, port)
        raise _unreachable(what, errors, tls_errors)

    def _drop(self) -> None:
        """Forget the current connection: the next call opens another."""
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.abort()
        self.proto = None

    async def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()
        self.proto = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, body: dict[str, Any]) -> dict[str, Any]:
        """One attempt. A ``ConnectionLost`` raised before the request left
        (no connection could be opened) has ``applied`` False."""
        if self.proto is None or self.proto.error is not None:
            try:
                await self._reconnect()
            except ConnectionLost as exc:
                exc.applied = False
                raise
        assert self.proto is not None
        proto = self.proto
        fut = proto.send({**body, "id": next(self._ids)})
        try:
            async with asyncio.timeout(self.timeout):  # not wait_for: on 3.11 it can swallow a caller's cancel
                body = await fut
            return _check(body)
        except TimeoutError:
            if proto is self.proto:
                self._drop()  # answers on this connection would now come out of order
            raise RequestTimeout(self.timeout) from None
        except ConnectionLost:
            if proto is self.proto:
                self.proto = None
            raise

    async def _retrying(self, body: dict[str, Any], retry_for: float, write: bool) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + retry_for
        backoff = RETRY_BACKOFF_MIN
        while True:
            try:
                return await self._call(body)
            except ZabdError as exc:
                if write and exc.applied is None:
                    raise OutcomeUnknown(exc) from None
                remaining = deadline - loop.time()
                if not exc.retryable or remaining <= 0:
                    raise
                if isinstance(exc, ConnectionLost | RequestTimeout) or exc.code == schema.NO_LEADER:
                    self._drop()  # the next try goes to the next server
            await asyncio.sleep(min(backoff, remaining))  # the last try at the deadline
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX)

    async def _read(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._retrying(body, self.read_retry, write=False)

    async def _write(self, body: dict[str, Any], retry_for: float) -> dict[str, Any]:
        return await self._retrying(body, retry_for, write=True)

    async def propose(self, payload: bytes, *, retry_for: float = 0.0) -> int:
        """Order ``payload``; returns its zxid once committed."""
        body = await self._write({"v": 1, "type": "propose", "payload": payload}, retry_for)
        return int(body["zxid"])

    async def reconfig(
        self, *, add: dict[int, str] | None = None, observe: dict[int, str] | None = None,
        remove: list[int] | None = None,
    ) -> int:
        """A membership change (``add``: voters, ``observe``: observers, node id
        -> quorum host:port; ``remove``: ids), made by the leader: each server
        in the list is asked in turn until the leader takes it. Returns the
        change's zxid once applied there. Not retried: it may have been made."""
        body = {"v": 1, "type": "reconfig", "add": {str(k): v for k, v in (add or {}).items()},
                "observe": {str(k): v for k, v in (observe or {}).items()}, "remove": list(remove or [])}
        last: ZabdError | None = None
        for _ in range(len(self.servers)):
            try:
                return int((await self._call(body))["zxid"])
            except ZabdError as exc:
                if exc.code != schema.NO_LEADER:
                    raise
                last = exc
                self._drop()  # the next server in the list
        assert last is not None
        raise last

    # ------------------------------------------------------- key-value calls

    async def put(self, key: str, value: bytes, *, retry_for: float = 0.0) -> schema.KVWriteResult:
        """Set ``key``; returns the commit zxid and the key's new version."""
        body = await self._write({"v": 1, "type": "put", "key": key, "value": value}, retry_for)
        return schema.KVWriteResult.model_validate(body)

    async def cas(self, key: str, version: int, value: bytes, *, retry_for: float = 0.0) -> schema.KVWriteResult:
        """Set ``key`` if its version is ``version`` (0: only if absent); else
        ZabdError ``bad_version`` (its ``version`` attribute is not set: read it with get)."""
        body = await self._write({"v": 1, "type": "cas", "key": key, "version": version, "value": value}, retry_for)
        return schema.KVWriteResult.model_validate(body)

    async def delete(self, key: str, version: int = -1, *, retry_for: float = 0.0) -> schema.KVWriteResult:
        body = await self._write({"v": 1, "type": "delete", "key": key, "version": version}, retry_for)
        return schema.KVWriteResult.model_validate(body)

    async def get(self, key: str) -> schema.GetResult:
        """The value on the server this client talks to (``value`` None if
        absent). Call :meth:`sync` first to see every write acknowledged
        anywhere before it."""
        body = await self._read({"v": 1, "type": "get", "key": key})
        return schema.GetResult.model_validate(body)

    async def sync(self, *, retry_for: float | None = None) -> int:
        """Wait until this server has applied the leader's commit point as of
        now; returns that zxid. Retried like every call that changes nothing,
        for ``retry_for`` seconds if given, else ``read_retry``."""
        body = await self._retrying(
            {"v": 1, "type": "sync"}, self.read_retry if retry_for is None else retry_for, False
        )
        return int(body["zxid"])

    async def status(self) -> schema.NodeStatus:
        body = await self._read({"v": 1, "type": "status"})
        return schema.NodeStatus.model_validate(body["status"])

    async def read_page(self, from_zxid: int = 0, limit: int = 1000) -> tuple[list[LogEntry], int, int]:
        """Up to ``limit`` committed transactions with zxid >= ``from_zxid``
        (fewer if they would not fit in one frame, and only those this
        client's role may see: ZooKeeper txns are the admin's), the server's
        commit point when it answered, and the zxid the next page starts at."""
        body = await self._read({"v": 1, "type": "read", "from_zxid": from_zxid, "limit": limit})
        txns = [_entry(z, p) for z, p in body["txns"]]
        after = int(body.get("next", txns[-1].zxid + 1 if txns else from_zxid))
        return txns, int(body["last_committed"]), after

    async def read(self, from_zxid: int = 0, limit: int = 1000) -> list[LogEntry]:
        return (await self.read_page(from_zxid, limit))[0]

    async def read_all(self, from_zxid: int = 0, page: int = 5000) -> list[LogEntry]:
        """Every transaction committed (at this server) from ``from_zxid`` on
        that this client may see, page by page."""
        out: list[LogEntry] = []
        while True:
            txns, committed, after = await self.read_page(from_zxid, page)
            out.extend(txns)
            if after <= from_zxid or after > committed:
                return out
            from_zxid = after

    async def watch(self, from_zxid: int = 0) -> AsyncIterator[LogEntry]:
        """Committed transactions from ``from_zxid`` on, as they commit, on a
        connection of their own. When the server goes away the watch resumes
        on the next server from the first zxid not yet yielded; it ends with
        ConnectionLost when no server took it back within ``read_retry``."""
        loop = asyncio.get_running_loop()
        next_zxid = from_zxid
        while True:
            deadline = loop.time() + self.read_retry
            backoff = RETRY_BACKOFF_MIN
            while True:
                try:
                    proto = await self._open_watch(next_zxid)
                    break
                except ConnectionLost:
                    if loop.time() + backoff > deadline:
                        raise
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX)
            try:
                assert proto.stream is not None
                while True:
                    item = await proto.stream.get()
                    if isinstance(item, ConnectionLost):
                        break  # resume elsewhere
                    if isinstance(item, BaseException):
                        raise item
                    for z, p in _check(item)["txns"]:
                        next_zxid = int(z) + 1
                        yield _entry(z, p)
            finally:
                if proto.transport is not None:
                    proto.transport.close()

    async def _open_watch(self, from_zxid: int) -> _Proto:
        proto, _ = await self._open_next(" for the watch")
        proto.stream = asyncio.Queue()
        proto.send({"v": 1, "type": "watch", "id": 0, "from_zxid": from_zxid})
        proto.waiters.clear()
        return proto

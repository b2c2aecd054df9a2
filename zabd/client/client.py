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
import contextlib
import itertools
import socket
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

from zabd.client import schema
from zabd.protocol.messages import Txn
from zabd.server.wire import FrameError, FrameReader, frame

DEFAULT_MAX_FRAME = 64 * 1024 * 1024


class ZabdError(Exception):
    """An error answer from the server (``code`` is one of the schema's codes)."""

    def __init__(self, code: str, message: str, retryable: bool = False, leader: int = 0) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.leader = leader


class ConnectionLost(ZabdError):
    def __init__(self, message: str) -> None:
        super().__init__("connection_lost", message, retryable=True)


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
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
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


async def _open(host: str, port: int, timeout: float, max_frame: int) -> _Proto:
    loop = asyncio.get_running_loop()
    _, proto = await asyncio.wait_for(loop.create_connection(lambda: _Proto(max_frame), host, port), timeout)
    return proto


def _check(body: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ZabdError("bad_response", f"unexpected response {body!r:.80}")
    if not body.get("ok"):
        raise ZabdError(
            str(body.get("error", "error")),
            str(body.get("message", "")),
            bool(body.get("retryable", False)),
            int(body.get("leader", 0) or 0),
        )
    return body


class Client:
    """One connection to one server of the cluster (the first that answers)."""

    def __init__(self, servers: list[tuple[str, int]], timeout: float, max_frame: int) -> None:
        self.servers = servers
        self.timeout = timeout
        self.max_frame = max_frame
        self.proto: _Proto | None = None
        self.server: tuple[str, int] | None = None
        self._ids = itertools.count(1)

    @classmethod
    async def connect(
        cls, servers: str | Sequence[str], timeout: float = 5.0, max_frame: int = DEFAULT_MAX_FRAME
    ) -> Client:
        client = cls(parse_servers(servers), timeout, max_frame)
        await client._reconnect()
        return client

    async def _reconnect(self) -> None:
        errors = []
        for host, port in self.servers:
            try:
                self.proto = await _open(host, port, self.timeout, self.max_frame)
                self.server = (host, port)
                return
            except (OSError, TimeoutError) as exc:
                errors.append(f"{host}:{port}: {exc}")
        raise ConnectionLost("no server reachable (" + "; ".join(errors) + ")")

    async def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()
        self.proto = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.proto is None or self.proto.error is not None:
            await self._reconnect()
        assert self.proto is not None
        fut = self.proto.send(body)
        return _check(await asyncio.wait_for(fut, self.timeout))

    async def propose(self, payload: bytes, *, retry_for: float = 0.0) -> int:
        """Order ``payload``; returns its zxid once committed. ``no_leader``
        (nothing was proposed) is retried for up to ``retry_for`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + retry_for
        while True:
            try:
                body = await self._call({"v": 1, "type": "propose", "id": next(self._ids), "payload": payload})
                return int(body["zxid"])
            except ZabdError as exc:
                if exc.code != schema.NO_LEADER or loop.time() >= deadline:
                    raise
            await asyncio.sleep(0.1)

    # ------------------------------------------------------- key-value calls

    async def _kv(self, body: dict[str, Any], retry_for: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + retry_for
        while True:
            try:
                return await self._call({"v": 1, "id": next(self._ids), **body})
            except ZabdError as exc:
                if exc.code != schema.NO_LEADER or loop.time() >= deadline:
                    raise
            await asyncio.sleep(0.1)

    async def put(self, key: str, value: bytes, *, retry_for: float = 0.0) -> schema.KVWriteResult:
        """Set ``key``; returns the commit zxid and the key's new version."""
        body = await self._kv({"type": "put", "key": key, "value": value}, retry_for)
        return schema.KVWriteResult.model_validate(body)

    async def cas(self, key: str, version: int, value: bytes, *, retry_for: float = 0.0) -> schema.KVWriteResult:
        """Set ``key`` if its version is ``version`` (0: only if absent); else
        ZabdError ``bad_version`` (its ``version`` attribute is not set: read it with get)."""
        body = await self._kv({"type": "cas", "key": key, "version": version, "value": value}, retry_for)
        return schema.KVWriteResult.model_validate(body)

    async def delete(self, key: str, version: int = -1, *, retry_for: float = 0.0) -> schema.KVWriteResult:
        body = await self._kv({"type": "delete", "key": key, "version": version}, retry_for)
        return schema.KVWriteResult.model_validate(body)

    async def get(self, key: str) -> schema.GetResult:
        """The value on the server this client talks to (``value`` None if
        absent). Call :meth:`sync` first to see every write acknowledged
        anywhere before it."""
        body = await self._call({"v": 1, "type": "get", "id": next(self._ids), "key": key})
        return schema.GetResult.model_validate(body)

    async def sync(self, *, retry_for: float = 0.0) -> int:
        """Wait until this server has applied the leader's commit point as of
        now; returns that zxid."""
        body = await self._kv({"type": "sync"}, retry_for)
        return int(body["zxid"])

    async def status(self) -> schema.NodeStatus:
        body = await self._call({"v": 1, "type": "status", "id": next(self._ids)})
        return schema.NodeStatus.model_validate(body["status"])

    async def read_page(self, from_zxid: int = 0, limit: int = 1000) -> tuple[list[Txn], int]:
        """Up to ``limit`` committed transactions with zxid >= ``from_zxid``
        (fewer if they would not fit in one frame), and the server's commit
        point when it answered."""
        body = await self._call({"v": 1, "type": "read", "id": next(self._ids), "from_zxid": from_zxid, "limit": limit})
        return [Txn(int(z), bytes(p)) for z, p in body["txns"]], int(body["last_committed"])

    async def read(self, from_zxid: int = 0, limit: int = 1000) -> list[Txn]:
        return (await self.read_page(from_zxid, limit))[0]

    async def read_all(self, from_zxid: int = 0, page: int = 5000) -> list[Txn]:
        """Every transaction committed (at this server) from ``from_zxid`` on,
        page by page."""
        out: list[Txn] = []
        while True:
            txns, committed = await self.read_page(from_zxid, page)
            out.extend(txns)
            if not txns or txns[-1].zxid >= committed:
                return out
            from_zxid = txns[-1].zxid + 1

    async def watch(self, from_zxid: int = 0) -> AsyncIterator[Txn]:
        """Committed transactions from ``from_zxid`` on, as they commit (its
        own connection; ends with ConnectionLost if the server goes away)."""
        assert self.server is not None
        proto = await _open(*self.server, self.timeout, self.max_frame)
        proto.stream = asyncio.Queue()
        try:
            proto.send({"v": 1, "type": "watch", "id": 0, "from_zxid": from_zxid})
            proto.waiters.clear()
            while True:
                item = await proto.stream.get()
                if isinstance(item, BaseException):
                    raise item
                for z, p in _check(item)["txns"]:
                    yield Txn(int(z), bytes(p))
        finally:
            if proto.transport is not None:
                proto.transport.close()

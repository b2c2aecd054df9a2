"""Test-only clients of zabd's ZooKeeper layer: ``ZKDriver`` over zabd's own
client port (``zk_connect`` and ``zk`` requests, ``zabd.zk.msgpack_wire``),
``JuteSocket`` and ``four_letter`` on ZooKeeper's port, for what kazoo has
no call for (raw frames, pipelining, four-letter words)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
from typing import Any

from zabd.codec.framing import FrameReader, frame
from zabd.zk import jute
from zabd.zk.errors import Code
from zabd.zk.msgpack_wire import Request, Result, decode_result, encode_request
from zabd.zk.records import Ping


def four_letter(addr: str, word: str) -> str:
    """A four-letter word's answer from ZooKeeper's port at ``addr`` (it closes after)."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(word.encode())
        out = b""
        while chunk := s.recv(4096):
            out += chunk
    return out.decode()


class JuteSocket:
    """A bare socket speaking jute: what is sent is written in one call."""

    def __init__(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.reader = jute.FrameReader(1 << 20)
        self.bodies: list[bytes] = []

    def next_body(self) -> bytes:
        while not self.bodies:
            data = self.sock.recv(65536)
            assert data, "the server closed the connection"
            self.bodies += self.reader.feed(data)
        return self.bodies.pop(0)

    def closed_by_server(self) -> bool:
        while True:
            data = self.sock.recv(65536)
            if not data:
                return True
            self.bodies += self.reader.feed(data)

    def close(self) -> None:
        self.sock.close()


class ZKRefused(Exception):
    def __init__(self, err: int, message: str) -> None:
        super().__init__(f"{Code(err).name}: {message}")
        self.code = Code(err)


class ZKDriver:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.frames = FrameReader(1 << 26, use_list=True)
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: asyncio.Queue[tuple[int, int, str, int]] = asyncio.Queue()
        self.arrivals: list[tuple[str, Any]] = []  # ("event", path) and ("reply", xid), in arrival order
        self.xids = itertools.count(1)
        self.session = 0
        self.password = b""
        self.timeout_ms = 0
        self.last_zxid = 0
        self.closed = asyncio.Event()
        self._pump = asyncio.create_task(self._read())
        self._pinger: asyncio.Task[None] | None = None
        self.dropping = False

    @classmethod
    async def connect(cls, addr: str, timeout_ms: int = 2000, session: int = 0, password: bytes = b"",
                      last_zxid: int = 0, ping: bool = True, token: str | None = None) -> ZKDriver:
        host, port = addr.rsplit(":", 1)
        r, w = await asyncio.wait_for(asyncio.open_connection(host, int(port)), 5)
        d = cls(r, w)
        if token is not None:  # a server that asks for one: a token first
            auth = await d._send({"type": "auth", "token": token})
            if not auth.get("ok"):
                await d.drop()
                raise ZKRefused(int(Code.AUTH_FAILED), auth.get("message", ""))
        body = await d._send({"type": "zk_connect", "session": session, "password": password,
                              "timeout": timeout_ms, "last_zxid": last_zxid})
        if not body.get("ok"):
            await d.drop()
            raise ZKRefused(body.get("err", int(Code.SYSTEM_ERROR)), body.get("message", ""))
        d.session, d.password, d.timeout_ms = body["session"], body["password"], body["timeout"]
        d.last_zxid = last_zxid
        if ping:
            d._pinger = asyncio.create_task(d._ping_loop())
        return d

    async def _read(self) -> None:
        try:
            while True:
                data = await self.reader.read(1 << 16)
                if not data:
                    break
                for body in self.frames.feed(data):
                    if "event" in body:
                        kind, state, path = body["event"]
                        self.arrivals.append(("event", path))
                        self.events.put_nowait((kind, state, path, body["zxid"]))
                        continue
                    self.arrivals.append(("reply", body["id"]))
                    fut = self.waiting.pop(body["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(body)
        finally:
            self.closed.set()
            for fut in self.waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection closed"))

    async def _send(self, body: dict[str, Any]) -> dict[str, Any]:
        xid = next(self.xids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[xid] = fut
        self.writer.write(frame({"v": 1, "id": xid, **body}))
        async with asyncio.timeout(10):  # not wait_for: on 3.11 it can swallow a cancel that meets an answer
            return await fut

    async def call(self, req: Request) -> tuple[int, Code, Result | None]:
        """(zxid, error code, result) of one request."""
        return self._answer(await self._send({"type": "zk", "req": encode_request(req)}))

    async def call_xid(self, req: Request) -> tuple[int, tuple[int, Code, Result | None]]:
        """The xid the request went with, and its answer."""
        xid = next(self.xids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[xid] = fut
        self.writer.write(frame({"v": 1, "id": xid, "type": "zk", "req": encode_request(req)}))
        async with asyncio.timeout(10):
            return xid, self._answer(await fut)

    def _answer(self, body: dict[str, Any]) -> tuple[int, Code, Result | None]:
        if not body.get("ok"):
            raise ZKRefused(body.get("err", int(Code.SYSTEM_ERROR)), body.get("message", str(body)))
        zxid = body["zxid"]
        self.last_zxid = max(self.last_zxid, zxid)
        result = decode_result(body["result"]) if body["result"] is not None else None
        return zxid, Code(body["err"]), result

    async def ok(self, req: Request) -> Result:
        """The result of a request that must succeed."""
        _, err, result = await self.call(req)
        assert err == Code.OK, f"{req!r} failed with {err.name}"
        assert result is not None
        return result

    async def event(self, timeout: float = 10.0) -> tuple[int, int, str, int]:
        return await asyncio.wait_for(self.events.get(), timeout)

    async def _ping_loop(self) -> None:
        with contextlib.suppress(Exception):
            while not self.closed.is_set() and not self.dropping:
                await asyncio.sleep(self.timeout_ms / 3000)
                await self.call(Ping())

    async def drop(self) -> None:
        """Close the connection, not the session (a client that crashed)."""
        self.dropping = True  # the ping loop ends even if a cancel is lost in the middle of a ping
        if self._pinger is not None:
            self._pinger.cancel()
            with contextlib.suppress(BaseException):
                await self._pinger
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
        self._pump.cancel()
        with contextlib.suppress(BaseException):
            await self._pump

"""``zabd bench --zookeeper OP``: the closed-loop load of ``zabd bench`` on
ZooKeeper's client port, in its own jute protocol (``zabd.zk.jute``).

Each connection opens a session, makes its znode ``/zkbench/c<i>`` (the
payload as data), then keeps ``window`` requests in flight: ``set`` is
setData of that znode (version -1), ``get`` getData of it, ``create`` a
persistent sequential child of it. Requests are encoded once and only their
xid changes; replies are matched by order (a session's answers come in the
order sent), their header says ok or the error.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import deque
from typing import Any, Protocol, cast

from zabd.codec.framing import no_delay
from zabd.zk import jute
from zabd.zk.records import PERSISTENT, PERSISTENT_SEQUENTIAL, Create, GetData, SetData

OPS = ("set", "get", "create")
_HEADER = struct.Struct(">iqi")
_XID = struct.Struct(">i")
SETUP_XIDS = (1, 2)


class BenchStats(Protocol):
    ops: int
    errors: int
    error_codes: dict[str, int]
    measuring: bool

    @property
    def hist(self) -> Any: ...


def _request(op: str, path: str, payload: bytes) -> tuple[int, bytes]:
    """(opcode, the framed request with xid 0): xid is bytes 4..8."""
    if op == "set":
        return jute.OP_SET_DATA, jute.encode_request(0, jute.OP_SET_DATA, SetData(path, payload, -1))
    if op == "get":
        return jute.OP_GET_DATA, jute.encode_request(0, jute.OP_GET_DATA, GetData(path))
    create = Create(path + "/n-", payload, mode=PERSISTENT_SEQUENTIAL)
    return jute.OP_CREATE, jute.encode_request(0, jute.OP_CREATE, create)


class ZKBenchConn(asyncio.Protocol):
    def __init__(self, index: int, op: str, stats: BenchStats, payload: bytes, window: int,
                 stop_at: list[float]) -> None:
        self.stats = stats
        self.window = window
        self.stop_at = stop_at
        self.path = f"/zkbench/c{index}"
        self.payload = payload
        _, self.template = _request(op, self.path, payload)
        self.transport: asyncio.Transport | None = None
        self.reader = jute.FrameReader(64 * 1024 * 1024)
        self.sent: deque[int] = deque()  # issue times (ns) of the load's requests, in order
        self.connected = False
        self.setup_left = len(SETUP_XIDS)
        self.next_xid = 10
        self.done = False
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        no_delay(transport)
        self.transport.write(jute.encode_connect(jute.ConnectRequest(0, 0, 30_000, 0, b"", False)))

    def _setup(self) -> None:
        assert self.transport is not None
        self.transport.write(
            jute.encode_request(SETUP_XIDS[0], jute.OP_CREATE, Create("/zkbench", b"", mode=PERSISTENT))
            + jute.encode_request(SETUP_XIDS[1], jute.OP_CREATE, Create(self.path, self.payload, mode=PERSISTENT))
        )

    def _issue(self, n: int) -> None:
        if n <= 0 or self.done or self.transport is None:
            return
        now = time.perf_counter_ns()
        template = self.template
        out = []
        for _ in range(n):
            self.next_xid += 1
            out.append(template[:4] + _XID.pack(self.next_xid) + template[8:])
            self.sent.append(now)
        self.transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        try:
            bodies = self.reader.feed(data)
        except jute.JuteError:
            if self.transport is not None:
                self.transport.abort()
            return
        if not self.connected and bodies:
            body = bodies.pop(0)
            _, timeout, _, _, _ = jute.decode_connect_response(body)
            if timeout <= 0:
                self._failed("session_refused", 1)
                if self.transport is not None:
                    self.transport.close()
                return
            self.connected = True
            self._setup()
        now = time.perf_counter_ns()
        stats = self.stats
        ok = failed = 0
        for body in bodies:
            xid, _, err = _HEADER.unpack_from(body)
            if xid in SETUP_XIDS:
                self.setup_left -= 1
                if err not in (0, -110):  # NodeExists: another connection made /zkbench first
                    self._failed(f"setup_err_{err}", 1)
                elif self.setup_left == 0:
                    self._issue(self.window)
                continue
            t0 = self.sent.popleft()
            if err == 0:
                ok += 1
                if stats.measuring:
                    stats.hist.record_value((now - t0) // 1000 or 1)
            else:
                failed += 1
                self._failed(f"zk_err_{err}", 1)
        if stats.measuring:
            stats.ops += ok
        if time.monotonic() >= self.stop_at[0]:
            self.done = True
            if not self.sent and self.transport is not None:
                self.transport.close()
            return
        self._issue(ok)
        if failed:
            asyncio.get_running_loop().call_later(0.05, self._issue, failed)

    def _failed(self, code: str, n: int) -> None:
        stats = self.stats
        if stats.measuring:
            stats.errors += n
        stats.error_codes[code] = stats.error_codes.get(code, 0) + n

    def connection_lost(self, exc: Exception | None) -> None:
        if self.sent and self.stats.measuring and not self.done:
            self._failed("connection_lost", len(self.sent))
        self.done = True
        if not self.closed.done():
            self.closed.set_result(None)

"""The admin port: ``/health``, ``/status`` and ``/metrics`` over HTTP.

HTTP is parsed by ``h11`` (sans-IO, like our own sessions) on an asyncio
server in the replica's own loop, so every answer reads the replica's state
between two events, never in the middle of one. ``/health`` is 200 only
while this node serves (leading or following, in the broadcast phase), which
is what a container healthcheck or a load balancer wants to know.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import h11
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

MAX_REQUEST = 16 * 1024
IDLE_S = 30.0


class AdminServer:
    def __init__(self, status: Callable[[], dict[str, Any]], registry: CollectorRegistry, log: Any) -> None:
        self.status = status
        self.registry = registry
        self.log = log
        self.server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._serve, host, port, reuse_address=True)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    def answer(self, method: str, target: str) -> tuple[int, str, bytes]:
        """(status code, content type, body) for one request."""
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"only GET\n"
        if path == "/health":
            st = self.status()
            serving = st["phase"] == "broadcast" and st["role"] in ("leading", "following")
            body = {"serving": serving, "role": st["role"], "phase": st["phase"], "leader": st["leader"] or None}
            return (200 if serving else 503), "application/json", json.dumps(body).encode() + b"\n"
        if path == "/status":
            return 200, "application/json", json.dumps(self.status()).encode() + b"\n"
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        return 404, "text/plain", b"not found; try /health, /status or /metrics\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await asyncio.wait_for(reader.read(65536), IDLE_S)
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    code, ctype, body = self.answer(event.method.decode(), event.target.decode())
                    headers = [("content-type", ctype), ("content-length", str(len(body)))]
                    writer.write(conn.send(h11.Response(status_code=code, headers=headers)) or b"")
                    if event.method != b"HEAD":
                        writer.write(conn.send(h11.Data(data=body)) or b"")
                    writer.write(conn.send(h11.EndOfMessage()) or b"")
                    await writer.drain()
                elif isinstance(event, h11.EndOfMessage):
                    if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                        conn.start_next_cycle()
                elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                    break
        except h11.RemoteProtocolError as exc:
            # a bad request is the client's problem: answer 400 when still possible, log one line
            self.log.warning("bad admin request", error=str(exc))
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                with contextlib.suppress(Exception):
                    writer.write(conn.send(h11.Response(status_code=400, headers=[("content-length", "0")])) or b"")
                    writer.write(conn.send(h11.EndOfMessage()) or b"")
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

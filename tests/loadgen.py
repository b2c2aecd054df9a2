"""Bounded background client load for real-cluster tests: proposals (and,
optionally, KV puts) through chosen nodes, remembering what was acknowledged
(what the client saw committed)."""

from __future__ import annotations

import asyncio
import contextlib

from zabd.client import Client, ZabdError
from zabd.client.spawn import LocalCluster


class Load:
    def __init__(
        self,
        cluster: LocalCluster,
        nodes: list[int] | None = None,
        window: int = 8,
        limit: int = 300_000,
        kv_every: int = 0,
    ) -> None:
        """``window`` workers per node; every ``kv_every``-th request is a KV
        put instead of a proposal (0: proposals only)."""
        self.cluster = cluster
        self.nodes = nodes if nodes is not None else list(range(1, cluster.n + 1))
        self.window = window
        self.limit = limit
        self.kv_every = kv_every
        self.acked: dict[int, bytes] = {}  # zxid -> payload of acknowledged proposals
        self.kv_acked: dict[str, bytes] = {}  # key -> value of acknowledged puts
        self.errors = 0
        self.sent = 0
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self._progress = asyncio.Event()

    async def _worker(self, node: int, k: int) -> None:
        client: Client | None = None
        while not self.stop.is_set() and self.sent < self.limit:
            try:
                if client is None:
                    client = await Client.connect(self.cluster.client_addr(node), timeout=3.0)
                self.sent += 1
                n = self.sent
                if self.kv_every and n % self.kv_every == 0:
                    key, value = f"k{node}-{k}-{n}", b"v%d" % n
                    await client.put(key, value)
                    self.kv_acked[key] = value
                else:
                    payload = f"n{node}-w{k}-{n}".encode()
                    z = await client.propose(payload)
                    self.acked[z] = payload
                self._progress.set()
            except (ZabdError, OSError, TimeoutError):
                self.errors += 1
                if client is not None:
                    await client.close()
                client = None
                await asyncio.sleep(0.05)
        if client is not None:
            await client.close()

    @property
    def total(self) -> int:
        """Requests acknowledged so far, proposals and puts."""
        return len(self.acked) + len(self.kv_acked)

    async def wait_acked(self, count: int, timeout: float = 30.0) -> None:
        """Wait until at least ``count`` requests were acknowledged in all."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.acked) + len(self.kv_acked) < count:
            self._progress.clear()
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"{len(self.acked) + len(self.kv_acked)} of {count} acknowledged in {timeout}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), left)

    def start(self) -> None:
        for node in self.nodes:
            for k in range(self.window):
                self.tasks.append(asyncio.create_task(self._worker(node, k)))

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.wait_for(asyncio.gather(*self.tasks), 30)

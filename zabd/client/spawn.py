"""Start a local N-node cluster of real ``zabd serve`` processes.

Used by ``zabd bench --spawn``, the benchmarks and the tests. By default every
node listens on 127.0.0.1 with ephemeral ports (picked by binding port 0);
``hosts`` gives each node an address of its own and ``spawn`` starts its
process (for example inside a network namespace of ``zabd.nemesis.netlab``).
Data directories are temporary unless ``base_dir`` is given; every process
started here is stopped by PID in :meth:`LocalCluster.stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from zabd.client.client import Client, ZabdError
from zabd.config import ConfigError, ServerConfig, format_validation_error

# (node id, argv, environment, output file) -> the started process
Spawner = Callable[[int, list[str], dict[str, str], BinaryIO], "subprocess.Popen[bytes]"]


def free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class LocalCluster:
    def __init__(
        self,
        n: int,
        *,
        storage: str = "memory",
        fsync: bool = True,
        base_dir: str | Path | None = None,
        tick_ms: int = 10,
        extra: dict[str, Any] | None = None,
        log_level: str = "info",
        seed: int = 1,
        hosts: dict[int, str] | None = None,
        spawn: Spawner | None = None,
        admin: bool = False,
        tls: bool = False,
        client_certs: str = "required",
        tokens: dict[str, str] | None = None,
        zk_secure: bool = False,
        members: int = 0,
    ) -> None:
        """``members``: only nodes 1..members form the ensemble; the others
        start with ``join = true``, to be added by a membership change (0: all)."""
        self.n = n
        self.members = members or n
        self.seed = seed
        self.storage = storage
        self.fsync = fsync
        self.tick_ms = tick_ms
        self.extra = extra or {}
        self.log_level = log_level
        self._own_dir = base_dir is None
        self.base = Path(base_dir) if base_dir is not None else Path(tempfile.mkdtemp(prefix="zabd-cluster-"))
        ports = free_ports(6 * n)
        self.peer_ports = {i: ports[i - 1] for i in range(1, n + 1)}
        # ZooKeeper's election port of each node's spec: zabd accepts the same peer links there
        self.election_ports = {i: ports[5 * n + i - 1] for i in range(1, n + 1)}
        self.client_ports = {i: ports[n + i - 1] for i in range(1, n + 1)}
        # the admin HTTP port (/health, /status, /metrics), when asked for
        self.admin_ports = {i: ports[2 * n + i - 1] for i in range(1, n + 1)} if admin else {}
        # ZooKeeper's client port (its jute protocol), on every node
        self.zk_ports = {i: ports[3 * n + i - 1] for i in range(1, n + 1)}
        # zk_secure: a TLS ZooKeeper port too (secureClientPort), certificates in base/tls
        self.zk_secure_ports = {i: ports[4 * n + i - 1] for i in range(1, n + 1)} if zk_secure else {}
        self.hosts = hosts or {i: "127.0.0.1" for i in range(1, n + 1)}
        self._spawn = spawn
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.log_files: dict[int, Path] = {}
        # tls: a CA and certificates in base/tls (zabd.certs), TLS on both
        # ports, client certificates as client_certs says; tokens: TOKEN ->
        # rw|ro, written to base/tokens. The helpers below connect with
        # client1's certificate, or the first rw token.
        self.tls_dir = self.base / "tls" if tls or zk_secure else None
        self.tls = tls
        self.client_certs = client_certs
        self.tokens = tokens
        self.token = next((t for t, role in (tokens or {}).items() if role == "rw"), None)
        self._client_tls: ssl.SSLContext | None = None

    def client_addr(self, i: int) -> str:
        return f"{self.hosts[i]}:{self.client_ports[i]}"

    @property
    def servers(self) -> list[str]:
        return [self.client_addr(i) for i in range(1, self.n + 1)]

    def zk_addr(self, i: int) -> str:
        return f"{self.hosts[i]}:{self.zk_ports[i]}"

    def zk_secure_addr(self, i: int) -> str:
        return f"{self.hosts[i]}:{self.zk_secure_ports[i]}"

    @property
    def zk_hosts(self) -> str:
        """The connect string of ZooKeeper's clients (kazoo's ``hosts``, zkCli's ``-server``)."""
        return ",".join(self.zk_addr(i) for i in range(1, self.n + 1))

    def spec(self, i: int, role: str | None = None) -> str:
        """Node ``i``'s ZooKeeper server spec (``role`` left out: the
        membership says it), so that ``/zookeeper/config`` lists every client
        address as ZooKeeper's clients (Curator, zkCli ``config``) read it;
        also what a reconfig that adds the node names (``zabd reconfig
        --add i=SPEC``)."""
        head = f"{self.hosts[i]}:{self.peer_ports[i]}:{self.election_ports[i]}"
        return f"{head}{'' if role is None else ':' + role};{self.zk_addr(i)}"

    def config_path(self, i: int) -> Path:
        return self.base / f"node{i}.toml"

    def client_tls(self) -> ssl.SSLContext | None:
        """The context the helpers connect with (client1's certificate)."""
        if self.tls and self.tls_dir is not None and self._client_tls is None:
            from zabd.tls import client_tls

            d = self.tls_dir
            self._client_tls = client_tls(str(d / "ca.pem"), str(d / "client1.pem"), str(d / "client1.key"))
        return self._client_tls

    def _security_fields(self, i: int) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if self.tls_dir is not None:
            d = self.tls_dir
            fields |= {"tls_ca": str(d / "ca.pem"), "tls_cert": str(d / f"node{i}.pem"),
                       "tls_key": str(d / f"node{i}.key"), "tls_client_certs": self.client_certs}
            if self.tls:
                fields |= {"tls_peer": True, "tls_client": True}
            if self.zk_secure_ports:
                fields["zookeeper_secure"] = self.zk_secure_addr(i)
        if self.tokens is not None:
            fields["auth_tokens_file"] = str(self.base / "tokens")
        return fields

    def node_fields(self, i: int) -> dict[str, Any]:
        """Node ``i``'s config fields as this cluster gives them (``extra`` last)."""
        fields: dict[str, Any] = {
            "id": i,
            "client": self.client_addr(i),
            "zookeeper": self.zk_addr(i),
            "data_dir": str(self.base / f"data{i}"),
            "tick_ms": self.tick_ms,
            # one seed for the whole cluster, as in the simulator: the
            # jitter is mix(seed ^ id ^ t), so per-node seeds like base+id
            # can cancel the id and give two nodes the same deadlines
            "seed": self.seed,
            "storage": self.storage,
            "fsync": self.fsync,
            "log_level": self.log_level,
            **self._security_fields(i),
        }
        if self.admin_ports:
            fields["admin"] = f"{self.hosts[i]}:{self.admin_ports[i]}"
        fields |= self.extra
        if i > self.members:
            fields["join"] = True
        observers = self.extra.get("observers", ())
        fields["peers"] = {j: self.spec(j, "observer" if j in observers else "participant")
                           for j in range(1, self.n + 1) if j <= self.members or j == i}
        return fields

    def node_config(self, i: int, **overrides: Any) -> ServerConfig:
        """Node ``i``'s config, checked by the server's own model: a bad
        ``extra`` field is a one-line ConfigError here, before any process
        starts. Its files (certificates, tokens) are read, so
        :meth:`write_configs` makes them first."""
        fields = self.node_fields(i) | overrides
        try:
            return ServerConfig.model_validate(fields)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, fields)) from None

    def write_config(self, i: int, path: Path | None = None, **overrides: Any) -> Path:
        """Write node ``i``'s config file (to ``path``, default :meth:`config_path`)."""
        path = path or self.config_path(i)
        path.write_text(self.node_config(i, **overrides).to_toml())
        return path

    def write_configs(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if self.tls_dir is not None and not (self.tls_dir / "ca.pem").exists():
            from zabd.certs import make_cluster

            make_cluster(self.tls_dir, self.n, [self.hosts[i] for i in range(1, self.n + 1)])
        if self.tokens is not None:
            (self.base / "tokens").write_text("".join(f"{t} {role}\n" for t, role in self.tokens.items()))
        for i in range(1, self.n + 1):
            self.write_config(i)

    def start_node(self, i: int, config: Path | None = None) -> None:
        """Start node ``i`` on its config file, or on ``config`` (one made by
        :meth:`write_config` with overrides, for this start only)."""
        log = self.base / f"node{i}.log"
        self.log_files[i] = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZABD_")}
        argv = [sys.executable, "-m", "zabd", "serve", "--config", str(config or self.config_path(i))]
        with open(log, "ab") as out:
            if self._spawn is not None:
                self.procs[i] = self._spawn(i, argv, env, out)
            else:
                self.procs[i] = subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
                )

    def start(self) -> None:
        self.write_configs()
        for i in range(1, self.n + 1):
            self.start_node(i)

    def signal(self, i: int, sig: int) -> None:
        proc = self.procs[i]
        if proc.poll() is None:
            os.kill(proc.pid, sig)

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def terminate(self, i: int, timeout: float = 10.0) -> int:
        proc = self.procs[i]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            return -9

    def alive(self, i: int) -> bool:
        return self.procs[i].poll() is None

    def log_text(self, i: int) -> str:
        path = self.log_files.get(i)
        if path is None:  # a process this cluster did not start
            return ""
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if self._own_dir:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------- async helpers

    async def status(self, i: int, timeout: float = 2.0) -> dict[str, Any] | None:
        try:
            client = await Client.connect(
                self.client_addr(i), timeout=timeout, read_retry=0, tls=self.client_tls(), token=self.token
            )
        except (ZabdError, OSError, TimeoutError):
            return None
        try:
            return (await client.status()).model_dump()
        except (ZabdError, OSError, TimeoutError):
            return None
        finally:
            await client.close()

    async def statuses(self, nodes: list[int] | None = None) -> dict[int, dict[str, Any] | None]:
        ids = nodes or list(range(1, self.n + 1))
        results = await asyncio.gather(*(self.status(i) for i in ids))
        return dict(zip(ids, results, strict=True))

    async def wait_leader(self, nodes: list[int] | None = None, timeout: float = 20.0, exclude: int = 0) -> int:
        """Wait until every node in ``nodes`` reports the same leader, that
        leader is in the broadcast phase, and it is not ``exclude``."""
        ids = nodes or [i for i in range(1, self.n + 1) if self.alive(i)]
        deadline = time.monotonic() + timeout
        last: dict[int, dict[str, Any] | None] = {}
        while time.monotonic() < deadline:
            dead = [i for i in ids if not self.alive(i)]
            if dead:
                tail = self.log_text(dead[0]).strip().splitlines()[-1:] or ["(no output)"]
                raise RuntimeError(f"node {dead[0]} exited: {tail[0]}")
            last = await self.statuses(ids)
            leaders = {st["leader"] if st else -1 for st in last.values()}
            if len(leaders) == 1:
                leader = leaders.pop()
                if leader > 0 and leader != exclude and leader in last:
                    st = last[leader]
                    settled = all(s and s["phase"] == "broadcast" for s in last.values())
                    if st and st["role"] == "leading" and settled:
                        return int(leader)
            await asyncio.sleep(0.05)
        raise TimeoutError(f"no common leader within {timeout}s: {last}")

    async def wait_caught_up(self, nodes: list[int], timeout: float = 20.0) -> int:
        """Wait until ``nodes`` report the same last_committed; return it."""
        deadline = time.monotonic() + timeout
        last: dict[int, dict[str, Any] | None] = {}
        while time.monotonic() < deadline:
            last = await self.statuses(nodes)
            values = {st["last_committed"] if st else -1 for st in last.values()}
            if len(values) == 1 and -1 not in values:
                return int(values.pop())
            await asyncio.sleep(0.05)
        raise TimeoutError(f"nodes {nodes} did not converge within {timeout}s: {last}")

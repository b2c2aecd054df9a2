"""What the abuse probes (``zabd.nemesis.abuse``) attack and measure with.

* **Targets**: a zabd cluster (``LocalCluster``: 3 nodes, disk storage, the
  default config unless told otherwise; optionally TLS with client
  certificates and a tokens file) or an Apache ZooKeeper 3.8 ensemble
  configured as ``/work/shared/anchors/zookeeper/cluster.sh`` configures it
  (tickTime=2000 initLimit=10 syncLimit=5 forceSync=yes, the admin server
  off, ``4lw.commands.whitelist=*``, 1 GiB heaps, the Debian package's jars)
  but on ports picked free and in a directory of its own, so that no other
  run of ``cluster.sh`` (which stops whatever its pid file names) can take it
  down mid-probe. ``ZkEnsemble(1, whitelist=None)`` is a standalone server
  with ZooKeeper's *default* four-letter-word whitelist. Every process started
  here is stopped by its PID.
* **The server under attack**: ``Target.victim``, the leader (the node whose
  loss hurts most); its RSS comes from ``/proc/<pid>/status``.
* **The well-behaved client**: a kazoo session (or zabd's own client where
  ZooKeeper's port is closed to it) doing a bounded loop of set/get on a
  znode (key) of its own in a thread, every op's latency recorded.
* **Raw sockets**: many connections from chosen 127.0.0.0/8 source addresses
  (``open_many``), bytes pumped into them without blocking (``pump``),
  whether the server closed them (``closed_by_peer``), and a ZooKeeper
  session over a bare socket (``RawZk``) for what kazoo has no call for
  (a chosen session id and password, persistent watches).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import math
import os
import secrets
import selectors
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState

__all__ = ["KazooClient"]  # re-exported: the probes type their sessions with it

from zabd.client.client import Client
from zabd.client.spawn import LocalCluster, free_ports
from zabd.zk import jute

MiB = 1 << 20
T = TypeVar("T")
Log = Callable[[str], None]

# Linux: pick the source port at connect(), not bind(), so that thousands of
# connections bound to one source address do not run out of ports held by
# TIME_WAIT sockets towards other destinations
IP_BIND_ADDRESS_NO_PORT = 24
TCP_ESTABLISHED = 1  # tcpi_state, the first byte of TCP_INFO

ZK_JARS = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"


def quiet(_: str) -> None:
    """A log that says nothing (the library never prints; the bench passes its own)."""


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """A coroutine run to its end from the probes' synchronous code."""
    return asyncio.run(coro)


# ------------------------------------------------------------------ measures


def rss_mib(pid: int) -> float | None:
    """The resident set of ``pid`` in MiB (None: the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class RssSampler:
    """The largest RSS of a process while the ``with`` block runs (a sample every ``interval``)."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.peak: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while True:
            v = rss_mib(self.pid)
            if v is not None and (self.peak is None or v > self.peak):
                self.peak = v
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def settle_rss(pid: int, baseline: float | None, within: float, max_wait: float,
               tolerance: float = 0.10) -> float | None:
    """RSS once it is back within ``tolerance`` of ``baseline``, or after
    ``max_wait`` seconds: freed memory can take a collection or two to leave."""
    deadline = time.monotonic() + max_wait
    v = rss_mib(pid)
    while v is not None and baseline is not None and v > baseline * (1 + tolerance) and time.monotonic() < deadline:
        time.sleep(within)
        v = rss_mib(pid)
    return v


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


# ------------------------------------------------------ well-behaved clients


@dataclass
class ClientRun:
    """What the well-behaved client saw while it ran."""

    ops: int = 0
    errors: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    first_error: str = ""

    @property
    def ok(self) -> bool:
        return self.ops > 0 and self.errors == 0

    def to_json(self) -> dict[str, Any]:
        return {"ops": self.ops, "errors": self.errors, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
                "max_ms": self.max_ms, "first_error": self.first_error}


class WellBehaved(abc.ABC):
    """A client that does a bounded loop of small reads and writes of its own
    in a thread, one at a time, ``interval`` apart; every op's latency kept.
    An op that fails or takes ``op_timeout`` counts as an error."""

    def __init__(self, interval: float = 0.02, max_ops: int = 20_000, op_timeout: float = 5.0) -> None:
        self.interval = interval
        self.max_ops = max_ops
        self.op_timeout = op_timeout
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lat: list[float] = []
        self._errors = 0
        self._first_error = ""

    @abc.abstractmethod
    def open(self) -> None:
        """Connect (before the probe: a connection made during it is not the point)."""

    @abc.abstractmethod
    def op(self, i: int) -> None:
        """One op (even i: a write, odd: a read of it); raises on failure."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def _loop(self) -> None:
        i = 0
        while not self._stop.is_set() and i < self.max_ops:
            t0 = time.perf_counter()
            try:
                self.op(i)
                self._lat.append((time.perf_counter() - t0) * 1000)
            except Exception as exc:  # every failure is the server's answer to report, whatever its type
                self._errors += 1
                if not self._first_error:
                    self._first_error = f"{type(exc).__name__}: {exc}"[:200]
            i += 1
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._stop.clear()
        self._lat = []
        self._errors = 0
        self._first_error = ""
        self._thread = threading.Thread(target=self._loop, name="well-behaved", daemon=True)
        self._thread.start()

    def stop(self) -> ClientRun:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.op_timeout * 3)
        lat = list(self._lat)
        return ClientRun(len(lat) + self._errors, self._errors, percentile(lat, 50), percentile(lat, 99),
                         max(lat) if lat else None, self._first_error)

    def run_for(self, seconds: float) -> ClientRun:
        self.start()
        time.sleep(seconds)
        return self.stop()


class KazooWorker(WellBehaved):
    """set/get of its own znode through ZooKeeper's port of one server."""

    def __init__(self, make: Callable[[], KazooClient], path: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.make = make
        self.path = path
        self.zk: KazooClient | None = None

    def open(self) -> None:
        self.zk = self.make()
        self.zk.ensure_path(self.path)

    def op(self, i: int) -> None:
        assert self.zk is not None
        if i % 2 == 0:
            self.zk.set_async(self.path, b"%d" % i).get(timeout=self.op_timeout)
        else:
            data, _ = self.zk.get_async(self.path).get(timeout=self.op_timeout)
            if data != b"%d" % (i - 1):
                raise AssertionError(f"read {data!r} after writing {i - 1}")

    def close(self) -> None:
        if self.zk is not None:
            stop_kazoo(self.zk)
            self.zk = None


class KVWorker(WellBehaved):
    """put/get of its own key through zabd's client port (TLS and a token as the target needs)."""

    def __init__(self, addr: str, key: str, tls: ssl.SSLContext | None, token: str | None, **kw: Any) -> None:
        super().__init__(**kw)
        self.addr = addr
        self.key = key
        self.tls = tls
        self.token = token
        self.loop: asyncio.AbstractEventLoop | None = None
        self.client: Client | None = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self.loop is not None
        return self.loop.run_until_complete(asyncio.wait_for(coro, self.op_timeout))

    def open(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = self._run(Client.connect(self.addr, timeout=self.op_timeout, read_retry=0, tls=self.tls,
                                               token=self.token))

    def op(self, i: int) -> None:
        assert self.client is not None
        if i % 2 == 0:
            self._run(self.client.put(self.key, b"%d" % i))
        else:
            got = self._run(self.client.get(self.key))
            if got.value != b"%d" % (i - 1):
                raise AssertionError(f"read {got.value!r} after writing {i - 1}")

    def close(self) -> None:
        if self.loop is not None:
            if self.client is not None:
                with contextlib.suppress(Exception):
                    self._run(self.client.close())
            self.loop.close()
        self.client = None
        self.loop = None


def stop_kazoo(zk: KazooClient) -> None:
    with contextlib.suppress(Exception):
        zk.stop()
    with contextlib.suppress(Exception):
        zk.close()


# ------------------------------------------------------------------ targets


# the SASL DIGEST-MD5 user both kinds of target know (a JAAS Server section each, as ZooKeeper reads it)
SASL_USER = ("sasluser", "s3cret-sasl")
SASL_JAAS = ('Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n'
             f'    user_{SASL_USER[0]}="{SASL_USER[1]}";\n}};\n')


class Target(abc.ABC):
    """A replicated server under attack: its nodes, their ports and PIDs."""

    name = "target"
    kind = "zabd"  # or "zookeeper"
    n = 3
    tls = False
    frame_timeout_s = 10.0  # sessionlessCnxnTimeout / client_frame_timeout_ms
    per_address = 60  # maxClientCnxns / max_client_cnxns

    def __init__(self) -> None:
        self.victim = 1

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    @abc.abstractmethod
    def pid(self, i: int) -> int: ...

    @abc.abstractmethod
    def dead(self) -> list[int]:
        """Nodes whose process has exited."""

    @abc.abstractmethod
    def zk_addr(self, i: int) -> tuple[str, int]: ...

    @abc.abstractmethod
    def serving(self) -> dict[int, str]:
        """Each node's role as it says now ("" when it does not answer)."""

    def attack_ports(self) -> dict[str, tuple[str, int]]:
        """The client ports of the victim, by name."""
        return {"zookeeper": self.zk_addr(self.victim)}

    def kazoo_options(self) -> dict[str, Any]:
        return {}

    def kazoo(self, i: int, auth: tuple[str, str] | None = None, timeout: float = 20.0) -> KazooClient:
        """A started kazoo session on node ``i`` (``auth``: a digest user, password)."""
        host, port = self.zk_addr(i)
        zk = KazooClient(hosts=f"{host}:{port}", timeout=10.0,
                         auth_data=[("digest", f"{auth[0]}:{auth[1]}")] if auth else None, **self.kazoo_options())
        try:
            zk.start(timeout=timeout)
        except BaseException:
            stop_kazoo(zk)
            raise
        return zk

    def well_behaved(self, name: str) -> WellBehaved:
        return KazooWorker(lambda: self.kazoo(self.victim), f"/abuse-wb/{name}")

    def up(self) -> bool:
        """Every node alive and serving (a leader or a follower)."""
        if self.dead():
            return False
        roles = self.serving()
        return all(roles.values()) and list(roles.values()).count("leader") == 1

    def describe(self) -> str:
        return self.name


class ZabdTarget(Target):
    """A zabd ``LocalCluster``: 3 nodes, disk storage, the default config
    (``extra`` adds to it). ``tls``: TLS on the client ports, client
    certificates ``client_certs``, and a tokens file with one token of each role."""

    kind = "zabd"

    def __init__(self, base: Path | None = None, extra: dict[str, Any] | None = None, tls: bool = False,
                 client_certs: str = "optional", log: Log = quiet, keep: bool = False) -> None:
        """``keep``: leave the data directories and logs behind (for a diagnosis)."""
        super().__init__()
        self.name = "zabd-tls" if tls else "zabd"
        self.tls = tls
        self.extra = dict(extra or {})
        self.frame_timeout_s = self.extra.get("client_frame_timeout_ms", 10_000) / 1000
        self.per_address = int(self.extra.get("max_client_cnxns", 60))
        self.client_certs = client_certs
        self.tokens: dict[str, str] = {}
        if tls:
            # random tokens: nothing a reader of this code could guess
            self.tokens = {f"ro-{secrets.token_hex(8)}": "ro", f"rw-{secrets.token_hex(8)}": "rw",
                           f"admin-{secrets.token_hex(8)}": "admin"}
        self._own_base = base is None and not keep
        self.base = base or Path(tempfile.mkdtemp(prefix="zabd-abuse-"))
        self.log = log
        self.cluster: LocalCluster | None = None
        self._starts = 0

    def token(self, role: str | None) -> str | None:
        return next((t for t, r in self.tokens.items() if r == role), None)

    def start(self) -> None:
        self._starts += 1
        jaas = self.base / "jaas.conf"
        self.base.mkdir(parents=True, exist_ok=True)
        jaas.write_text(SASL_JAAS)
        c = LocalCluster(3, storage="disk", base_dir=self.base / f"cluster{self._starts}",
                         extra={"zk_sasl_jaas": str(jaas), **self.extra}, tls=self.tls,
                         client_certs=self.client_certs, tokens=self.tokens or None)
        self.cluster = c
        c.start()
        try:
            self.victim = run_async(c.wait_leader(timeout=60))
        except BaseException:
            c.stop()
            raise
        self.log(f"{self.name}: 3 nodes up, leader {self.victim}, pids "
                 f"{','.join(str(c.procs[i].pid) for i in range(1, 4))}, base {c.base}")

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None
        if self._own_base:
            shutil.rmtree(self.base, ignore_errors=True)

    @property
    def c(self) -> LocalCluster:
        assert self.cluster is not None, "the target is not started"
        return self.cluster

    def pid(self, i: int) -> int:
        return self.c.procs[i].pid

    def dead(self) -> list[int]:
        return [i for i in range(1, self.n + 1) if not self.c.alive(i)]

    def zk_addr(self, i: int) -> tuple[str, int]:
        return self.c.hosts[i], self.c.zk_ports[i]

    def client_addr(self, i: int) -> str:
        return self.c.client_addr(i)

    def attack_ports(self) -> dict[str, tuple[str, int]]:
        v = self.victim
        return {"client": (self.c.hosts[v], self.c.client_ports[v]), "zookeeper": self.zk_addr(v)}

    def serving(self) -> dict[int, str]:
        sts = run_async(self.c.statuses())
        out: dict[int, str] = {}
        for i, st in sts.items():
            ok = st is not None and st.get("phase") == "broadcast"
            out[i] = {"leading": "leader", "following": "follower"}.get(str(st["role"]), "") if st and ok else ""
        return out

    def status(self, i: int) -> dict[str, Any] | None:
        return run_async(self.c.status(i))

    # TLS: client1's certificate (a verified one is rw), or none at all
    def client_tls(self, cert: bool = True) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        assert self.c.tls_dir is not None
        d = self.c.tls_dir
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(d / "ca.pem"))
        ctx.check_hostname = False  # the node certificates name zabd-node-<i>, not the address dialed
        if cert:
            ctx.load_cert_chain(str(d / "client1.pem"), str(d / "client1.key"))
        return ctx

    def kazoo_options(self) -> dict[str, Any]:
        if not self.tls:
            return {}
        assert self.c.tls_dir is not None
        d = self.c.tls_dir
        return {"use_ssl": True, "ca": str(d / "ca.pem"), "certfile": str(d / "client1.pem"),
                "keyfile": str(d / "client1.key"), "verify_certs": True}

    async def client(self, i: int, role: str | None = "rw", cert: bool = False, timeout: float = 10.0) -> Client:
        """zabd's client on node ``i`` with the token of ``role`` (when the
        cluster has tokens; None: no token) and client1's certificate if ``cert``."""
        token = self.token(role) if self.tokens else None
        return await Client.connect(self.client_addr(i), timeout=timeout, read_retry=0,
                                    tls=self.client_tls(cert), token=token)

    def well_behaved(self, name: str) -> WellBehaved:
        if self.tls:
            # tokens travel on zabd's port only: the well-behaved client is zabd's own
            return KVWorker(self.client_addr(self.victim), f"abuse-wb-{name}", self.client_tls(False),
                            self.token("rw"))
        return super().well_behaved(name)

    def describe(self) -> str:
        how = f"TLS, client certificates {self.client_certs}, tokens ro/rw/admin" if self.tls else "plaintext"
        extra = ", ".join(f"{k}={v}" for k, v in self.extra.items()) or "default config"
        return f"zabd: 3 nodes, disk storage, {extra}, {how}"


class ZkEnsemble:
    """ZooKeeper 3.8 servers configured as ``cluster.sh`` configures them, on
    free ports under ``base``; ``n == 1`` is a standalone server. ``whitelist``:
    the ``4lw.commands.whitelist`` line (None: no line, ZooKeeper's default);
    ``jaas``: a JAAS file whose Server section holds SASL users (with the
    SASL authentication provider, as kazoo's harness sets it)."""

    def __init__(self, n: int, base: Path, whitelist: str | None = "*", heap: str = "1g",
                 jaas: Path | None = None) -> None:
        self.n = n
        self.base = base
        self.whitelist = whitelist
        self.heap = heap
        self.jaas = jaas
        ports = free_ports(3 * n)
        self.client_ports = {i: ports[i - 1] for i in range(1, n + 1)}
        self.quorum_ports = {i: ports[n + i - 1] for i in range(1, n + 1)}
        self.election_ports = {i: ports[2 * n + i - 1] for i in range(1, n + 1)}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @staticmethod
    def available() -> str:
        """Why no ZooKeeper can start here ("" when it can)."""
        if not Path("/usr/share/java/zookeeper.jar").exists():
            return "ZooKeeper is not installed (apt-get install -y zookeeper)"
        if shutil.which("java") is None:
            return "no java on the PATH"
        return ""

    def _config(self, i: int) -> str:
        d = self.base / str(i)
        lines = ["tickTime=2000", "initLimit=10", "syncLimit=5", f"dataDir={d / 'data'}", f"dataLogDir={d / 'datalog'}",
                 "clientPortAddress=127.0.0.1", f"clientPort={self.client_ports[i]}", "forceSync=yes",
                 "admin.enableServer=false", "autopurge.purgeInterval=0"]
        if self.whitelist is not None:
            lines.append(f"4lw.commands.whitelist={self.whitelist}")
        if self.jaas is not None:
            lines.append("authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider")
        if self.n > 1:
            lines += [f"server.{j}=127.0.0.1:{self.quorum_ports[j]}:{self.election_ports[j]}"
                      for j in range(1, self.n + 1)]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 90.0) -> int:
        """Start every server and wait until all serve; the leader's id (1 standalone)."""
        shutil.rmtree(self.base, ignore_errors=True)
        for i in range(1, self.n + 1):
            d = self.base / str(i)
            (d / "data").mkdir(parents=True)
            (d / "datalog").mkdir()
            (d / "data" / "myid").write_text(f"{i}\n")
            (d / "zoo.cfg").write_text(self._config(i))
            (d / "log4j.properties").write_text(
                "log4j.rootLogger=INFO, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
                f"log4j.appender.F.File={d / 'zookeeper.log'}\n"
                "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
                "log4j.appender.F.layout.ConversionPattern=%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n\n")
            jaas = [] if self.jaas is None else [f"-Djava.security.auth.login.config={self.jaas}"]
            argv = ["java", f"-Xms{self.heap}", f"-Xmx{self.heap}",
                    f"-Dlog4j.configuration=file:{d / 'log4j.properties'}", f"-Dzookeeper.log.dir={d}", *jaas,
                    "-cp", ZK_JARS, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    str(d / "zoo.cfg")]
            with open(d / "stdout.log", "ab") as out:
                # a session of its own, as cluster.sh's setsid: not killed with our terminal's group
                self.procs[i] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 start_new_session=True)
        deadline = time.monotonic() + timeout
        modes: dict[int, str] = {}
        while time.monotonic() < deadline:
            for i, p in self.procs.items():
                if p.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"ZooKeeper server {i} exited; see {self.base / str(i) / 'zookeeper.log'}")
            modes = self.modes()
            leaders = [i for i, m in modes.items() if m in ("leader", "standalone")]
            if len(leaders) == 1 and all(m in ("leader", "follower", "standalone") for m in modes.values()):
                return leaders[0]
            time.sleep(0.3)
        self.stop()
        raise TimeoutError(f"ZooKeeper not serving after {timeout:.0f} s: {modes}")

    def modes(self) -> dict[int, str]:
        out = {}
        for i in range(1, self.n + 1):
            text = four_letter(("127.0.0.1", self.client_ports[i]), "srvr", 1.0)
            out[i] = next((ln[6:].strip() for ln in text.splitlines() if ln.startswith("Mode: ")), "")
        return out

    def stop(self) -> None:
        """SIGTERM each server started here, SIGKILL after 10 s (by PID, as cluster.sh)."""
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                p.wait(10)


class ZooKeeperTarget(Target):
    """A 3-node ZooKeeper 3.8 ensemble with ``cluster.sh``'s settings."""

    kind = "zookeeper"
    name = "zookeeper"

    def __init__(self, base: Path | None = None, heap: str = "1g", log: Log = quiet, keep: bool = False) -> None:
        super().__init__()
        self._own_base = base is None and not keep
        self.base = base or Path(tempfile.mkdtemp(prefix="zk-abuse-"))
        self.heap = heap
        self.log = log
        self.ensemble: ZkEnsemble | None = None
        self._starts = 0

    def start(self) -> None:
        if why := ZkEnsemble.available():
            raise RuntimeError(why)
        self._starts += 1
        jaas = self.base / "jaas.conf"
        self.base.mkdir(parents=True, exist_ok=True)
        jaas.write_text(SASL_JAAS)
        e = ZkEnsemble(3, self.base / f"ensemble{self._starts}", "*", self.heap, jaas)
        self.ensemble = e
        self.victim = e.start()
        self.log(f"zookeeper: 3 servers up, leader {self.victim}, pids "
                 f"{','.join(str(e.procs[i].pid) for i in range(1, 4))}, base {e.base}")

    def stop(self) -> None:
        if self.ensemble is not None:
            self.ensemble.stop()
            self.ensemble = None
        if self._own_base:
            shutil.rmtree(self.base, ignore_errors=True)

    @property
    def e(self) -> ZkEnsemble:
        assert self.ensemble is not None, "the target is not started"
        return self.ensemble

    def pid(self, i: int) -> int:
        return self.e.procs[i].pid

    def dead(self) -> list[int]:
        return [i for i, p in self.e.procs.items() if p.poll() is not None]

    def zk_addr(self, i: int) -> tuple[str, int]:
        return "127.0.0.1", self.e.client_ports[i]

    def serving(self) -> dict[int, str]:
        return self.e.modes()

    def describe(self) -> str:
        return (f"ZooKeeper 3.8.0 (Debian): 3 servers, cluster.sh's settings (tickTime=2000, forceSync=yes, "
                f"4lw.commands.whitelist=*, -Xmx{self.heap}), maxClientCnxns default 60")


# --------------------------------------------------------------- raw sockets


def _bound(source: str | None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if source is not None:
        with contextlib.suppress(OSError):
            s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        s.bind((source, 0))
    return s


@dataclass
class Opened:
    """Connections ``open_many`` made, when each was made, and how many failed."""

    socks: list[socket.socket] = field(default_factory=list)
    at: list[float] = field(default_factory=list)
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def close(self) -> None:
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()


def open_many(n: int, addr: tuple[str, int], sources: list[str], timeout: float = 30.0, in_flight: int = 256,
              rcvbuf: int = 0) -> Opened:
    """``n`` TCP connections to ``addr``, source addresses taken in turn from
    ``sources``; at most ``in_flight`` connecting at once, all within ``timeout``.
    A server that accepts and closes at once still counts as connected here:
    ``closed_by_peer`` tells those apart."""
    out = Opened()
    sel = selectors.DefaultSelector()
    deadline = time.monotonic() + timeout
    started = 0
    pending = 0
    try:
        while (started < n or pending) and time.monotonic() < deadline:
            while started < n and pending < in_flight:
                s = _bound(sources[started % len(sources)])
                if rcvbuf:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
                s.setblocking(False)
                started += 1
                err = s.connect_ex(addr)
                if err in (0, 115):  # connected, or EINPROGRESS
                    sel.register(s, selectors.EVENT_WRITE, s)
                    pending += 1
                else:
                    out.failed += 1
                    why = os.strerror(err)
                    out.errors[why] = out.errors.get(why, 0) + 1
                    s.close()
            for key, _ in sel.select(timeout=0.2):
                s = key.data
                sel.unregister(s)
                pending -= 1
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    out.failed += 1
                    name = os.strerror(err)
                    out.errors[name] = out.errors.get(name, 0) + 1
                    s.close()
                else:
                    out.socks.append(s)
                    out.at.append(time.monotonic())
    finally:
        for key in list(sel.get_map().values()):
            s = key.data
            out.failed += 1
            out.errors["timed out"] = out.errors.get("timed out", 0) + 1
            s.close()
        out.failed += n - started
        sel.close()
    return out


def closed_by_peer(s: socket.socket) -> bool:
    """True once the server closed ``s`` (its FIN or a reset came), read or
    not: the kernel's TCP state says so without touching what waits to be read
    (a reader that never reads stays one) and under TLS alike."""
    try:
        state = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
    except OSError:
        return True
    return state != TCP_ESTABLISHED


_MAPPED_V4 = "0000000000000000FFFF0000"  # ::ffff:a.b.c.d in /proc/net/tcp6 (a JVM's dual-stack sockets)


def _v4(hexaddr: str) -> str | None:
    """a.b.c.d of an address of /proc/net/tcp{,6} (little-endian words), None if not IPv4."""
    if len(hexaddr) == 32 and hexaddr.startswith(_MAPPED_V4):
        hexaddr = hexaddr[24:]
    if len(hexaddr) != 8:
        return None
    return socket.inet_ntoa(bytes.fromhex(hexaddr)[::-1])


def held_by(pid: int, port: int, remote: str) -> tuple[int, int]:
    """Connections from ``remote`` to ``port`` as the server sees them:
    (held by process ``pid``, waiting in its accept queue). The client's
    side cannot tell these apart, nor from a handshake the kernel dropped
    with a full queue: it sees all of them connected."""
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    except OSError:
        return 0, 0
    held = queued = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    local, rem, state, inode = cols[1], cols[2], cols[3], cols[9]
                    if state != "01" or int(local.rsplit(":", 1)[1], 16) != port:
                        continue
                    if _v4(rem.rsplit(":", 1)[0]) != remote:
                        continue
                    if inode == "0":
                        queued += 1
                    elif inode in inodes:
                        held += 1
        except OSError:
            continue
    return held, queued


def listen_overflows() -> int:
    """The kernel's ListenOverflows + ListenDrops (all sockets of this network
    namespace): a burst of connects past a listener's backlog is dropped or
    reset by the kernel before the server sees it (or counts it)."""
    try:
        with open("/proc/net/netstat") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        if head.startswith("TcpExt:"):
            row = dict(zip(head.split()[1:], values.split()[1:], strict=False))
            return int(row.get("ListenOverflows", 0)) + int(row.get("ListenDrops", 0))
    return 0


def count_closed(socks: Iterable[socket.socket]) -> int:
    return sum(1 for s in socks if closed_by_peer(s))


def pump(items: list[tuple[socket.socket, bytes]], timeout: float) -> list[int]:
    """Send each socket its bytes without blocking, all within ``timeout``;
    the bytes each one took (a server that stops reading takes fewer)."""
    sent = [0] * len(items)
    views = [memoryview(data) for _, data in items]
    sel = selectors.DefaultSelector()
    for k, (s, _) in enumerate(items):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_WRITE, k)
    left = len(items)
    deadline = time.monotonic() + timeout
    try:
        while left and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=0.2):
                k = key.data
                s = items[k][0]
                done = False
                try:
                    n = s.send(views[k][sent[k]:sent[k] + 256 * 1024])
                    sent[k] += n
                    done = sent[k] >= len(views[k])
                except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    continue
                except OSError:
                    done = True  # closed by the server: it takes no more
                if done:
                    sel.unregister(s)
                    left -= 1
    finally:
        sel.close()
    return sent


def four_letter(addr: tuple[str, int], word: str, timeout: float = 3.0) -> str:
    """A four-letter word's answer ("" if none came)."""
    try:
        with socket.create_connection(addr, timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def jute_connect(session: int = 0, password: bytes = bytes(16), timeout_ms: int = 30_000) -> bytes:
    return jute.encode_connect(jute.ConnectRequest(0, 0, timeout_ms, session, password, False))


class RawZk:
    """A ZooKeeper session over a bare socket. ``connected`` is the
    ConnectResponse (protocol, timeout, session, password, read-only), or None
    when the server closed without one. A live session has a timeout above 0."""

    def __init__(self, addr: tuple[str, int], session: int = 0, password: bytes = bytes(16), timeout_ms: int = 30_000,
                 source: str | None = None, tls: ssl.SSLContext | None = None, io_timeout: float = 5.0) -> None:
        s = _bound(source)
        s.settimeout(io_timeout)
        s.connect(addr)
        self.sock: socket.socket = tls.wrap_socket(s) if tls is not None else s
        self.reader = jute.FrameReader(16 * MiB)
        self.bodies: list[bytes] = []
        self.events: list[tuple[int, int, str]] = []
        self.xid = 0
        self.connected: tuple[int, int, int, bytes, bool] | None = None
        self.sock.sendall(jute_connect(session, password, timeout_ms))
        body = self._next()
        if body is not None:
            with contextlib.suppress(jute.JuteError):
                self.connected = jute.decode_connect_response(body)

    @property
    def live(self) -> bool:
        return self.connected is not None and self.connected[1] > 0 and self.connected[2] != 0

    def _next(self, timeout: float | None = None) -> bytes | None:
        """The next frame body; None when the server closed (or nothing came within ``timeout``)."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            while not self.bodies:
                data = self.sock.recv(65536)
                if not data:
                    return None
                self.bodies += self.reader.feed(data)
        except (TimeoutError, OSError):
            return None
        return self.bodies.pop(0)

    def call(self, op: int, record: object, timeout: float = 5.0) -> tuple[int, object | None]:
        """(err, result) of one request; events that come before its answer are kept in ``events``."""
        self.xid += 1
        self.sock.sendall(jute.encode_request(self.xid, op, record))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = self._next(max(0.01, deadline - time.monotonic()))
            if body is None:
                raise ConnectionError("no answer: the server closed the connection or did not answer")
            (xid,) = struct.unpack_from(">i", body)
            if xid == jute.XID_NOTIFICATION:
                self.events.append(jute.decode_event(body))
            elif xid == self.xid:
                _, _, err, result = jute.decode_reply(body, op)
                return err, result
        raise TimeoutError(f"no answer to op {op} within {timeout} s")

    def wait_events(self, seconds: float) -> list[tuple[int, int, str]]:
        """Events that arrive within ``seconds`` (pings are not asked for: the probes are shorter than a session)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            body = self._next(left)
            if body is None:
                break
            (xid,) = struct.unpack_from(">i", body)
            if xid == jute.XID_NOTIFICATION:
                self.events.append(jute.decode_event(body))
        return list(self.events)

    def closed_within(self, seconds: float) -> bool:
        """Whether the server closes the connection within ``seconds`` (what it sends meanwhile is kept)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                return False
            except OSError:
                return True
            if not data:
                return True
            with contextlib.suppress(jute.JuteError):
                self.bodies += self.reader.feed(data)
        return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def kazoo_connected(zk: KazooClient, within: float = 15.0) -> bool:
    """True once ``zk`` is connected (it may be reconnecting after the server closed it)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if zk.state == KazooState.CONNECTED and zk.connected:
            return True
        time.sleep(0.1)
    return False

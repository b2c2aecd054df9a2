"""The proof harness for ZooKeeper migration (issue 40): a real ZooKeeper 3.8
ensemble (Debian's package), a workload that leaves every kind of znode,
session and ACL a migration has to carry, a full read of a tree with every
Stat field and ACL, and a diff of two such reads.

The migration tests read a ZooKeeper ensemble's tree, import one server's
data dir (or a copy taken from a live follower with ``backup_copy``) into
zabd and read zabd's tree, export zabd's tree and start ZooKeeper on the
export (``ZooKeeperEnsemble(base, 1, data_dirs=[...])``) and read that:
``diff_trees`` of any two must be empty. A client's Stat shows 0 as the
owner of a container or TTL node; ``read_snapshot`` (ZooKeeper's own
SnapshotFormatter) shows the types and sessions a snapshot holds.

Every server gets free ports (``zabd.client.spawn.free_ports``), runs as a
child process and is stopped by its PID. Every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import KazooState
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from bench.zkcluster import JARS, mode
from scripts.record_zk38_semantics import CONTAINER, PSEQTTL, PTTL, Raw, build_request, create
from zabd.client.spawn import free_ports
from zabd.zk.acl import digest_id
from zabd.zk.records import Stat  # ZooKeeper's 11 fields, in its order and with its names

START_TIMEOUT_S = 120.0  # three JVMs starting on a busy 2-core box
STOP_GRACE_S = 15.0  # SIGTERM, then SIGKILL
CALL_TIMEOUT_S = 30.0
SESSION_TIMEOUT_S = 30.0  # < 20 * tickTime (ZooKeeper's cap); long enough to ride out a full restart

# ``addauth digest super:...`` reads every node (zoo.cfg's superDigest)
SUPER_USER, SUPER_PASSWORD = "super", "migration-harness"
SUPER_AUTH = ("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")
ALICE = ("alice", "alice-pw")
BOB = ("bob", "bob-pw")

TTL_MS = 3_600_000  # nothing is reaped while a test runs
# ZooKeeper's CreateMode names, in its order; WorkloadFacts.modes is keyed by them
CREATE_MODES = ("persistent", "persistent_sequential", "ephemeral", "ephemeral_sequential", "container",
                "persistent_with_ttl", "persistent_sequential_with_ttl")
ROOT = "/mig"


def zoo_cfg_lines(super_digest: str = digest_id(SUPER_USER, SUPER_PASSWORD)) -> list[str]:
    """What the migration tests need of ZooKeeper beyond ``ZkCluster``'s settings:
    snapshots and log rolls every few dozen txns, TTL nodes, small preallocated
    logs, no purge, a super user, every four-letter word."""
    return [
        "snapCount=50",  # ZooKeeper rolls at a random point in [snapCount/2, snapCount)
        "preAllocSize=64",  # KiB
        "extendedTypesEnabled=true",
        "autopurge.purgeInterval=0",
        # an unknown key becomes the system property "zookeeper.<key>": this is superDigest
        f"DigestAuthenticationProvider.superDigest={super_digest}",
        "4lw.commands.whitelist=*",
        "admin.enableServer=false",
        "maxClientCnxns=0",
    ]


# ---------------------------------------------------------------- the servers

class ZooKeeperEnsemble:
    """``n`` ZooKeeper 3.8 servers on 127.0.0.1 (``n == 1``: one standalone
    ``ZooKeeperServerMain``, as a restore would run it).

    By default every server's data lives under ``base/<i>/data``, snapshots and
    txn logs in one ``version-2`` (ZooKeeper's layout when ``dataLogDir`` is not
    set, the "one server's dataDir" the importer reads); ``separate_log_dir``
    puts the logs in ``base/<i>/datalog``. ``data_dirs`` runs the servers on
    directories someone else wrote (an export, a backup copy): those are never
    wiped, and only a missing ``myid`` is written (an ensemble needs one).
    """

    def __init__(self, base: Path, n: int = 3, *, data_dirs: Sequence[Path] | None = None,
                 separate_log_dir: bool = False, cfg: Sequence[str] = (), jvm: Sequence[str] = (),
                 heap: str = "256m", reaper_asleep: bool = True) -> None:
        if data_dirs is not None and len(data_dirs) != n:
            raise ValueError(f"data_dirs: {len(data_dirs)} dirs for {n} servers")
        self.base = base
        self.n = n
        self.ids = list(range(1, n + 1))
        self.own_dirs = data_dirs is None
        self.separate_log_dir = separate_log_dir and self.own_dirs
        self._data = {i: (base / str(i) / "data" if data_dirs is None else Path(data_dirs[i - 1]))
                      for i in self.ids}
        ports = free_ports(3 * n)
        self.client_ports = dict(zip(self.ids, ports[:n], strict=True))
        self.quorum_ports = dict(zip(self.ids, ports[n:2 * n], strict=True))
        self.election_ports = dict(zip(self.ids, ports[2 * n:], strict=True))
        self.cfg = [*zoo_cfg_lines(), *cfg]
        # the container/TTL reaper deletes at its own times (an emptied container
        # within a minute): asleep, the tree changes only when the test writes
        self.jvm = [*(["-Dznode.container.checkIntervalMs=86400000"] if reaper_asleep else []), *jvm]
        self.heap = heap
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    # -- addresses and dirs

    def addr(self, i: int) -> str:
        return f"127.0.0.1:{self.client_ports[i]}"

    @property
    def hosts(self) -> str:
        """kazoo's connect string for every server."""
        return ",".join(self.addr(i) for i in self.ids)

    def data_dir(self, i: int) -> Path:
        return self._data[i]

    def log_dir(self, i: int) -> Path:
        """``dataLogDir``: the data dir itself unless ``separate_log_dir``."""
        return self.base / str(i) / "datalog" if self.separate_log_dir else self._data[i]

    def files(self, i: int, prefix: str) -> list[Path]:
        """Server ``i``'s ``snapshot.*`` (prefix "snapshot") or ``log.*`` ("log") files, oldest first."""
        d = (self.data_dir(i) if prefix == "snapshot" else self.log_dir(i)) / "version-2"
        return sorted(d.glob(f"{prefix}.*"), key=lambda p: int(p.name.split(".", 1)[1], 16))

    # -- start and stop

    def start(self, wipe: bool = True, timeout: float = START_TIMEOUT_S) -> None:
        """Start every server and wait until they serve (one leader, the rest
        following). ``wipe`` empties the harness's own dirs first; with
        ``wipe=False`` (a restart) or ``data_dirs`` the servers load what is there."""
        if wipe and self.own_dirs:
            for i in self.ids:
                shutil.rmtree(self.base / str(i), ignore_errors=True)
        for i in self.ids if self.n > 1 else ():
            myid = self.data_dir(i) / "myid"
            if myid.exists() and myid.read_text().strip() != str(i):  # a copy of another server's dir
                raise ValueError(f"{myid} says {myid.read_text().strip()!r}, expected server {i}")
        for i in self.ids:
            self.procs[i] = self._spawn(i)
        self.wait_serving(timeout)

    def _spawn(self, i: int) -> subprocess.Popen[bytes]:
        home = self.base / str(i)
        home.mkdir(parents=True, exist_ok=True)
        data, log = self.data_dir(i), self.log_dir(i)
        data.mkdir(parents=True, exist_ok=True)
        log.mkdir(parents=True, exist_ok=True)
        lines = ["tickTime=2000", "initLimit=10", "syncLimit=5", f"dataDir={data}", f"dataLogDir={log}",
                 "clientPortAddress=127.0.0.1", f"clientPort={self.client_ports[i]}", *self.cfg]
        if self.n > 1:
            if not (data / "myid").exists():
                (data / "myid").write_text(f"{i}\n")
            lines += [f"server.{j}=127.0.0.1:{self.quorum_ports[j]}:{self.election_ports[j]}" for j in self.ids]
        (home / "zoo.cfg").write_text("\n".join(lines) + "\n")
        (home / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
            f"log4j.appender.F.File={home / 'zookeeper.log'}\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.F.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n")
        main = "org.apache.zookeeper.server.quorum.QuorumPeerMain" if self.n > 1 else \
            "org.apache.zookeeper.server.ZooKeeperServerMain"
        # a client JIT and the serial collector: three JVMs start sooner on two cores
        argv = ["java", "-Xms64m", f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                f"-Dlog4j.configuration=file:{home / 'log4j.properties'}", f"-Dzookeeper.log.dir={home}",
                *self.jvm, "-cp", JARS, main, str(home / "zoo.cfg")]
        with open(home / "stdout.log", "ab") as out:  # the child keeps its own descriptor
            return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def mode(self, i: int) -> str:
        """``leader``, ``follower``, ``standalone``, or ``""`` while it does not serve."""
        return mode("127.0.0.1", self.client_ports[i])

    def wait_serving(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        modes: dict[int, str] = {}
        while time.monotonic() < deadline:
            for i, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"ZooKeeper server {i} exited ({p.returncode}); see {self.base / str(i)}")
            modes = {i: self.mode(i) for i in self.ids}
            if self.n == 1 and modes[1] == "standalone":
                return
            roles = sorted(modes.values())
            if self.n > 1 and roles.count("leader") == 1 and roles.count("follower") == self.n - 1:
                return
            time.sleep(0.1)  # polling the servers' srvr answers, not waiting out a window
        raise TimeoutError(f"ZooKeeper not serving after {timeout} s: {modes}; see {self.base}")

    def leader(self) -> int:
        for i in self.ids:
            if self.mode(i) == "leader":
                return i
        raise RuntimeError(f"no ZooKeeper server leads: {[self.mode(i) for i in self.ids]}")

    def followers(self) -> list[int]:
        return [i for i in self.ids if self.mode(i) == "follower"]

    def stop(self, ids: Iterable[int] | None = None) -> None:
        """SIGTERM to each (all at once), SIGKILL to any still running after the grace."""
        procs = [self.procs.pop(i) for i in (self.ids if ids is None else ids) if i in self.procs]
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)

    def kill(self, i: int) -> None:
        """SIGKILL: a crash, nothing flushed that was not already."""
        p = self.procs.pop(i)
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)

    def __enter__(self) -> ZooKeeperEnsemble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------- clients

def connect(hosts: str, auth: Sequence[tuple[str, str]] = (), timeout: float = SESSION_TIMEOUT_S) -> KazooClient:
    """A started kazoo client; it reconnects within a second of a server coming
    back, so a session outlives a restart of the whole ensemble."""
    c = KazooClient(hosts=hosts, timeout=timeout, auth_data=list(auth) or None,
                    connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 1.0})
    c.start(timeout=CALL_TIMEOUT_S)
    return c


def close(c: KazooClient) -> None:
    c.stop()
    c.close()


def _get(ar: IAsyncResult) -> Any:
    return ar.get(timeout=CALL_TIMEOUT_S)


def raw_create(c: KazooClient, path: str, data: bytes = b"", mode: int = 0, ttl: int | None = None,
               acl: Sequence[tuple[int, str, str]] | None = None) -> str:
    """A create kazoo cannot send (createContainer, createTTL), through kazoo's
    connection with the semantics recorder's jute request; the path it made."""
    req: Raw = build_request(create(path, data, list(acl) if acl else None, mode=mode, ttl=ttl))
    ar = c.handler.async_result()
    c._call(req, ar)  # kazoo's own request queue: its public API has no TTL or container create
    return str(_get(ar)["path"])


# ---------------------------------------------------------------- the workload

@dataclass
class LiveSession:
    """A session the workload left open: its client, for the caller to close
    (or keep), and the ephemerals it owns."""
    session_id: int
    password: bytes
    ephemerals: list[str]
    client: KazooClient

    def reattach(self, timeout: float = CALL_TIMEOUT_S) -> None:
        """Wait until the client is connected again (after a restart) and
        check it is still the same session: it was not expired meanwhile."""
        up = threading.Event()

        def listener(state: str) -> None:
            if state == KazooState.CONNECTED:
                up.set()

        self.client.add_listener(listener)
        try:
            if not (self.client.connected or up.wait(timeout)):
                raise TimeoutError(f"session {self.session_id:#x} not reconnected after {timeout} s")
        finally:
            self.client.remove_listener(listener)
        now = self.client.client_id[0]
        if now != self.session_id:
            raise RuntimeError(f"session {self.session_id:#x} expired: the client reconnected as {now:#x}")


@dataclass
class WorkloadFacts:
    """What ``run_workload`` left in the tree, for the tests to check a read against."""
    # CREATE_MODES name -> paths created that way that still exist (sequential ones as made)
    modes: dict[str, list[str]] = field(default_factory=dict)
    # every path the workload wrote that still exists -> its data as last written (None: null)
    data: dict[str, bytes | None] = field(default_factory=dict)
    # paths that must not exist: deleted, ephemerals of closed sessions, the failed multi's create
    gone: list[str] = field(default_factory=list)
    live: list[LiveSession] = field(default_factory=list)
    closed_sessions: list[int] = field(default_factory=list)
    # label -> path: world, digest, digest_only, auth, ip, mixed, readonly, aversion
    acl: dict[str, str] = field(default_factory=dict)
    multi_committed: list[str] = field(default_factory=list)  # the paths the committed multi touched
    multi_failed: list[str] = field(default_factory=list)  # the paths the failed multi tried
    writes: int = 0  # write requests sent that committed or failed as txns (each a zxid)
    last_zxid: int = 0

    def close_live(self) -> None:
        for s in self.live:
            close(s.client)


def _bulk(kind: bytes, i: int) -> bytes:
    """32 to 128 bytes that differ per node and per write."""
    return hashlib.sha256(kind + i.to_bytes(4, "big")).digest() * (1 + i % 4)


class _Workload:
    """The writes of ``run_workload``, each recorded in ``facts`` as it commits."""

    def __init__(self, hosts: str, deadline_s: float) -> None:
        self.hosts = hosts
        self.deadline_s = deadline_s
        self.deadline = time.monotonic() + deadline_s
        self.facts = WorkloadFacts(modes={m: [] for m in CREATE_MODES})
        self.c = connect(hosts)
        self.alice = connect(hosts, [("digest", f"{ALICE[0]}:{ALICE[1]}")])
        self.bob = connect(hosts, [("digest", f"{BOB[0]}:{BOB[1]}")])

    def close(self) -> None:
        for x in (self.c, self.alice, self.bob):
            close(x)

    def phase(self, name: str) -> None:
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"workload over {self.deadline_s} s before {name}")

    def mk(self, path: str, data: bytes | None = b"", mode: str = "persistent", acl: list[ACL] | None = None,
           client: KazooClient | None = None) -> str:
        client = client or self.c
        made = str(_get(client.create_async(path, data, acl=acl, ephemeral=mode.startswith("ephemeral"),
                                            sequence=mode.endswith("sequential"))))
        self.facts.writes += 1
        self.facts.data[made] = data
        self.facts.modes[mode].append(made)
        return made

    def raw(self, path: str, data: bytes, mode: int, name: str, ttl: int | None = None) -> str:
        made = raw_create(self.c, path, data, mode, ttl)
        self.facts.writes += 1
        self.facts.data[made] = data
        self.facts.modes[name].append(made)
        return made

    def set(self, path: str, data: bytes | None, version: int = -1, client: KazooClient | None = None) -> None:
        _get((client or self.c).set_async(path, data, version))
        self.facts.writes += 1
        self.facts.data[path] = data

    def gone(self, path: str) -> None:
        """``path`` was deleted (by a delete, a multi or its session's close)."""
        self.facts.data.pop(path)
        for paths in self.facts.modes.values():
            if path in paths:
                paths.remove(path)
        self.facts.gone.append(path)

    def rm(self, path: str, version: int = -1) -> None:
        _get(self.c.delete_async(path, version))
        self.facts.writes += 1
        self.gone(path)

    # -- the phases, in order

    def create_modes(self) -> None:
        """Every create mode but the ephemerals (those belong to the sessions)."""
        m = f"{ROOT}/modes"
        self.mk(f"{m}/persistent", b"p")
        for _ in range(3):
            self.mk(f"{m}/pseq-", b"s", mode="persistent_sequential")
        self.raw(f"{m}/container", b"k", CONTAINER, "container")
        # a child keeps the container: an emptied one (cversion > 0) is the reaper's
        self.mk(f"{m}/container/child", b"c")
        self.raw(f"{m}/container-unused", b"", CONTAINER, "container")  # never had a child: kept
        self.raw(f"{m}/ttl", b"t", PTTL, "persistent_with_ttl", ttl=TTL_MS)
        self.mk(f"{m}/ttl/child", b"under a ttl node")
        for _ in range(2):
            self.raw(f"{m}/ttlseq-", b"ts", PSEQTTL, "persistent_sequential_with_ttl", ttl=TTL_MS)

    def data(self) -> None:
        """Null vs empty, binary, large, set to null or empty, many versions, a deep path."""
        d = f"{ROOT}/data"
        self.mk(f"{d}/null", None)
        self.mk(f"{d}/empty", b"")
        self.mk(f"{d}/binary", bytes(range(256)))
        self.mk(f"{d}/zeros", b"\0" * 33)
        self.mk(f"{d}/large", b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(8000)))
        for to in (None, b""):
            path = self.mk(f"{d}/set-{'null' if to is None else 'empty'}", b"was here")
            self.set(path, to)
        self.mk(f"{d}/unicode", "ünïcödé ✓".encode())
        self.mk(f"{d}/versions", b"v0")
        for v in range(6):
            self.set(f"{d}/versions", f"v{v + 1}".encode(), version=v)
        deep = self.mk(f"{d}/deep", b"")
        for part in "abcdefgh":  # one create each, no makepath
            deep = self.mk(f"{deep}/{part}", part.encode())

    def acls(self) -> None:
        """An ACL of each scheme, a node only alice (and super) can read, aversion moves."""
        a, acl = f"{ROOT}/acl", self.facts.acl
        alice_all = ACL(Permissions.ALL, Id("digest", digest_id(*ALICE)))
        anyone_read = ACL(Permissions.READ, Id("world", "anyone"))
        acl["world"] = self.mk(f"{a}/world", b"w", acl=list(OPEN_ACL_UNSAFE))
        acl["digest"] = self.mk(f"{a}/digest", b"d", acl=[alice_all, anyone_read])
        acl["digest_only"] = self.mk(f"{a}/digest-only", b"secret", acl=[alice_all])
        self.set(acl["digest_only"], b"alice's secret", client=self.alice)
        self.mk(f"{a}/digest-only/child", b"under a secret", acl=[alice_all], client=self.alice)
        # "auth" is stored as the creator's digest ids
        acl["auth"] = self.mk(f"{a}/auth", b"bob's", acl=[ACL(Permissions.ALL, Id("auth", ""))], client=self.bob)
        acl["ip"] = self.mk(f"{a}/ip", b"i", acl=[ACL(Permissions.ALL, Id("ip", "127.0.0.1"))])
        acl["mixed"] = self.mk(f"{a}/mixed", b"m", acl=[
            anyone_read, alice_all, ACL(Permissions.ADMIN | Permissions.WRITE, Id("ip", "127.0.0.1"))])
        acl["readonly"] = self.mk(f"{a}/readonly", b"r", acl=[anyone_read])
        moves = acl["aversion"] = self.mk(f"{a}/aversion", b"a")
        # the first setACL leaves ADMIN to alice alone: she makes the next two
        for av, (who, to) in enumerate(((self.c, [anyone_read, alice_all]), (self.alice, [alice_all, anyone_read]),
                                        (self.alice, list(OPEN_ACL_UNSAFE)))):
            _get(who.set_acls_async(moves, to, av))
            self.facts.writes += 1

    def multis(self) -> None:
        """One multi that commits (create, setData, delete, check), one that fails."""
        m = f"{ROOT}/multi"
        self.mk(f"{m}/target", b"before")
        self.mk(f"{m}/victim", b"doomed")
        self.mk(f"{m}/checked", b"checked")
        t = self.c.transaction()
        t.create(f"{m}/new", b"made in a multi")
        t.set_data(f"{m}/target", b"after", version=0)
        t.delete(f"{m}/victim")
        t.check(f"{m}/checked", 0)
        results = _get(t.commit_async())
        if any(isinstance(r, Exception) for r in results):
            raise RuntimeError(f"the multi that should commit failed: {results}")
        self.facts.writes += 1
        self.facts.data[f"{m}/new"] = b"made in a multi"
        self.facts.modes["persistent"].append(f"{m}/new")
        self.facts.data[f"{m}/target"] = b"after"
        self.gone(f"{m}/victim")
        self.facts.multi_committed = [f"{m}/new", f"{m}/target", f"{m}/victim", f"{m}/checked"]
        t = self.c.transaction()
        t.create(f"{m}/never", b"never")
        t.set_data(f"{m}/target", b"never")
        t.check(f"{m}/checked", 7)
        results = _get(t.commit_async())
        if not any(isinstance(r, Exception) for r in results):
            raise RuntimeError(f"the multi that should fail committed: {results}")
        self.facts.writes += 1  # ZooKeeper logs a failed multi as an error txn: it takes a zxid
        self.facts.gone.append(f"{m}/never")
        self.facts.multi_failed = [f"{m}/never", f"{m}/target", f"{m}/checked"]

    def deletes(self) -> None:
        """Sequential nodes with holes, a delete by version, a deleted subtree."""
        items = [self.mk(f"{ROOT}/seq/item-", str(i).encode(), mode="persistent_sequential") for i in range(9)]
        for p in items[::3]:
            self.rm(p)
        g = f"{ROOT}/gone"
        self.mk(f"{g}/a", b"a")
        self.mk(f"{g}/b", b"b")
        self.mk(f"{g}/b/c", b"c")
        self.set(f"{g}/a", b"a1")
        self.rm(f"{g}/a", version=1)
        self.rm(f"{g}/b/c")
        self.rm(f"{g}/b")

    def sessions(self) -> None:
        """Two sessions stay open with their ephemerals; two close, and theirs go."""
        live = f"{ROOT}/live"
        for k in range(2):
            s = connect(self.hosts)
            made = [self.mk(f"{live}/open{k}-eph", b"live" if k == 0 else None, mode="ephemeral", client=s)]
            made += [self.mk(f"{live}/open{k}-eseq-", mode="ephemeral_sequential", client=s) for _ in range(2)]
            sid, pw = s.client_id
            self.facts.live.append(LiveSession(sid, pw, made, s))
        for k in range(2):
            s = connect(self.hosts)
            made = [self.mk(f"{live}/closed{k}-eph", mode="ephemeral", client=s),
                    self.mk(f"{live}/closed{k}-eseq-", mode="ephemeral_sequential", client=s)]
            self.facts.closed_sessions.append(s.client_id[0])
            close(s)  # its closeSession has committed when close() returns: the ephemerals are gone
            for p in made:
                self.gone(p)

    def bulk(self, n: int) -> None:
        """``n`` nodes created, each set once, every fifth deleted: pipelined, 50 at a time."""
        names = [f"{ROOT}/bulk/n-{i:05d}" for i in range(n)]
        for lo in range(0, n, 50):
            self.phase("bulk")
            chunk = names[lo:lo + 50]
            for kind, version in ((b"c", None), (b"s", 0)):
                pending = [(p, _bulk(kind, i)) for i, p in enumerate(chunk, lo)]
                ars = [self.c.create_async(p, d) if version is None else self.c.set_async(p, d, version)
                       for p, d in pending]
                for (p, d), ar in zip(pending, ars, strict=True):
                    _get(ar)
                    self.facts.writes += 1
                    self.facts.data[p] = d
                    if version is None:
                        self.facts.modes["persistent"].append(p)
            dels = [(p, self.c.delete_async(p, 1)) for p in chunk[::5]]
            for p, ar in dels:
                _get(ar)
                self.facts.writes += 1
                self.gone(p)


def run_workload(hosts: str, bulk: int = 150, deadline_s: float = 120.0) -> WorkloadFacts:
    """Write the migration workload under /mig through kazoo (createContainer
    and createTTL as raw jute requests): every create mode, setData versions,
    deletes, setACL, a committed and a failed multi, null/empty/binary data,
    deep paths, an ACL of each scheme, live and closed sessions' ephemerals,
    and ``bulk`` nodes created, set and partly deleted (2.2 writes each) so
    that snapCount=50 rolls snapshots and logs several times (about 270 writes
    besides the bulk's). Each call waits at most CALL_TIMEOUT_S, the whole run
    ``deadline_s``. The live sessions' clients are the caller's to close
    (``WorkloadFacts.close_live``)."""
    w = _Workload(hosts, deadline_s)
    try:
        w.mk(ROOT, b"migration harness")
        for sub in ("modes", "data", "acl", "multi", "seq", "live", "gone", "bulk"):
            w.mk(f"{ROOT}/{sub}", None if sub == "data" else b"")  # a parent with null data too
        for phase in (w.create_modes, w.data, w.acls, w.multis, w.deletes, w.sessions):
            w.phase(phase.__name__)
            phase()
        w.bulk(bulk)
        _get(w.c.sync_async("/"))
        w.facts.last_zxid = int(w.c.last_zxid)
        return w.facts
    except BaseException:
        w.facts.close_live()
        raise
    finally:
        w.close()


# ---------------------------------------------------------------- reading and comparing

AclEntry = tuple[int, str, str]  # perms, scheme, id


@dataclass(frozen=True, slots=True)
class NodeView:
    data: bytes | None  # None: the node's data is null (length -1 on the wire), not b""
    stat: Stat
    acl: tuple[AclEntry, ...]  # in ZooKeeper's order


def read_tree(hosts: str, auth: tuple[str, str] | None = SUPER_AUTH, batch: int = 200) -> dict[str, NodeView]:
    """Every node from "/" down: data, Stat, ACL. Read as ``auth`` (super by
    default, which ZooKeeper lets read everything) after a sync, level by
    level with ``batch`` nodes' requests in flight; the tree must hold still."""
    c = connect(hosts, [auth] if auth else [])
    try:
        _get(c.sync_async("/"))
        out: dict[str, NodeView] = {}
        level = ["/"]
        while level:
            nxt: list[str] = []
            for lo in range(0, len(level), batch):
                reqs = [(p, c.get_async(p), c.get_children_async(p), c.get_acls_async(p))
                        for p in level[lo:lo + batch]]
                for p, g, k, a in reqs:
                    data, stat = _get(g)
                    acl, _ = _get(a)
                    out[p] = NodeView(data, Stat(*stat), tuple((e.perms, e.id.scheme, e.id.id) for e in acl))
                    nxt += [("" if p == "/" else p) + "/" + name for name in sorted(_get(k))]
            level = nxt
        return out
    finally:
        close(c)


def _show(field_name: str, v: object) -> str:
    if isinstance(v, bytes):
        return f"{v[:24]!r}{'...' if len(v) > 24 else ''} ({len(v)} B)"
    if v is None:
        return "null"
    if isinstance(v, int) and field_name in ("czxid", "mzxid", "pzxid", "ephemeralOwner"):
        return hex(v)
    return str(v)


def diff_trees(a: dict[str, NodeView], b: dict[str, NodeView],
               ignore: Iterable[str] = ("/zookeeper/config",)) -> list[str]:
    """One line per difference, ``path field: a != b`` (``path: only in a``);
    a path in ``ignore`` and everything under it are skipped."""
    skip = tuple(ignore)
    lines = []
    for path in sorted(a.keys() | b.keys()):
        if any(path == s or path.startswith(s.rstrip("/") + "/") for s in skip):
            continue
        if path not in b:
            lines.append(f"{path}: only in a")
            continue
        if path not in a:
            lines.append(f"{path}: only in b")
            continue
        va, vb = a[path], b[path]
        if va.data != vb.data:
            lines.append(f"{path} data: {_show('data', va.data)} != {_show('data', vb.data)}")
        for name, x, y in zip(Stat._fields, va.stat, vb.stat, strict=True):
            if x != y:
                lines.append(f"{path} {name}: {_show(name, x)} != {_show(name, y)}")
        if va.acl != vb.acl:
            lines.append(f"{path} acl: {list(va.acl)} != {list(vb.acl)}")
    return lines


def check_facts(tree: dict[str, NodeView], facts: WorkloadFacts) -> list[str]:
    """What the workload says it left against a read tree: one line per miss."""
    out = []
    for path, data in sorted(facts.data.items()):
        if path not in tree:
            out.append(f"{path}: missing")
        elif tree[path].data != data:
            out.append(f"{path} data: {_show('data', data)} written, {_show('data', tree[path].data)} read")
    out += [f"{path}: still there" for path in facts.gone if path in tree]
    for s in facts.live:
        for path in s.ephemerals:
            owner = tree[path].stat.ephemeralOwner if path in tree else None
            if owner != s.session_id:
                out.append(f"{path}: owner {owner!r}, not session {s.session_id:#x}")
    return out


# ---------------------------------------------------------------- snapshots

CONTAINER_OWNER = -(1 << 63)  # ZooKeeper's EphemeralType: Long.MIN_VALUE marks a container
TTL_TAG = 0xFF  # the top byte of a TTL node's owner; the low 56 bits hold the TTL in ms


def node_kind(owner: int) -> str:
    """What a persisted ``ephemeralOwner`` says a node is (extended types on):
    ``container``, ``ttl``, ``ephemeral`` or ``persistent``. A client's Stat
    cannot tell: ZooKeeper shows 0 for containers and TTL nodes."""
    if owner == CONTAINER_OWNER:
        return "container"
    if (owner & 0xFFFF_FFFF_FFFF_FFFF) >> 56 == TTL_TAG:
        return "ttl"
    return "persistent" if owner == 0 else "ephemeral"


@dataclass
class SnapshotView:
    owners: dict[str, int]  # path -> ephemeralOwner as persisted (signed 64 bits)
    sessions: dict[int, int]  # session id -> timeout in ms
    last_zxid: int


def read_snapshot(snapshot: Path, timeout: float = START_TIMEOUT_S) -> SnapshotView:
    """Read a ``snapshot.<zxid>`` with ZooKeeper's own ``SnapshotFormatter``:
    proof that ZooKeeper can load it, and the node types and sessions a
    client's reads do not show."""
    out = subprocess.run(["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", JARS,
                          "org.apache.zookeeper.server.SnapshotFormatter", str(snapshot)],
                         capture_output=True, text=True, timeout=timeout, check=False)
    if out.returncode != 0 or "Last zxid: " not in out.stdout:
        raise RuntimeError(f"SnapshotFormatter failed on {snapshot} ({out.returncode}): {out.stderr.strip()[-500:]}")
    owners: dict[str, int] = {}
    sessions: dict[int, int] = {}
    path, section, last = "", "nodes", 0
    for line in out.stdout.splitlines():
        if line.startswith("Session Details"):
            section = "sessions"
        elif line.startswith("Last zxid: "):
            last = int(line.split(": ", 1)[1], 16)
        elif section == "nodes" and line.startswith("/"):  # a path: ZooKeeper forbids control characters in one
            path = line
        elif section == "nodes" and line.startswith("  ephemeralOwner = "):
            owners[path] = int.from_bytes(int(line.split(" = ", 1)[1], 16).to_bytes(8, "big"), "big", signed=True)
        elif section == "sessions" and line.startswith("0x"):
            sid, timeout_ms, _count = line.split(", ")
            sessions[int(sid, 16)] = int(timeout_ms)
    return SnapshotView(owners, sessions, last)


# ---------------------------------------------------------------- backups

def backup_copy(data_dir: Path, dest: Path, data_log_dir: Path | None = None) -> Path:
    """Copy a live server's files as a file-level backup tool would: a plain
    copy, file by file, while it runs (so at no single instant). The logs of
    a separate ``data_log_dir`` land beside the snapshots, so ``dest`` is one
    ZooKeeper dataDir. A file that vanishes mid-copy is skipped. Returns ``dest``."""
    for src in (data_dir, data_log_dir):
        if src is None:
            continue
        for root, _dirs, files in os.walk(src):
            for name in sorted(files):
                f = Path(root) / name
                to = dest / f.relative_to(src)
                to.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileNotFoundError):
                    shutil.copy2(f, to)
    return dest


@contextlib.contextmanager
def ensemble(base: Path, n: int = 3, **kw: Any) -> Iterator[ZooKeeperEnsemble]:
    """A started ensemble, stopped (by PID) on the way out whatever happens."""
    zk = ZooKeeperEnsemble(base, n, **kw)
    try:
        zk.start()
        yield zk
    finally:
        zk.stop()

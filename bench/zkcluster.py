"""An Apache ZooKeeper ensemble for side-by-side benchmarks.

The servers are configured exactly as ``../shared/anchors/zookeeper/cluster.sh``
configures them (tickTime=2000, initLimit=10, syncLimit=5, forceSync=yes, the
Debian package's jars), but each server may listen on its own address, so an
ensemble can run on 127.0.0.1 (distinct ports) or one server per network
namespace (``zabd.nemesis.netlab``). Every process started here is stopped by
PID. Needs ``apt-get install zookeeper`` (the anchor's ``run.sh`` does it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

JARS = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
# (host, argv, stdout file) -> process; the default runs it here
Spawner = Callable[[int, list[str], Path], "subprocess.Popen[bytes]"]


def available() -> tuple[bool, str]:
    if not Path("/usr/share/java/zookeeper.jar").exists():
        return False, "ZooKeeper is not installed (apt-get install -y zookeeper)"
    if shutil.which("java") is None:
        return False, "no java on the PATH"
    return True, ""


def four_letter(host: str, port: int, cmd: str = "srvr", timeout: float = 1.0) -> str:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(cmd.encode())
            s.settimeout(timeout)
            chunks = []
            while True:
                data = s.recv(4096)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def mode(host: str, port: int) -> str:
    """``leader``, ``follower``, or ``""`` when the server does not serve."""
    for line in four_letter(host, port).splitlines():
        if line.startswith("Mode: "):
            return line[6:].strip()
    return ""


class ZkCluster:
    def __init__(
        self,
        n: int,
        base: Path,
        hosts: dict[int, str] | None = None,
        spawn: Spawner | None = None,
        heap: str = "512m",
        client_in_spec: bool = False,
    ) -> None:
        """``client_in_spec``: each ``server.N`` line carries its client
        address (``;host:port``), so that /zookeeper/config lists them all."""
        self.n = n
        self.client_in_spec = client_in_spec
        self.base = base
        self.hosts = hosts or {i: "127.0.0.1" for i in range(1, n + 1)}
        loopback = len(set(self.hosts.values())) == 1
        # one host for all: distinct ports as in cluster.sh; else the standard ports
        self.client_ports = {i: (21810 + i if loopback else 2181) for i in self.hosts}
        self.quorum_ports = {i: (22810 + i if loopback else 2888) for i in self.hosts}
        self.election_ports = {i: (23810 + i if loopback else 3888) for i in self.hosts}
        self.heap = heap
        self._spawn = spawn or _spawn_here
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def client_addr(self, i: int) -> str:
        return f"{self.hosts[i]}:{self.client_ports[i]}"

    def start(self, timeout: float = 90.0) -> int:
        """Start every server; wait until all serve with one leader; return its id."""
        shutil.rmtree(self.base, ignore_errors=True)
        servers = "".join(
            f"server.{i}={self.hosts[i]}:{self.quorum_ports[i]}:{self.election_ports[i]}"
            + (f":participant;{self.client_addr(i)}" if self.client_in_spec else "") + "\n"
            for i in self.hosts
        )
        for i in self.hosts:
            d = self.base / str(i)
            (d / "data").mkdir(parents=True)
            (d / "datalog").mkdir()
            (d / "data" / "myid").write_text(f"{i}\n")
            (d / "zoo.cfg").write_text(
                "tickTime=2000\ninitLimit=10\nsyncLimit=5\n"
                f"dataDir={d / 'data'}\ndataLogDir={d / 'datalog'}\n"
                f"clientPortAddress={self.hosts[i]}\nclientPort={self.client_ports[i]}\n"
                "forceSync=yes\nadmin.enableServer=false\n4lw.commands.whitelist=*\nautopurge.purgeInterval=0\n"
                + servers
            )
            (d / "log4j.properties").write_text(
                "log4j.rootLogger=INFO, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
                f"log4j.appender.F.File={d / 'zookeeper.log'}\n"
                "log4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
                "log4j.appender.F.layout.ConversionPattern=%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n\n"
            )
            argv = [
                "java",
                f"-Xms{self.heap}",
                f"-Xmx{self.heap}",
                f"-Dlog4j.configuration=file:{d / 'log4j.properties'}",
                f"-Dzookeeper.log.dir={d}",
                "-cp",
                JARS,
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(d / "zoo.cfg"),
            ]
            self.procs[i] = self._spawn(i, argv, d / "stdout.log")
        return self.wait_leader(list(self.hosts), timeout)

    def mode(self, i: int) -> str:
        return mode(self.hosts[i], self.client_ports[i])

    def wait_leader(self, nodes: list[int], timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        modes: dict[int, str] = {}
        while time.monotonic() < deadline:
            for i in nodes:
                if self.procs[i].poll() is not None:
                    raise RuntimeError(f"ZooKeeper server {i} exited; see {self.base / str(i) / 'stdout.log'}")
            modes = {i: self.mode(i) for i in nodes}
            leaders = [i for i, m in modes.items() if m == "leader"]
            if len(leaders) == 1 and all(m in ("leader", "follower") for m in modes.values()):
                return leaders[0]
            time.sleep(0.1)
        raise TimeoutError(f"ZooKeeper ensemble not serving after {timeout}s: {modes}")

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        self.procs.clear()


def _spawn_here(host: int, argv: list[str], out: Path) -> subprocess.Popen[bytes]:
    with open(out, "ab") as f:
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

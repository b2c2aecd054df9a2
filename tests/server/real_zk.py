"""A standalone Apache ZooKeeper (Debian's 3.8 package) beside zabd in one
test: ZooKeeper's behaviour is the specification, so the tests that can ask
it do. Each server gets its own free port, data directory and zoo.cfg lines
(``4lw.commands.whitelist``, ...), and is stopped by its PID."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bench.zkcluster import available
from zabd.client.spawn import free_ports

CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
START_TIMEOUT_S = 120.0  # a JVM's start on a busy 2-core box

needs_zookeeper = pytest.mark.skipif(not available()[0], reason=f"no ZooKeeper to compare with: {available()[1]}")


def four_letter(addr: str, word: bytes) -> bytes:
    """The bytes a server answers ``word`` with, until it closes the connection."""
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(word)
        out = b""
        while chunk := s.recv(4096):
            out += chunk
    return out


class StandaloneZooKeeper:
    def __init__(self, base: Path, cfg: Sequence[str] = (), jvm: Sequence[str] = ()) -> None:
        self.base = base
        self.port = free_ports(1)[0]
        self.cfg = list(cfg)  # zoo.cfg lines, e.g. "4lw.commands.whitelist=*"
        self.jvm = list(jvm)  # JVM flags, e.g. "-Dreadonlymode.enabled=true" (a system property, not a zoo.cfg key)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def spawn(self) -> None:
        d = self.base
        (d / "data").mkdir(parents=True)
        (d / "zoo.cfg").write_text("\n".join([
            "tickTime=2000", f"dataDir={d / 'data'}", "clientPortAddress=127.0.0.1", f"clientPort={self.port}",
            "admin.enableServer=false", "autopurge.purgeInterval=0", *self.cfg]) + "\n")
        (d / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n"
            f"log4j.appender.F.File={d / 'zookeeper.log'}\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.F.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n\n")
        argv = ["java", "-Xms64m", "-Xmx256m", f"-Dlog4j.configuration=file:{d / 'log4j.properties'}",
                f"-Dzookeeper.log.dir={d}", *self.jvm, "-cp", CLASSPATH,
                "org.apache.zookeeper.server.ZooKeeperServerMain", str(d / "zoo.cfg")]
        with open(d / "stdout.log", "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wait_serving(self) -> None:
        """Until ``srvr`` (always on in ZooKeeper) says it serves."""
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited ({self.proc.returncode}); see {self.base / 'stdout.log'}")
            with contextlib.suppress(OSError):
                if b"Mode: standalone" in four_letter(self.addr, b"srvr"):
                    return
            time.sleep(0.1)  # polling the server, not waiting out a time window
        raise TimeoutError(f"ZooKeeper not serving after {START_TIMEOUT_S} s; see {self.base}")

    def stop(self) -> None:
        p = self.proc
        if p is None or p.poll() is not None:
            return
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


@contextlib.contextmanager
def zookeepers(*servers: StandaloneZooKeeper) -> Iterator[None]:
    """Start them side by side (the JVMs' starts overlap), stop them all after."""
    try:
        for s in servers:
            s.spawn()
        for s in servers:
            s.wait_serving()
        yield
    finally:
        for s in servers:
            s.stop()

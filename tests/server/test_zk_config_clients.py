"""``/zookeeper/config`` as ZooKeeper's own code reads it: ZooKeeper's parser
(``QuorumPeerConfig.parseDynamicConfig``, a tiny Java program compiled here
against Debian's zookeeper.jar), zkCli's ``config -c`` beside a ZooKeeper 3.8
ensemble, and Curator 5.x (Debian's libcurator-*-java): its EnsembleTracker
follows a live 3 -> 5 -> 3 membership change, and LeaderLatch and
InterProcessMutex go on through a leader's SIGKILL, with no ERROR in its log."""

from __future__ import annotations

import asyncio
import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from bench.zkcluster import ZkCluster, available
from tests.kazoo_suite.zabd_cluster import SUPER_DIGEST
from zabd.client.spawn import LocalCluster

JAVA_SRC = Path(__file__).resolve().parents[1] / "java"
JARS = Path("/usr/share/java")
ZK_CP = [JARS / "zookeeper.jar", JARS / "slf4j-api.jar"]
CURATOR_CP = [JARS / f"curator-{m}.jar" for m in ("framework", "client", "recipes")] + [JARS / "guava.jar"]
ZKCLI = Path("/usr/share/zookeeper/bin/zkCli.sh")
CONFIG = "/zookeeper/config"

needs_java = pytest.mark.skipif(not all(p.exists() for p in ZK_CP) or not available()[0],
                                reason="needs javac and Debian's zookeeper package (bash scripts/install.sh)")
needs_curator = pytest.mark.skipif(not all(p.exists() for p in CURATOR_CP),
                                   reason="needs Debian's libcurator-*-java (bash scripts/install.sh installs them)")


def _cp(*parts: Path | str) -> str:
    return ":".join(str(p) for p in parts)


@pytest.fixture(scope="module")
def java_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test's Java programs, compiled once for the module."""
    build = tmp_path_factory.mktemp("java")
    sources = [JAVA_SRC / "ZkConfigParse.java"]
    classpath = list(ZK_CP)
    if all(p.exists() for p in CURATOR_CP):
        sources.append(JAVA_SRC / "CuratorProbe.java")
        classpath += CURATOR_CP
    subprocess.run(["javac", "-Xlint:all,-path", "-Werror", "-cp", _cp(*classpath), "-d", str(build),
                    *map(str, sources)], check=True, timeout=300)  # fmt: skip
    return build


@pytest.fixture
def cluster(cluster_factory: Callable[..., LocalCluster]) -> Iterator[LocalCluster]:
    """Nodes 1..3 the ensemble, 4 and 5 waiting to be added; a superuser for ZooKeeper's reconfig."""
    c = cluster_factory(5, members=3, extra={"zk_super_digest": SUPER_DIGEST})
    asyncio.run(c.wait_leader([1, 2, 3]))
    yield c


def kazoo(addr: str, superuser: bool = False) -> KazooClient:
    zk = KazooClient(hosts=addr, timeout=10, auth_data=[("digest", "super:test")] if superuser else None)
    zk.start(20)
    return zk


def zookeeper_parse(build: Path, text: bytes) -> dict[str, Any]:
    """What ZooKeeper's parser makes of ``text`` (asserting it takes it)."""
    out = subprocess.run(["java", "-cp", _cp(build, *ZK_CP, JARS / "slf4j-nop.jar"), "ZkConfigParse"], input=text,
                         capture_output=True, timeout=120)  # fmt: skip
    stdout = out.stdout.decode()
    assert out.returncode == 0, f"ZooKeeper's parser refused {text!r}: {stdout} {out.stderr.decode()[-2000:]}"
    parsed: dict[str, Any] = {"servers": {}, "clients": {}}
    for line in stdout.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "version":
            parsed["version"] = int(rest, 16)
        elif kind in ("server", "client"):
            node, _, value = rest.partition(" ")
            parsed[f"{kind}s"][int(node)] = value
        elif kind == "clientconfig":
            version, _, hosts = rest.partition(" ")
            parsed["clientconfig"] = (int(version, 16), set(hosts.split(",")))
    return parsed


def config_everywhere(cluster: LocalCluster, nodes: list[int]) -> tuple[bytes, dict[int, Any]]:
    """``/zookeeper/config`` through each node's ZooKeeper port (after a sync):
    the one text all hold, and each node's stat."""
    texts, stats = {}, {}
    for node in nodes:
        zk = kazoo(cluster.zk_addr(node))
        try:
            zk.sync(CONFIG)
            texts[node], stats[node] = zk.get(CONFIG)
        finally:
            zk.stop()
            zk.close()
    assert len(set(texts.values())) == 1, texts
    return texts[nodes[0]], stats


def member_lines(cluster: LocalCluster, roles: dict[int, str]) -> dict[int, str]:
    """Each member's line as ZooKeeper writes it back (``QuorumServer.toString``)."""
    return {i: f"127.0.0.1:{cluster.peer_ports[i]}:{cluster.election_ports[i]}:{role};{cluster.zk_addr(i)}"
            for i, role in roles.items()}


async def same_digest(cluster: LocalCluster, nodes: list[int]) -> None:
    """Replicas that applied the same zxid show the same tree digest, the config node's included."""
    deadline = time.monotonic() + 30
    seen: dict[int, Any] = {}
    while time.monotonic() < deadline:
        sts = await cluster.statuses(nodes)
        seen = {n: (st["zk"]["digest_zxid"], st["zk"]["digest"]) if st else None for n, st in sts.items()}
        if None not in seen.values() and len(set(seen.values())) == 1:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"digests differ: {seen}")


@needs_java
def test_zookeepers_parser_reads_zabds_config_before_and_after_reconfigs(
    cluster: LocalCluster, java_build: Path
) -> None:
    started_ms = int(time.time() * 1000)
    text, stats = config_everywhere(cluster, [1, 2, 3])
    parsed = zookeeper_parse(java_build, text)
    want = member_lines(cluster, dict.fromkeys((1, 2, 3), "participant"))
    assert parsed["servers"] == want and parsed["version"] == 0
    assert parsed["clients"] == {i: cluster.zk_addr(i) for i in (1, 2, 3)}
    assert parsed["clientconfig"] == (0, {cluster.zk_addr(i) for i in (1, 2, 3)})
    # ZooKeeper's stat for it: version and aversion -1; mtime each server's own (when it set the node)
    assert all(s.version == -1 and s.aversion == -1 and 0 < s.mtime <= started_ms for s in stats.values()), stats
    asyncio.run(same_digest(cluster, [1, 2, 3]))

    su = kazoo(cluster.zk_addr(3), superuser=True)
    try:
        # ZooKeeper's reconfig: a voter and an observer join (their specs carry their client
        # addresses), then node 1 leaves
        steps = [({"joining": f"server.4={cluster.spec(4, 'participant')}"}, {4: "participant"}),
                 ({"joining": f"server.5={cluster.spec(5, 'observer')}"}, {5: "observer"}),
                 ({"leaving": "1"}, {})]
        roles = dict.fromkeys((1, 2, 3), "participant")
        for request, added in steps:
            before_ms = int(time.time() * 1000)
            data, stat = su.reconfig(**{"joining": None, "leaving": None, "new_members": None, **request})
            roles |= added
            if "leaving" in request:
                del roles[int(request["leaving"])]
            parsed = zookeeper_parse(java_build, data)
            assert parsed["servers"] == member_lines(cluster, roles), (request, data)
            assert parsed["clients"] == {i: cluster.zk_addr(i) for i in roles}
            assert parsed["version"] == stat.mzxid > 0 and stat.mtime >= before_ms
            nodes = sorted(roles)
            text, stats = config_everywhere(cluster, nodes)
            assert text == data
            assert all(s.mzxid == stat.mzxid and s.mtime >= before_ms for s in stats.values()), stats
            asyncio.run(same_digest(cluster, nodes))
        assert b"server.1=" not in data and f";{cluster.zk_addr(1)}".encode() not in data
    finally:
        su.stop()
        su.close()


def zkcli(addr: str, *command: str) -> str:
    out = subprocess.run([str(ZKCLI), "-server", addr, *command], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)  # fmt: skip
    return out.stdout + out.stderr


def client_config_line(output: str) -> tuple[str, set[str]]:
    """zkCli ``config -c``'s answer: ``<version hex> host:port,...``."""
    lines = [ln for ln in output.splitlines() if re.fullmatch(r"[0-9a-f]+ \S+(,\S+)*", ln.strip())]
    assert len(lines) == 1, output
    version, hosts = lines[0].strip().split(" ")
    return version, set(hosts.split(","))


def config_and_stat(output: str) -> list[str]:
    """zkCli ``config -s``'s answer with the ports, the mtime and the length (of the ports' digits) left out."""
    lines = output.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("server."))
    return [re.sub(r"^(mtime|dataLength) = .*", r"\1 = _", re.sub(r":\d+", ":_", ln)) for ln in lines[start:]
            if ln.strip()]


@needs_java
@pytest.mark.skipif(not ZKCLI.exists(), reason="needs Debian's zookeeper package (zkCli.sh)")
def test_zkcli_config_prints_as_against_zookeeper(tmp_path: Path, cluster: LocalCluster) -> None:
    """``config -c`` prints the client addresses (what zkCli reconnects with), ``config -s``
    the same lines and stat as a ZooKeeper 3.8 ensemble whose specs carry client addresses."""
    zk = ZkCluster(3, tmp_path / "zookeeper", client_in_spec=True, heap="128m")
    try:
        zk.start()
        reference = [zkcli(zk.client_addr(1), "config", "-c"), zkcli(zk.client_addr(1), "config", "-s")]
    finally:
        zk.stop()
    ours = [zkcli(cluster.zk_addr(2), "config", "-c"), zkcli(cluster.zk_addr(2), "config", "-s")]
    assert client_config_line(reference[0]) == ("0", {zk.client_addr(i) for i in (1, 2, 3)}), reference[0]
    assert client_config_line(ours[0]) == ("0", {cluster.zk_addr(i) for i in (1, 2, 3)}), ours[0]
    assert "dataVersion = -1" in reference[1] and config_and_stat(ours[1]) == config_and_stat(reference[1])
    for out in (*reference, *ours):
        assert "Exception" not in out and "\tat " not in out, out


class Probe:
    """The CuratorProbe process: a command a line, an answer a line, each read with a deadline."""

    def __init__(self, build: Path, connect: str, log: Path) -> None:
        cp = _cp(build, *CURATOR_CP, *ZK_CP, JARS / "slf4j-simple.jar")
        self.log = log
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", f"-Dorg.slf4j.simpleLogger.logFile={log}",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=info", "-Dorg.slf4j.simpleLogger.showDateTime=true",
             "-cp", cp, "CuratorProbe", connect],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def answer(self, timeout: float = 120.0) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"CuratorProbe: no answer in {timeout} s; log: {self.log_text()[-3000:]}") from None

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@needs_java
@needs_curator
def test_curator_follows_a_membership_change_and_its_recipes_survive_a_leader_kill(
    tmp_path: Path, cluster: LocalCluster, java_build: Path
) -> None:
    zk_hosts = ",".join(cluster.zk_addr(i) for i in (1, 2, 3))
    probe = Probe(java_build, zk_hosts, tmp_path / "curator.log")
    try:
        assert probe.answer() == "ready", probe.log_text()[-3000:]
        assert probe.ask("leader").startswith("leader "), probe.log_text()[-3000:]
        assert probe.ask("acquire A 30") == "acquire A true"
        assert probe.ask("acquire B 1") == "acquire B false"  # one holder

        # 3 -> 5 -> 3 voters through ZooKeeper's reconfig, one voter a change; Curator's
        # EnsembleTracker rebuilds its connect string from each /zookeeper/config
        su = kazoo(cluster.zk_addr(3), superuser=True)
        try:
            for node in (4, 5):
                su.reconfig(joining=f"server.{node}={cluster.spec(node, 'participant')}", leaving=None,
                            new_members=None)
            five = [cluster.zk_addr(i) for i in (1, 2, 3, 4, 5)]
            got = probe.ask("conn " + ",".join(five))
            assert got.startswith("conn ok ") and got.endswith(",".join(five[3:])), got
            for node in (1, 2):
                su.reconfig(joining=None, leaving=str(node), new_members=None)
        finally:
            su.stop()
            su.close()
        three = [cluster.zk_addr(i) for i in (3, 4, 5)]
        got = probe.ask("conn " + ",".join(three))
        assert got == "conn ok " + ",".join(three), got

        # the leader of the new ensemble SIGKILLed: the latch has one leader again, the
        # mutex its one holder, which releases it to the other; then it is taken again
        leader = asyncio.run(cluster.wait_leader([3, 4, 5], timeout=30))
        cluster.kill(leader)
        asyncio.run(cluster.wait_leader([n for n in (3, 4, 5) if n != leader], timeout=30, exclude=leader))
        assert probe.ask("leader").startswith("leader "), probe.log_text()[-3000:]
        assert probe.ask("holds A") == "holds A true 1"
        assert probe.ask("acquire B 1") == "acquire B false"
        assert probe.ask("release A") == "release A"
        assert probe.ask("acquire B 30") == "acquire B true"
        assert probe.ask("release B") == "release B"
        assert probe.ask("acquire A 30") == "acquire A true"
        assert probe.ask("release A") == "release A"
        assert probe.ask("quit") == "bye"
    finally:
        probe.stop()
    log = probe.log_text()
    assert "New config event received" in log, log[-3000:]  # EnsembleTracker read every change
    errors = [ln for ln in log.splitlines() if " ERROR " in ln]
    assert not errors, "\n".join(errors[:20])

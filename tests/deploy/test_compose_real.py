"""The compose files brought up for real on a Docker engine.

Runs whenever a Docker engine answers (``docker info``) and a Compose is
installed (``.ci/run`` starts one with ../shared/tools/docker-engine.sh when
that script exists); skips with the reason otherwise. Each test uses its own
project name (``-p``), talks to the nodes only on 127.0.0.1, and removes its
containers, network and volumes (``down -v``) in a finally block, also on
failure. The image tag ``zabd:latest`` is kept (its build cache makes the
next run fast).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from kazoo.client import KazooClient

from zabd.client.client import Client, ZabdError
from zabd.client.compose import CLIENT_PORT, spec
from zabd.codec.client import NodeStatus

pytestmark = pytest.mark.docker
T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    3: ROOT / "docker-compose.yml",
    5: ROOT / "deploy/docker-compose.5.yml",
    7: ROOT / "deploy/docker-compose.7.yml",
}
HOST_BASE = 7000
HOST_ZK_BASE = 2180
UP_TIMEOUT = 600.0  # the first build installs the package in the image
WAIT_S = 90.0


def _compose_cmd() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return None


def _skip_reason(n: int) -> str | None:
    if shutil.which("docker") is None:
        return "no docker command (bash ../shared/tools/docker-engine.sh up installs and starts one)"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if info.returncode != 0:
        last = (info.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no Docker engine answers `docker info`: {last}"
    if _compose_cmd() is None:
        return "no docker-compose and no `docker compose`"
    for port in [*range(HOST_BASE + 1, HOST_BASE + n + 1), *range(HOST_ZK_BASE + 1, HOST_ZK_BASE + n + 1)]:
        with socket.socket() as s:
            # as docker-proxy binds: a connection of an earlier run in TIME_WAIT is no conflict
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError as exc:
                return (f"host port 127.0.0.1:{port} is busy ({exc.strerror}); the compose file publishes "
                        f"7001..700{n} and 2181..218{n}")
    return None


class Project:
    """One compose project: ``docker-compose -p NAME -f FILE ...``."""

    def __init__(self, n: int, file: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.n = n
        self.name = f"zabdtest{os.getpid()}n{n}{'tls' if file else ''}"
        compose = _compose_cmd()
        assert compose is not None
        self.base = [*compose, "-p", self.name, "-f", str(file or FILES[n])]
        self.env = {**os.environ, **(env or {})}
        self.servers = [f"127.0.0.1:{HOST_BASE + i}" for i in range(1, n + 1)]

    def run(self, *args: str, timeout: float = 120.0) -> str:
        r = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=timeout, env=self.env)
        assert r.returncode == 0, f"{' '.join(args)} failed ({r.returncode}): {r.stderr[-2000:]}"
        return r.stdout

    def container(self, node: int) -> str:
        cid = self.run("ps", "-q", f"zabd{node}").strip()
        assert cid, f"no container for zabd{node}"
        return cid

    def health(self, node: int) -> str:
        fmt = "{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}"
        r = subprocess.run(["docker", "inspect", "--format", fmt, self.container(node)], capture_output=True, text=True)
        return r.stdout.strip()


@contextlib.contextmanager
def project(n: int, file: Path | None = None, env: dict[str, str] | None = None) -> Iterator[Project]:
    reason = _skip_reason(n)
    if reason is not None:
        pytest.skip(reason)
    p = Project(n, file, env)
    try:
        p.run("up", "-d", "--build", timeout=UP_TIMEOUT)
        yield p
    finally:
        # everything this project created: containers, its network, its volumes
        subprocess.run([*p.base, "down", "-v", "-t", "5", "--remove-orphans"], capture_output=True, timeout=180,
                       env=p.env)


async def _status(addr: str) -> NodeStatus | None:
    try:
        async with await Client.connect(addr, timeout=2.0, read_retry=0) as c:
            return await c.status()
    except (ZabdError, OSError, TimeoutError):
        return None


async def _until(what: str, probe: Callable[[], Awaitable[T | None]], timeout: float = WAIT_S) -> T:
    """Poll ``probe`` until it returns a value (the event), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = await probe()
        if got is not None:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def _leader(p: Project, among: list[int], not_: int = 0) -> int:
    """The node every node in ``among`` follows (or is), once they agree."""

    async def probe() -> int | None:
        sts = [await _status(p.servers[i - 1]) for i in among]
        if any(st is None or st.phase != "broadcast" for st in sts):
            return None
        leaders = {st.leader for st in sts if st is not None}
        if len(leaders) != 1:
            return None
        leader = leaders.pop()
        return leader if leader not in (0, not_) else None

    return await _until(f"one leader among {among}", probe)


async def test_three_nodes_failover_catch_up_and_restart_keep_every_write() -> None:
    with project(3) as p:
        everyone = [1, 2, 3]
        leader = await _leader(p, everyone)
        # the healthcheck (admin port /health through python3 -c) turns healthy
        await _until("healthy containers", _all_healthy(p, everyone), timeout=120.0)
        acked: dict[str, bytes] = {}
        proposals: dict[int, bytes] = {}
        async with await Client.connect(p.servers, timeout=5.0) as c:
            for i in range(20):
                w = await c.put(f"k{i}", f"v{i}".encode(), retry_for=10)
                assert w.version == 1
                acked[f"k{i}"] = f"v{i}".encode()
            for i in range(5):
                proposals[await c.propose(f"raw{i}".encode(), retry_for=10)] = f"raw{i}".encode()

        subprocess.run(["docker", "kill", p.container(leader)], check=True, capture_output=True)
        others = [i for i in everyone if i != leader]
        new_leader = await _leader(p, others, not_=leader)
        async with await Client.connect([p.servers[i - 1] for i in others], timeout=5.0) as c:
            for i in range(20, 30):
                await c.put(f"k{i}", f"v{i}".encode(), retry_for=20)
                acked[f"k{i}"] = f"v{i}".encode()
            last = (await c.put("last", b"after-failover", retry_for=20)).zxid
            acked["last"] = b"after-failover"

        # `restart: unless-stopped` leaves a killed container down: start it by hand
        p.run("start", f"zabd{leader}")

        async def caught_up() -> int | None:
            st, lst = await _status(p.servers[leader - 1]), await _status(p.servers[new_leader - 1])
            if st is None or lst is None or st.phase != "broadcast":
                return None
            done = st.last_committed >= last and st.last_committed == lst.last_committed
            return st.last_committed if done else None

        assert await _until(f"zabd{leader} catching up to {last}", caught_up) >= last

        # down keeps the volumes: the disk logs bring every acknowledged write back
        p.run("down", "-t", "5")
        p.run("up", "-d", timeout=UP_TIMEOUT)
        await _leader(p, everyone)
        for node in everyone:
            async with await Client.connect(p.servers[node - 1], timeout=5.0) as c:
                await c.sync(retry_for=20)
                for key, value in acked.items():
                    g = await c.get(key)
                    assert g.value == value, f"zabd{node}: {key} = {g.value!r} after down + up, acknowledged {value!r}"
                log = {t.zxid: t.payload for t in await c.read_all(0)}
                for z, payload in proposals.items():
                    assert log.get(z) == payload, f"zabd{node}: proposal {z:#x} lost after down + up"


def _all_healthy(p: Project, nodes: list[int]) -> Callable[[], Awaitable[bool | None]]:
    async def probe() -> bool | None:
        return True if all(p.health(i) == "healthy" for i in nodes) else None

    return probe


@pytest.mark.parametrize("n", [5, 7])
async def test_bigger_cluster_elects_writes_and_reads(n: int) -> None:
    with project(n) as p:
        nodes = list(range(1, n + 1))
        await _leader(p, nodes)
        async with await Client.connect(p.servers[0], timeout=5.0) as c:
            w = await c.put("colour", b"blue", retry_for=20)
        async with await Client.connect(p.servers[-1], timeout=5.0) as c:
            assert await c.sync(retry_for=20) >= w.zxid
            g = await c.get("colour")
        assert (g.value, g.version) == (b"blue", 1)
        # ZooKeeper's port of every node, published as 127.0.0.1:2180+i: kazoo writes on one, reads on another
        zk_hosts = [f"127.0.0.1:{HOST_ZK_BASE + i}" for i in nodes]
        writer = KazooClient(hosts=zk_hosts[0])
        reader = KazooClient(hosts=zk_hosts[-1])
        writer.start(timeout=20)
        reader.start(timeout=20)
        try:
            writer.create("/colour", b"green")
            reader.sync("/colour")
            assert reader.get("/colour")[0] == b"green"
        finally:
            for zk in (writer, reader):
                zk.stop()
                zk.close()


async def test_the_tls_variant_elects_writes_and_refuses_plaintext(tmp_path: Path) -> None:
    """deploy/docker-compose.tls.yml with the certificates of ``zabd certs
    --owner 10001`` (the image's user): the nodes elect over mutual TLS, a
    client that trusts the CA writes and reads, a plaintext client gets nothing."""
    from zabd.certs import main as certs_main
    from zabd.tls import client_tls

    certs = tmp_path / "tls"
    assert certs_main(["--out", str(certs), "--nodes", "3", "--owner", "10001"]) == 0
    with project(3, ROOT / "deploy/docker-compose.tls.yml", {"ZABD_TLS_DIR": str(certs)}) as p:
        tls = client_tls(str(certs / "ca.pem"))

        async def leader() -> int | None:
            try:
                async with await Client.connect(p.servers[0], timeout=2.0, read_retry=0, tls=tls) as c:
                    st = await c.status()
            except (ZabdError, OSError, TimeoutError):
                return None
            return st.leader if st.phase == "broadcast" and st.leader else None

        await _until("a leader over TLS", leader)
        async with await Client.connect(p.servers[1], timeout=5.0, tls=tls) as c:
            w = await c.put("colour", b"blue", retry_for=20)
        async with await Client.connect(p.servers[2], timeout=5.0, tls=tls) as c:
            assert await c.sync(retry_for=20) >= w.zxid
            assert (await c.get("colour")).value == b"blue"
        with pytest.raises((ZabdError, OSError, TimeoutError)):
            async with await Client.connect(p.servers[0], timeout=2.0, read_retry=0) as c:
                await c.status()


async def test_the_three_node_cluster_grows_to_five_live() -> None:
    """deploy/docker-compose.grow5.yml in the running 3-node project: ``up -d``
    of the two new services, then one ``zabd reconfig --voters ...`` inside
    zabd1, and the five serve the writes made before and after."""
    reason = _skip_reason(5)
    if reason is not None:
        pytest.skip(reason)
    with project(3) as p:
        await _leader(p, [1, 2, 3])
        async with await Client.connect(p.servers[0], timeout=5.0) as c:
            await c.put("before", b"3 nodes", retry_for=20)
        grow = [*p.base[:-1], str(ROOT / "deploy/docker-compose.grow5.yml")]
        five = [f"127.0.0.1:{HOST_BASE + i}" for i in range(1, 6)]
        try:
            up = subprocess.run([*grow, "up", "-d", "--build", "zabd4", "zabd5"], capture_output=True, text=True,
                                timeout=UP_TIMEOUT, env=p.env)  # fmt: skip
            assert up.returncode == 0, up.stderr[-2000:]
            members = ",".join(f"zabd{i}:{CLIENT_PORT}" for i in (1, 2, 3))  # the leader takes it
            cmd = [*grow, "exec", "-T", "zabd1", "zabd", "reconfig", "--servers", members,
                   "--voters", f"1,2,3,4={spec(4)},5={spec(5)}"]  # fmt: skip
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=p.env)
            assert out.returncode == 0, out.stderr[-2000:]

            async def five_voters() -> bool | None:
                sts = [await _status(addr) for addr in five]
                ok = all(st is not None and st.model_dump().get("membership", {}).get("voters") == [1, 2, 3, 4, 5]
                         and st.phase == "broadcast" for st in sts)  # fmt: skip
                return True if ok else None

            await _until("five voters on every node", five_voters)
            async with await Client.connect(five[0], timeout=5.0) as c:
                await c.put("after", b"5 nodes", retry_for=20)
            async with await Client.connect(five[4], timeout=5.0) as c:
                await c.sync(retry_for=20)
                assert ((await c.get("before")).value, (await c.get("after")).value) == (b"3 nodes", b"5 nodes")
        finally:
            subprocess.run([*grow, "down", "-v", "-t", "5", "--remove-orphans"], capture_output=True, timeout=180,
                           env=p.env)  # fmt: skip

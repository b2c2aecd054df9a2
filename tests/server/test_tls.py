"""TLS on both ports, peer identity and client authentication, with real
TLS on 127.0.0.1 between real server processes: what is refused is refused,
logged with the address and the reason, and no server goes down for it."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from zabd.certs import make_cert, make_cluster
from zabd.client import Client
from zabd.client.client import ZabdError
from zabd.client.spawn import LocalCluster
from zabd.codec.framing import frame
from zabd.server import peer_wire as wire
from zabd.tls import client_tls, node_name

RW, RO = "rw-token-0123456789", "ro-token-0123456789"


async def wait_log(cluster: LocalCluster, node: int, *parts: str, timeout: float = 15.0) -> str:
    """The first line of the node's log holding every one of ``parts``, once it is written."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        for line in cluster.log_text(node).splitlines():
            if all(p in line for p in parts):
                return line
        if loop.time() > deadline:
            raise AssertionError(f"node {node} never logged {parts!r}; log:\n{cluster.log_text(node)[-3000:]}")
        await asyncio.sleep(0.05)


async def wait_links(cluster: LocalCluster, n: int, timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        sts = await cluster.statuses()
        if all(st and len(st["peers_connected"]) == n for st in sts.values()):
            return
        assert loop.time() < deadline, f"peer links not all up: {sts}"
        await asyncio.sleep(0.05)


def assert_healthy(cluster: LocalCluster, nodes: list[int]) -> None:
    for i in nodes:
        assert cluster.alive(i), f"node {i} exited: {cluster.log_text(i)[-2000:]}"
        assert "Traceback" not in cluster.log_text(i), cluster.log_text(i)[-3000:]


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def clusters() -> Iterator[list[LocalCluster]]:
    made: list[LocalCluster] = []
    try:
        yield made
    finally:
        for c in made:
            c.stop()


async def _closed_by_server(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    got = b""
    try:
        async with asyncio.timeout(10):
            while chunk := await reader.read(65536):
                got += chunk
    except ConnectionResetError:
        pass
    writer.close()
    return got


async def test_tls_cluster_commits_and_refuses_what_it_must(base: Path, clusters: list[LocalCluster]) -> None:
    c = LocalCluster(3, base_dir=base / "c", tls=True, client_certs="required")
    clusters.append(c)
    c.start()
    await c.wait_leader(timeout=30)
    assert c.tls_dir is not None
    good = c.client_tls()
    async with await Client.connect(c.servers, tls=good) as client:
        w = await client.put("k", b"over tls")
        assert (await client.propose(b"raw")) > w.zxid
    for i in (1, 2, 3):  # every node has it, each read over its own TLS port
        async with await Client.connect(c.client_addr(i), tls=good) as client:
            await client.sync()
            assert (await client.get("k")).value == b"over tls"
    # every peer link comes up (each one a mutual-TLS link)
    await wait_links(c, 2)

    # a client without a certificate: the handshake is refused, the client told, the server logs it
    with pytest.raises(ZabdError) as no_cert:
        anonymous = client_tls(str(c.tls_dir / "ca.pem"))
        async with await Client.connect(c.client_addr(1), tls=anonymous, read_retry=0) as cl:
            await cl.status()
    assert "certificate" in str(no_cert.value)
    line = await wait_log(c, 1, "client connection refused: TLS handshake failed", "did not return a certificate")
    assert '"addr": "127.0.0.1:' in line

    # a client certificate of another CA
    other = base / "other-ca"
    make_cluster(other, 1)
    foreign = client_tls(str(c.tls_dir / "ca.pem"), str(other / "client1.pem"), str(other / "client1.key"))
    with pytest.raises(ZabdError):
        async with await Client.connect(c.client_addr(2), tls=foreign, read_retry=0) as cl:
            await cl.status()
    await wait_log(c, 2, "client connection refused: TLS handshake failed", "certificate verify failed")

    # a client that does not trust the servers' CA refuses them itself: a 'tls' error, not 'unreachable'
    with pytest.raises(ZabdError) as distrust:
        await Client.connect(c.servers, tls=client_tls(str(other / "ca.pem")), read_retry=0)
    assert distrust.value.code == "tls" and not distrust.value.retryable

    # plaintext to the TLS client port: the library's request, refused, and the client told what it likely means
    with pytest.raises(ZabdError) as plain:
        async with await Client.connect(c.client_addr(3), read_retry=0, timeout=5) as cl:
            await cl.status()
    assert "does the server run TLS? then give --ca" in str(plain.value)
    await wait_log(c, 3, "client connection refused: TLS handshake failed", "not a TLS handshake")

    # ZooKeeper's port is TLS too (its secureClientPort): kazoo with client1's certificate gets in, plaintext does not
    d = c.tls_dir
    assert d is not None
    zk = KazooClient(hosts=c.zk_addr(1), use_ssl=True, ca=str(d / "ca.pem"), certfile=str(d / "client1.pem"),
                     keyfile=str(d / "client1.key"))
    zk.start(timeout=15)
    try:
        zk.create("/over-tls", b"zk")
        assert zk.get("/over-tls")[0] == b"zk"
    finally:
        zk.stop()
        zk.close()
    plain_zk = KazooClient(hosts=c.zk_addr(2), connection_retry={"max_tries": 1})
    with pytest.raises(KazooTimeoutError):
        plain_zk.start(timeout=2)
    plain_zk.stop()
    plain_zk.close()
    await wait_log(c, 2, "zookeeper connection refused: TLS handshake failed", "not a TLS handshake")

    # plaintext to the TLS peer port: a real Hello, refused before any frame is read
    assert await _closed_by_server(c.peer_ports[3], frame((wire.TAG_HELLO, wire.WIRE_VERSION, 1))) == b""
    line = await wait_log(c, 3, "peer connection refused: TLS handshake failed", "not a TLS handshake")
    assert '"addr": "127.0.0.1:' in line

    # nothing of this hurt anyone: all up, and the cluster still commits
    assert_healthy(c, [1, 2, 3])
    async with await Client.connect(c.servers, tls=good) as client:
        await client.put("k", b"still")
    assert await c.wait_caught_up([1, 2, 3]) > 0


def _rogue(cluster: LocalCluster, node: int, cert: Path, key: Path) -> None:
    """Node ``node`` presents ``cert`` (it still trusts the cluster's CA)."""
    path = cluster.config_path(node)
    text = re.sub(r'tls_cert = ".*"', f'tls_cert = "{cert}"', path.read_text())
    path.write_text(re.sub(r'tls_key = ".*"', f'tls_key = "{key}"', text))


def _start(cluster: LocalCluster) -> None:
    for i in range(1, cluster.n + 1):
        cluster.start_node(i)


async def test_node_with_a_certificate_of_another_ca_is_refused(base: Path, clusters: list[LocalCluster]) -> None:
    # node 2 is the rogue: node 1 dials it (the dialer's check) and it dials node 3 (the acceptor's check)
    c = LocalCluster(3, base_dir=base / "c", tls=True)
    clusters.append(c)
    c.write_configs()
    other = base / "other-ca"
    make_cluster(other, 3)
    _rogue(c, 2, other / "node2.pem", other / "node2.key")
    _start(c)
    leader = await c.wait_leader(nodes=[1, 3], timeout=30)
    assert leader in (1, 3)
    line = await wait_log(c, 1, "peer refused: TLS handshake failed", "certificate verify failed")
    assert '"peer": 2' in line and f'"addr": "127.0.0.1:{c.peer_ports[2]}"' in line
    line = await wait_log(c, 3, "peer connection refused: TLS handshake failed", "certificate verify failed")
    assert '"addr": "127.0.0.1:' in line
    # the rogue is up, alone (its client port trusts the cluster's client certificates)
    d = c.tls_dir
    assert d is not None
    rogue_ca = client_tls(str(other / "ca.pem"), str(d / "client1.pem"), str(d / "client1.key"))
    async with await Client.connect(c.client_addr(2), tls=rogue_ca, read_retry=0) as cl:
        assert (await cl.status()).peers_connected == []
    assert_healthy(c, [1, 2, 3])


async def test_node_claiming_another_nodes_id_is_refused(base: Path, clusters: list[LocalCluster]) -> None:
    # node 2 holds a good certificate of the cluster's CA, but one made for node 4
    c = LocalCluster(3, base_dir=base / "c", tls=True)
    clusters.append(c)
    c.write_configs()
    assert c.tls_dir is not None
    ca = x509.load_pem_x509_certificate((c.tls_dir / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((c.tls_dir / "ca.key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    make_cert(c.tls_dir, "node4", node_name(4), [node_name(4), "localhost", "127.0.0.1"], ca, ca_key)
    _rogue(c, 2, c.tls_dir / "node4.pem", c.tls_dir / "node4.key")
    _start(c)
    await c.wait_leader(nodes=[1, 3], timeout=30)
    # node 3 accepts its TLS (same CA) but not its Hello as node 2
    line = await wait_log(c, 3, "peer connection refused: wrong identity")
    assert "claims node 2" in line and node_name(4) in line and '"addr": "127.0.0.1:' in line
    # node 1 dials node 2 and finds a certificate that does not name zabd-node-2
    line = await wait_log(c, 1, "peer refused: TLS handshake failed")
    assert '"peer": 2' in line and ("hostname mismatch" in line.lower() or "certificate verify failed" in line)
    # node 2 keeps redialing node 3, whose TLS lets it in before its Hello is refused: a
    # status can catch that moment, so wait for one that shows no link (never a lasting one)
    deadline = time.monotonic() + 10
    while True:
        st = await c.status(2)
        assert st is not None
        if st["peers_connected"] == []:
            break
        assert time.monotonic() < deadline, f"node 2 stays connected to {st['peers_connected']}"
        await asyncio.sleep(0.05)
    assert_healthy(c, [1, 2, 3])


async def test_tokens_read_write_read_only_and_wrong(base: Path, clusters: list[LocalCluster]) -> None:
    c = LocalCluster(1, base_dir=base / "c", tls=True, client_certs="none", tokens={RW: "rw", RO: "ro"})
    clusters.append(c)
    c.start()
    await c.wait_leader(timeout=30)
    assert c.tls_dir is not None
    server_only = client_tls(str(c.tls_dir / "ca.pem"))
    async with await Client.connect(c.servers, tls=server_only, token=RW) as rw:
        await rw.put("a", b"1")

    async with await Client.connect(c.servers, tls=server_only, token=RO) as ro:
        assert (await ro.get("a")).value == b"1"
        with pytest.raises(ZabdError) as forbidden:
            await ro.put("a", b"2")
        assert forbidden.value.code == "forbidden" and forbidden.value.applied is False
        assert (await ro.get("a")).value == b"1"  # the connection serves on

    with pytest.raises(ZabdError) as wrong:
        await Client.connect(c.servers, tls=server_only, token="not-a-token-at-all")
    assert wrong.value.code == "unauthorized" and not wrong.value.retryable
    await wait_log(c, 1, "client authentication failed")

    with pytest.raises(ZabdError) as none:
        async with await Client.connect(c.servers, tls=server_only, read_retry=0) as anon:
            await anon.status()
    assert none.value.code == "unauthorized"
    line = await wait_log(c, 1, "unauthenticated client request refused")
    assert '"addr": "127.0.0.1:' in line
    assert_healthy(c, [1])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zabd", *args], capture_output=True, text=True, timeout=60)


async def test_cli_with_tls_and_a_token(base: Path, clusters: list[LocalCluster]) -> None:
    c = LocalCluster(1, base_dir=base / "c", tls=True, client_certs="required", tokens={RW: "rw", RO: "ro"})
    clusters.append(c)
    c.start()
    await c.wait_leader(timeout=30)
    d = c.tls_dir
    assert d is not None
    flags = ["--servers", c.servers[0], "--ca", str(d / "ca.pem"), "--cert", str(d / "client1.pem"),
             "--key", str(d / "client1.key")]
    put = await asyncio.to_thread(_cli, "kv", "put", "x", "y", *flags, "--token", RW)
    assert put.returncode == 0, put.stderr
    got = await asyncio.to_thread(_cli, "kv", "get", "x", *flags, "--token", RO)
    assert got.returncode == 0 and got.stdout.strip() == "y", got.stderr
    denied = await asyncio.to_thread(_cli, "kv", "put", "x", "z", *flags, "--token", RO)
    assert denied.returncode == 1 and "forbidden" in denied.stderr and "Traceback" not in denied.stderr
    status = await asyncio.to_thread(_cli, "status", *flags, "--token", RW)
    assert status.returncode == 0 and "leading" in status.stdout, status.stderr
    missing = await asyncio.to_thread(_cli, "status", "--servers", c.servers[0], "--ca", str(base / "nope.pem"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "--ca" in missing.stderr


def test_tls_config_errors_are_one_line(base: Path) -> None:
    make_cluster(base / "tls", 1)
    bad = base / "bad.pem"
    bad.write_text("not a certificate\n")
    common = 'id = 1\nclient = "127.0.0.1:1"\n[peers]\n1 = "127.0.0.1:2"\n'
    cases = {
        "tls_ca": "tls_peer = true\n",
        "tls_cert": f'tls_peer = true\ntls_ca = "{base / "tls/ca.pem"}"\ntls_cert = "{bad}"\n'
        f'tls_key = "{base / "tls/node1.key"}"\n',
        "tls_client_certs": 'tls_client_certs = "required"\n',
        "auth_tokens_file": f'auth_tokens_file = "{bad}"\n',
    }
    for field, extra in cases.items():
        path = base / "node.toml"
        path.write_text(extra + f'data_dir = "{base / "data"}"\n' + common)
        out = _cli("serve", "--config", str(path))
        assert out.returncode == 2, (field, out.stderr)
        assert out.stderr.count("\n") == 1 and field in out.stderr and "Traceback" not in out.stderr, out.stderr

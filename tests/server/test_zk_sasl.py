"""SASL DIGEST-MD5 on ZooKeeper's port: kazoo (``sasl_options``) and bare
jute sockets against real ``zabd serve`` processes, and the same scripts
against Debian's ZooKeeper 3.8.0 started with the same JAAS file, which
must come out the same.

The JAAS file is kazoo's test harness's (``user_super``, ``user_jaasuser``)
plus ``admin``, the superuser (zabd's ``zk_sasl_super_user``, ZooKeeper's
``-Dzookeeper.superUser``). One difference is left out of the comparison on
purpose: ZooKeeper 3.8 lets an unknown user in with the password of the last
user who authenticated (ZOOKEEPER-4839, fixed after 3.8); zabd refuses it
(``test_an_unknown_user_never_gets_in``).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, NoAuthError
from kazoo.protocol.states import KazooState
from kazoo.security import CREATOR_ALL_ACL, make_acl, make_digest_acl
from puresasl.client import SASLClient

from tests.server.real_zk import StandaloneZooKeeper, needs_zookeeper, zookeepers
from tests.server.zk_driver import JuteSocket
from zabd.client.spawn import LocalCluster
from zabd.zk import jute
from zabd.zk.errors import Code
from zabd.zk.records import Sasl, WhoAmI, WhoAmIResult
from zabd.zk.sasl import parse_directives, response_value

Factory = Callable[..., LocalCluster]
JAAS = """Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_super="super_secret"
    user_admin="admin_secret"
    user_jaasuser="jaas_password";
};
"""
DIGEST_USER = ("digestuser", "digest_pw")


@pytest.fixture
def jaas(tmp_path: Path) -> Path:
    path = tmp_path / "jaas.conf"
    path.write_text(JAAS)
    return path


def zabd_node(cluster_factory: Factory, jaas: Path | None) -> str:
    extra: dict[str, Any] = {"zk_tick_ms": 2000}
    if jaas is not None:
        extra |= {"zk_sasl_jaas": str(jaas), "zk_sasl_super_user": "admin"}
    cluster = cluster_factory(1, extra=extra)
    asyncio.run(cluster.wait_leader())
    return cluster.zk_addr(1)


def real_zookeeper(tmp_path: Path, jaas: Path) -> StandaloneZooKeeper:
    return StandaloneZooKeeper(
        tmp_path / "zk", cfg=["authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"],
        jvm=[f"-Djava.security.auth.login.config={jaas}", "-Dzookeeper.superUser=admin"])


# ------------------------------------------------------------ through kazoo


@contextlib.contextmanager
def started(addr: str, user: str | None = None, password: str = "",
            auth: tuple[str, str] | None = None) -> Iterator[KazooClient]:
    sasl = None if user is None else {"mechanism": "DIGEST-MD5", "username": user, "password": password}
    zk = KazooClient(hosts=addr, timeout=15, connection_retry={"max_tries": 1}, sasl_options=sasl,
                     auth_data=None if auth is None else [("digest", f"{auth[0]}:{auth[1]}")])
    zk.start(timeout=15)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def reads(zk: KazooClient, path: str) -> str:
    try:
        zk.get(path)
    except NoAuthError:
        return "NoAuth"
    return "read"


def kazoo_script(addr: str) -> dict[str, Any]:
    """What kazoo sees: ACLs by SASL id, who may read what, a wrong password."""
    out: dict[str, Any] = {}
    with started(addr, "jaasuser", "jaas_password") as zk:
        zk.create("/sasl-only", b"s", acl=[make_acl("sasl", "jaasuser", all=True)])
        zk.create("/creator", b"c", acl=CREATOR_ALL_ACL)  # "auth" expands to the SASL id
        out["creator acl"] = [(a.perms, a.id.scheme, a.id.id) for a in zk.get_acls("/creator")[0]]
        out["jaasuser reads"] = reads(zk, "/sasl-only")
    with started(addr, auth=DIGEST_USER) as zk:
        zk.create("/digest-only", b"d", acl=[make_digest_acl(*DIGEST_USER, all=True)])
        out["anonymous reads"] = reads(zk, "/sasl-only")
    with started(addr, "super", "super_secret") as zk:
        # the SASL user "super" matches every sasl entry, and nothing else
        out["sasl super reads"] = [reads(zk, "/sasl-only"), reads(zk, "/creator"), reads(zk, "/digest-only")]
    with started(addr, "admin", "admin_secret") as zk:
        # the superuser (zookeeper.superUser / zk_sasl_super_user) passes every ACL
        out["admin reads"] = [reads(zk, "/sasl-only"), reads(zk, "/digest-only")]
        zk.delete("/sasl-only")
        zk.delete("/creator")
        zk.delete("/digest-only")
    for user, password in (("jaasuser", "wrong"), ("nobody", "nope")):
        zk = KazooClient(hosts=addr, timeout=15, connection_retry={"max_tries": 1},
                         sasl_options={"mechanism": "DIGEST-MD5", "username": user, "password": password})
        try:
            out[f"{user} start"] = first_request(zk)
            out[f"{user} state"] = zk.state  # LOST: kazoo gives up, as on an expired session
        finally:
            zk.stop()
            zk.close()
    return out


def first_request(zk: KazooClient) -> str:
    """Whether a client gets its first request through. kazoo says CONNECTED
    before its SASL exchange, so ``start()`` may return before the exchange
    fails; a request waits for the exchange and fails with AuthFailedError."""
    changed = threading.Event()
    zk.add_listener(lambda state: changed.set())
    zk.start_async()
    assert changed.wait(15), "no state change within 15 s"
    try:
        zk.exists("/")
    except AuthFailedError:
        return "AuthFailedError"
    return "started"


EXPECTED_KAZOO = {
    "creator acl": [(31, "sasl", "jaasuser")],
    "jaasuser reads": "read",
    "anonymous reads": "NoAuth",
    "sasl super reads": ["read", "read", "NoAuth"],
    "admin reads": ["read", "read"],
    "jaasuser start": "AuthFailedError",
    "jaasuser state": KazooState.LOST,
    "nobody start": "AuthFailedError",
    "nobody state": KazooState.LOST,
}


def test_kazoo_against_zabd(cluster_factory: Factory, jaas: Path) -> None:
    assert kazoo_script(zabd_node(cluster_factory, jaas)) == EXPECTED_KAZOO


@needs_zookeeper
def test_kazoo_sees_the_same_on_zookeeper(tmp_path: Path, cluster_factory: Factory, jaas: Path) -> None:
    zk = real_zookeeper(tmp_path, jaas)
    with zookeepers(zk):
        theirs = kazoo_script(zk.addr)
    assert theirs == EXPECTED_KAZOO
    assert kazoo_script(zabd_node(cluster_factory, jaas)) == theirs


# ---------------------------------------------------- bare jute: what a client can send


class Raw(JuteSocket):
    """A jute connection with a session, one SASL token at a time."""

    def __init__(self, addr: str, session: int = 0, password: bytes = b"") -> None:
        super().__init__(addr)
        self.sock.sendall(jute.encode_connect(jute.ConnectRequest(0, 0, 10_000, session, password, False)))
        _, timeout, self.session, self.password, _ = jute.decode_connect_response(self.next_body())
        assert timeout > 0

    def sasl(self, xid: int, token: bytes | None) -> tuple[str, Any]:
        """("ok", token) or (error code, raw reply) or ("closed", None)."""
        self.sock.sendall(jute.encode_request(xid, jute.OP_SASL, Sasl(token)))
        try:
            body = self.next_body()
        except AssertionError:
            return "closed", None
        rxid, _, err, result = jute.decode_reply(body, jute.OP_SASL)
        assert rxid == xid
        if err:
            return Code(err).name, body
        return "ok", getattr(result, "token", None)

    def whoami(self, xid: int) -> list[tuple[str, str]]:
        self.sock.sendall(jute.encode_request(xid, jute.OP_WHO_AM_I, WhoAmI()))
        result = jute.decode_reply(self.next_body(), jute.OP_WHO_AM_I)[3]
        assert isinstance(result, WhoAmIResult)
        return sorted(result.ids)


def answer(challenge: bytes, user: str, password: str, *, authzid: bytes | None = None) -> bytes:
    nonce = parse_directives(challenge)["nonce"]
    uri = b"zookeeper/zk-sasl-md5"
    value = response_value(user, "zk-sasl-md5", password, nonce, b"cn", authzid, uri, client=True)
    token = (b'username="' + user.encode() + b'",realm="zk-sasl-md5",nonce="' + nonce + b'",cnonce="cn",'
             b'nc=00000001,qop=auth,digest-uri="' + uri + b'",response=' + value)
    return token + (b',authzid="' + authzid + b'"' if authzid else b"")


def closed(raw: Raw) -> bool:
    with contextlib.suppress(OSError):
        return raw.closed_by_server()
    return True


def hostile_script(addr: str) -> dict[str, Any]:
    """What a client that does not play by the rules gets (nonces and rspauth left out)."""
    out: dict[str, Any] = {}

    def fresh() -> tuple[Raw, bytes]:
        raw = Raw(addr)
        kind, challenge = raw.sasl(1, b"")
        assert kind == "ok" and challenge.startswith(b'realm="zk-sasl-md5",nonce="')
        return raw, challenge

    raw, challenge = fresh()
    first = answer(challenge, "jaasuser", "jaas_password", authzid=b"super")
    kind, rspauth = raw.sasl(2, first)
    out["authzid super"] = [kind, rspauth[:8], raw.whoami(3)]  # the authenticated user, not the one asked for
    out["a token after the exchange"] = [raw.sasl(4, b"")[0], closed(raw)]
    raw.close()

    raw = Raw(addr)
    out["the response of another connection (a replay)"] = [raw.sasl(1, b"")[0], raw.sasl(2, first)[0], closed(raw)]
    raw.close()

    raw, challenge = fresh()
    kind, body = raw.sasl(2, answer(challenge, "jaasuser", "wrong"))
    out["wrong password"] = [kind, body, closed(raw)]  # ZooKeeper's answer byte for byte, then the close
    raw.close()
    again = Raw(addr, raw.session, raw.password)  # only the connection was closed: the session lives on
    out["the session after a failure"] = [again.session == raw.session, again.whoami(1)]
    again.close()

    raw, _ = fresh()
    out["two first tokens"] = [raw.sasl(2, b"")[0], closed(raw)]
    raw.close()

    raw = Raw(addr)
    out["an initial token of 4096 bytes"] = raw.sasl(1, b"a" * 4096)[0]  # ignored, as Java ignores it
    out["a response of 4097 bytes"] = [raw.sasl(2, b"a" * 4097)[0], closed(raw)]
    raw.close()

    raw = Raw(addr)
    out["a null token"] = [raw.sasl(1, None)[0], closed(raw)]  # no answer: the connection closes
    raw.close()

    raw = Raw(addr)  # a client asking for another mechanism: only DIGEST-MD5 is spoken
    kind, challenge = raw.sasl(1, b"\x00user\x00password")  # what a PLAIN client would send first
    out["a PLAIN client"] = [kind, challenge.startswith(b'realm="zk-sasl-md5"'),
                             raw.sasl(2, b"\x00user\x00password")[0], closed(raw)]
    raw.close()

    raw = JuteSocket(addr)  # SASL before any ConnectRequest: read as one, refused
    raw.sock.sendall(jute.encode_request(1, jute.OP_SASL, Sasl(b"")))
    out["SASL before the session"] = closed(raw) and not raw.bodies  # type: ignore[arg-type]
    raw.close()
    return out


EXPECTED_HOSTILE = {
    "authzid super": ["ok", b"rspauth=", [("ip", "127.0.0.1"), ("sasl", "jaasuser")]],
    "a token after the exchange": ["AUTH_FAILED", True],
    "the response of another connection (a replay)": ["ok", "AUTH_FAILED", True],
    "wrong password": ["AUTH_FAILED", struct.pack(">iqii", 2, 0, Code.AUTH_FAILED, -1), True],
    "the session after a failure": [True, [("ip", "127.0.0.1")]],
    "two first tokens": ["AUTH_FAILED", True],
    "an initial token of 4096 bytes": "ok",
    "a response of 4097 bytes": ["AUTH_FAILED", True],
    "a null token": ["closed", True],
    "a PLAIN client": ["ok", True, "AUTH_FAILED", True],
    "SASL before the session": True,
}


def test_a_hostile_client_against_zabd(cluster_factory: Factory, jaas: Path) -> None:
    assert hostile_script(zabd_node(cluster_factory, jaas)) == EXPECTED_HOSTILE


@needs_zookeeper
def test_a_hostile_client_gets_the_same_from_zookeeper(tmp_path: Path, jaas: Path) -> None:
    zk = real_zookeeper(tmp_path, jaas)
    with zookeepers(zk):
        assert hostile_script(zk.addr) == EXPECTED_HOSTILE


def test_an_unknown_user_never_gets_in(cluster_factory: Factory, jaas: Path) -> None:
    """ZooKeeper 3.8's callback handler keeps the last known user name across
    connections (ZOOKEEPER-4839): there, "nobody" with jaasuser's password
    gets in as sasl:nobody right after jaasuser did. Not here."""
    addr = zabd_node(cluster_factory, jaas)
    raw = Raw(addr)
    challenge = raw.sasl(1, b"")[1]
    assert raw.sasl(2, answer(challenge, "jaasuser", "jaas_password"))[0] == "ok"
    raw.close()
    raw = Raw(addr)
    challenge = raw.sasl(1, b"")[1]
    assert raw.sasl(2, answer(challenge, "nobody", "jaas_password"))[0] == "AUTH_FAILED"
    raw.close()


def test_a_server_without_sasl_answers_auth_failed_at_once(cluster_factory: Factory) -> None:
    """ZooKeeper without a JAAS Server section answers null tokens until the
    client gives up (kazoo: AuthFailedError after a loop of ~10 s); zabd
    without zk_sasl_jaas says AUTH_FAILED to the first token."""
    addr = zabd_node(cluster_factory, None)
    raw = Raw(addr)
    assert raw.sasl(1, b"")[0] == "AUTH_FAILED" and closed(raw)
    raw.close()
    zk = KazooClient(hosts=addr, timeout=15, connection_retry={"max_tries": 1},
                     sasl_options={"mechanism": "DIGEST-MD5", "username": "jaasuser", "password": "jaas_password"})
    try:
        assert first_request(zk) == "AuthFailedError"
    finally:
        zk.stop()
        zk.close()


def test_pure_sasl_over_a_bare_socket_sent_behind_the_connect_request(cluster_factory: Factory, jaas: Path) -> None:
    """The first token sent before the ConnectResponse (the session is still
    being created) waits for it, as ZooKeeper holds requests behind it."""
    addr = zabd_node(cluster_factory, jaas)
    raw = JuteSocket(addr)
    client = SASLClient("zk-sasl-md5", service="zookeeper", mechanism="DIGEST-MD5", username="jaasuser",
                        password="jaas_password")
    raw.sock.sendall(jute.encode_connect(jute.ConnectRequest(0, 0, 10_000, 0, b"", False))
                     + jute.encode_request(1, jute.OP_SASL, Sasl(client.process(None) or b"")))
    assert jute.decode_connect_response(raw.next_body())[1] > 0
    xid, _, err, challenge = jute.decode_reply(raw.next_body(), jute.OP_SASL)
    assert (xid, err) == (1, 0)
    raw.sock.sendall(jute.encode_request(2, jute.OP_SASL, Sasl(client.process(getattr(challenge, "token", b"")))))
    xid, _, err, rspauth = jute.decode_reply(raw.next_body(), jute.OP_SASL)
    assert (xid, err) == (2, 0)
    client.process(getattr(rspauth, "token", b""))  # raises unless the server proved it knows the password
    assert client.complete
    raw.close()

"""A watch event reaches only a session that may READ the node it is about
(ZooKeeper 3.8.4 and Debian's 3.8.0-11+deb12u2, CVE-2024-23944): the
changed node's ACL as it is then (a deleted node's last one), the parent's
for children-changed, for one-shot, persistent and persistent-recursive
watches alike; the superuser, ``digest`` and ``ip`` ids count as in reads.

In process through the session layer and the jute port (the fuzzer's
one-node replica, each connection from its own 10.0.0.x address); then
kazoo 2.11 on real processes against zabd, and against Debian's ZooKeeper,
the same script must see the same events. kazoo 2.11 has no addWatch: the
request goes through its connection as is (as
scripts/record_zk38_semantics.py sends what kazoo has no call for), and
every event a client receives is read from its connection's log record,
whether a kazoo watcher waits for it or not.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_acl, make_digest_acl

from tests.server.real_zk import StandaloneZooKeeper, needs_zookeeper, zookeepers
from tests.server.zk_conn_fuzz import SUPER, Conn, Harness, Scenario, _Capture, captured_logs
from zabd.client.spawn import LocalCluster
from zabd.zk import jute
from zabd.zk.acl import ACL, ALL, READ, Id, digest_id
from zabd.zk.records import (
    WATCH_PERSISTENT_RECURSIVE,
    AddAuth,
    AddWatch,
    Create,
    Delete,
    GetData,
    SetACL,
)

Factory = Callable[..., LocalCluster]
CREATED, DELETED, CHANGED, CHILD = 1, 2, 3, 4


# ---------------------------------------------------- in process (session layer)


@pytest.fixture
def logs() -> Iterator[_Capture]:
    with captured_logs() as cap:
        yield cap


def events_of(out: bytes) -> list[tuple[int, str]]:
    """(type, path) of every watch event in a connection's output, in order."""
    found = []
    first = True
    while out:
        (n,) = struct.unpack_from(">i", out)
        body, out = out[4 : 4 + n], out[4 + n :]
        if not first and struct.unpack_from(">i", body)[0] == jute.XID_NOTIFICATION:
            kind, _, path = jute.decode_event(body)
            found.append((kind, path))
        first = False  # the ConnectResponse
    return found


def test_the_session_layer_checks_read_with_each_connections_ids(logs: _Capture) -> None:
    """A data watch on a node made readable by alice and one ip only, then
    deleted; a persistent-recursive watch above a node created so: only
    alice's session, the connection from that ip and the superuser hear of
    them; everyone hears of the open node."""
    alice = Id("digest", digest_id("alice", "secret"))
    guarded = (ACL(ALL, alice), ACL(READ, Id("ip", "10.0.0.4")))
    new: dict[str, Any] = {"kind": "connect", "session": "new"}

    def frames(*requests: tuple[int, int, object]) -> list[bytes]:
        return [jute.encode_request(xid, op, rec) for xid, op, rec in requests]

    auth_alice = (jute.XID_AUTH, jute.OP_AUTH, AddAuth("digest", b"alice:secret"))
    watch = [(1, jute.OP_GET_DATA, GetData("/n", True)),
             (2, jute.OP_ADD_WATCH, AddWatch("/r", WATCH_PERSISTENT_RECURSIVE))]
    writer = Conn(new, frames(auth_alice, (1, jute.OP_CREATE, Create("/n")), (2, jute.OP_CREATE, Create("/r")),
                              (3, jute.OP_SET_ACL, SetACL("/n", guarded)), (4, jute.OP_DELETE, Delete("/n")),
                              (5, jute.OP_CREATE, Create("/r/s", acl=guarded)), (6, jute.OP_CREATE, Create("/r/o"))))
    watchers = [
        Conn(new, frames(*watch)),  # 10.0.0.2: nobody
        Conn(new, frames(auth_alice, *watch)),  # 10.0.0.3: alice
        Conn(new, frames(*watch)),  # 10.0.0.4: the ip READ is granted to
        Conn(new, frames((jute.XID_AUTH, jute.OP_AUTH, AddAuth("digest", ":".join(SUPER).encode())), *watch)),
    ]
    plan: list[list[Any]] = [["send", 0, 4, "f"]]  # connect, auth, the two creates
    plan += [["send", i, -1, "b"] for i in range(1, 5)]
    plan += [["send", 0, -1, "b"]]
    h = Harness(logs)
    try:
        h.run(Scenario([writer, *watchers], plan))
        h.check_tree()
        heard = [events_of(bytes(c.t.out)) for c in h.last[1:]]
    finally:
        h.close()
    everything = [(DELETED, "/n"), (CREATED, "/r/s"), (CREATED, "/r/o")]
    assert heard == [[(CREATED, "/r/o")], everything, everything, everything]


# ------------------------------------------------------ kazoo on real servers

ALICE_AUTH = [("digest", "alice:secret")]
SUPER_AUTH = [("digest", "super:test")]  # kazoo's harness's superuser
SUPER_DIGEST = digest_id("super", "test")
ALICE_ONLY = [make_digest_acl("alice", "secret", all=True)]
PERSISTENT, RECURSIVE = 0, 1


class AddWatchRequest:
    """ZooKeeper's addWatch (opcode 106), which kazoo 2.11 does not have, as
    its connection sends a request object: the reply has no body."""

    type = jute.OP_ADD_WATCH

    def __init__(self, path: str, mode: int) -> None:
        self.path, self.mode = path, mode

    def serialize(self) -> bytes:
        p = self.path.encode()
        return struct.pack(">i", len(p)) + p + struct.pack(">i", self.mode)

    def deserialize(self, buf: bytes, offset: int) -> bool:
        return True


class Heard(logging.Handler):
    """A client's log: every event its connection received, in order (its
    ``Received EVENT`` record carries the event as it came off the wire)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[tuple[int, str]] = []
        self.cond = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == "Received EVENT: %s" and record.args:
            ev = record.args[0] if isinstance(record.args, tuple) else record.args
            with self.cond:
                self.events.append((int(ev.type), str(ev.path)))  # type: ignore[attr-defined]
                self.cond.notify_all()

    def wait_for(self, event: tuple[int, str], timeout: float = 30.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: event in self.events, timeout), (event, self.events)


def client(hosts: str, name: str, auth: list[tuple[str, str]] | None = None) -> tuple[KazooClient, Heard]:
    heard = Heard()
    logger = logging.getLogger(f"zk-watch-acl.{name}.{id(heard)}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(heard)
    zk = KazooClient(hosts=hosts, timeout=10.0, auth_data=auth, logger=logger)
    zk.start(timeout=30)
    return zk, heard


def add_watch(zk: KazooClient, path: str, mode: int) -> None:
    ar = zk.handler.async_result()
    zk._call(AddWatchRequest(path, mode), ar)
    ar.get(timeout=10)


def noop(event: Any) -> None:
    pass


def script(addr: Callable[[str], str]) -> dict[str, list[tuple[int, str]]]:
    """The same steps against any server: who hears what. ``addr(name)``:
    the connect string of the writer and of the watchers nobody, alice (her
    digest) and super (the superuser)."""
    writer, _ = client(addr("writer"), "writer", ALICE_AUTH)
    watchers = {name: client(addr(name), name, auth)
                for name, auth in (("nobody", None), ("alice", ALICE_AUTH), ("super", SUPER_AUTH))}
    w = writer

    def each(step: Callable[[KazooClient], object]) -> None:
        for zk, _ in watchers.values():
            zk.sync("/")  # its server has applied what came before: a watch set now sees only what follows
            step(zk)

    try:
        for path in ("/data", "/data/n", "/exist", "/child", "/pers", "/pers/n", "/rec", "/marker"):
            w.create(path, b"")
        # one-shot: a data watch, an exist watch, a child watch (and the marker, heard last)
        each(lambda zk: (zk.get("/data/n", watch=noop), zk.exists("/exist/n", watch=noop),
                         zk.get_children("/child", watch=noop), zk.get("/marker", watch=noop)))
        w.set_acls("/data/n", ALICE_ONLY)  # fires nothing
        w.delete("/data/n")  # the case reported: the last ACL is alice's
        w.create("/exist/n", b"", acl=ALICE_ONLY)  # the new node's ACL
        w.create("/child/secret", b"", acl=ALICE_ONLY)  # the parent's ACL: open
        each(lambda zk: zk.get_children("/child", watch=noop))
        w.set_acls("/child", ALICE_ONLY)
        w.create("/child/x", b"")  # the parent's ACL: alice's
        # persistent: it stays while its events are withheld
        each(lambda zk: add_watch(zk, "/pers/n", PERSISTENT))
        w.set("/pers/n", b"1")
        w.set_acls("/pers/n", ALICE_ONLY)
        w.set("/pers/n", b"2")
        w.create("/pers/n/c", b"")  # children-changed of /pers/n: its ACL
        w.set_acls("/pers/n", OPEN_ACL_UNSAFE)
        w.set("/pers/n", b"3")
        # persistent-recursive: each node below on its own ACL
        each(lambda zk: add_watch(zk, "/rec", RECURSIVE))
        w.create("/rec/user-bob", b"", acl=ALICE_ONLY)
        w.create("/rec/open", b"")
        w.set("/rec/user-bob", b"x")
        w.delete("/rec/user-bob")
        w.create("/rec/tens", b"", acl=[make_acl("ip", "10.0.0.0/8", read=True), *ALICE_ONLY])
        w.create("/rec/wo", b"", acl=[make_acl("world", "anyone", write=True, create=True, delete=True, admin=True)])
        w.set("/marker", b"end")
        for _, heard in watchers.values():
            heard.wait_for((CHANGED, "/marker"))  # the last: every event before it was received
        return {name: list(heard.events) for name, (_, heard) in watchers.items()}
    finally:
        for zk in (writer, *(zk for zk, _ in watchers.values())):
            zk.stop()
            zk.close()


READERS = [(DELETED, "/data/n"), (CREATED, "/exist/n"), (CHILD, "/child"), (CHILD, "/child"),
           (CHANGED, "/pers/n"), (CHANGED, "/pers/n"), (CHILD, "/pers/n"), (CHANGED, "/pers/n"),
           (CREATED, "/rec/user-bob"), (CREATED, "/rec/open"), (CHANGED, "/rec/user-bob"), (DELETED, "/rec/user-bob"),
           (CREATED, "/rec/tens")]
EXPECTED = {
    "nobody": [(CHILD, "/child"), (CHANGED, "/pers/n"), (CHANGED, "/pers/n"), (CREATED, "/rec/open"),
               (CHANGED, "/marker")],
    "alice": [*READERS, (CHANGED, "/marker")],
    "super": [*READERS, (CREATED, "/rec/wo"), (CHANGED, "/marker")],
}


def zabd_cluster(cluster_factory: Factory) -> LocalCluster:
    cluster = cluster_factory(3, extra={"zk_tick_ms": 500, "zk_super_digest": SUPER_DIGEST})
    asyncio.run(cluster.wait_leader())
    return cluster


def on_three_nodes(cluster: LocalCluster) -> Callable[[str], str]:
    # the writer and the watchers spread over the nodes: events come from each node's own apply
    node = {"writer": 1, "nobody": 1, "alice": 2, "super": 3}
    return lambda name: cluster.zk_addr(node[name])


def test_kazoo_sessions_hear_only_of_nodes_they_may_read(cluster_factory: Factory) -> None:
    assert script(on_three_nodes(zabd_cluster(cluster_factory))) == EXPECTED


@needs_zookeeper
def test_the_same_events_as_zookeeper(tmp_path: Path, cluster_factory: Factory) -> None:
    """Debian's ZooKeeper 3.8.0-11+deb12u2 (CVE-2024-23944 fixed) and zabd,
    the same script: the same events for every client."""
    superuser = f"-Dzookeeper.DigestAuthenticationProvider.superDigest={SUPER_DIGEST}"
    zk = StandaloneZooKeeper(tmp_path / "zk", jvm=[superuser])
    with zookeepers(zk):
        theirs = script(lambda name: zk.addr)
    assert theirs == EXPECTED
    assert script(on_three_nodes(zabd_cluster(cluster_factory))) == theirs

"""ZooKeeper's client port on real server processes, driven by kazoo 2.11
(a client nobody here wrote): sessions, znodes, watches, transactions and
recipes over ZooKeeper's own jute protocol."""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState

from tests.server.zk_driver import JuteSocket, four_letter
from zabd.client.spawn import LocalCluster
from zabd.zk import jute
from zabd.zk.errors import Code
from zabd.zk.records import (
    AddAuth,
    ChildrenResult,
    DataResult,
    ErrorResult,
    Exists,
    GetChildren,
    GetData,
    MultiRead,
    MultiResult,
    WhoAmI,
    WhoAmIResult,
)

Factory = Callable[..., LocalCluster]


@pytest.fixture
def kazoo(zk_cluster: LocalCluster) -> Iterator[KazooClient]:
    zk = KazooClient(hosts=zk_cluster.zk_hosts, timeout=4.0)
    zk.start(timeout=15)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def test_znodes_stats_and_errors(kazoo: KazooClient) -> None:
    kazoo.create("/app", b"root")
    data, stat = kazoo.get("/app")
    assert data == b"root" and stat.version == 0 and stat.numChildren == 0
    seq = kazoo.create("/app/job-", b"x", sequence=True)
    assert seq == "/app/job-0000000000"
    assert kazoo.get_children("/app") == ["job-0000000000"]
    stat = kazoo.set("/app", b"v1", version=0)
    assert stat.version == 1
    with pytest.raises(BadVersionError):
        kazoo.set("/app", b"v2", version=0)
    with pytest.raises(NodeExistsError):
        kazoo.create("/app")
    with pytest.raises(NoNodeError):
        kazoo.get("/nope")
    with pytest.raises(NotEmptyError):
        kazoo.delete("/app")
    assert kazoo.exists("/nope") is None
    kazoo.delete("/app", recursive=True)
    assert kazoo.exists("/app") is None
    assert "zookeeper" in kazoo.get_children("/")
    # null data is not empty data, as in ZooKeeper
    kazoo.create("/null", None)
    assert kazoo.get("/null")[0] is None
    kazoo.set("/null", b"")
    assert kazoo.get("/null")[0] == b""


def test_a_request_over_jute_maxbuffer_closes_the_connection(kazoo: KazooClient) -> None:
    """As ZooKeeper's server: a request longer than jute.maxbuffer (1 MiB - 1)
    is not answered, the connection closes; kazoo reports ConnectionLoss."""
    with pytest.raises(ConnectionLoss):
        kazoo.create("/big", b"x" * (2 << 20))
    kazoo.create("/fits", b"x" * 1_000_000)  # reconnected, same session
    assert len(kazoo.get("/fits")[0]) == 1_000_000


def test_transaction_ephemerals_and_watches(zk_cluster: LocalCluster, kazoo: KazooClient) -> None:
    tx = kazoo.transaction()
    tx.create("/t", b"")
    tx.create("/t/a", b"1")
    tx.check("/t", 0)
    assert tx.commit() == ["/t", "/t/a", True]
    tx = kazoo.transaction()
    tx.set_data("/t/a", b"2")
    tx.delete("/t/missing")
    results = tx.commit()
    assert isinstance(results[1], NoNodeError)
    assert kazoo.get("/t/a")[0] == b"1"

    fired = threading.Event()
    events = []

    def watch(event: object) -> None:
        events.append(event)
        fired.set()

    kazoo.get("/t/a", watch=watch)
    other = KazooClient(hosts=zk_cluster.zk_addr(2), timeout=4.0)
    other.start(timeout=15)
    try:
        other.create("/t/eph", b"", ephemeral=True)
        other.set("/t/a", b"changed")
        assert fired.wait(10)
        assert events[0].type == EventType.CHANGED and events[0].path == "/t/a"
        assert kazoo.exists("/t/eph") is not None
    finally:
        other.stop()
        other.close()
    kazoo.sync("/t")
    assert kazoo.exists("/t/eph") is None  # closed with its session


def test_lock_and_election_recipes(kazoo: KazooClient) -> None:
    lock = kazoo.Lock("/locks/one", "me")
    with lock:
        assert kazoo.get_children("/locks/one")
    election = kazoo.Election("/election", "me")
    won = []
    t = threading.Thread(target=election.run, args=(lambda: won.append(True),))
    t.start()
    t.join(15)
    assert won == [True]


def test_connection_state_and_four_letter_words(cluster_factory: Factory) -> None:
    # ruok, envi (kazoo's server_version) and mntr answer only where listed, as in ZooKeeper
    cluster = cluster_factory(3, extra={"zk_tick_ms": 200, "zk_4lw_whitelist": "ruok,envi,mntr"})
    kazoo = KazooClient(hosts=cluster.zk_hosts, timeout=4.0)
    kazoo.start(timeout=15)
    try:
        assert kazoo.state == KazooState.CONNECTED
        assert four_letter(cluster.zk_addr(1), "ruok") == "imok"
        srvr = four_letter(cluster.zk_addr(1), "srvr")
        assert "Mode: " in srvr and "Node count: " in srvr
        assert kazoo.server_version()[:2] == (3, 8)
        mntr = four_letter(cluster.zk_addr(2), "mntr")
        assert "zk_znode_count\t" in mntr
    finally:
        kazoo.stop()
        kazoo.close()


class RawJute(JuteSocket):
    """A bare jute client (zabd.zk.jute's client side) for what kazoo
    2.11 has no call for: multiRead, whoAmI, an unknown opcode."""

    def __init__(self, addr: str) -> None:
        super().__init__(addr)
        self.sock.sendall(jute.encode_connect(jute.ConnectRequest(0, 0, 10_000, 0, b"", False)))
        _, timeout, self.session, _, _ = jute.decode_connect_response(self.next_body())
        assert timeout > 0 and self.session != 0

    def call(self, xid: int, op: int, record: object) -> tuple[int, int, int, object | None]:
        self.sock.sendall(jute.encode_request(xid, op, record))
        return jute.decode_reply(self.next_body(), op)


def test_multi_read_who_am_i_and_an_unknown_opcode(zk_cluster: LocalCluster, kazoo: KazooClient) -> None:
    kazoo.create("/r/a", b"A", makepath=True)
    raw = RawJute(zk_cluster.zk_addr(1))
    try:
        xid, _, err, result = raw.call(jute.XID_AUTH, jute.OP_AUTH, AddAuth("digest", b"alice:secret"))
        assert (xid, err) == (jute.XID_AUTH, 0)
        _, _, err, result = raw.call(2, jute.OP_MULTI_READ,
                                     MultiRead((GetData("/r/a"), GetChildren("/r"), GetData("/r/none"))))
        assert err == 0 and isinstance(result, MultiResult)
        data, children, missing = result.results
        assert isinstance(data, DataResult) and data.data == b"A"
        assert isinstance(children, ChildrenResult) and children.children == ["a"]
        assert missing == ErrorResult(Code.NO_NODE)
        _, _, err, result = raw.call(3, jute.OP_WHO_AM_I, WhoAmI())
        assert err == 0 and isinstance(result, WhoAmIResult)
        assert ("digest", "alice") in result.ids and ("ip", "127.0.0.1") in result.ids
        # an opcode not served: ZooKeeper's Unimplemented, and the connection stays usable
        raw.sock.sendall(jute.frame(struct.pack(">ii", 4, jute.OP_DELETE_CONTAINER)))
        assert jute.decode_reply(raw.next_body(), jute.OP_DELETE_CONTAINER)[2] == Code.UNIMPLEMENTED
        assert raw.call(5, jute.OP_EXISTS, Exists("/r/a"))[2] == 0
    finally:
        raw.sock.close()


def test_a_server_that_asks_for_tokens_refuses_zookeeper_clients_without_a_certificate(
    cluster_factory: Factory,
) -> None:
    import asyncio

    c = cluster_factory(3, tokens={"secret-rw": "rw"})
    asyncio.run(c.wait_leader())
    zk = KazooClient(hosts=c.zk_addr(1), connection_retry={"max_tries": 1})
    with pytest.raises(KazooTimeoutError):
        zk.start(timeout=2)
    zk.stop()
    zk.close()
    assert "ZooKeeper connection refused: the server requires a client certificate or a token" in c.log_text(1)

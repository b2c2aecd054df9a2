"""The data tree (ZooKeeper 3.8's ``DataTree`` and ``DataNode``): the stat
rules of every write, sequential names, ephemerals, containers and TTL
nodes, version wrap, determinism, the digest and snapshots."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from tests.zk.standalone import Standalone
from zabd.zk import txn as tx
from zabd.zk.acl import ACL, ADMIN, ALL, ANYONE, OPEN_ACL_UNSAFE, READ, READ_ACL_UNSAFE, Id, digest_id
from zabd.zk.errors import Code
from zabd.zk.events import EventType
from zabd.zk.prep import ZKLeader, next_version
from zabd.zk.reads import serve
from zabd.zk.records import (
    CONTAINER,
    CONTAINER_OWNER,
    EPHEMERAL,
    EPHEMERAL_SEQUENTIAL,
    MAX_TTL,
    PERSISTENT,
    PERSISTENT_SEQUENTIAL,
    PERSISTENT_SEQUENTIAL_WITH_TTL,
    PERSISTENT_WITH_TTL,
    Check,
    CheckResult,
    CloseSession,
    Create,
    CreateResult,
    CreateSession,
    DataResult,
    Delete,
    DeleteContainer,
    DeleteResult,
    ErrorResult,
    Exists,
    GetChildren,
    GetData,
    GetEphemerals,
    Multi,
    MultiResult,
    PathsResult,
    SessionResult,
    SetACL,
    SetData,
    Stat,
    StatResult,
    ttl_of,
)
from zabd.zk.sessions import password_digest, password_matches
from zabd.zk.tree import Applied, DataTree, TreeBuilder

T0 = 1_700_000_000_000
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
TTL_BASE = -(1 << 56)


def wire(acl: tuple[ACL, ...]) -> list[list[Any]]:
    """An ACL as txns carry it (``[perms, scheme, id]``, zabd.zk.txn)."""
    return [[a.perms, a.id.scheme, a.id.id] for a in acl]


OPEN = wire(OPEN_ACL_UNSAFE)


class ZK:
    """A Standalone whose clock the test sets."""

    def __init__(self, **kw: Any) -> None:
        self.now = T0
        self.sa = Standalone(clock_ms=lambda: self.now, **kw)
        self.sid = self.sa.session()

    @property
    def tree(self) -> DataTree:
        return self.sa.tree

    def w(self, req: Any, sid: int | None = None, auth: tuple[Id, ...] = (), at: int | None = None) -> Any:
        if at is not None:
            self.now = at
        return self.sa.write(self.sid if sid is None else sid, req, auth)

    def stat(self, path: str) -> Stat:
        st = self.tree.stat(path)
        assert st is not None, path
        return st

    def create(self, path: str, data: bytes = b"", mode: int = PERSISTENT, at: int | None = None,
               **kw: Any) -> str:
        r = self.w(Create(path, data, mode=mode, **kw), at=at)
        assert isinstance(r, CreateResult), r
        return r.path


class Pipe:
    """A leader and its tree driven by hand: propose now, apply later."""

    def __init__(self) -> None:
        self.tree = DataTree()
        self.leader = ZKLeader(self.tree)
        self.zxid = 1 << 32
        self.pending: list[tuple[int, bytes]] = []
        self.recorded: list[tuple[int, bytes]] = []  # what commit() applied

    def propose(self, sid: int, req: Any, auth: tuple[Id, ...] = (), now: int = T0) -> int:
        p = self.leader.prepare(sid, auth, req, now)
        self.zxid += 1
        self.leader.proposed(self.zxid, p)
        self.pending.append((self.zxid, p.payload))
        return self.zxid

    def commit(self, upto: int | None = None) -> list[Any]:
        out = []
        while self.pending and (upto is None or self.pending[0][0] <= upto):
            zxid, payload = self.pending.pop(0)
            out.append(self.tree.apply(zxid, payload).result)
            self.leader.committed(zxid)
            self.recorded.append((zxid, payload))
        return out

    def write(self, sid: int, req: Any, auth: tuple[Id, ...] = (), now: int = T0) -> Any:
        self.propose(sid, req, auth, now)
        return self.commit()[-1]

    def session(self, sid: int) -> int:
        assert self.write(sid, CreateSession(sid, 30_000, b"p" * 16)) == SessionResult(sid)
        return sid


# ------------------------------------------------------------ a fresh tree


def test_fresh_tree_holds_zookeepers_fixed_nodes() -> None:
    t = DataTree()
    assert set(t.nodes) == {"/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"}
    assert t.children_of("/") == ["zookeeper"]
    assert t.children_of("/zookeeper") == ["config", "quota"]
    assert t.children_of("/zookeeper/quota") == []
    assert t.sessions == {} and t.ephemerals == {} and t.applied == 0
    for path in ("/zookeeper", "/zookeeper/quota"):
        assert t.nodes[path].acl == OPEN_ACL_UNSAFE
    # ZOOKEEPER-2014: the config node is read-only for anyone, set with setACL(..., -1)
    assert t.nodes["/zookeeper/config"].acl == READ_ACL_UNSAFE
    assert t.stat("/zookeeper/config") == Stat(0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0)
    # a client sees cversion = creates * 2 - children (DataNode.copyStat): -1 for the root
    assert t.stat("/") == Stat(0, 0, 0, 0, 0, -1, 0, 0, 0, 1, 0)
    assert t.nodes["/"].cversion == 0  # the stored counter
    assert t.stat("/zookeeper").numChildren == 2
    assert t.descendants("/") == 3
    assert len(t) == 4


def test_fresh_tree_reads() -> None:
    zk = ZK()
    assert zk.sa.read(zk.sid, GetChildren("/")).children == ["zookeeper"]
    assert zk.sa.read(zk.sid, GetData("/zookeeper/config")) == DataResult(b"", zk.stat("/zookeeper/config"))
    assert zk.w(SetData("/zookeeper/config", b"x")) == ErrorResult(Code.NO_AUTH)
    assert zk.w(Create("/zookeeper/config/x")) == ErrorResult(Code.NO_AUTH)
    # quota is open: ZooKeeper's setquota writes there
    assert zk.w(Create("/zookeeper/quota/q")) == CreateResult("/zookeeper/quota/q", zk.stat("/zookeeper/quota/q"))


# ZooKeeper's client-visible Stat.cversion is stored cversion * 2 - numChildren (DataNode.copyStat,
# DataNode.java 159-163, same in 3.8.6): a fresh server answers `stat /` with cversion -1 and
# /zookeeper with -2. (Found by these tests; fixed in fe81526.)
def test_fresh_tree_client_visible_cversion() -> None:
    t = DataTree()
    assert t.stat("/").cversion == -1  # type: ignore[union-attr]
    assert t.stat("/zookeeper").cversion == -2  # type: ignore[union-attr]


# ------------------------------------------------------------------ create


TTL = 5_000


@pytest.mark.parametrize(("mode", "kw", "seq"), [
    (PERSISTENT, {}, False),
    (EPHEMERAL, {}, False),
    (PERSISTENT_SEQUENTIAL, {}, True),
    (EPHEMERAL_SEQUENTIAL, {}, True),
    (CONTAINER, {}, False),
    (PERSISTENT_WITH_TTL, {"ttl": TTL}, False),
    (PERSISTENT_SEQUENTIAL_WITH_TTL, {"ttl": TTL}, True),
])
def test_create_stat_of_every_mode(mode: int, kw: dict[str, int], seq: bool) -> None:
    zk = ZK()
    zk.create("/p", b"parent", at=T0 + 1)
    zk.w(SetData("/p", b"parent2"), at=T0 + 2)
    before = zk.stat("/p")
    r = zk.w(Create("/p/n", b"hello", mode=mode, **kw), at=T0 + 50)
    zxid = zk.sa.zxid
    assert isinstance(r, CreateResult)
    assert r.path == ("/p/n0000000000" if seq else "/p/n")
    owner = {EPHEMERAL: zk.sid, EPHEMERAL_SEQUENTIAL: zk.sid, CONTAINER: CONTAINER_OWNER,
             PERSISTENT_WITH_TTL: TTL_BASE | TTL, PERSISTENT_SEQUENTIAL_WITH_TTL: TTL_BASE | TTL}.get(mode, 0)
    assert zk.tree.nodes[r.path].owner == owner
    # clients see a session owner only (DataNode.getClientEphemeralOwner)
    visible = owner if mode in (EPHEMERAL, EPHEMERAL_SEQUENTIAL) else 0
    expected = Stat(czxid=zxid, mzxid=zxid, ctime=T0 + 50, mtime=T0 + 50, version=0, cversion=0, aversion=0,
                    ephemeralOwner=visible, dataLength=5, numChildren=0, pzxid=zxid)
    assert r.stat == expected
    assert zk.stat(r.path) == expected
    assert zk.tree.nodes[r.path].data == b"hello"
    # the parent: cversion + 1, pzxid = the zxid, one more child; nothing else
    assert zk.stat("/p") == before._replace(cversion=before.cversion + 1, pzxid=zxid, numChildren=1)
    assert zk.sa.triggers == [(EventType.NODE_CREATED, r.path, OPEN_ACL_UNSAFE),
                              (EventType.NODE_CHILDREN_CHANGED, "/p", OPEN_ACL_UNSAFE)]


def test_create_under_root_and_in_depth() -> None:
    zk = ZK()
    root = zk.stat("/")
    zk.create("/a")
    z1 = zk.sa.zxid
    assert zk.stat("/") == root._replace(cversion=root.cversion + 1, pzxid=z1, numChildren=2)
    zk.create("/a/b")
    zk.create("/a/b/c", b"xyz")
    assert zk.stat("/a").numChildren == 1 and zk.stat("/a/b").numChildren == 1
    assert zk.stat("/a/b/c").dataLength == 3
    # grandchildren do not count
    assert zk.stat("/") == root._replace(cversion=root.cversion + 1, pzxid=z1, numChildren=2)
    assert zk.tree.children_of("/") == ["a", "zookeeper"]
    assert zk.tree.descendants("/a") == 2


def test_set_data_stat() -> None:
    zk = ZK()
    zk.create("/n", b"one", at=T0 + 1)
    zk.create("/n/c")
    zk.w(SetACL("/n", OPEN_ACL_UNSAFE))
    before = zk.stat("/n")
    r = zk.w(SetData("/n", b"twotwo"), at=T0 + 77)
    zxid = zk.sa.zxid
    expected = before._replace(mzxid=zxid, mtime=T0 + 77, version=1, dataLength=6)
    assert r == StatResult(expected)
    assert zk.stat("/n") == expected
    assert zk.tree.nodes["/n"].data == b"twotwo"
    assert zk.sa.triggers == [(EventType.NODE_DATA_CHANGED, "/n", OPEN_ACL_UNSAFE)]
    # the parent is untouched by a child's data change
    root = zk.stat("/")
    zk.w(SetData("/n/c", b"x"))
    assert zk.stat("/") == root
    # setData to the same bytes is still a change: mzxid and version move
    zk.w(SetData("/n", b"twotwo"), at=T0 + 90)
    assert zk.stat("/n") == expected._replace(mzxid=zk.sa.zxid, mtime=T0 + 90, version=2)


def test_set_data_of_a_session_nobody_here_answers_has_no_result() -> None:
    """A replica skips the Stat of a setData it answers no client for; its
    tree ends the same, digest included, and a failed write still says why."""
    pipes = Pipe(), Pipe()
    for pipe in pipes:
        pipe.session(7)
        pipe.session(8)
        pipe.write(7, Create("/n", b"one"))
        pipe.propose(7, SetData("/n", b"two"))
        pipe.propose(8, SetData("/n", b"three"))
        pipe.propose(7, SetData("/gone", b"x"))  # the leader decides NO_NODE
    answering, skipping = pipes
    assert skipping.pending == answering.pending
    full = answering.commit()
    part = [skipping.tree.apply(z, p, answered={8}) for z, p in skipping.pending]
    assert isinstance(full[0], StatResult) and isinstance(full[1], StatResult)
    assert [a.result for a in part] == [None, full[1], ErrorResult(Code.NO_NODE)]
    assert [a.triggers for a in part] == [[(EventType.NODE_DATA_CHANGED, "/n", OPEN_ACL_UNSAFE)]] * 2 + [[]]
    assert skipping.tree.stat("/n") == answering.tree.stat("/n") == full[1].stat
    assert skipping.tree.nodes["/n"].data == answering.tree.nodes["/n"].data == b"three"
    assert skipping.tree.digest == answering.tree.digest


def test_machine_builds_the_results_of_the_sessions_it_answers_only() -> None:
    from zabd.kv.kvmachine import KVMachine
    from zabd.protocol.messages import Txn

    pipe = Pipe()
    pipe.session(7)
    pipe.session(8)
    pipe.write(7, Create("/n"))
    m = KVMachine()
    for z, p in pipe.recorded:
        m.apply(Txn(z, p))
    m.answer_only({8})
    pipe.propose(7, SetData("/n", b"a"))
    pipe.propose(8, SetData("/n", b"b"))
    seven, eight = (m.apply(Txn(z, p)) for z, p in pipe.pending)
    assert isinstance(seven, Applied) and isinstance(eight, Applied)
    assert seven.result is None and seven.triggers  # no Stat built; its watches still fire
    assert eight.result == StatResult(m.zk.stat("/n"))


def test_set_data_to_empty() -> None:
    zk = ZK()
    zk.create("/n", b"abc")
    zk.w(SetData("/n", b""))
    assert zk.stat("/n").dataLength == 0
    assert zk.sa.read(zk.sid, GetData("/n")).data == b""


def test_null_data_is_not_empty_data() -> None:
    """ZooKeeper keeps null data apart from empty: a create or setData of null
    reads back null (kazoo's test_create_null_data, test_set_null_data)."""
    zk = ZK()
    zk.w(Create("/null", None))
    zk.create("/empty", b"")
    assert zk.sa.read(zk.sid, GetData("/null")).data is None
    assert zk.sa.read(zk.sid, GetData("/empty")).data == b""
    assert zk.stat("/null").dataLength == 0
    zk.w(SetData("/empty", None))
    zk.w(SetData("/null", b"now some"))
    assert zk.sa.read(zk.sid, GetData("/empty")).data is None
    assert zk.sa.read(zk.sid, GetData("/null")).data == b"now some"
    # the digest tells them apart, and a snapshot keeps them apart
    restored = DataTree.restore(zk.tree.snapshot())
    assert serve(restored, GetData("/empty"), (), 0).data is None  # type: ignore[union-attr]
    assert restored.digest == zk.tree.digest


def test_null_and_empty_data_hash_apart() -> None:
    a, b = ZK(), ZK()
    a.w(Create("/n", None))
    b.w(Create("/n", b""))
    assert a.stat("/n") == b.stat("/n") and a.tree.digest != b.tree.digest


def test_triggers_carry_the_acl_a_watcher_needs_read_on() -> None:
    """ZooKeeper 3.8.4's DataTree (CVE-2024-23944) hands each event the ACL
    its watchers need READ on: the node's own as it is when changed (a deleted
    node's last one), the parent's for children-changed; setACL fires nothing."""
    zk = ZK()
    alice = Id("digest", digest_id("alice", "pw"))
    mine = (ACL(ALL, alice),)
    parents = (ACL(ALL, ANYONE), ACL(READ, Id("ip", "10.0.0.1")))
    zk.create("/p", acl=parents)
    zk.create("/p/c", acl=mine)
    assert zk.sa.triggers == [(EventType.NODE_CREATED, "/p/c", mine), (EventType.NODE_CHILDREN_CHANGED, "/p", parents)]
    zk.w(SetData("/p/c", b"x"), auth=(alice,))
    assert zk.sa.triggers == [(EventType.NODE_DATA_CHANGED, "/p/c", mine)]
    zk.w(SetACL("/p/c", OPEN_ACL_UNSAFE), auth=(alice,))
    assert zk.sa.triggers == []
    zk.w(SetData("/p/c", b"y"))
    assert zk.sa.triggers == [(EventType.NODE_DATA_CHANGED, "/p/c", OPEN_ACL_UNSAFE)]
    zk.w(SetACL("/p/c", mine))
    assert zk.w(Delete("/p/c")) == DeleteResult()
    assert zk.sa.triggers == [(EventType.NODE_DELETED, "/p/c", mine), (EventType.NODE_CHILDREN_CHANGED, "/p", parents)]


def test_delete_child_moves_the_parents_pzxid_not_its_stored_cversion() -> None:
    zk = ZK()
    zk.create("/p")
    zk.create("/p/a")
    zk.create("/p/b")
    before = zk.stat("/p")
    assert before.cversion == 2 and before.numChildren == 2
    assert zk.w(Delete("/p/a"), at=T0 + 99) == DeleteResult()
    zxid = zk.sa.zxid
    # DataTree.deleteNode: only the pzxid (and the child set); the client's cversion is
    # creates * 2 - children, so it reads one more
    assert zk.stat("/p") == before._replace(pzxid=zxid, numChildren=1, cversion=3)
    assert zk.tree.nodes["/p"].cversion == 2
    assert zk.tree.stat("/p/a") is None
    assert zk.sa.triggers == [(EventType.NODE_DELETED, "/p/a", OPEN_ACL_UNSAFE),
                              (EventType.NODE_CHILDREN_CHANGED, "/p", OPEN_ACL_UNSAFE)]


# From a client, a child's delete bumps the parent's cversion (DataNode.copyStat: creates * 2 -
# children), although DataTree.deleteNode leaves the stored counter alone.
def test_delete_child_client_visible_cversion_counts_the_delete() -> None:
    zk = ZK()
    zk.create("/p")
    zk.create("/p/a")
    assert zk.stat("/p").cversion == 1
    zk.w(Delete("/p/a"))
    assert zk.stat("/p").cversion == 2


def test_set_acl_stat() -> None:
    zk = ZK()
    zk.create("/n", b"d", at=T0 + 5)
    before = zk.stat("/n")
    acl = (ACL(READ | ADMIN, ANYONE),)
    r = zk.w(SetACL("/n", acl), at=T0 + 500)
    # only aversion: no mzxid, no mtime (DataTree.setACL)
    assert r == StatResult(before._replace(aversion=1))
    assert zk.stat("/n") == before._replace(aversion=1)
    assert zk.tree.nodes["/n"].acl == acl
    assert zk.sa.triggers == []
    zk.w(SetACL("/n", OPEN_ACL_UNSAFE, version=1))
    assert zk.stat("/n").aversion == 2


def test_failed_write_changes_nothing_but_consumes_a_zxid() -> None:
    zk = ZK()
    zk.create("/n")
    digest, applied = zk.tree.digest, zk.tree.applied
    snap = zk.tree.snapshot()
    assert zk.w(SetData("/n", b"x", version=5)) == ErrorResult(Code.BAD_VERSION)
    assert zk.tree.applied == applied + 1
    assert zk.tree.digest == digest
    assert zk.sa.triggers == []
    assert DataTree.restore(snap).digest == zk.tree.digest


def test_check_is_a_no_op_txn() -> None:
    zk = ZK()
    zk.create("/n")
    digest = zk.tree.digest
    assert zk.w(Multi((Check("/n", 0),))) == MultiResult((CheckResult(),))
    assert zk.tree.digest == digest and zk.sa.triggers == []


# ------------------------------------------------- replays of the fuzzy range


def test_create_replay_never_lowers_the_parents_cversion_or_pzxid() -> None:
    # DataTree.createNode: "only update when it's larger"
    t = DataTree()
    t.apply(10, tx.encode(tx.T_CREATE, T0, 0, "/p", b"", OPEN, 0, 1))
    t.apply(11, tx.encode(tx.T_CREATE, T0, 0, "/p/a", b"", OPEN, 0, 5))
    assert (t.nodes["/p"].cversion, t.nodes["/p"].pzxid) == (5, 11)
    t.apply(12, tx.encode(tx.T_CREATE, T0, 0, "/p/b", b"", OPEN, 0, 3))
    n = t.nodes["/p"]
    assert (n.cversion, n.pzxid, len(t.children_of("/p"))) == (5, 11, 2)


def test_delete_replay_never_lowers_the_parents_pzxid() -> None:
    # DataTree.deleteNode: "Only update pzxid when the zxid is larger"
    t = DataTree()
    t.apply(10, tx.encode(tx.T_CREATE, T0, 0, "/p", b"", OPEN, 0, 1))
    t.apply(11, tx.encode(tx.T_CREATE, T0, 0, "/p/a", b"", OPEN, 0, 1))
    t.apply(20, tx.encode(tx.T_CREATE, T0, 0, "/p/b", b"", OPEN, 0, 2))
    t.apply(15, tx.encode(tx.T_DELETE, T0, 0, "/p/a"))
    st = t.stat("/p")
    assert st is not None and (st.pzxid, st.numChildren) == (20, 1)


def test_replayed_create_of_an_existing_node_is_node_exists() -> None:
    t = DataTree()
    t.apply(10, tx.encode(tx.T_CREATE, T0, 0, "/p", b"a", OPEN, 0, 1))
    digest = t.digest
    r = t.apply(11, tx.encode(tx.T_CREATE, T0, 0, "/p", b"b", OPEN, 0, 2))
    assert r.result == ErrorResult(Code.NODE_EXISTS)
    assert t.digest == digest and t.nodes["/p"].data == b"a"


# --------------------------------------------------------------- sequential


def test_sequential_suffix_is_ten_digits_of_the_parents_cversion() -> None:
    zk = ZK()
    zk.create("/s")
    assert zk.create("/s/x-", mode=PERSISTENT_SEQUENTIAL) == "/s/x-0000000000"
    assert zk.create("/s/x-", mode=PERSISTENT_SEQUENTIAL) == "/s/x-0000000001"
    assert zk.create("/s/other") == "/s/other"  # any create bumps the counter
    assert zk.create("/s/y", mode=EPHEMERAL_SEQUENTIAL) == "/s/y0000000003"
    assert zk.create("/s/z", mode=PERSISTENT_SEQUENTIAL_WITH_TTL, ttl=10) == "/s/z0000000004"


def test_sequential_counter_keeps_growing_after_deletes() -> None:
    zk = ZK()
    zk.create("/s")
    a = zk.create("/s/n", mode=PERSISTENT_SEQUENTIAL)
    b = zk.create("/s/n", mode=PERSISTENT_SEQUENTIAL)
    zk.w(Delete(a))
    zk.w(Delete(b))
    assert zk.stat("/s").numChildren == 0
    assert zk.create("/s/n", mode=PERSISTENT_SEQUENTIAL) == "/s/n0000000002"


def test_sequential_suffix_of_a_large_cversion() -> None:
    t = DataTree()
    t.apply(1, tx.encode(tx.T_CREATE, T0, 0, "/s", b"", OPEN, 0, 1))
    t.apply(2, tx.encode(tx.T_CREATE, T0, 0, "/s/c", b"", OPEN, 0, 1234567))
    leader = ZKLeader(t)
    t.apply(3, leader.prepare(9, (), CreateSession(9, 1000, b""), T0).payload)
    r = t.apply(4, leader.prepare(9, (), Create("/s/q", mode=PERSISTENT_SEQUENTIAL), T0).payload).result
    assert isinstance(r, CreateResult) and r.path == "/s/q0001234567"


def test_two_sequentials_in_one_multi() -> None:
    zk = ZK()
    zk.create("/s")
    r = zk.w(Multi((Create("/s/m", mode=PERSISTENT_SEQUENTIAL), Create("/s/m", mode=EPHEMERAL_SEQUENTIAL))))
    assert isinstance(r, MultiResult) and not r.failed
    a, b = r.results
    assert isinstance(a, CreateResult) and isinstance(b, CreateResult)
    assert (a.path, b.path) == ("/s/m0000000000", "/s/m0000000001")
    assert a.stat.czxid == b.stat.czxid == zk.sa.zxid  # one txn, one zxid
    assert zk.stat("/s").cversion == 2 and zk.stat("/s").numChildren == 2


def test_sequential_path_ending_in_slash_names_the_child_by_number() -> None:
    zk = ZK()
    zk.create("/s")
    assert zk.create("/s/", mode=PERSISTENT_SEQUENTIAL) == "/s/0000000000"
    assert zk.tree.children_of("/s") == ["0000000000"]
    # under the root too: its stored cversion is 0 on a fresh tree
    assert zk.create("/", mode=PERSISTENT_SEQUENTIAL) == "/0000000001"
    # without the sequential flag a trailing '/' is a bad path
    assert zk.w(Create("/s/")) == ErrorResult(Code.BAD_ARGUMENTS)


def test_sequential_under_a_fresh_root() -> None:
    zk = ZK()
    assert zk.create("/", mode=PERSISTENT_SEQUENTIAL) == "/0000000000"


# --------------------------------------------------------------- ephemerals


def test_ephemeral_owner_is_the_session() -> None:
    zk = ZK()
    other = zk.sa.session()
    zk.create("/e", mode=EPHEMERAL)
    zk.w(Create("/f", mode=EPHEMERAL), sid=other)
    assert zk.stat("/e").ephemeralOwner == zk.sid
    assert zk.stat("/f").ephemeralOwner == other
    assert zk.tree.ephemerals_of(zk.sid) == ["/e"]
    assert zk.tree.ephemerals_of(other) == ["/f"]
    assert zk.tree.ephemerals_of(12345) == []


def test_ephemerals_go_with_their_session() -> None:
    zk = ZK()
    other = zk.sa.session()
    zk.create("/p")
    e1 = zk.create("/p/e", mode=EPHEMERAL)
    e2 = zk.create("/p/s", mode=EPHEMERAL_SEQUENTIAL)
    e3 = zk.create("/top", mode=EPHEMERAL)
    keep = zk.w(Create("/p/k", mode=EPHEMERAL), sid=other)
    assert isinstance(keep, CreateResult)
    persistent = zk.create("/p/persistent")
    parent = zk.stat("/p")
    assert zk.sa.close(zk.sid) == SessionResult(zk.sid)
    zxid = zk.sa.zxid
    for path in (e1, e2, e3):
        assert zk.tree.stat(path) is None
    assert zk.tree.stat("/p/k") is not None and zk.tree.stat(persistent) is not None
    # two children fewer: the client's cversion counts both deletes
    assert zk.stat("/p") == parent._replace(pzxid=zxid, numChildren=2, cversion=parent.cversion + 2)
    assert zk.tree.ephemerals_of(zk.sid) == []
    assert zk.sid not in zk.tree.sessions and other in zk.tree.sessions
    deleted = [p for kind, p, _ in zk.sa.triggers if kind == EventType.NODE_DELETED]
    assert sorted(deleted) == sorted([e1, e2, e3])
    assert (EventType.NODE_CHILDREN_CHANGED, "/p", OPEN_ACL_UNSAFE) in zk.sa.triggers
    assert (EventType.NODE_CHILDREN_CHANGED, "/", OPEN_ACL_UNSAFE) in zk.sa.triggers


def test_deleted_ephemeral_leaves_the_sessions_list() -> None:
    zk = ZK()
    zk.create("/e", mode=EPHEMERAL)
    zk.create("/f", mode=EPHEMERAL)
    zk.w(Delete("/e"))
    assert zk.tree.ephemerals_of(zk.sid) == ["/f"]
    zk.w(Delete("/f"))
    assert zk.tree.ephemerals_of(zk.sid) == []
    assert zk.sa.close(zk.sid) == SessionResult(zk.sid)


def test_get_ephemerals_with_a_prefix() -> None:
    zk = ZK()
    other = zk.sa.session()
    zk.create("/a")
    zk.create("/ab")
    for path in ("/a/1", "/a/2", "/ab/3", "/b"):
        zk.create(path, mode=EPHEMERAL)
    zk.w(Create("/a/other", mode=EPHEMERAL), sid=other)

    def eph(prefix: str) -> list[str]:
        r = zk.sa.read(zk.sid, GetEphemerals(prefix))
        assert isinstance(r, PathsResult)
        return sorted(r.paths)

    assert eph("/") == ["/a/1", "/a/2", "/ab/3", "/b"]
    assert eph("") == eph(" ") == eph(" / ") == eph("/")
    # FinalRequestProcessor: p.startsWith(prefixPath), a string prefix, not a path one
    assert eph("/a") == ["/a/1", "/a/2", "/ab/3"]
    assert eph("/a/") == ["/a/1", "/a/2"]
    assert eph("/b") == ["/b"]
    assert eph("/zzz") == []
    assert zk.sa.read(other, GetEphemerals()) == PathsResult(["/a/other"])


def test_no_children_for_ephemerals() -> None:
    zk = ZK()
    zk.create("/e", mode=EPHEMERAL)
    for mode in (PERSISTENT, EPHEMERAL, PERSISTENT_SEQUENTIAL, CONTAINER):
        assert zk.w(Create("/e/c", mode=mode)) == ErrorResult(Code.NO_CHILDREN_FOR_EPHEMERALS)
    assert zk.stat("/e").numChildren == 0


# ZooKeeper's DataTree.killSession deletes the listed paths AND every ephemeral the tree still holds for
# the session (DataTree.java 948-957, 1130-1155). (Found by these tests; fixed in fe81526.)
def test_close_session_txn_deletes_ephemerals_it_does_not_list() -> None:
    t = DataTree()
    t.apply(1, tx.encode(tx.T_CREATE_SESSION, T0, 5, 1000, b""))
    t.apply(2, tx.encode(tx.T_CREATE, T0, 5, "/e", b"", OPEN, 5, 1))
    t.apply(3, tx.encode(tx.T_CLOSE_SESSION, T0, 5, []))
    assert t.stat("/e") is None


# --------------------------------------------------- containers and TTL nodes


def test_container_and_ttl_owners() -> None:
    zk = ZK()
    zk.create("/c", mode=CONTAINER)
    zk.create("/t", mode=PERSISTENT_WITH_TTL, ttl=1234)
    zk.create("/tmax", mode=PERSISTENT_WITH_TTL, ttl=MAX_TTL)
    assert zk.tree.nodes["/c"].owner == CONTAINER_OWNER == -(2**63)
    assert zk.tree.nodes["/t"].owner == -(1 << 56) | 1234
    assert zk.tree.nodes["/t"].owner & 0xFFFFFFFFFFFFFFFF == 0xFF000000000004D2  # EphemeralType.TTL
    assert ttl_of(zk.tree.nodes["/t"].owner) == 1234
    assert ttl_of(zk.tree.nodes["/tmax"].owner) == MAX_TTL
    assert ttl_of(CONTAINER_OWNER) == 0 and ttl_of(0) == 0 and ttl_of(zk.sid) == 0
    assert zk.tree.containers == {"/c"}
    assert zk.tree.ttls == {"/t", "/tmax"}
    assert zk.tree.ephemerals == {}
    # neither is an ephemeral: both take children
    zk.create("/c/kid")
    zk.create("/t/kid")


# ZooKeeper's Stat shows ephemeralOwner 0 for containers and TTL nodes (DataNode.getClientEphemeralOwner,
# DataNode.java 153, 166-172). (Found by these tests; fixed in fe81526.)
def test_container_and_ttl_stat_ephemeral_owner_is_zero_for_clients() -> None:
    zk = ZK()
    r1 = zk.w(Create("/c", mode=CONTAINER))
    r2 = zk.w(Create("/t", mode=PERSISTENT_WITH_TTL, ttl=1234))
    assert isinstance(r1, CreateResult) and isinstance(r2, CreateResult)
    assert (r1.stat.ephemeralOwner, r2.stat.ephemeralOwner) == (0, 0)


def test_container_cleanup_candidates() -> None:
    zk = ZK()
    zk.create("/c", mode=CONTAINER)
    zk.create("/d", mode=CONTAINER)
    # never had a child: not a candidate (ContainerManager: cversion > 0)
    assert zk.tree.cleanup_candidates(T0 + 10**9) == []
    zk.create("/c/kid")
    assert zk.tree.cleanup_candidates(T0 + 10**9) == []  # has a child
    zk.w(Delete("/c/kid"))
    assert zk.tree.cleanup_candidates(T0) == ["/c"]  # empty again: at once, whatever the time
    assert zk.w(DeleteContainer("/c"), sid=0) == DeleteResult()
    assert zk.tree.stat("/c") is None
    assert zk.tree.containers == {"/d"}
    assert zk.tree.cleanup_candidates(T0 + 10**9) == []


def test_ttl_cleanup_candidates() -> None:
    zk = ZK()
    zk.create("/t", mode=PERSISTENT_WITH_TTL, ttl=1000, at=T0)
    assert zk.tree.cleanup_candidates(T0 + 1000) == []  # elapsed must exceed the ttl
    assert zk.tree.cleanup_candidates(T0 + 1001) == ["/t"]
    zk.w(SetData("/t", b"touch"), at=T0 + 500)  # mtime moves
    assert zk.tree.cleanup_candidates(T0 + 1001) == []
    assert zk.tree.cleanup_candidates(T0 + 1501) == ["/t"]
    zk.create("/t/kid", at=T0 + 600)  # a child keeps it (the parent's mtime is unchanged)
    assert zk.tree.cleanup_candidates(T0 + 10**9) == []
    zk.w(Delete("/t/kid"))
    assert zk.tree.cleanup_candidates(T0 + 1501) == ["/t"]
    assert zk.w(DeleteContainer("/t"), sid=0) == DeleteResult()
    assert zk.tree.ttls == set()


def test_cleanup_candidates_are_sorted_containers_first() -> None:
    zk = ZK()
    for p in ("/c2", "/c1"):
        zk.create(p, mode=CONTAINER)
        zk.create(p + "/k")
        zk.w(Delete(p + "/k"))
    for p in ("/t2", "/t1"):
        zk.create(p, mode=PERSISTENT_WITH_TTL, ttl=1, at=T0)
    assert zk.tree.cleanup_candidates(T0 + 10) == ["/c1", "/c2", "/t1", "/t2"]


def test_delete_container_refuses_a_non_empty_node() -> None:
    zk = ZK()
    zk.create("/c", mode=CONTAINER)
    zk.create("/c/k")
    assert zk.w(DeleteContainer("/c"), sid=0) == ErrorResult(Code.NOT_EMPTY)
    zk.create("/t", mode=PERSISTENT_WITH_TTL, ttl=1)
    zk.create("/t/k")
    assert zk.w(DeleteContainer("/t"), sid=0) == ErrorResult(Code.NOT_EMPTY)


def test_delete_container_refuses_a_recreated_node() -> None:
    zk = ZK()
    zk.create("/c", mode=CONTAINER)
    zk.w(Delete("/c"))
    zk.create("/c", mode=EPHEMERAL)
    # ZooKeeper: BadVersion for an ephemeral (PrepRequestProcessor deleteContainer)
    assert zk.w(DeleteContainer("/c"), sid=0) == ErrorResult(Code.BAD_VERSION)
    zk.w(Delete("/c"))
    zk.create("/c")
    # stricter than ZooKeeper (documented in prep.py): a persistent node is left alone too
    assert zk.w(DeleteContainer("/c"), sid=0) == ErrorResult(Code.BAD_VERSION)
    assert zk.tree.stat("/c") is not None


def test_delete_container_of_a_missing_or_special_node() -> None:
    zk = ZK()
    assert zk.w(DeleteContainer("/nope"), sid=0) == ErrorResult(Code.NO_NODE)
    assert zk.w(DeleteContainer("/zookeeper"), sid=0) == ErrorResult(Code.BAD_ARGUMENTS)


# ------------------------------------------------------------- version wrap


def test_next_version() -> None:
    assert next_version(0, -1, "/p") == 1
    assert next_version(5, 5, "/p") == 6
    assert next_version(INT_MAX, -1, "/p") == INT_MIN  # a Java int wraps
    assert next_version(-2, -1, "/p") == 0  # ZOOKEEPER-4743: -1 is skipped
    assert next_version(-2, -2, "/p") == 0
    assert next_version(INT_MIN, INT_MIN, "/p") == INT_MIN + 1


def test_set_data_version_wraps_and_skips_minus_one() -> None:
    p = Pipe()
    p.session(7)
    p.write(7, Create("/v"))
    p.tree.apply(p.zxid + 1, tx.encode(tx.T_SET_DATA, T0, 7, "/v", b"", INT_MAX))
    p.zxid += 1
    r = p.write(7, SetData("/v", b"a", version=INT_MAX))
    assert isinstance(r, StatResult) and r.stat.version == INT_MIN
    assert p.write(7, SetData("/v", b"b", version=INT_MAX)) == ErrorResult(Code.BAD_VERSION)
    assert p.write(7, Multi((Check("/v", INT_MIN),))) == MultiResult((CheckResult(),))
    p.tree.apply(p.zxid + 1, tx.encode(tx.T_SET_DATA, T0, 7, "/v", b"", -2))
    p.zxid += 1
    r = p.write(7, SetData("/v", b"c", version=-2))
    assert isinstance(r, StatResult) and r.stat.version == 0
    # and -1 remains "any version"
    r = p.write(7, SetData("/v", b"d", version=-1))
    assert isinstance(r, StatResult) and r.stat.version == 1


def test_set_acl_aversion_wraps() -> None:
    p = Pipe()
    p.session(7)
    p.write(7, Create("/v"))
    p.tree.apply(p.zxid + 1, tx.encode(tx.T_SET_ACL, T0, 7, "/v", OPEN, INT_MAX))
    p.zxid += 1
    r = p.write(7, SetACL("/v", OPEN_ACL_UNSAFE, version=INT_MAX))
    assert isinstance(r, StatResult) and r.stat.aversion == INT_MIN


def test_delete_with_a_wrapped_version() -> None:
    p = Pipe()
    p.session(7)
    p.write(7, Create("/v"))
    p.tree.apply(p.zxid + 1, tx.encode(tx.T_SET_DATA, T0, 7, "/v", b"", INT_MIN))
    p.zxid += 1
    assert p.write(7, Delete("/v", version=INT_MAX)) == ErrorResult(Code.BAD_VERSION)
    assert p.write(7, Delete("/v", version=INT_MIN)) == DeleteResult()


# A parent's cversion is a Java int in ZooKeeper: getCversion() + 1 wraps to -2**31
# (PrepRequestProcessor.pRequest2TxnCreate) and DataTree.createNode then keeps the old cversion and pzxid
# (parentCVersion > parent.stat.getCversion() is false). zabd used to emit 2**31 and die in apply with
# struct.error half-way (the child already in the tree): found by these tests, fixed in fe81526.
def test_cversion_at_int_max_does_not_break_apply() -> None:
    p = Pipe()
    p.session(7)
    p.write(7, Create("/p"))
    p.tree.apply(p.zxid + 1, tx.encode(tx.T_CREATE, T0, 7, "/p/c", b"", OPEN, 0, INT_MAX))
    p.zxid += 1
    pzxid = p.tree.nodes["/p"].pzxid
    r = p.write(7, Create("/p/x", mode=PERSISTENT_SEQUENTIAL))
    assert isinstance(r, CreateResult) and r.path == "/p/x2147483647"
    assert p.tree.applied == p.zxid
    assert p.tree.children_of("/p") == ["c", "x2147483647"]
    assert p.tree.nodes["/p"].cversion == INT_MAX and p.tree.nodes["/p"].pzxid == pzxid
    st = p.tree.stat("/p")
    assert st is not None and st.cversion == -4  # Java: INT_MAX * 2 - 2 children, in int arithmetic
    assert DataTree.restore(p.tree.snapshot()).digest == p.tree.digest


# ------------------------------------------------ determinism and the digest


def some_history(zk: ZK) -> None:
    other = zk.sa.session()
    zk.create("/a", b"1")
    zk.create("/a/b", b"2", acl=(ACL(ALL, ANYONE), ACL(READ, Id("ip", "10.0.0.0/8"))))
    zk.create("/a/s", mode=PERSISTENT_SEQUENTIAL)
    zk.w(Create("/e", b"eph", mode=EPHEMERAL), sid=other)
    zk.create("/c", mode=CONTAINER)
    zk.create("/t", b"ttl", mode=PERSISTENT_WITH_TTL, ttl=99)
    zk.w(SetData("/a", b"11"))
    zk.w(SetACL("/a/b", OPEN_ACL_UNSAFE))
    zk.w(Multi((Create("/m"), SetData("/m", b"x"), Create("/m/k"), Delete("/m/k"))))
    zk.w(Delete("/a/b"))


class Recorder:
    """Keeps every (zxid, payload) a Standalone applies to its tree."""

    def __init__(self, sa: Standalone) -> None:
        self.log: list[tuple[int, bytes]] = []
        sa.recorded = self.log


def test_apply_is_deterministic() -> None:
    zk = ZK()
    rec = Recorder(zk.sa)
    some_history(zk)
    a, b = DataTree(), DataTree()
    # the first session was created before the recorder: replay it too
    first = tx.encode(tx.T_CREATE_SESSION, T0, zk.sid, 30_000, b"\0" * 16)
    for t in (a, b):
        t.apply(zk.sa.zxid - len(rec.log), first)
        for zxid, payload in rec.log:
            t.apply(zxid, payload)
    assert a.digest == b.digest == zk.tree.digest
    assert a.snapshot() == b.snapshot() == zk.tree.snapshot()


def test_digest_changes_with_every_write() -> None:
    zk = ZK()
    seen = {zk.tree.digest}
    writes = [
        Create("/a", b"x"), Create("/a/b"), SetData("/a", b"y"), SetData("/a", b"y"), Delete("/a/b"),
        SetACL("/a", READ_ACL_UNSAFE), Create("/e", mode=EPHEMERAL), Multi((Create("/m"), Create("/m/n"))),
        Create("/c", mode=CONTAINER), Create("/t", mode=PERSISTENT_WITH_TTL, ttl=5),
    ]
    for req in writes:
        r = zk.w(req)
        assert not isinstance(r, ErrorResult) and not (isinstance(r, MultiResult) and r.failed), (req, r)
        assert zk.tree.digest not in seen, req
        seen.add(zk.tree.digest)
    zk.sa.session()
    assert zk.tree.digest not in seen
    seen.add(zk.tree.digest)
    zk.sa.close(zk.sid)
    assert zk.tree.digest not in seen


def test_digest_is_a_function_of_the_state() -> None:
    # the same content reached by different histories has the same digest
    # (zxids and times included, so only a no-op round trip can show it)
    zk = ZK()
    zk.create("/a")
    d = zk.tree.digest
    zk.create("/a/b")
    assert zk.tree.digest != d
    zk.w(Delete("/a/b"))
    assert zk.tree.digest != d  # /a's pzxid moved
    t = DataTree()
    assert t.digest == DataTree().digest


def test_restore_gives_the_same_tree() -> None:
    zk = ZK()
    some_history(zk)
    snap = zk.tree.snapshot()
    r = DataTree.restore(snap)
    assert r.digest == zk.tree.digest
    assert r.applied == zk.tree.applied
    assert set(r.nodes) == set(zk.tree.nodes)
    for path, node in zk.tree.nodes.items():
        assert r.stat(path) == node.stat()
        assert r.nodes[path].data == node.data
        assert r.nodes[path].acl == node.acl
        assert r.children_of(path) == zk.tree.children_of(path)
    assert r.sessions == zk.tree.sessions
    assert r.ephemerals == zk.tree.ephemerals
    assert r.containers == zk.tree.containers and r.ttls == zk.tree.ttls
    assert r.snapshot() == snap
    assert r.cleanup_candidates(T0 + 10**9) == zk.tree.cleanup_candidates(T0 + 10**9)


def test_restored_tree_applies_like_the_original() -> None:
    zk = ZK()
    some_history(zk)
    r = DataTree.restore(zk.tree.snapshot())
    leader = ZKLeader(r)
    for req in (Create("/a/new", b"q"), SetData("/a", b"z"), Delete("/t"), CloseSession()):
        p = leader.prepare(zk.sid, (), req, T0 + 1)
        zk.sa.zxid += 1
        assert r.apply(zk.sa.zxid, p.payload).result == zk.tree.apply(zk.sa.zxid, p.payload).result
        assert r.digest == zk.tree.digest
    assert r.snapshot() == zk.tree.snapshot()


def test_restore_refuses_a_flipped_data_byte() -> None:
    zk = ZK()
    zk.create("/n", b"PAYLOAD-0123456789")
    snap = zk.tree.snapshot()
    i = snap.index(b"PAYLOAD-0123456789")
    bad = snap[:i + 8] + bytes([snap[i + 8] ^ 0x01]) + snap[i + 9:]
    assert len(bad) == len(snap)
    with pytest.raises(ValueError, match="digest"):
        DataTree.restore(bad)


def test_restore_refuses_a_changed_acl() -> None:
    zk = ZK()
    zk.create("/n", acl=(ACL(ALL, Id("ip", "10.0.0.1")),))
    snap = zk.tree.snapshot()
    bad = snap.replace(b"10.0.0.1", b"10.0.0.2")
    assert bad != snap
    with pytest.raises(ValueError, match="digest"):
        DataTree.restore(bad)


@pytest.mark.parametrize("data", [
    b"",
    b"garbage",
    b"\x93\x01\x02\x03",  # a msgpack array, not a snapshot
    tx.encode(tx.T_CREATE_SESSION, 0, 1, 1000, b""),
])
def test_restore_refuses_other_formats(data: bytes) -> None:
    with pytest.raises(ValueError):
        DataTree.restore(data)


def test_restore_refuses_another_format_number_and_truncation() -> None:
    zk = ZK()
    zk.create("/n", b"x")
    snap = zk.tree.snapshot()
    # the format number is the second byte (after the array header): 6 -> 7
    assert snap[1] == 6
    with pytest.raises(ValueError, match="format"):
        DataTree.restore(snap[:1] + b"\x07" + snap[2:])
    with pytest.raises(ValueError):
        DataTree.restore(snap[:-3])


@pytest.mark.parametrize("fmt", [2, 3], ids=["blake2b", "crc32"])
def test_restore_takes_an_older_snapshot_and_recomputes_its_digest(fmt: int) -> None:
    # format 2 recorded a BLAKE2b digest, 3 a CRC-32 one: the content is the
    # same, the digest is recomputed
    zk = ZK()
    zk.create("/n", b"x")
    fields = list(msgpack.unpackb(as_format(zk.tree.snapshot(), fmt), raw=False))
    fields[2] ^= 1  # another hash's digest
    tree = DataTree.restore(msgpack.packb(fields, use_bin_type=True))
    assert tree.digest == zk.tree.digest
    assert tree.nodes["/n"].data == b"x"


def as_format(snap: bytes, fmt: int) -> bytes:
    """A format-6 snapshot rewritten as formats 2 to 5 wrote it: rows of
    three fields (four for null data), the ACL table after them."""
    f6, applied, digest, rows, _, sessions, count = msgpack.unpackb(snap, raw=False)
    assert f6 == 6
    acls = [row[4] for row in rows if len(row) == 5]
    old = [[p, blob, a, 1] if len(row) > 3 and row[3] else [p, blob, a] for row in rows for p, blob, a in [row[:3]]]
    return msgpack.packb([fmt, applied, digest, old, acls, sessions, count], use_bin_type=True)


def test_restore_takes_a_format_5_snapshot() -> None:
    zk = ZK()
    zk.create("/n", b"x", acl=(ACL(ALL, Id("ip", "10.0.0.1")),))
    zk.create("/null", None)
    zk.create("/e", mode=EPHEMERAL)
    tree = DataTree.restore(as_format(zk.tree.snapshot(), 5))
    assert tree.digest == zk.tree.digest
    assert tree.snapshot() == zk.tree.snapshot()


def test_snapshot_in_pieces_is_the_snapshot_whole() -> None:
    """What a SNAP streams: the chunks join to the snapshot's bytes, and a
    builder fed them in pieces of any size (a row split anywhere) makes the
    same tree as one restore."""
    zk = ZK()
    for i in range(30):
        acl = OPEN_ACL_UNSAFE if i < 3 else (ACL(ALL, Id("ip", f"10.0.0.{i % 4}")),)
        zk.create(f"/p{i % 3}" if i < 3 else f"/p{i % 3}/c{i}", bytes([i]) * i, acl=acl)
    zk.create("/p0/null", None)
    zk.create("/e", mode=EPHEMERAL)
    view = zk.tree.snapshot_view()
    chunks = list(DataTree.encode_chunks(view, 64))
    assert len(chunks) > 10
    snap = b"".join(chunks)
    assert snap == zk.tree.snapshot()
    for step in (1, 7, 64, 1000, len(snap)):
        builder = TreeBuilder()
        for off in range(0, len(snap), step):
            builder.feed(snap[off : off + step])
        assert builder.done
        tree = builder.finish()
        assert tree.digest == zk.tree.digest
        assert tree.snapshot() == snap
        assert tree.ephemerals == zk.tree.ephemerals
        assert tree.children_of("/p1") == zk.tree.children_of("/p1")


def test_builder_refuses_a_snapshot_cut_short_or_followed_by_more() -> None:
    zk = ZK()
    zk.create("/n", b"x")
    snap = zk.tree.snapshot()
    builder = TreeBuilder()
    builder.feed(snap[:-1])
    assert not builder.done
    with pytest.raises(ValueError, match="cut short"):
        builder.finish()
    builder = TreeBuilder()
    builder.feed(snap + b"\x01")
    with pytest.raises(ValueError, match="after its end"):
        builder.finish()


def test_snapshot_view_is_copy_on_write() -> None:
    zk = ZK()
    zk.create("/p", b"old")
    zk.create("/p/a")
    zk.create("/e", mode=EPHEMERAL)
    expected = zk.tree.snapshot()
    digest = zk.tree.digest
    view = zk.tree.snapshot_view()
    # every kind of change after the view: data, children of a shared parent, acl, delete, sessions
    zk.w(SetData("/p", b"new"))
    zk.create("/p/b")
    zk.w(Delete("/p/a"))
    zk.w(SetACL("/p", READ_ACL_UNSAFE))
    zk.sa.session()
    zk.sa.close(zk.sid)
    encoded = DataTree.encode_view(view)
    assert encoded == expected
    old = DataTree.restore(encoded)
    assert old.digest == digest
    assert old.nodes["/p"].data == b"old"
    assert old.children_of("/p") == ["a"]
    assert old.stat("/e") is not None and zk.sid in old.sessions


def test_malformed_txn_is_a_value_error_and_changes_nothing() -> None:
    zk = ZK()
    zk.create("/n")
    digest, applied = zk.tree.digest, zk.tree.applied
    for payload in (b"not a txn", tx.encode(tx.T_CREATE, T0, 0, "/x"), tx.encode(tx.T_SET_DATA, T0, 0)):
        with pytest.raises(ValueError):
            zk.tree.apply(applied + 1, payload)
    assert zk.tree.digest == digest and zk.tree.applied == applied and zk.tree.stat("/x") is None


def test_reads_see_the_applied_tree() -> None:
    zk = ZK()
    zk.create("/n", b"v")
    assert serve(zk.tree, Exists("/n"), (), zk.sid) == zk.sa.read(zk.sid, Exists("/n"))
    assert zk.sa.read(zk.sid, Exists("/missing")).stat is None  # type: ignore[union-attr]
    r = zk.sa.read(zk.sid, GetChildren("/n", with_stat=True))
    assert r.stat == zk.stat("/n") and r.children == []  # type: ignore[union-attr]
    assert zk.sa.read(zk.sid, GetChildren("/n")).stat is None  # type: ignore[union-attr]


def test_a_snapshot_of_format_4_holds_passwords_and_restores_with_their_digests() -> None:
    """Format 4 (before passwords left the log) kept each session's password
    and a digest over it: it restores, checked against that digest, and the
    table holds the password's digest, as a replay of the same txns gives."""
    password = bytes(range(16))
    legacy = tx.encode(tx.T_CREATE_SESSION, 1, 77, 30_000, password)  # an old log's txn: the password itself
    replayed = DataTree()
    replayed.apply(1, legacy)
    assert replayed.sessions[77].password_digest == password_digest(password)
    fmt, applied, _, rows, acls, sessions, count = msgpack.unpackb(as_format(replayed.snapshot(), 5), raw=False)
    assert fmt == 5 and sessions == [[77, 30_000, password_digest(password)]]
    nodes = sum(replayed._node_hash(p, n) for p, n in replayed.nodes.items())
    old_digest = (nodes + DataTree._session_hash(77, 30_000, password)) & ((1 << 64) - 1)
    old = msgpack.packb([4, applied, old_digest, rows, acls, [[77, 30_000, password]], count])
    restored = DataTree.restore(old)
    assert restored.digest == replayed.digest
    assert password_matches(restored.sessions[77].password_digest, password)
    assert not password_matches(restored.sessions[77].password_digest, bytes(16))
    with pytest.raises(ValueError, match="digest"):  # still checked: a format 4 snapshot with a wrong digest
        DataTree.restore(msgpack.packb([4, applied, old_digest ^ 1, rows, acls, [[77, 30_000, password]], count]))

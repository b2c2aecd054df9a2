"""The leader's request processor (ZooKeeper 3.8's ``PrepRequestProcessor``)
and the reads (``FinalRequestProcessor``): every error in ZooKeeper's order,
the ACL checks, multi, and prepares against proposals not committed yet."""

from __future__ import annotations

from typing import Any

import pytest

from tests.zk.standalone import Standalone
from zabd.zk import txn as tx
from zabd.zk.acl import (
    ACL,
    ADMIN,
    ALL,
    ANYONE,
    CREATE,
    DELETE,
    OPEN_ACL_UNSAFE,
    READ,
    SUPER,
    WRITE,
    Id,
    digest_id,
)
from zabd.zk.errors import Code
from zabd.zk.prep import ZKLeader
from zabd.zk.records import (
    CONTAINER,
    EPHEMERAL,
    EPHEMERAL_SEQUENTIAL,
    MAX_TTL,
    PERSISTENT,
    PERSISTENT_SEQUENTIAL,
    PERSISTENT_SEQUENTIAL_WITH_TTL,
    PERSISTENT_WITH_TTL,
    ACLResult,
    Check,
    CheckResult,
    ChildrenResult,
    CloseSession,
    CountResult,
    Create,
    CreateResult,
    CreateSession,
    DataResult,
    Delete,
    DeleteResult,
    ErrorResult,
    Exists,
    ExistsResult,
    GetACL,
    GetAllChildrenNumber,
    GetChildren,
    GetData,
    Multi,
    MultiResult,
    SessionResult,
    SetACL,
    SetData,
    StatResult,
)
from zabd.zk.tree import DataTree

T0 = 1_700_000_000_000
ALICE = Id("digest", digest_id("alice", "secret"))
BOB = Id("digest", digest_id("bob", "pw"))
IP = Id("ip", "10.0.0.5")
OK_, RI = Code.OK, Code.RUNTIME_INCONSISTENCY


def only(perms: int, who: Id = ANYONE) -> tuple[ACL, ...]:
    return (ACL(perms, who),)


def codes(r: Any) -> list[Code]:
    assert isinstance(r, MultiResult), r
    assert all(isinstance(x, ErrorResult) for x in r.results), r
    return [x.code for x in r.results]


class ZK:
    def __init__(self, **kw: Any) -> None:
        self.sa = Standalone(**kw)
        self.sid = self.sa.session()

    def w(self, req: Any, auth: tuple[Id, ...] = (), sid: int | None = None) -> Any:
        return self.sa.write(self.sid if sid is None else sid, req, auth)

    def r(self, req: Any, auth: tuple[Id, ...] = ()) -> Any:
        return self.sa.read(self.sid, req, auth)

    def ok(self, req: Any, auth: tuple[Id, ...] = ()) -> Any:
        r = self.w(req, auth)
        assert not isinstance(r, ErrorResult) and not (isinstance(r, MultiResult) and r.failed), (req, r)
        return r

    def err(self, req: Any, auth: tuple[Id, ...] = ()) -> Code:
        r = self.w(req, auth)
        assert isinstance(r, ErrorResult), (req, r)
        return r.code


class Pipe:
    """A leader and its tree driven by hand: propose now, apply later."""

    def __init__(self, **kw: Any) -> None:
        self.tree = DataTree()
        self.leader = ZKLeader(self.tree, **kw)
        self.zxid = 1 << 32
        self.pending: list[tuple[int, bytes]] = []

    def propose(self, sid: int, req: Any, auth: tuple[Id, ...] = ()) -> int:
        p = self.leader.prepare(sid, auth, req, T0)
        self.zxid += 1
        self.leader.proposed(self.zxid, p)
        self.pending.append((self.zxid, p.payload))
        return self.zxid

    def payload(self, zxid: int) -> list[Any]:
        return next(tx.decode(p) for z, p in self.pending if z == zxid)

    def commit(self, upto: int | None = None) -> list[Any]:
        out = []
        while self.pending and (upto is None or self.pending[0][0] <= upto):
            zxid, payload = self.pending.pop(0)
            out.append(self.tree.apply(zxid, payload).result)
            self.leader.committed(zxid)
        return out

    def write(self, sid: int, req: Any, auth: tuple[Id, ...] = ()) -> Any:
        self.propose(sid, req, auth)
        return self.commit()[-1]


S = 7  # the session of Pipe tests


def pipe(**kw: Any) -> Pipe:
    p = Pipe(**kw)
    assert p.write(S, CreateSession(S, 30_000, b"x" * 16)) == SessionResult(S)
    return p


# ------------------------------------------------------------------ errors


def test_no_node() -> None:
    zk = ZK()
    assert zk.err(Create("/missing/child")) == Code.NO_NODE
    assert zk.err(Delete("/missing")) == Code.NO_NODE
    assert zk.err(Delete("/missing/child")) == Code.NO_NODE
    assert zk.err(SetData("/missing", b"")) == Code.NO_NODE
    assert zk.err(SetACL("/missing", OPEN_ACL_UNSAFE)) == Code.NO_NODE
    assert codes(zk.w(Multi((Check("/missing", -1),)))) == [Code.NO_NODE]
    for req in (GetData("/missing"), GetChildren("/missing"), GetACL("/missing"), GetAllChildrenNumber("/missing")):
        assert zk.r(req) == ErrorResult(Code.NO_NODE)
    assert zk.r(Exists("/missing")) == ExistsResult(None)


def test_node_exists() -> None:
    zk = ZK()
    zk.ok(Create("/a"))
    assert zk.err(Create("/a")) == Code.NODE_EXISTS
    assert zk.err(Create("/a", mode=EPHEMERAL)) == Code.NODE_EXISTS
    assert zk.err(Create("/zookeeper")) == Code.NODE_EXISTS
    # a sequential name that is already taken (created by hand)
    zk.ok(Create("/s"))
    zk.ok(Create("/s/n0000000001"))
    assert zk.err(Create("/s/n", mode=PERSISTENT_SEQUENTIAL)) == Code.NODE_EXISTS  # cversion 1 -> n0000000001


def test_not_empty() -> None:
    zk = ZK()
    zk.ok(Create("/a"))
    zk.ok(Create("/a/b"))
    assert zk.err(Delete("/a")) == Code.NOT_EMPTY
    assert zk.err(Delete("/a", version=0)) == Code.NOT_EMPTY
    # version is checked before emptiness
    assert zk.err(Delete("/a", version=3)) == Code.BAD_VERSION


def test_bad_version_everywhere() -> None:
    zk = ZK()
    zk.ok(Create("/v"))
    assert zk.err(SetData("/v", b"", version=1)) == Code.BAD_VERSION
    assert zk.err(Delete("/v", version=1)) == Code.BAD_VERSION
    assert zk.err(SetACL("/v", OPEN_ACL_UNSAFE, version=1)) == Code.BAD_VERSION
    assert codes(zk.w(Multi((Check("/v", 1),)))) == [Code.BAD_VERSION]
    assert zk.ok(SetData("/v", b"", version=0)).stat.version == 1
    # setACL checks the aversion, not the version
    assert zk.err(SetACL("/v", OPEN_ACL_UNSAFE, version=1)) == Code.BAD_VERSION
    assert zk.ok(SetACL("/v", OPEN_ACL_UNSAFE, version=0)).stat.aversion == 1
    assert zk.ok(Multi((Check("/v", 1),))) == MultiResult((CheckResult(),))
    assert zk.ok(Delete("/v", version=1)) == DeleteResult()


def test_no_children_for_ephemerals() -> None:
    zk = ZK()
    zk.ok(Create("/e", mode=EPHEMERAL_SEQUENTIAL))
    path = zk.sa.tree.children_of("/")[0]
    for mode in (PERSISTENT, EPHEMERAL, PERSISTENT_SEQUENTIAL, EPHEMERAL_SEQUENTIAL, CONTAINER):
        assert zk.err(Create(f"/{path}/c", mode=mode)) == Code.NO_CHILDREN_FOR_EPHEMERALS
    assert zk.err(Create(f"/{path}/t", mode=PERSISTENT_WITH_TTL, ttl=10)) == Code.NO_CHILDREN_FOR_EPHEMERALS
    # NodeExists comes first (PrepRequestProcessor: exists, then the ephemeral parent)
    assert zk.err(Create(f"/{path}")) == Code.NODE_EXISTS


@pytest.mark.parametrize("acl", [
    (),
    (ACL(ALL, Id("auth", "")),),  # no digest identity to expand to
    (ACL(ALL, Id("digest", "nocolon")),),
    (ACL(ALL, Id("ip", "999.0.0.1")),),
    (ACL(ALL, Id("world", "everyone")),),
    (ACL(ALL, Id("super", "")),),
])
def test_invalid_acl_on_create_and_set_acl(acl: tuple[ACL, ...]) -> None:
    zk = ZK()
    zk.ok(Create("/n"))
    assert zk.err(Create("/m", acl=acl)) == Code.INVALID_ACL
    assert zk.err(SetACL("/n", acl)) == Code.INVALID_ACL
    # fixupACL runs before the node is looked up
    assert zk.err(SetACL("/missing", acl)) == Code.INVALID_ACL
    assert zk.err(Create("/missing/m", acl=acl)) == Code.INVALID_ACL


def test_auth_acl_expands_to_the_requesters_digest_ids() -> None:
    zk = ZK()
    zk.ok(Create("/n", acl=(ACL(ALL, Id("auth", "")),)), auth=(IP, ALICE))
    assert zk.sa.tree.nodes["/n"].acl == (ACL(ALL, ALICE),)
    zk.ok(SetACL("/n", (ACL(READ | ADMIN, Id("auth", "")),)), auth=(ALICE, BOB))
    assert zk.sa.tree.nodes["/n"].acl == (ACL(READ | ADMIN, ALICE), ACL(READ | ADMIN, BOB))


def test_duplicate_acl_entries_are_stored_once() -> None:
    zk = ZK()
    zk.ok(Create("/n", acl=(ACL(READ, ANYONE), ACL(ALL, ALICE), ACL(READ, ANYONE))))
    assert zk.sa.tree.nodes["/n"].acl == (ACL(READ, ANYONE), ACL(ALL, ALICE))


@pytest.mark.parametrize(("req", "code"), [
    (Create("a"), Code.BAD_ARGUMENTS),  # no '/': validatePathForCreate
    (Create("/a\x00"), Code.BAD_ARGUMENTS),
    (Create("/a/"), Code.BAD_ARGUMENTS),
    (Create("//a"), Code.BAD_ARGUMENTS),  # parent "/" exists; validatePath refuses
    (Create("/."), Code.BAD_ARGUMENTS),
    (Create("/x\x01"), Code.BAD_ARGUMENTS),
    (Create("/nope//a"), Code.NO_NODE),  # the parent "/nope/" is looked up before the path is validated
    (SetData("a", b""), Code.BAD_ARGUMENTS),
    (SetData("/a/", b""), Code.BAD_ARGUMENTS),
    (SetData("", b""), Code.BAD_ARGUMENTS),
    (SetData("/a//", b""), Code.BAD_ARGUMENTS),  # a missing node's path is still checked first
    (SetData("/a/b", b""), Code.NO_NODE),
    (SetACL("/a/..", OPEN_ACL_UNSAFE), Code.BAD_ARGUMENTS),
    (Delete("a"), Code.BAD_ARGUMENTS),
    (Delete("/a\x00"), Code.BAD_ARGUMENTS),
    (Delete("/a/"), Code.NO_NODE),  # delete does not validate the path: "/a/" just does not exist
    (Delete(""), Code.BAD_ARGUMENTS),
])
def test_bad_paths(req: Any, code: Code) -> None:
    zk = ZK()
    zk.ok(Create("/a"))
    assert zk.err(req) == code


def test_bad_path_in_check() -> None:
    zk = ZK()
    assert codes(zk.w(Multi((Check("/a/", -1),)))) == [Code.BAD_ARGUMENTS]


@pytest.mark.parametrize("path", ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"])
def test_special_paths_refused_on_delete(path: str) -> None:
    zk = ZK()
    assert zk.err(Delete(path)) == Code.BAD_ARGUMENTS
    assert codes(zk.w(Multi((Delete(path),)))) == [Code.BAD_ARGUMENTS]
    assert zk.sa.tree.stat(path) is not None


def test_special_paths_can_have_children_deleted() -> None:
    zk = ZK()
    zk.ok(Create("/zookeeper/quota/x"))
    assert zk.ok(Delete("/zookeeper/quota/x")) == DeleteResult()


@pytest.mark.parametrize(("mode", "ttl"), [
    (7, -1), (-1, -1), (100, -1),
    (PERSISTENT_WITH_TTL, 0), (PERSISTENT_WITH_TTL, -1), (PERSISTENT_WITH_TTL, MAX_TTL + 1),
    (PERSISTENT_SEQUENTIAL_WITH_TTL, 0),
    (PERSISTENT, 5), (EPHEMERAL, 0), (CONTAINER, 1),  # a ttl for a mode without one (EphemeralType.validateTTL)
])
def test_bad_mode_or_ttl(mode: int, ttl: int) -> None:
    zk = ZK()
    assert zk.err(Create("/n", mode=mode, ttl=ttl)) == Code.BAD_ARGUMENTS


def test_ttl_bounds() -> None:
    zk = ZK()
    zk.ok(Create("/a", mode=PERSISTENT_WITH_TTL, ttl=1))
    zk.ok(Create("/b", mode=PERSISTENT_WITH_TTL, ttl=MAX_TTL))


def test_ttl_disabled_is_unimplemented() -> None:
    p = pipe(ttl_enabled=False)
    assert p.write(S, Create("/t", mode=PERSISTENT_WITH_TTL, ttl=10)) == ErrorResult(Code.UNIMPLEMENTED)
    assert p.write(S, Create("/t", mode=PERSISTENT_SEQUENTIAL_WITH_TTL, ttl=10)) == ErrorResult(Code.UNIMPLEMENTED)
    assert isinstance(p.write(S, Create("/c", mode=CONTAINER)), CreateResult)


def test_data_over_max_data() -> None:
    zk = ZK(max_data=10)
    zk.ok(Create("/n", b"x" * 10))
    assert zk.err(Create("/m", b"x" * 11)) == Code.BAD_ARGUMENTS
    zk.ok(SetData("/n", b"y" * 10))
    assert zk.err(SetData("/n", b"y" * 11)) == Code.BAD_ARGUMENTS
    assert codes(zk.w(Multi((Create("/k"), SetData("/n", b"z" * 11))))) == [OK_, Code.BAD_ARGUMENTS]
    assert zk.sa.tree.nodes["/n"].data == b"y" * 10


def test_closed_or_unknown_session_is_expired() -> None:
    zk = ZK()
    zk.ok(Create("/n"))
    assert zk.sa.close(zk.sid) == SessionResult(zk.sid)
    for req in (Create("/m"), Create("/e", mode=EPHEMERAL), Delete("/n"), SetData("/n", b""),
                SetACL("/n", OPEN_ACL_UNSAFE)):
        assert zk.err(req) == Code.SESSION_EXPIRED, req
    assert codes(zk.w(Multi((Check("/n", 0), Create("/m"))))) == [Code.SESSION_EXPIRED, RI]
    assert zk.sa.write(424242, Create("/m")) == ErrorResult(Code.SESSION_EXPIRED)
    assert zk.sa.tree.stat("/m") is None


# --------------------------------------------------------------------- ACLs


def test_create_needs_create_on_the_parent() -> None:
    zk = ZK()
    zk.ok(Create("/p", acl=only(ALL & ~CREATE)))
    assert zk.err(Create("/p/c")) == Code.NO_AUTH
    # the ACL is checked before NodeExists and before the ephemeral parent
    zk.ok(Create("/q", acl=only(READ)))
    assert zk.err(Create("/q/c")) == Code.NO_AUTH
    zk.ok(Create("/r", acl=only(CREATE)))
    zk.ok(Create("/r/c", acl=only(READ)))  # CREATE alone suffices; the child's own ACL is irrelevant
    assert zk.err(Create("/r/c")) == Code.NODE_EXISTS
    zk.ok(Create("/d", acl=only(CREATE, ALICE)))
    assert zk.err(Create("/d/c"), auth=(BOB,)) == Code.NO_AUTH
    zk.ok(Create("/d/c"), auth=(BOB, ALICE))


def test_delete_needs_delete_on_the_parent() -> None:
    zk = ZK()
    zk.ok(Create("/p", acl=only(ALL & ~DELETE)))
    zk.ok(Create("/p/c"))
    assert zk.err(Delete("/p/c")) == Code.NO_AUTH
    # checked before the node is looked up: a missing child under that parent is NoAuth too
    assert zk.err(Delete("/p/missing")) == Code.NO_AUTH
    zk.ok(Create("/q", acl=only(DELETE | CREATE)))
    zk.ok(Create("/q/c", acl=only(READ)))  # the node's own ACL does not matter
    assert zk.ok(Delete("/q/c")) == DeleteResult()


def test_set_data_needs_write() -> None:
    zk = ZK()
    zk.ok(Create("/n", acl=only(ALL & ~WRITE)))
    assert zk.err(SetData("/n", b"x")) == Code.NO_AUTH
    assert zk.err(SetData("/n", b"x", version=9)) == Code.NO_AUTH  # before the version
    zk.ok(Create("/w", acl=only(WRITE)))
    zk.ok(SetData("/w", b"x"))


def test_set_acl_needs_admin() -> None:
    zk = ZK()
    zk.ok(Create("/n", acl=only(ALL & ~ADMIN)))
    assert zk.err(SetACL("/n", OPEN_ACL_UNSAFE)) == Code.NO_AUTH
    assert zk.err(SetACL("/n", OPEN_ACL_UNSAFE, version=5)) == Code.NO_AUTH
    zk.ok(Create("/a", acl=only(ADMIN)))
    zk.ok(SetACL("/a", OPEN_ACL_UNSAFE))


def test_reads_and_check_need_read() -> None:
    zk = ZK()
    zk.ok(Create("/n", b"secret", acl=only(ALL & ~READ)))
    zk.ok(Create("/n/c"))
    for req in (GetData("/n"), GetChildren("/n"), GetChildren("/n", with_stat=True), GetAllChildrenNumber("/n")):
        assert zk.r(req) == ErrorResult(Code.NO_AUTH), req
    assert codes(zk.w(Multi((Check("/n", -1),)))) == [Code.NO_AUTH]
    zk.ok(Create("/r", b"open", acl=only(READ)))
    assert zk.r(GetData("/r")) == DataResult(b"open", zk.sa.tree.stat("/r"))
    assert zk.r(GetChildren("/r")) == ChildrenResult([], None)
    assert zk.r(GetAllChildrenNumber("/r")) == CountResult(0)
    zk.ok(Multi((Check("/r", 0),)))


# ZOOKEEPER-2590 (in 3.8.4+): exists() checks READ on an existing node (release-3.8.6
# FinalRequestProcessor.java 372-381). (Found by these tests; fixed in fe81526.)
def test_exists_needs_read_on_an_existing_node() -> None:
    zk = ZK()
    zk.ok(Create("/n", acl=only(ALL & ~READ)))
    assert zk.r(Exists("/n")) == ErrorResult(Code.NO_AUTH)


def test_get_acl_needs_read_or_admin_and_redacts_digests_without_admin() -> None:
    zk = ZK()
    acl_read = (ACL(READ, ANYONE), ACL(ALL, ALICE), ACL(WRITE, IP))
    zk.ok(Create("/r", acl=acl_read))
    stat = zk.sa.tree.stat("/r")
    # READ without ADMIN: digests are shown as user:x (FinalRequestProcessor getACL)
    assert zk.r(GetACL("/r")) == ACLResult((ACL(READ, ANYONE), ACL(ALL, Id("digest", "alice:x")), ACL(WRITE, IP)), stat)
    # with ADMIN: the real thing
    assert zk.r(GetACL("/r"), auth=(ALICE,)) == ACLResult(acl_read, stat)
    assert zk.r(GetACL("/r"), auth=(SUPER,)) == ACLResult(acl_read, stat)
    # ADMIN alone suffices
    zk.ok(Create("/a", acl=(ACL(ADMIN, ANYONE), ACL(CREATE, BOB))))
    assert zk.r(GetACL("/a")).acl == (ACL(ADMIN, ANYONE), ACL(CREATE, BOB))
    # neither READ nor ADMIN
    zk.ok(Create("/w", acl=(ACL(WRITE | CREATE | DELETE, ANYONE), ACL(ALL, BOB))))
    assert zk.r(GetACL("/w")) == ErrorResult(Code.NO_AUTH)
    assert zk.r(GetACL("/w"), auth=(ALICE,)) == ErrorResult(Code.NO_AUTH)
    assert zk.r(GetACL("/w"), auth=(BOB,)).acl == (ACL(WRITE | CREATE | DELETE, ANYONE), ACL(ALL, BOB))


def test_world_anyone_digest_and_ip() -> None:
    zk = ZK()
    zk.ok(Create("/n", b"d", acl=(ACL(READ, Id("ip", "10.0.0.0/24")), ACL(ALL, ALICE))))
    assert zk.r(GetData("/n")) == ErrorResult(Code.NO_AUTH)
    assert zk.r(GetData("/n"), auth=(IP,)).data == b"d"
    assert zk.r(GetData("/n"), auth=(Id("ip", "10.0.1.5"),)) == ErrorResult(Code.NO_AUTH)
    assert zk.err(SetData("/n", b"e"), auth=(IP,)) == Code.NO_AUTH
    zk.ok(SetData("/n", b"e"), auth=(IP, ALICE))
    assert zk.err(SetData("/n", b"f"), auth=(BOB,)) == Code.NO_AUTH


def test_superuser_bypasses_every_check() -> None:
    zk = ZK()
    locked = (ACL(READ, BOB),)
    zk.ok(Create("/n", b"d", acl=locked), auth=())
    zk.ok(Create("/p", acl=locked))
    sup = (SUPER, Id("digest", digest_id("super", "test")))
    zk.ok(Create("/p/c"), auth=sup)
    zk.ok(SetData("/n", b"x"), auth=sup)
    zk.ok(SetACL("/n", locked), auth=sup)
    assert zk.r(GetData("/n"), auth=sup).data == b"x"
    assert zk.r(GetACL("/n"), auth=sup).acl == locked
    zk.ok(Multi((Check("/n", 1),)), auth=sup)
    zk.ok(Delete("/p/c"), auth=sup)
    assert zk.err(Delete("/p/c"), auth=sup) == Code.NO_NODE  # bypasses ACLs, not existence


def test_a_node_with_an_acl_nobody_matches_is_only_reachable_by_super() -> None:
    zk = ZK()
    zk.ok(Create("/n", acl=only(ALL, Id("ip", "192.0.2.1"))))
    for auth in ((), (ALICE,), (IP,)):
        assert zk.r(GetData("/n"), auth=auth) == ErrorResult(Code.NO_AUTH)
    assert zk.r(GetData("/n"), auth=(Id("ip", "192.0.2.1"),)).data == b""
    assert zk.r(GetData("/n"), auth=(SUPER,)).data == b""


# -------------------------------------------------------------------- multi


def test_multi_success_results_per_op() -> None:
    zk = ZK()
    zk.ok(Create("/old", b"x"))
    zk.ok(Create("/gone"))
    r = zk.ok(Multi((Create("/m", b"1"), SetData("/old", b"y", version=0), Check("/old", 1), Delete("/gone"))))
    a, b, c, d = r.results
    zxid = zk.sa.zxid
    assert a == CreateResult("/m", zk.sa.tree.stat("/m"))
    assert b == StatResult(zk.sa.tree.stat("/old")) and b.stat.version == 1 and b.stat.mzxid == zxid
    assert c == CheckResult()
    assert d == DeleteResult()
    assert a.stat.czxid == zxid


def test_multi_is_all_or_nothing_with_zookeepers_codes() -> None:
    zk = ZK()
    zk.ok(Create("/a", b"x"))
    digest = zk.sa.tree.digest
    r = zk.w(Multi((Create("/new"), SetData("/a", b"y"), Create("/a"), Delete("/a"), Check("/a", 0))))
    assert isinstance(r, MultiResult) and r.failed
    assert codes(r) == [OK_, OK_, Code.NODE_EXISTS, RI, RI]
    assert zk.sa.tree.digest == digest
    assert zk.sa.tree.stat("/new") is None and zk.sa.tree.nodes["/a"].data == b"x"
    assert zk.sa.triggers == []
    # failing first and failing last
    assert codes(zk.w(Multi((Delete("/x"), Create("/y"))))) == [Code.NO_NODE, RI]
    assert codes(zk.w(Multi((Create("/y"), Create("/z"), Check("/a", 7))))) == [OK_, OK_, Code.BAD_VERSION]
    assert zk.sa.tree.digest == digest


def test_multi_ops_see_each_other() -> None:
    zk = ZK()
    r = zk.ok(Multi((
        Create("/m"), Create("/m/c"), SetData("/m", b"x", version=0), Check("/m", 1), Create("/m/s", mode=2),
        Delete("/m/c", version=0), SetData("/m", b"y", version=1),
    )))
    assert r.results[4].path == "/m/s0000000001"
    assert zk.sa.tree.children_of("/m") == ["s0000000001"]
    st = zk.sa.tree.stat("/m")
    assert st is not None and (st.version, st.cversion, st.numChildren) == (2, 3, 1)  # 2 creates, 1 delete
    assert zk.sa.tree.nodes["/m"].cversion == 2  # the stored counter: creates only
    assert zk.sa.tree.nodes["/m"].data == b"y"
    # a delete then a re-create of the same path
    r = zk.ok(Multi((Delete("/m/s0000000001"), Delete("/m"), Create("/m", b"again"))))
    assert zk.sa.tree.nodes["/m"].data == b"again" and zk.sa.tree.children_of("/m") == []
    # a later op sees an earlier one's effect: delete of a node the multi made non-empty
    zk.ok(Create("/e"))
    assert codes(zk.w(Multi((Create("/e/k"), Delete("/e"))))) == [OK_, Code.NOT_EMPTY]


def test_empty_multi() -> None:
    zk = ZK()
    assert zk.w(Multi(())) == MultiResult(())


def test_failed_multi_leaves_no_outstanding_records() -> None:
    p = pipe()
    p.write(S, Create("/q"))
    z_seq = p.propose(S, Create("/q/s", mode=PERSISTENT_SEQUENTIAL))  # /q/s0000000000, uncommitted
    assert p.leader.outstanding > 0
    before = p.leader.outstanding
    p.propose(S, Multi((Create("/x"), Create("/q/s", mode=PERSISTENT_SEQUENTIAL), SetData("/x/y", b""))))
    assert p.leader.outstanding == before
    # a following write sees the old state: /x does not exist, the counter of /q was rolled back
    # (ZOOKEEPER-1624's rollbackPendingChanges)
    z_x = p.propose(S, Create("/x/y"))
    z_next = p.propose(S, Create("/q/s", mode=PERSISTENT_SEQUENTIAL))
    assert p.payload(z_x)[0] == tx.T_ERROR
    results = p.commit()
    assert results[0].path == "/q/s0000000000"
    assert codes(results[1]) == [OK_, OK_, Code.NO_NODE]
    assert results[2] == ErrorResult(Code.NO_NODE)
    assert results[3].path == "/q/s0000000001"
    assert z_seq < z_next
    assert p.leader.outstanding == 0


def test_a_failed_single_write_proposes_no_records() -> None:
    p = pipe()
    p.propose(S, Delete("/nope"))
    assert p.leader.outstanding == 0
    assert p.commit() == [ErrorResult(Code.NO_NODE)]


# ------------------------------------------------- against outstanding proposals


def test_set_data_sees_an_uncommitted_set_data() -> None:
    p = pipe()
    p.write(S, Create("/n"))
    p.propose(S, SetData("/n", b"1", version=0))
    p.propose(S, SetData("/n", b"2", version=1))  # sees version 1, not committed yet
    p.propose(S, SetData("/n", b"3", version=1))  # stale
    p.propose(S, Multi((Check("/n", 2),)))
    r = p.commit()
    assert [x.stat.version for x in r[:2]] == [1, 2]
    assert r[2] == ErrorResult(Code.BAD_VERSION)
    assert r[3] == MultiResult((CheckResult(),))
    assert p.tree.nodes["/n"].data == b"2"


def test_create_under_a_parent_created_by_an_uncommitted_proposal() -> None:
    p = pipe()
    p.propose(S, Create("/p"))
    p.propose(S, Create("/p/c"))
    p.propose(S, Create("/p/s", mode=PERSISTENT_SEQUENTIAL))
    p.propose(S, Create("/p"))  # exists, as far as the leader knows
    p.propose(S, Delete("/p"))  # not empty, as far as the leader knows
    r = p.commit()
    assert [type(x) for x in r[:3]] == [CreateResult] * 3
    assert r[2].path == "/p/s0000000001"
    assert r[3:] == [ErrorResult(Code.NODE_EXISTS), ErrorResult(Code.NOT_EMPTY)]


def test_uncommitted_delete_is_seen() -> None:
    p = pipe()
    p.write(S, Create("/n"))
    p.propose(S, Delete("/n"))
    p.propose(S, SetData("/n", b""))
    p.propose(S, Create("/n", b"again"))
    r = p.commit()
    assert r == [DeleteResult(), ErrorResult(Code.NO_NODE), CreateResult("/n", p.tree.stat("/n"))]


def test_uncommitted_set_acl_is_seen() -> None:
    p = pipe()
    p.write(S, Create("/n"))
    p.propose(S, SetACL("/n", (ACL(READ, ANYONE),)))
    p.propose(S, SetData("/n", b"x"))  # no WRITE any more
    p.propose(S, SetACL("/n", OPEN_ACL_UNSAFE, version=1))  # no ADMIN any more
    r = p.commit()
    assert r[1:] == [ErrorResult(Code.NO_AUTH), ErrorResult(Code.NO_AUTH)]


def test_committed_removes_records() -> None:
    p = pipe()
    z1 = p.propose(S, Create("/a"))
    z2 = p.propose(S, Create("/b"))
    assert p.leader.outstanding == 4  # each create: the node and its parent
    p.commit(z1)
    assert p.leader.outstanding == 2
    assert p.leader.rec("/a").exists and p.leader.rec("/b").exists
    p.commit(z2)
    assert p.leader.outstanding == 0
    root = p.tree.nodes["/"]
    assert p.leader.rec("/").cversion == root.cversion == 2  # the stored counter, in both
    assert p.leader.rec("/").children == len(p.tree.children_of("/")) == 3


def test_a_record_stays_while_a_later_proposal_for_its_path_is_uncommitted() -> None:
    p = pipe()
    p.write(S, Create("/n"))
    z1 = p.propose(S, SetData("/n", b"1"))
    z2 = p.propose(S, SetData("/n", b"2"))
    p.commit(z1)
    assert p.tree.nodes["/n"].version == 1
    assert p.leader.rec("/n").version == 2  # z2's record, not the tree's
    assert p.leader.outstanding == 1
    z3 = p.propose(S, SetData("/n", b"3", version=2))
    p.commit(z2)
    assert p.leader.rec("/n").version == 3
    p.commit(z3)
    assert p.leader.outstanding == 0
    assert p.leader.rec("/n").version == p.tree.nodes["/n"].version == 3


def test_reset_forgets_outstanding_records() -> None:
    p = pipe()
    p.propose(S, Create("/p"))
    p.pending.clear()  # the proposal is lost with the leadership
    p.leader.reset()
    assert p.leader.outstanding == 0
    assert not p.leader.rec("/p").exists
    assert p.write(S, Create("/p/c")) == ErrorResult(Code.NO_NODE)
    assert isinstance(p.write(S, Create("/p")), CreateResult)


def test_reset_forgets_uncommitted_sessions() -> None:
    p = pipe()
    p.propose(9, CreateSession(9, 1000, b""))
    assert p.leader.session_open(9)
    p.pending.clear()
    p.leader.reset()
    assert not p.leader.session_open(9)
    assert p.write(9, Create("/x")) == ErrorResult(Code.SESSION_EXPIRED)


def test_an_uncommitted_session_is_usable() -> None:
    p = pipe()
    p.propose(9, CreateSession(9, 1000, b""))
    p.propose(9, Create("/e", mode=EPHEMERAL))
    r = p.commit()
    assert r[0] == SessionResult(9)
    assert isinstance(r[1], CreateResult) and r[1].stat.ephemeralOwner == 9


def test_close_session_deletes_uncommitted_ephemerals() -> None:
    p = pipe()
    p.write(S, Create("/p"))
    p.write(S, Create("/p/committed", mode=EPHEMERAL))
    p.propose(S, Create("/p/pending", mode=EPHEMERAL))
    p.propose(S, Multi((Create("/p/in-multi", mode=EPHEMERAL_SEQUENTIAL),)))
    p.propose(S, Create("/p/persistent"))
    z_close = p.propose(S, CloseSession())
    kind, _, session, listed = p.payload(z_close)
    assert (kind, session) == (tx.T_CLOSE_SESSION, S)
    assert sorted(listed) == ["/p/committed", "/p/in-multi0000000002", "/p/pending"]
    # after the close is proposed, the session is gone for the leader
    assert p.leader.prepare(S, (), Create("/late"), T0).payload == tx.encode(
        tx.T_ERROR, T0, S, int(Code.SESSION_EXPIRED))
    p.commit()
    assert p.tree.children_of("/p") == ["persistent"]
    assert p.tree.ephemerals_of(S) == []
    assert S not in p.tree.sessions
    assert p.leader.outstanding == 0


def test_close_session_skips_ephemerals_deleted_by_uncommitted_proposals() -> None:
    p = pipe()
    p.write(S, Create("/a", mode=EPHEMERAL))
    p.write(S, Create("/b", mode=EPHEMERAL))
    p.propose(S, Delete("/a"))
    z_close = p.propose(S, CloseSession())
    assert p.payload(z_close)[3] == ["/b"]
    r = p.commit()
    assert r == [DeleteResult(), SessionResult(S)]
    assert p.tree.stat("/a") is None and p.tree.stat("/b") is None


def test_close_session_leaves_other_sessions_ephemerals_recreated_at_its_paths() -> None:
    p = pipe()
    p.write(8, CreateSession(8, 1000, b""))
    p.write(S, Create("/a", mode=EPHEMERAL))
    p.propose(S, Delete("/a"))
    p.propose(8, Create("/a", mode=EPHEMERAL))
    z_close = p.propose(S, CloseSession())
    assert p.payload(z_close)[3] == []
    p.commit()
    st = p.tree.stat("/a")
    assert st is not None and st.ephemeralOwner == 8


def test_parent_of_ephemerals_is_deletable_once_their_close_is_proposed() -> None:
    # The leader's view counts the close's deletes. ZooKeeper's own close records only move the parent's
    # pzxid, not its childCount (release-3.8.6 PrepRequestProcessor.java 608-617), so there this delete
    # is NOT_EMPTY until the close commits; zabd answers as the tree will be.
    p = pipe()
    p.write(8, CreateSession(8, 1000, b""))
    p.write(S, Create("/p"))
    p.write(S, Create("/p/e", mode=EPHEMERAL))
    p.propose(S, CloseSession())
    p.propose(8, Delete("/p"))
    assert p.commit() == [SessionResult(S), DeleteResult()]
    assert p.tree.stat("/p") is None


def test_two_closes_of_one_session() -> None:
    p = pipe()
    p.write(S, Create("/e", mode=EPHEMERAL))
    z1 = p.propose(S, CloseSession())
    p.propose(S, CloseSession())  # e.g. the expirer racing the client's own close
    assert p.payload(z1)[3] == ["/e"]
    first, second = p.commit()
    assert first == SessionResult(S)
    # ZooKeeper proposes a second, empty closeSession (its prep skips the session check); zabd refuses it
    # as SESSION_EXPIRED: either way nothing more changes
    assert second in (SessionResult(S), ErrorResult(Code.SESSION_EXPIRED))
    assert p.tree.stat("/e") is None and S not in p.tree.sessions and p.leader.outstanding == 0


def test_prepare_does_not_touch_the_tree() -> None:
    p = pipe()
    p.write(S, Create("/n"))
    digest = p.tree.digest
    p.propose(S, Create("/m"))
    p.propose(S, SetData("/n", b"x"))
    p.propose(S, CloseSession())
    assert p.tree.digest == digest and p.tree.stat("/m") is None


# ZOOKEEPER-2623 (in 3.8.5+): a check outside a multi is refused with UNIMPLEMENTED (Request.isValid is
# false for OpCode.check; CheckTest.testOperations). (Found by these tests; fixed in fe81526.)
def test_a_lone_check_is_unimplemented() -> None:
    zk = ZK()
    zk.ok(Create("/n"))
    assert zk.w(Check("/n", 0)) == ErrorResult(Code.UNIMPLEMENTED)

"""Random histories against ``Standalone`` and a reference model.

The model below is written from ZooKeeper 3.8's rules (``PrepRequestProcessor``
for the checks and their order, ``DataTree`` for the stat changes,
``ContainerManager`` for the cleanup candidates), with plain dicts, not from
zabd's code. Every result (paths, Stat fields, error codes, per-op multi
codes) and the whole tree are compared after each step.

The Stat compared is the one a ZooKeeper client sees (``DataNode.copyStat``:
cversion is the stored count of creates * 2 - children now, as a Java int, and
containers and TTL nodes show ephemeralOwner 0); the stored counters are
compared on the tree's nodes.
"""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.zk.standalone import Standalone
from zabd.zk.acl import ACL, Id, digest_id
from zabd.zk.errors import Code
from zabd.zk.records import (
    ACLResult,
    Check,
    CheckResult,
    ChildrenResult,
    CountResult,
    Create,
    CreateResult,
    DataResult,
    Delete,
    DeleteContainer,
    DeleteResult,
    ErrorResult,
    Exists,
    ExistsResult,
    GetACL,
    GetAllChildrenNumber,
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
)
from zabd.zk.tree import DataTree

T0 = 1_700_000_000_000

# ---------------------------------------------------------------- the model
# ZooKeeper's numbers, restated here on purpose
R, W, C, D, A = 1, 2, 4, 8, 16
ALLP = 31
PERSISTENT, EPHEMERAL, PSEQ, ESEQ, CONTAINER, TTL, TTLSEQ = range(7)
SEQUENTIAL = {PSEQ, ESEQ, TTLSEQ}
CONTAINER_OWNER = -(2**63)
SPECIAL = {"/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"}
WORLD = Id("world", "anyone")


def ttl_owner(ttl: int) -> int:
    v = 0xFF00000000000000 | ttl  # EphemeralType.TTL.toEphemeralOwner
    return v - 2**64


def owner_kind(owner: int) -> str:
    if owner == 0:
        return "none"
    if owner == CONTAINER_OWNER:
        return "container"
    if (owner & 0xFFFFFFFFFFFFFFFF) >> 56 == 0xFF and (owner >> 40) & 0xFFFF == 0:
        return "ttl"
    return "session"


class Fail(Exception):
    def __init__(self, code: Code) -> None:
        self.code = code


@dataclass
class MNode:
    data: bytes
    acl: tuple[ACL, ...]
    czxid: int
    mzxid: int
    pzxid: int
    ctime: int
    mtime: int
    owner: int
    version: int = 0
    cversion: int = 0
    aversion: int = 0
    children: set[str] = field(default_factory=set)

    def stat(self) -> Stat:
        """DataNode.copyStat: what a client sees."""
        cversion = (self.cversion * 2 - len(self.children) + 2**31) % 2**32 - 2**31
        owner = self.owner if owner_kind(self.owner) == "session" else 0
        return Stat(self.czxid, self.mzxid, self.ctime, self.mtime, self.version, cversion, self.aversion,
                    owner, len(self.data), len(self.children), self.pzxid)


def fresh_nodes() -> dict[str, MNode]:
    open_ = (ACL(ALLP, WORLD),)
    nodes = {p: MNode(b"", open_, 0, 0, 0, 0, 0, 0) for p in ("/", "/zookeeper", "/zookeeper/quota")}
    nodes["/zookeeper/config"] = MNode(b"", (ACL(R, WORLD),), 0, 0, 0, 0, 0, 0, aversion=-1)
    nodes["/"].children = {"zookeeper"}
    nodes["/zookeeper"].children = {"quota", "config"}
    return nodes


def split(path: str) -> tuple[str, str]:
    i = path.rfind("/")
    return (path[:i] or "/"), path[i + 1:]


def java_path_ok(path: str) -> bool:
    """PathUtils.validatePath, for the characters these tests use."""
    if not path or path[0] != "/":
        return False
    if path == "/":
        return True
    if path.endswith("/") or "\0" in path or "//" in path:
        return False
    return all(name not in (".", "..") for name in path[1:].split("/"))


def ip_ok(spec: str) -> bool:
    try:
        ipaddress.ip_network(spec, strict=False)
    except ValueError:
        return False
    return True


def java_split(s: str, sep: str) -> list[str]:
    """Java's String.split: trailing empty strings are dropped."""
    parts = s.split(sep)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def fixup(auth: tuple[Id, ...], acl: tuple[ACL, ...]) -> tuple[ACL, ...]:
    uniq: list[ACL] = []
    for a in acl:
        if a not in uniq:
            uniq.append(a)
    if not uniq:
        raise Fail(Code.INVALID_ACL)
    out: list[ACL] = []
    for a in uniq:
        if a.id == WORLD:
            out.append(a)
        elif a.id.scheme == "auth":
            mine = [ACL(a.perms, i) for i in auth if i.scheme == "digest"]
            if not mine:
                raise Fail(Code.INVALID_ACL)
            out += mine
        elif (a.id.scheme == "digest" and len(java_split(a.id.id, ":")) == 2) or (
                a.id.scheme == "ip" and ip_ok(a.id.id)):
            out.append(a)
        else:
            raise Fail(Code.INVALID_ACL)
    return tuple(out)


def permitted(acl: tuple[ACL, ...], perm: int, auth: tuple[Id, ...]) -> bool:
    if not acl or any(i.scheme == "super" for i in auth):
        return True
    for a in acl:
        if not a.perms & perm:
            continue
        if a.id == WORLD:
            return True
        for i in auth:
            if i.scheme != a.id.scheme:
                continue
            if i.scheme == "ip":
                if ipaddress.ip_address(i.id) in ipaddress.ip_network(a.id.id, strict=False):
                    return True
            elif i.id == a.id.id:
                return True
    return False


def need(cond: bool, code: Code) -> None:
    if not cond:
        raise Fail(code)


def bump(version: int, expected: int) -> int:
    need(expected == -1 or expected == version, Code.BAD_VERSION)
    nxt = version + 1
    if nxt > 2**31 - 1:
        nxt = -(2**31)
    return 0 if nxt == -1 else nxt


class Model:
    def __init__(self) -> None:
        self.nodes = fresh_nodes()
        self.sessions: set[int] = set()
        self.zxid = 1 << 32

    # one op on a state (a multi runs its ops on a copy)
    def op(self, nodes: dict[str, MNode], sid: int, auth: tuple[Id, ...], req: Any, zxid: int, now: int,
           in_multi: bool = True) -> Any:
        need(sid in self.sessions, Code.SESSION_EXPIRED)
        need(in_multi or not isinstance(req, Check), Code.UNIMPLEMENTED)  # ZOOKEEPER-2623
        if isinstance(req, Create):
            need("/" in req.path and "\0" not in req.path, Code.BAD_ARGUMENTS)
            ppath, _ = split(req.path)
            acl = fixup(auth, req.acl)
            parent = nodes.get(ppath)
            need(parent is not None, Code.NO_NODE)
            assert parent is not None
            need(permitted(parent.acl, C, auth), Code.NO_AUTH)
            path = req.path + (f"{parent.cversion:010d}" if req.mode in SEQUENTIAL else "")
            need(java_path_ok(path), Code.BAD_ARGUMENTS)
            need(path not in nodes, Code.NODE_EXISTS)
            need(owner_kind(parent.owner) != "session", Code.NO_CHILDREN_FOR_EPHEMERALS)
            owner = {EPHEMERAL: sid, ESEQ: sid, CONTAINER: CONTAINER_OWNER}.get(req.mode, 0)
            if req.mode in (TTL, TTLSEQ):
                owner = ttl_owner(req.ttl)
            nodes[path] = MNode(req.data, acl, zxid, zxid, zxid, now, now, owner)
            parent.children.add(split(path)[1])
            parent.cversion += 1
            parent.pzxid = zxid
            return CreateResult(path, nodes[path].stat())
        if isinstance(req, Delete):
            need("/" in req.path and "\0" not in req.path and req.path not in SPECIAL, Code.BAD_ARGUMENTS)
            ppath, _ = split(req.path)
            parent = nodes.get(ppath)
            need(parent is not None, Code.NO_NODE)
            assert parent is not None
            need(permitted(parent.acl, D, auth), Code.NO_AUTH)
            node = nodes.get(req.path)
            need(node is not None, Code.NO_NODE)
            assert node is not None
            bump(node.version, req.version)
            need(not node.children, Code.NOT_EMPTY)
            self.unlink(nodes, req.path, zxid)
            return DeleteResult()
        need(java_path_ok(req.path), Code.BAD_ARGUMENTS)
        if isinstance(req, SetACL):
            acl = fixup(auth, req.acl)
        node = nodes.get(req.path)
        need(node is not None, Code.NO_NODE)
        assert node is not None
        if isinstance(req, SetData):
            need(permitted(node.acl, W, auth), Code.NO_AUTH)
            node.version = bump(node.version, req.version)
            node.data, node.mzxid, node.mtime = req.data, zxid, now
            return StatResult(node.stat())
        if isinstance(req, SetACL):
            need(permitted(node.acl, A, auth), Code.NO_AUTH)
            node.aversion = bump(node.aversion, req.version)
            node.acl = acl
            return StatResult(node.stat())
        assert isinstance(req, Check)
        need(permitted(node.acl, R, auth), Code.NO_AUTH)
        bump(node.version, req.version)
        return CheckResult()

    @staticmethod
    def unlink(nodes: dict[str, MNode], path: str, zxid: int) -> None:
        del nodes[path]
        ppath, name = split(path)
        parent = nodes[ppath]
        parent.children.discard(name)
        parent.pzxid = max(parent.pzxid, zxid)  # the stored cversion does not change

    def write(self, sid: int, auth: tuple[Id, ...], req: Any, now: int) -> Any:
        self.zxid += 1
        if isinstance(req, Multi):
            scratch = copy.deepcopy(self.nodes)
            results = []
            for i, op in enumerate(req.ops):
                try:
                    results.append(self.op(scratch, sid, auth, op, self.zxid, now))
                except Fail as f:
                    n = len(req.ops)
                    return MultiResult(tuple([ErrorResult(Code.OK)] * i + [ErrorResult(f.code)]
                                             + [ErrorResult(Code.RUNTIME_INCONSISTENCY)] * (n - i - 1)))
            self.nodes = scratch
            return MultiResult(tuple(results))
        if isinstance(req, DeleteContainer):
            node = self.nodes.get(req.path)
            if node is None:
                return ErrorResult(Code.NO_NODE)
            assert not node.children and owner_kind(node.owner) in ("container", "ttl")
            self.unlink(self.nodes, req.path, self.zxid)
            return DeleteResult()
        scratch = copy.deepcopy(self.nodes)
        try:
            result = self.op(scratch, sid, auth, req, self.zxid, now, in_multi=False)
        except Fail as f:
            return ErrorResult(f.code)
        self.nodes = scratch
        return result

    def open_session(self, sid: int) -> SessionResult:
        self.zxid += 1
        self.sessions.add(sid)
        return SessionResult(sid)

    def close_session(self, sid: int) -> SessionResult:
        self.zxid += 1
        for path in sorted(self.ephemerals(sid), key=len, reverse=True):
            self.unlink(self.nodes, path, self.zxid)
        self.sessions.discard(sid)
        return SessionResult(sid)

    def ephemerals(self, sid: int) -> list[str]:
        return sorted(p for p, n in self.nodes.items() if n.owner == sid and owner_kind(n.owner) == "session")

    def candidates(self, now: int) -> list[str]:
        out = []
        for path, n in self.nodes.items():
            if n.children:
                continue
            kind = owner_kind(n.owner)
            # ContainerManager.getCandidates: a container that had a child; a TTL node past its ttl
            if (kind == "container" and n.cversion > 0) or (kind == "ttl" and now - n.mtime > n.owner & (2**40 - 1)):
                out.append(path)
        return sorted(out)

    def child_paths(self, path: str) -> list[str]:
        kids = self.nodes[path].children
        return [("" if path == "/" else path) + "/" + k for k in kids]

    def read(self, sid: int, auth: tuple[Id, ...], req: Any) -> Any:
        if isinstance(req, GetEphemerals):
            mine = self.ephemerals(sid)
            pre = req.prefix
            return PathsResult(mine if pre.strip() in ("", "/") else [p for p in mine if p.startswith(pre)])
        if isinstance(req, Exists) and "\0" in req.path:
            return ErrorResult(Code.BAD_ARGUMENTS)  # FinalRequestProcessor, case exists
        node = self.nodes.get(req.path)
        if node is None:
            return ExistsResult(None) if isinstance(req, Exists) else ErrorResult(Code.NO_NODE)
        if isinstance(req, Exists):  # ZOOKEEPER-2590: READ on an existing node
            return ExistsResult(node.stat()) if permitted(node.acl, R, auth) else ErrorResult(Code.NO_AUTH)
        if isinstance(req, GetACL):
            if not permitted(node.acl, R | A, auth):
                return ErrorResult(Code.NO_AUTH)
            if permitted(node.acl, A, auth):
                return ACLResult(node.acl, node.stat())
            return ACLResult(tuple(ACL(a.perms, Id("digest", a.id.id.split(":")[0] + ":x"))
                                   if a.id.scheme == "digest" else a for a in node.acl), node.stat())
        if not permitted(node.acl, R, auth):
            return ErrorResult(Code.NO_AUTH)
        if isinstance(req, GetData):
            return DataResult(node.data, node.stat())
        if isinstance(req, GetChildren):
            return ChildrenResult(sorted(node.children), node.stat() if req.with_stat else None)
        assert isinstance(req, GetAllChildrenNumber)
        prefix = "/" if req.path == "/" else req.path + "/"
        return CountResult(sum(1 for p in self.nodes if p != req.path and p.startswith(prefix)))


# ------------------------------------------------------------- the vocabulary

ALICE = Id("digest", digest_id("alice", "secret"))
BOB = Id("digest", digest_id("bob", "pw"))
IP = Id("ip", "10.1.2.3")
SUPER_IDS = (Id("super", ""), Id("digest", digest_id("super", "test")))
AUTHS: list[tuple[Id, ...]] = [(), (), (ALICE,), (BOB,), (ALICE, BOB), (IP,), (IP, ALICE), SUPER_IDS]

OPEN = (ACL(ALLP, WORLD),)
ACLS: list[tuple[ACL, ...]] = [
    OPEN, OPEN, OPEN, OPEN,
    (ACL(R, WORLD),),
    (ACL(ALLP, Id("auth", "")),),
    (ACL(ALLP, ALICE),),
    (ACL(R | C, WORLD), ACL(ALLP, BOB)),
    (ACL(ALLP, Id("ip", "10.0.0.0/8")),),
    (ACL(C | D, WORLD), ACL(R | W | A, IP)),
    (ACL(W | A, WORLD), ACL(R, Id("auth", ""))),
    (ACL(ALLP, WORLD), ACL(ALLP, WORLD), ACL(R, ALICE)),
    (),
    (ACL(ALLP, Id("nosuch", "x")),),
    (ACL(ALLP, Id("digest", "no-colon")),),
]
DATA = [b"", b"x", b"hello world"]
NAMES = ["a", "b", "c"]
ODD = ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config", "a", "/a/", "//a", "/a/.", "/x/y", "/a\x00b"]
TTLS = [1, 40, 5000]


class ZKMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.sa = Standalone(clock_ms=lambda: self.now)
        self.log: list[tuple[int, bytes]] = []
        self.sa.recorded = self.log
        self.model = Model()
        self.dead: list[int] = []
        self.new_session()

    # ------------------------------------------------------------ choosers

    def pick_session(self, data: st.DataObject) -> int:
        live = sorted(self.model.sessions)
        if self.dead and (not live or data.draw(st.sampled_from([False] * 7 + [True]), "dead?")):
            return data.draw(st.sampled_from(self.dead), "dead session")
        if not live:
            return 424242  # never opened
        return data.draw(st.sampled_from(live), "session")

    def pick_path(self, data: st.DataObject, for_create: bool = False) -> str:
        existing = sorted(self.model.nodes)
        mine = [p for p in existing if not p.startswith("/zookeeper") and p != "/"]
        leaves = [p for p in mine if not self.model.nodes[p].children]
        parents = ["/", *mine]
        kid = st.tuples(st.sampled_from(parents), st.sampled_from(NAMES)).map(
            lambda t: ("" if t[0] == "/" else t[0]) + "/" + t[1])
        if for_create:
            slash = st.sampled_from(parents).map(lambda p: p if p == "/" else p + "/")
            choices = [kid, kid, kid, st.sampled_from(existing), slash, st.sampled_from(ODD)]
        else:
            choices = [st.sampled_from(leaves)] if leaves else []
            choices += [st.sampled_from(mine)] if mine else []
            choices += [kid, st.sampled_from(existing), st.sampled_from(ODD)]
        return data.draw(st.one_of(choices), "path")

    def pick_version(self, data: st.DataObject, path: str, acl: bool = False) -> int:
        node = self.model.nodes.get(path)
        options = [st.just(-1), st.integers(0, 2)]
        if node is not None:
            options += [st.just(node.aversion if acl else node.version)] * 2
        return data.draw(st.one_of(options), "version")

    def create_req(self, data: st.DataObject) -> Create:
        mode = data.draw(st.sampled_from(range(7)), "mode")
        ttl = data.draw(st.sampled_from(TTLS), "ttl") if mode in (TTL, TTLSEQ) else -1
        return Create(self.pick_path(data, for_create=True), data.draw(st.sampled_from(DATA), "data"),
                      data.draw(st.sampled_from(ACLS), "acl"), mode, ttl)

    def op_req(self, data: st.DataObject, kinds: list[str]) -> Any:
        kind = data.draw(st.sampled_from(kinds), "kind")
        if kind == "create":
            return self.create_req(data)
        path = self.pick_path(data)
        if kind == "delete":
            return Delete(path, self.pick_version(data, path))
        if kind == "setData":
            return SetData(path, data.draw(st.sampled_from(DATA), "data"), self.pick_version(data, path))
        if kind == "setACL":
            return SetACL(path, data.draw(st.sampled_from(ACLS), "acl"), self.pick_version(data, path, acl=True))
        return Check(path, self.pick_version(data, path))

    # -------------------------------------------------------------- writes

    def both(self, sid: int, auth: tuple[Id, ...], req: Any) -> None:
        got = self.sa.write(sid, req, auth)
        want = self.model.write(sid, auth, req, self.now)
        assert got == want, (req, auth, got, want)
        assert self.sa.zxid == self.model.zxid

    @precondition(lambda self: len(self.model.sessions) < 3)
    @rule()
    def new_session(self) -> None:
        sid = self.sa.session()
        assert self.model.open_session(sid) == SessionResult(sid)

    @precondition(lambda self: len(self.model.sessions) > 1)  # one stays: most writes need a live session
    @rule(data=st.data())
    def close_session(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.model.sessions)), "closing")
        assert self.sa.close(sid) == self.model.close_session(sid)
        self.dead.append(sid)

    @rule(data=st.data())
    def single(self, data: st.DataObject) -> None:
        req = self.op_req(data, ["create", "create", "delete", "setData", "setACL", "check"])
        self.both(self.pick_session(data), data.draw(st.sampled_from(AUTHS), "auth"), req)

    @rule(data=st.data(), n=st.sampled_from([1, 2, 2, 3, 4]))
    def multi(self, data: st.DataObject, n: int) -> None:
        ops = tuple(self.op_req(data, ["create", "create", "delete", "setData", "check"]) for _ in range(n))
        self.both(self.pick_session(data), data.draw(st.sampled_from(AUTHS), "auth"), Multi(ops))

    @rule(ms=st.sampled_from([1, 30, 1000, 6000]))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule()
    def cleanup(self) -> None:
        candidates = self.sa.tree.cleanup_candidates(self.now)
        assert candidates == self.model.candidates(self.now)
        for path in candidates:
            self.both(0, (), DeleteContainer(path))

    @rule(data=st.data())
    def reads(self, data: st.DataObject) -> None:
        sid = self.pick_session(data)
        auth = data.draw(st.sampled_from(AUTHS), "auth")
        path = self.pick_path(data)
        reqs: list[Any] = [GetData(path), GetChildren(path, with_stat=True), GetChildren(path), GetACL(path),
                           GetAllChildrenNumber(path), Exists(path),
                           GetEphemerals(data.draw(st.sampled_from(["/", "", "/a", "/a/", "/b"]), "prefix"))]
        for req in reqs:
            got = self.sa.read(sid, req, auth)
            if isinstance(got, ChildrenResult):
                got = got._replace(children=sorted(got.children))
            if isinstance(got, PathsResult):
                got = PathsResult(sorted(got.paths))
            assert got == self.model.read(sid, auth, req), req

    # ---------------------------------------------------------- invariants

    @invariant()
    def same_tree(self) -> None:
        tree, model = self.sa.tree, self.model
        assert set(tree.nodes) == set(model.nodes)
        for path, m in model.nodes.items():
            node = tree.nodes[path]
            assert node.stat() == m.stat(), path
            assert (node.cversion, node.owner) == (m.cversion, m.owner), path  # the stored ones
            assert node.data == m.data and node.acl == m.acl, path
            assert tree.children_of(path) == sorted(m.children), path
        assert set(tree.sessions) == model.sessions
        for sid in model.sessions | set(self.dead):
            assert tree.ephemerals_of(sid) == model.ephemerals(sid)

    @invariant()
    def consistent_tree(self) -> None:
        tree = self.sa.tree
        for path, node in tree.nodes.items():
            kids = tree.children_of(path)
            assert node.stat().numChildren == len(kids)
            for k in kids:
                assert ("" if path == "/" else path) + "/" + k in tree.nodes
            if path != "/":
                assert split(path)[1] in tree.children_of(split(path)[0])
            if owner_kind(node.owner) == "session":
                assert node.owner in tree.sessions, path  # every ephemeral's owner is live
        assert tree.applied == self.sa.zxid

    def teardown(self) -> None:
        tree = self.sa.tree
        snap = tree.snapshot()
        assert DataTree.restore(snap).digest == tree.digest
        replay = DataTree()
        for zxid, payload in self.log:
            replay.apply(zxid, payload)
        assert replay.digest == tree.digest
        assert replay.snapshot() == snap


TestZooKeeperModel = ZKMachine.TestCase
TestZooKeeperModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)

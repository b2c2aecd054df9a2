"""Watches (``zabd.zk.watches``), case by case against ZooKeeper's rules:
what ``DataTree.createNode/deleteNode/setData`` trigger, what
``WatchManager.triggerWatch`` delivers (one-shot, persistent and
persistent-recursive modes, one event per connection and change), and
``DataTree.setWatches``/``removeWatch``/``containsWatcher``.

Pure: a ``Standalone`` applies the writes, its ``triggers`` go to a
``WatchManager``, reads register watches as ``zabd.server.zk.sessions``
does (getData: a data watch; exists: a data watch if the node exists, an
exist watch if not; getChildren: a child watch; none when the read fails).
Owners stand for connections.

An event reaches only an owner whose ids have READ on the changed node's
ACL, the parent's for children-changed (ZooKeeper 3.8.4's
``ServerCnxn.process(event, acl)``, CVE-2024-23944): the last section.

Where ZooKeeper's versions differ, the rule tested is ZooKeeper 3.9's
(ZOOKEEPER-4466: a connection's standard and persistent watches on one path
are kept side by side; ZOOKEEPER-4472: removeWatches by Persistent and
PersistentRecursive type). ZooKeeper 3.6 to 3.8 kept one mode per connection
and path, the last one set.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

import pytest

from tests.zk.standalone import Standalone
from zabd.zk.acl import ACL, ALL, ANYONE, OPEN_ACL_UNSAFE, READ, SUPER, WRITE, Id, digest_id
from zabd.zk.errors import Code
from zabd.zk.events import EventType
from zabd.zk.reads import serve
from zabd.zk.records import (
    CONTAINER,
    EPHEMERAL,
    PERSISTENT_SEQUENTIAL,
    Check,
    CloseSession,
    Create,
    CreateResult,
    Delete,
    DeleteContainer,
    ErrorResult,
    Exists,
    ExistsResult,
    GetChildren,
    GetData,
    Multi,
    MultiOp,
    MultiResult,
    SetACL,
    SetData,
    Write,
    WriteResult,
)
from zabd.zk.watches import (
    ANY,
    CHILDREN,
    DATA,
    PERSISTENT_RECURSIVE_TYPE,
    PERSISTENT_TYPE,
    Event,
    WatchKind,
    WatchManager,
)

CREATED = EventType.NODE_CREATED
DELETED = EventType.NODE_DELETED
CHANGED = EventType.NODE_DATA_CHANGED
KIDS = EventType.NODE_CHILDREN_CHANGED

A, B, C, D = "conn-a", "conn-b", "conn-c", "conn-d"
LOCAL = (Id("ip", "127.0.0.1"),)  # what every connection proves: its address
ALICE = Id("digest", digest_id("alice", "secret"))
ALICE_ONLY = (ACL(ALL, ALICE),)


class Server:
    """One standalone server and its watches, wired as the session layer wires them."""

    def __init__(self) -> None:
        self.zk = Standalone()
        self.wm = WatchManager()
        self.s = self.zk.session()
        self.ids: dict[Hashable, tuple[Id, ...]] = {}  # an owner's ids (ZKConn.auth); LOCAL if not set

    # ------------------------------------------------------------- writes

    def do(self, req: Write, session: int | None = None, auth: Sequence[Id] = ()) -> tuple[WriteResult, list[Event]]:
        result = self.zk.write(self.s if session is None else session, req, auth)
        return result, self.wm.trigger(self.zk.triggers, lambda owner: self.ids.get(owner, LOCAL))

    def events(self, req: Write, session: int | None = None, auth: Sequence[Id] = ()) -> list[Event]:
        return self.do(req, session, auth)[1]

    def create(self, path: str, data: bytes = b"", mode: int = 0, session: int | None = None,
               acl: tuple[ACL, ...] = OPEN_ACL_UNSAFE) -> list[Event]:
        result, events = self.do(Create(path, data, acl, mode=mode), session)
        assert isinstance(result, CreateResult), result
        return events

    def set(self, path: str, data: bytes = b"x") -> list[Event]:
        result, events = self.do(SetData(path, data))
        assert not isinstance(result, ErrorResult), result
        return events

    def delete(self, path: str) -> list[Event]:
        result, events = self.do(Delete(path))
        assert not isinstance(result, ErrorResult), result
        return events

    # -------------------------------------------------------------- reads

    def get_data(self, owner: Hashable, path: str) -> None:
        if not isinstance(serve(self.zk.tree, GetData(path, True), self.ids.get(owner, LOCAL), self.s), ErrorResult):
            self.wm.add(owner, path, WatchKind.DATA)

    def exists(self, owner: Hashable, path: str) -> bool:
        result = serve(self.zk.tree, Exists(path, True), self.ids.get(owner, LOCAL), self.s)
        assert isinstance(result, ExistsResult)
        self.wm.add(owner, path, WatchKind.DATA if result.stat is not None else WatchKind.EXIST)
        return result.stat is not None

    def get_children(self, owner: Hashable, path: str) -> None:
        if not isinstance(serve(self.zk.tree, GetChildren(path, True), self.ids.get(owner, LOCAL), self.s),
                          ErrorResult):
            self.wm.add(owner, path, WatchKind.CHILD)

    def add_watch(self, owner: Hashable, path: str, recursive: bool = False) -> None:
        self.wm.add(owner, path, WatchKind.PERSISTENT_RECURSIVE if recursive else WatchKind.PERSISTENT)

    def remove_watches(self, owner: Hashable, path: str, watcher_type: int) -> Code:
        return Code.OK if self.wm.remove(owner, path, watcher_type) else Code.NO_WATCHER

    def check_watches(self, owner: Hashable, path: str, watcher_type: int) -> Code:
        return Code.OK if self.wm.contains(owner, path, watcher_type) else Code.NO_WATCHER

    def set_watches(self, owner: Hashable, relative_zxid: int, data: Sequence[str] = (),
                    exist: Sequence[str] = (), child: Sequence[str] = (), persistent: Sequence[str] = (),
                    recursive: Sequence[str] = ()) -> list[Event]:
        return self.wm.set_watches(owner, relative_zxid, data, exist, child, persistent, recursive,
                                   self.zk.tree.stat)


@pytest.fixture
def zk() -> Server:
    return Server()


def test_numbers_are_zookeepers() -> None:
    assert (CREATED, DELETED, CHANGED, KIDS) == (1, 2, 3, 4)
    assert (CHILDREN, DATA, ANY, PERSISTENT_TYPE, PERSISTENT_RECURSIVE_TYPE) == (1, 2, 3, 4, 5)
    assert int(Code.NO_WATCHER) == -121


# ------------------------------------------------------ data watch (getData)


def test_data_watch_fires_node_data_changed_on_set_data(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    assert len(zk.wm) == 1
    assert zk.set("/a") == [(A, CHANGED, "/a")]
    assert len(zk.wm) == 0


def test_data_watch_fires_node_deleted_on_delete(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    assert zk.delete("/a") == [(A, DELETED, "/a")]
    assert len(zk.wm) == 0


def test_data_watch_does_not_fire_on_a_child_create_or_delete(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    assert zk.create("/a/b") == []
    assert zk.set("/a/b") == []
    assert zk.delete("/a/b") == []
    assert zk.check_watches(A, "/a", DATA) == Code.OK
    assert zk.set("/a") == [(A, CHANGED, "/a")]


def test_data_watch_does_not_fire_on_set_acl(zk: Server) -> None:
    # ZooKeeper's setACL triggers no watch
    zk.create("/a")
    zk.get_data(A, "/a")
    result, events = zk.do(SetACL("/a", OPEN_ACL_UNSAFE))
    assert not isinstance(result, ErrorResult)
    assert events == []
    assert zk.set("/a") == [(A, CHANGED, "/a")]


def test_data_watch_fires_once_and_must_be_set_again(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    assert zk.set("/a", b"1") == [(A, CHANGED, "/a")]
    assert zk.set("/a", b"2") == []
    assert zk.delete("/a") == []
    zk.create("/a")
    assert zk.set("/a", b"3") == []
    zk.get_data(A, "/a")
    assert zk.set("/a", b"4") == [(A, CHANGED, "/a")]


def test_a_failed_write_fires_nothing_and_keeps_the_watch(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    zk.get_children(B, "/a")
    result, events = zk.do(SetData("/a", b"x", version=7))
    assert result == ErrorResult(Code.BAD_VERSION)
    assert events == []
    result, events = zk.do(Create("/a"))
    assert result == ErrorResult(Code.NODE_EXISTS)
    assert events == []
    result, events = zk.do(Delete("/a/missing"))
    assert result == ErrorResult(Code.NO_NODE)
    assert events == []
    assert len(zk.wm) == 2
    assert zk.set("/a") == [(A, CHANGED, "/a")]


def test_get_data_on_a_missing_node_sets_no_watch(zk: Server) -> None:
    zk.get_data(A, "/nope")
    zk.get_children(A, "/nope")
    assert len(zk.wm) == 0
    assert zk.create("/nope") == []


# ------------------------------------------------------------ exists watch


def test_exists_watch_on_a_missing_node_fires_node_created(zk: Server) -> None:
    assert zk.exists(A, "/a") is False
    assert zk.check_watches(A, "/a", DATA) == Code.OK  # exist watches are Data watches to removeWatches
    assert zk.create("/a") == [(A, CREATED, "/a")]
    assert len(zk.wm) == 0
    assert zk.set("/a") == []  # one-shot


def test_exists_watch_on_a_missing_node_ignores_siblings_and_the_parent(zk: Server) -> None:
    zk.create("/p")
    zk.exists(A, "/p/a")
    assert zk.create("/p/b") == []
    assert zk.set("/p") == []
    assert zk.delete("/p/b") == []
    assert zk.create("/p/a") == [(A, CREATED, "/p/a")]


def test_exists_watch_on_an_existing_node_is_a_data_watch(zk: Server) -> None:
    zk.create("/a")
    assert zk.exists(A, "/a") is True
    assert zk.create("/a/kid") == []
    assert zk.set("/a") == [(A, CHANGED, "/a")]
    assert zk.set("/a") == []
    assert zk.exists(A, "/a") is True
    zk.delete("/a/kid")
    assert zk.delete("/a") == [(A, DELETED, "/a")]
    assert len(zk.wm) == 0


# ------------------------------------------------------ child watch (getChildren)


def test_child_watch_fires_on_a_child_create(zk: Server) -> None:
    zk.create("/a")
    zk.get_children(A, "/a")
    assert zk.create("/a/b") == [(A, KIDS, "/a")]
    assert zk.create("/a/c") == []  # one-shot
    zk.get_children(A, "/a")
    assert zk.create("/a/d") == [(A, KIDS, "/a")]


def test_child_watch_fires_on_a_child_delete(zk: Server) -> None:
    zk.create("/a")
    zk.create("/a/b")
    zk.get_children(A, "/a")
    assert zk.delete("/a/b") == [(A, KIDS, "/a")]
    assert len(zk.wm) == 0


def test_child_watch_fires_node_deleted_when_the_node_goes(zk: Server) -> None:
    zk.create("/a")
    zk.get_children(A, "/a")
    assert zk.delete("/a") == [(A, DELETED, "/a")]
    assert len(zk.wm) == 0


def test_child_watch_ignores_data_changes_and_grandchildren(zk: Server) -> None:
    zk.create("/a")
    zk.create("/a/b")
    zk.get_children(A, "/a")
    assert zk.set("/a/b") == []
    assert zk.set("/a") == []
    assert zk.create("/a/b/c") == []
    assert zk.delete("/a/b/c") == []
    assert zk.check_watches(A, "/a", CHILDREN) == Code.OK
    assert zk.create("/a/c") == [(A, KIDS, "/a")]


def test_child_watch_on_the_root_and_a_sequential_child(zk: Server) -> None:
    zk.get_children(A, "/")
    assert zk.create("/top") == [(A, KIDS, "/")]
    zk.get_children(A, "/top")
    result, events = zk.do(Create("/top/n-", mode=PERSISTENT_SEQUENTIAL))
    assert isinstance(result, CreateResult)
    assert result.path == "/top/n-0000000000"
    assert events == [(A, KIDS, "/top")]


def test_data_and_child_watch_of_one_owner_hear_of_a_delete_once(zk: Server) -> None:
    # deleteNode: the child watches are triggered with the data watchers
    # already told suppressed; both one-shot watches are used up
    zk.create("/a")
    zk.get_data(A, "/a")
    zk.get_children(A, "/a")
    zk.get_children(B, "/a")
    assert len(zk.wm) == 3
    assert zk.delete("/a") == [(A, DELETED, "/a"), (B, DELETED, "/a")]
    assert len(zk.wm) == 0
    zk.create("/a")
    assert zk.create("/a/b") == []


def test_create_and_delete_tell_the_node_and_its_parent(zk: Server) -> None:
    zk.create("/p")
    zk.exists(A, "/p/a")
    zk.get_children(B, "/p")
    assert zk.create("/p/a") == [(A, CREATED, "/p/a"), (B, KIDS, "/p")]
    zk.get_data(A, "/p/a")
    zk.get_children(B, "/p")
    assert zk.delete("/p/a") == [(A, DELETED, "/p/a"), (B, KIDS, "/p")]


# ------------------------------------------------------------- ephemerals


def test_closing_a_session_deletes_its_ephemerals_and_fires(zk: Server) -> None:
    zk.create("/locks")
    other = zk.zk.session()
    zk.create("/locks/e1", mode=EPHEMERAL, session=other)
    zk.create("/locks/e2", mode=EPHEMERAL, session=other)
    zk.get_data(A, "/locks/e1")
    zk.exists(B, "/locks/e2")
    zk.get_children(C, "/locks")
    zk.add_watch(D, "/locks")
    events = zk.events(CloseSession(), session=other)
    assert zk.zk.tree.children_of("/locks") == []
    assert events == [
        (A, DELETED, "/locks/e1"),
        (C, KIDS, "/locks"), (D, KIDS, "/locks"),
        (B, DELETED, "/locks/e2"),
        (D, KIDS, "/locks"),  # the child watch was used up by the first delete, the persistent one stays
    ]
    assert zk.wm.by_owner() == {D: ["/locks"]}


def test_closing_a_session_without_ephemerals_fires_nothing(zk: Server) -> None:
    zk.create("/a")
    zk.get_children(A, "/a")
    zk.add_watch(B, "/", recursive=True)
    other = zk.zk.session()
    assert zk.events(CloseSession(), session=other) == []


def test_a_container_cleanup_fires_like_a_delete(zk: Server) -> None:
    zk.create("/c", mode=CONTAINER)
    zk.create("/c/x")
    zk.delete("/c/x")
    zk.get_data(A, "/c")
    zk.get_children(B, "/")
    assert zk.events(DeleteContainer("/c")) == [(A, DELETED, "/c"), (B, KIDS, "/")]


# ------------------------------------------------------------------ multi


def test_multi_fires_for_each_op(zk: Server) -> None:
    zk.create("/m")
    zk.create("/m/y")
    zk.get_data(A, "/m")
    zk.get_children(B, "/m")
    zk.get_data(C, "/m/y")
    zk.add_watch(D, "/m")
    result, events = zk.do(Multi((Create("/m/x"), SetData("/m", b"new"), Delete("/m/y"), Check("/m", 1))))
    assert isinstance(result, MultiResult) and not result.failed
    assert events == [
        (B, KIDS, "/m"), (D, KIDS, "/m"),  # create /m/x
        (A, CHANGED, "/m"), (D, CHANGED, "/m"),  # setData /m
        (C, DELETED, "/m/y"), (D, KIDS, "/m"),  # delete /m/y: B's one-shot child watch is gone
    ]


def test_a_failed_multi_fires_nothing(zk: Server) -> None:
    zk.create("/m")
    zk.create("/m/y")
    zk.get_data(A, "/m")
    zk.get_children(B, "/m")
    zk.get_data(C, "/m/y")
    zk.add_watch(D, "/", recursive=True)
    zk.exists(A, "/m/x")
    before = len(zk.wm)
    result, events = zk.do(Multi((Create("/m/x"), SetData("/m", b"new"), Delete("/m/y"), Check("/m", 99))))
    assert isinstance(result, MultiResult) and result.failed
    assert events == []
    assert len(zk.wm) == before
    assert zk.zk.tree.stat("/m/x") is None
    assert zk.set("/m") == [(A, CHANGED, "/m"), (D, CHANGED, "/m")]


def test_multi_that_creates_and_deletes_one_node(zk: Server) -> None:
    zk.create("/m")
    zk.exists(A, "/m/t")
    zk.add_watch(B, "/m")
    zk.get_children(C, "/m")
    ops: tuple[MultiOp, ...] = (Create("/m/t"), SetData("/m/t", b"1"), Delete("/m/t"))
    assert zk.events(Multi(ops)) == [
        (A, CREATED, "/m/t"), (B, KIDS, "/m"), (C, KIDS, "/m"),
        (B, KIDS, "/m"),
    ]
    assert zk.wm.by_owner() == {B: ["/m"]}


# ------------------------------------------------------ persistent (addWatch)


def test_persistent_watch_fires_on_every_change_and_stays(zk: Server) -> None:
    zk.add_watch(A, "/p")
    assert zk.create("/p") == [(A, CREATED, "/p")]
    assert zk.set("/p", b"1") == [(A, CHANGED, "/p")]
    assert zk.set("/p", b"2") == [(A, CHANGED, "/p")]
    assert zk.create("/p/c") == [(A, KIDS, "/p")]
    assert zk.create("/p/d") == [(A, KIDS, "/p")]
    assert zk.set("/p/c") == []  # a child's data is not the node's
    assert zk.create("/p/c/g") == []  # nor a grandchild
    zk.delete("/p/c/g")
    assert zk.delete("/p/c") == [(A, KIDS, "/p")]
    zk.delete("/p/d")
    assert zk.delete("/p") == [(A, DELETED, "/p")]  # once, though it is in both tables
    assert zk.check_watches(A, "/p", PERSISTENT_TYPE) == Code.OK
    assert zk.create("/p") == [(A, CREATED, "/p")]


def test_persistent_watch_is_counted_in_both_tables(zk: Server) -> None:
    # ZooKeeper's watch count is dataWatches.size() + childWatches.size()
    zk.add_watch(A, "/p")
    assert len(zk.wm) == 2
    assert zk.wm.paths == 1
    assert zk.wm.by_owner() == {A: ["/p"]}
    assert zk.wm.by_path() == {"/p": [A]}
    zk.add_watch(A, "/p")  # again: nothing new
    assert len(zk.wm) == 2


# ------------------------------------------- persistent recursive (addWatch)


def test_recursive_watch_fires_for_the_node_and_every_descendant(zk: Server) -> None:
    zk.add_watch(A, "/r", recursive=True)
    assert len(zk.wm) == 1  # the data table only
    assert zk.create("/r") == [(A, CREATED, "/r")]
    assert zk.create("/r/a") == [(A, CREATED, "/r/a")]  # and no NodeChildrenChanged for /r
    assert zk.create("/r/a/b") == [(A, CREATED, "/r/a/b")]
    assert zk.set("/r/a/b") == [(A, CHANGED, "/r/a/b")]
    assert zk.set("/r") == [(A, CHANGED, "/r")]
    assert zk.delete("/r/a/b") == [(A, DELETED, "/r/a/b")]
    assert zk.delete("/r/a") == [(A, DELETED, "/r/a")]
    assert zk.delete("/r") == [(A, DELETED, "/r")]
    assert zk.check_watches(A, "/r", PERSISTENT_RECURSIVE_TYPE) == Code.OK
    assert zk.create("/r") == [(A, CREATED, "/r")]


def test_recursive_watch_ignores_paths_that_only_share_a_prefix(zk: Server) -> None:
    zk.create("/r")
    zk.add_watch(A, "/r", recursive=True)
    assert zk.create("/rx") == []
    assert zk.create("/rx/r") == []
    assert zk.set("/rx") == []
    assert zk.delete("/rx/r") == []
    assert zk.create("/r/in") == [(A, CREATED, "/r/in")]


def test_recursive_watch_on_the_root_sees_everything_but_children_changed(zk: Server) -> None:
    zk.add_watch(A, "/", recursive=True)
    assert zk.create("/x") == [(A, CREATED, "/x")]
    assert zk.create("/x/y") == [(A, CREATED, "/x/y")]
    assert zk.set("/") == [(A, CHANGED, "/")]
    assert zk.delete("/x/y") == [(A, DELETED, "/x/y")]


def test_recursive_watches_nested_of_one_owner_give_one_event(zk: Server) -> None:
    zk.add_watch(A, "/", recursive=True)
    zk.add_watch(A, "/r", recursive=True)
    zk.add_watch(A, "/r/a", recursive=True)
    zk.add_watch(B, "/r", recursive=True)
    zk.create("/r")
    zk.create("/r/a")
    assert zk.create("/r/a/b") == [(A, CREATED, "/r/a/b"), (B, CREATED, "/r/a/b")]


def test_recursive_watches_of_other_owners_survive_a_removal(zk: Server) -> None:
    zk.create("/r")
    zk.create("/q")
    zk.add_watch(A, "/r", recursive=True)
    zk.add_watch(A, "/r", recursive=True)  # again: still one watch
    zk.add_watch(B, "/q", recursive=True)
    zk.add_watch(C, "/", recursive=True)
    assert zk.remove_watches(A, "/r", PERSISTENT_RECURSIVE_TYPE) == Code.OK
    zk.wm.drop(C)
    assert zk.create("/r/x") == []
    assert zk.create("/q/x") == [(B, CREATED, "/q/x")]
    zk.wm.drop(B)
    assert zk.create("/q/y") == []
    zk.add_watch(D, "/q", recursive=True)
    assert zk.create("/q/z") == [(D, CREATED, "/q/z")]


def test_recursive_and_child_watch_of_one_owner(zk: Server) -> None:
    # two different events: NodeCreated of the child (recursive, data table)
    # and NodeChildrenChanged of the parent (child table)
    zk.create("/r")
    zk.add_watch(A, "/r", recursive=True)
    zk.get_children(A, "/r")
    assert zk.create("/r/a") == [(A, CREATED, "/r/a"), (A, KIDS, "/r")]
    assert zk.create("/r/b") == [(A, CREATED, "/r/b")]


def test_recursive_and_persistent_watch_of_one_owner(zk: Server) -> None:
    zk.create("/r")
    zk.add_watch(A, "/r", recursive=True)
    zk.add_watch(A, "/r")
    assert zk.create("/r/a") == [(A, CREATED, "/r/a"), (A, KIDS, "/r")]
    assert zk.set("/r") == [(A, CHANGED, "/r")]
    assert zk.remove_watches(A, "/r", PERSISTENT_TYPE) == Code.OK
    assert zk.create("/r/b") == [(A, CREATED, "/r/b")]
    assert zk.remove_watches(A, "/r", PERSISTENT_RECURSIVE_TYPE) == Code.OK
    assert zk.create("/r/c") == []
    assert len(zk.wm) == 0


# ------------------------------ standard and persistent watch on one path (3.9)


def test_data_watch_and_persistent_watch_of_one_owner(zk: Server) -> None:
    zk.create("/p")
    zk.get_data(A, "/p")
    zk.add_watch(A, "/p")
    assert len(zk.wm) == 2  # one entry per table, as ZooKeeper counts
    assert zk.set("/p") == [(A, CHANGED, "/p")]  # one event, not two
    assert zk.check_watches(A, "/p", DATA) == Code.NO_WATCHER  # the one-shot is used up
    assert zk.check_watches(A, "/p", PERSISTENT_TYPE) == Code.OK
    assert zk.set("/p") == [(A, CHANGED, "/p")]
    assert len(zk.wm) == 2


def test_persistent_watch_then_data_watch_of_one_owner(zk: Server) -> None:
    # ZooKeeper 3.9 (ZOOKEEPER-4466): the order they are set in does not matter;
    # 3.6-3.8 replaced the persistent mode by the standard one here
    zk.create("/p")
    zk.add_watch(A, "/p")
    zk.get_data(A, "/p")
    assert zk.set("/p") == [(A, CHANGED, "/p")]
    assert zk.set("/p") == [(A, CHANGED, "/p")]


def test_child_watch_and_persistent_watch_of_one_owner(zk: Server) -> None:
    zk.create("/p")
    zk.add_watch(A, "/p")
    zk.get_children(A, "/p")
    assert zk.create("/p/a") == [(A, KIDS, "/p")]
    assert zk.check_watches(A, "/p", CHILDREN) == Code.NO_WATCHER
    assert zk.create("/p/b") == [(A, KIDS, "/p")]


def test_standard_watches_and_persistent_watch_of_one_owner_on_delete(zk: Server) -> None:
    zk.create("/p")
    zk.get_data(A, "/p")
    zk.get_children(A, "/p")
    zk.add_watch(A, "/p")
    assert len(zk.wm) == 2
    assert zk.delete("/p") == [(A, DELETED, "/p")]
    assert zk.check_watches(A, "/p", DATA) == Code.NO_WATCHER
    assert zk.check_watches(A, "/p", CHILDREN) == Code.NO_WATCHER
    assert zk.check_watches(A, "/p", PERSISTENT_TYPE) == Code.OK
    assert zk.create("/p") == [(A, CREATED, "/p")]


def test_exists_watch_and_recursive_watch_of_one_owner(zk: Server) -> None:
    zk.exists(A, "/r")
    zk.add_watch(A, "/r", recursive=True)
    assert len(zk.wm) == 1
    assert zk.create("/r") == [(A, CREATED, "/r")]
    assert zk.check_watches(A, "/r", DATA) == Code.NO_WATCHER
    assert zk.set("/r") == [(A, CHANGED, "/r")]


# ------------------------------------------------- removeWatches / checkWatches


def test_check_watches_by_kind(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    assert zk.check_watches(A, "/a", DATA) == Code.OK
    assert zk.check_watches(A, "/a", ANY) == Code.OK
    assert zk.check_watches(A, "/a", CHILDREN) == Code.NO_WATCHER
    assert zk.check_watches(A, "/a", PERSISTENT_TYPE) == Code.NO_WATCHER
    assert zk.check_watches(A, "/a", PERSISTENT_RECURSIVE_TYPE) == Code.NO_WATCHER
    assert zk.check_watches(B, "/a", ANY) == Code.NO_WATCHER  # another connection's
    assert zk.check_watches(A, "/other", ANY) == Code.NO_WATCHER
    zk.get_children(A, "/a")
    assert zk.check_watches(A, "/a", CHILDREN) == Code.OK
    zk.add_watch(B, "/a")
    assert zk.check_watches(B, "/a", PERSISTENT_TYPE) == Code.OK
    assert zk.check_watches(B, "/a", ANY) == Code.OK
    assert zk.check_watches(B, "/a", DATA) == Code.NO_WATCHER
    assert zk.check_watches(B, "/a", CHILDREN) == Code.NO_WATCHER
    zk.add_watch(C, "/a", recursive=True)
    assert zk.check_watches(C, "/a", PERSISTENT_RECURSIVE_TYPE) == Code.OK
    assert zk.check_watches(C, "/a", PERSISTENT_TYPE) == Code.NO_WATCHER
    assert zk.check_watches(C, "/a/below", ANY) == Code.NO_WATCHER  # a watch is on its own path only
    # checking is not firing: nothing was used up
    assert len(zk.wm) == 5


def test_remove_children_leaves_the_data_watch(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    zk.get_children(A, "/a")
    assert zk.remove_watches(A, "/a", CHILDREN) == Code.OK
    assert zk.remove_watches(A, "/a", CHILDREN) == Code.NO_WATCHER
    assert len(zk.wm) == 1
    assert zk.create("/a/b") == []
    assert zk.set("/a") == [(A, CHANGED, "/a")]


def test_remove_data_leaves_the_child_watch(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    zk.get_children(A, "/a")
    assert zk.remove_watches(A, "/a", DATA) == Code.OK
    assert zk.remove_watches(A, "/a", DATA) == Code.NO_WATCHER
    assert zk.set("/a") == []
    assert zk.create("/a/b") == [(A, KIDS, "/a")]


def test_remove_data_removes_an_exist_watch(zk: Server) -> None:
    zk.exists(A, "/a")
    assert zk.remove_watches(A, "/a", DATA) == Code.OK
    assert zk.create("/a") == []
    assert len(zk.wm) == 0


def test_remove_any_removes_every_watch_of_the_owner_on_the_path(zk: Server) -> None:
    zk.create("/a")
    zk.create("/b")
    zk.get_data(A, "/a")
    zk.get_children(A, "/a")
    zk.add_watch(A, "/a")
    zk.add_watch(A, "/a", recursive=True)
    zk.get_data(A, "/b")
    zk.get_data(B, "/a")
    assert zk.remove_watches(A, "/a", ANY) == Code.OK
    assert zk.remove_watches(A, "/a", ANY) == Code.NO_WATCHER
    assert zk.wm.by_path() == {"/a": [B], "/b": [A]}
    assert zk.create("/a/c") == []  # the recursive watch went too
    assert zk.set("/a") == [(B, CHANGED, "/a")]
    assert zk.set("/b") == [(A, CHANGED, "/b")]


def test_remove_by_kind_does_not_touch_other_modes(zk: Server) -> None:
    zk.create("/p")
    zk.add_watch(A, "/p")
    zk.add_watch(A, "/p", recursive=True)
    # Data and Children are the one-shot watches (ZooKeeper 3.9)
    assert zk.remove_watches(A, "/p", DATA) == Code.NO_WATCHER
    assert zk.remove_watches(A, "/p", CHILDREN) == Code.NO_WATCHER
    assert zk.remove_watches(A, "/p", PERSISTENT_TYPE) == Code.OK
    assert zk.remove_watches(A, "/p", PERSISTENT_TYPE) == Code.NO_WATCHER
    assert zk.check_watches(A, "/p", PERSISTENT_RECURSIVE_TYPE) == Code.OK
    assert len(zk.wm) == 1
    assert zk.create("/p/x") == [(A, CREATED, "/p/x")]  # no NodeChildrenChanged: the persistent one is gone
    assert zk.remove_watches(A, "/p", PERSISTENT_RECURSIVE_TYPE) == Code.OK
    assert zk.remove_watches(A, "/p", PERSISTENT_RECURSIVE_TYPE) == Code.NO_WATCHER
    assert len(zk.wm) == 0
    assert zk.create("/p/y") == []
    assert zk.set("/p") == []


def test_removing_a_watch_of_another_owner_fails(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    assert zk.remove_watches(B, "/a", DATA) == Code.NO_WATCHER
    assert zk.remove_watches(B, "/a", ANY) == Code.NO_WATCHER
    assert zk.remove_watches(A, "/nope", ANY) == Code.NO_WATCHER
    assert zk.remove_watches(A, "/a", 9) == Code.NO_WATCHER  # not a watcher type
    assert zk.set("/a") == [(A, CHANGED, "/a")]


def test_dropping_an_owner_removes_all_its_watches(zk: Server) -> None:
    zk.create("/a")
    zk.create("/b")
    zk.get_data(A, "/a")
    zk.get_children(A, "/a")
    zk.exists(A, "/missing")
    zk.add_watch(A, "/b")
    zk.add_watch(A, "/", recursive=True)
    zk.get_data(B, "/a")
    zk.get_children(B, "/b")
    assert len(zk.wm) == 8  # A: 1 + 1 + 1 + 2 (persistent: both tables) + 1; B: 2
    assert zk.wm.paths == 4
    zk.wm.drop(A)
    assert len(zk.wm) == 2
    assert zk.wm.by_owner() == {B: ["/a", "/b"]}
    assert zk.wm.by_path() == {"/a": [B], "/b": [B]}
    assert zk.check_watches(A, "/a", ANY) == Code.NO_WATCHER
    assert zk.create("/missing") == []
    assert zk.create("/a/kid") == []
    assert zk.set("/a") == [(B, CHANGED, "/a")]
    assert zk.create("/b/kid") == [(B, KIDS, "/b")]
    zk.wm.drop(A)  # again: nothing to do
    zk.wm.drop(B)
    assert len(zk.wm) == 0
    assert zk.wm.paths == 0
    assert zk.wm.by_owner() == {}
    assert zk.wm.by_path() == {}


def test_a_dropped_owner_can_watch_again(zk: Server) -> None:
    zk.add_watch(A, "/", recursive=True)
    zk.wm.drop(A)
    assert zk.create("/a") == []
    zk.add_watch(A, "/", recursive=True)
    assert zk.create("/b") == [(A, CREATED, "/b")]


# ------------------------------------------------ setWatches after a reconnect


def test_set_watches_fires_node_data_changed_for_a_missed_set_data(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    last = zk.zk.zxid
    zk.wm.drop(A)  # the connection is gone
    assert zk.set("/a") == []
    assert zk.set_watches(A, last, data=["/a"]) == [(A, CHANGED, "/a")]
    assert len(zk.wm) == 0  # fired instead of set


def test_set_watches_fires_node_deleted_for_a_missed_delete(zk: Server) -> None:
    zk.create("/a")
    zk.create("/b")
    last = zk.zk.zxid
    zk.delete("/a")
    zk.delete("/b")
    assert zk.set_watches(A, last, data=["/a"], child=["/b"]) == [(A, DELETED, "/a"), (A, DELETED, "/b")]
    assert len(zk.wm) == 0


def test_set_watches_fires_node_created_for_a_missed_create(zk: Server) -> None:
    last = zk.zk.zxid
    zk.create("/a")
    assert zk.set_watches(A, last, exist=["/a"]) == [(A, CREATED, "/a")]
    assert len(zk.wm) == 0


def test_set_watches_fires_children_changed_for_a_missed_child_create_or_delete(zk: Server) -> None:
    zk.create("/a")
    zk.create("/b")
    zk.create("/b/old")
    last = zk.zk.zxid
    zk.create("/a/new")
    zk.delete("/b/old")
    assert zk.set_watches(A, last, child=["/a", "/b"]) == [(A, KIDS, "/a"), (A, KIDS, "/b")]
    assert len(zk.wm) == 0


def test_set_watches_sets_what_was_not_missed(zk: Server) -> None:
    zk.create("/a")
    zk.create("/c")
    last = zk.zk.zxid
    zk.create("/c/kid")  # changes /c's children, not its data
    zk.set("/a")  # changes /a's data, not its children
    assert zk.set_watches(A, last, data=["/c"], exist=["/none"], child=["/a"]) == []
    assert len(zk.wm) == 3
    assert zk.wm.by_owner() == {A: ["/a", "/c", "/none"]}
    assert zk.set("/c") == [(A, CHANGED, "/c")]
    assert zk.create("/none") == [(A, CREATED, "/none")]
    assert zk.create("/a/kid") == [(A, KIDS, "/a")]
    assert len(zk.wm) == 0


def test_set_watches_fires_nothing_when_nothing_was_missed(zk: Server) -> None:
    zk.create("/a")
    zk.create("/a/b")
    zk.set("/a")
    last = zk.zk.zxid  # the client saw the last change: relative zxid == mzxid == pzxid
    assert zk.zk.tree.stat("/a") is not None
    assert zk.set_watches(A, last, data=["/a"], exist=["/x"], child=["/a"], persistent=["/a"],
                          recursive=["/"]) == []
    assert len(zk.wm) == 4  # data + child (the standard and the persistent share them) + /x + the recursive one
    assert zk.set("/a") == [(A, CHANGED, "/a")]
    assert zk.set("/a") == [(A, CHANGED, "/a")]  # the persistent one


def test_set_watches_compares_with_the_zxid_the_client_saw(zk: Server) -> None:
    zk.create("/a")
    zk.set("/a")
    changed = zk.zk.zxid
    assert zk.set_watches(A, changed - 1, data=["/a"]) == [(A, CHANGED, "/a")]
    assert zk.set_watches(B, changed, data=["/a"]) == []
    assert zk.wm.by_path() == {"/a": [B]}


def test_set_watches_re_adds_persistent_watches_without_events(zk: Server) -> None:
    zk.create("/p")
    last = zk.zk.zxid
    zk.set("/p")
    zk.create("/p/kid")
    zk.delete("/p/kid")
    zk.delete("/p")
    assert zk.set_watches(A, last, persistent=["/p"], recursive=["/r"]) == []
    assert zk.check_watches(A, "/p", PERSISTENT_TYPE) == Code.OK
    assert zk.check_watches(A, "/r", PERSISTENT_RECURSIVE_TYPE) == Code.OK
    assert zk.create("/p") == [(A, CREATED, "/p")]
    assert zk.create("/r") == [(A, CREATED, "/r")]
    assert zk.create("/r/x") == [(A, CREATED, "/r/x")]


def test_set_watches_for_a_recreated_node(zk: Server) -> None:
    # deleted and created again since: its mzxid is newer, so NodeDataChanged
    zk.create("/a")
    last = zk.zk.zxid
    zk.delete("/a")
    zk.create("/a")
    assert zk.set_watches(A, last, data=["/a"]) == [(A, CHANGED, "/a")]


# ------------------------------------------------------------ several owners


def test_several_owners_on_one_path_each_hear_once(zk: Server) -> None:
    zk.create("/a")
    for owner in (A, B, C):
        zk.get_data(owner, "/a")
        zk.get_data(owner, "/a")  # twice: still one watch
    assert len(zk.wm) == 3
    # in the order the watches were set (ZooKeeper does not promise an order; zabd does)
    assert zk.set("/a") == [(A, CHANGED, "/a"), (B, CHANGED, "/a"), (C, CHANGED, "/a")]
    assert zk.set("/a") == []


def test_several_owners_with_every_kind_of_watch_on_one_path(zk: Server) -> None:
    zk.create("/a")
    zk.get_data(A, "/a")
    zk.exists(B, "/a")
    zk.add_watch(C, "/a")
    zk.add_watch(D, "/", recursive=True)
    events = zk.set("/a")
    assert Counter(events) == Counter({(A, CHANGED, "/a"): 1, (B, CHANGED, "/a"): 1, (C, CHANGED, "/a"): 1,
                                       (D, CHANGED, "/a"): 1})
    for owner in (A, B):
        zk.get_data(owner, "/a")
        zk.get_children(owner, "/a")
    events = zk.delete("/a")
    assert sorted(events) == sorted([(A, DELETED, "/a"), (B, DELETED, "/a"), (C, DELETED, "/a"),
                                     (D, DELETED, "/a")])
    assert zk.wm.by_owner() == {C: ["/a"], D: ["/"]}


# ------------------------------------------ READ checked when a watch fires


def acl_zk() -> Server:
    """A server where B proved alice's digest, C is the superuser, A is nobody."""
    zk = Server()
    zk.ids = {A: LOCAL, B: (*LOCAL, ALICE), C: (*LOCAL, SUPER)}
    return zk


def test_a_data_watch_on_a_node_made_digest_only_hears_nothing_of_its_delete() -> None:
    """The case reported: getData watch, the ACL becomes digest-only (setACL
    fires nothing), the node is deleted: ZooKeeper 3.8.4 sends A nothing, and
    A's one-shot watch is used up all the same (removed before the check)."""
    zk = acl_zk()
    zk.create("/n")
    for owner in (A, B, C):
        zk.get_data(owner, "/n")
    assert zk.events(SetACL("/n", ALICE_ONLY)) == []
    assert zk.events(Delete("/n"), auth=(ALICE,)) == [(B, DELETED, "/n"), (C, DELETED, "/n")]
    assert zk.check_watches(A, "/n", DATA) == Code.NO_WATCHER and len(zk.wm) == 0


def test_a_data_change_needs_read_on_the_acl_the_node_has_then() -> None:
    zk = acl_zk()
    zk.create("/n")
    zk.get_data(A, "/n")
    zk.exists(B, "/n")
    zk.events(SetACL("/n", ALICE_ONLY))
    assert zk.events(SetData("/n", b"x"), auth=(ALICE,)) == [(B, CHANGED, "/n")]
    zk.get_data(A, "/n")  # refused: no READ; no watch either
    assert len(zk.wm) == 0


def test_an_exist_watch_hears_a_create_only_with_read_on_the_new_nodes_acl() -> None:
    zk = acl_zk()
    for owner in (A, B):
        assert not zk.exists(owner, "/n")
    assert zk.events(Create("/n", acl=ALICE_ONLY)) == [(B, CREATED, "/n")]
    assert len(zk.wm) == 0  # A's used up too


def test_a_child_watch_needs_read_on_the_parent_not_on_the_child() -> None:
    zk = acl_zk()
    zk.create("/p")
    for owner in (A, B):
        zk.get_children(owner, "/p")
    # a child nobody but alice may read: its parent is open, so the children-changed goes to all
    assert zk.events(Create("/p/secret", acl=ALICE_ONLY)) == [(A, KIDS, "/p"), (B, KIDS, "/p")]
    for owner in (A, B):
        zk.get_children(owner, "/p")
    zk.events(SetACL("/p", ALICE_ONLY))
    assert zk.events(Create("/p/open"), auth=(ALICE,)) == [(B, KIDS, "/p")]
    zk.get_children(B, "/p")
    zk.add_watch(A, "/p/open")  # a child watch of its own: its delete is checked on the child's ACL
    zk.get_children(A, "/p/open")
    assert zk.events(Delete("/p/open"), auth=(ALICE,)) == [(A, DELETED, "/p/open"), (B, KIDS, "/p")]


def test_a_persistent_watch_stays_while_its_events_are_withheld() -> None:
    zk = acl_zk()
    zk.create("/n")
    zk.add_watch(A, "/n")
    zk.events(SetACL("/n", ALICE_ONLY))
    assert zk.events(SetData("/n", b"1"), auth=(ALICE,)) == []
    assert zk.events(Create("/n/c", acl=OPEN_ACL_UNSAFE), auth=(ALICE,)) == []  # children-changed: /n's ACL
    assert zk.check_watches(A, "/n", PERSISTENT_TYPE) == Code.OK
    zk.events(SetACL("/n", OPEN_ACL_UNSAFE), auth=(ALICE,))
    assert zk.events(SetData("/n", b"2")) == [(A, CHANGED, "/n")]


def test_a_recursive_watch_hears_of_the_nodes_below_it_it_may_read() -> None:
    """CVE-2024-23944 itself: a persistent-recursive watch on a path one may
    read told the paths of every node created, changed or deleted below it.
    The check is on the changed node's ACL, not the watched one's."""
    zk = acl_zk()
    zk.create("/app")
    for owner in (A, B, C):
        zk.add_watch(owner, "/app", recursive=True)
    assert zk.events(Create("/app/user-bob", acl=ALICE_ONLY)) == [(B, CREATED, "/app/user-bob"),
                                                                 (C, CREATED, "/app/user-bob")]
    assert zk.events(Create("/app/user-bob/key", acl=OPEN_ACL_UNSAFE), auth=(ALICE,)) == [
        (A, CREATED, "/app/user-bob/key"), (B, CREATED, "/app/user-bob/key"), (C, CREATED, "/app/user-bob/key")]
    assert zk.events(SetData("/app/user-bob", b"x"), auth=(ALICE,)) == [(B, CHANGED, "/app/user-bob"),
                                                                       (C, CHANGED, "/app/user-bob")]
    assert zk.events(Delete("/app/user-bob/key"), auth=(ALICE,)) == [
        (A, DELETED, "/app/user-bob/key"), (B, DELETED, "/app/user-bob/key"), (C, DELETED, "/app/user-bob/key")]
    assert zk.events(Delete("/app/user-bob"), auth=(ALICE,)) == [(B, DELETED, "/app/user-bob"),
                                                                (C, DELETED, "/app/user-bob")]
    assert zk.events(Create("/app/open")) == [(A, CREATED, "/app/open"), (B, CREATED, "/app/open"),
                                              (C, CREATED, "/app/open")]


def test_ip_and_world_entries_and_an_acl_without_read() -> None:
    zk = acl_zk()
    zk.ids[D] = (Id("ip", "10.1.2.3"),)
    ten = (ACL(READ, Id("ip", "10.0.0.0/8")), ACL(ALL, ALICE))
    zk.create("/n", acl=ten)
    for owner in (A, D):
        zk.add_watch(owner, "/n")
    assert zk.events(SetData("/n", b"x"), auth=(ALICE,)) == [(D, CHANGED, "/n")]
    zk.events(SetACL("/n", (ACL(READ, ANYONE), ACL(ALL, ALICE))), auth=(ALICE,))
    assert zk.events(SetData("/n", b"y"), auth=(ALICE,)) == [(A, CHANGED, "/n"), (D, CHANGED, "/n")]
    # anyone may write, nobody may read: the writes fire watches that nobody hears
    zk.events(SetACL("/n", (ACL(ALL & ~READ, ANYONE),)), auth=(ALICE,))
    assert zk.events(SetData("/n", b"z")) == []
    assert zk.events(SetData("/n", b"w"), auth=(ALICE,)) == []
    assert zk.events(SetACL("/n", (ACL(WRITE, ANYONE), ACL(READ, ALICE)))) == []


def test_set_watches_events_are_not_checked() -> None:
    """ZooKeeper's setWatches delivers what changed since the client's zxid
    without an ACL (DataTree.setWatches calls process(event)), in 3.8.4 too."""
    zk = acl_zk()
    zk.create("/n", acl=ALICE_ONLY)
    last = zk.zk.zxid
    zk.events(SetData("/n", b"x"), auth=(ALICE,))
    assert zk.set_watches(A, last, data=["/n"]) == [(A, CHANGED, "/n")]

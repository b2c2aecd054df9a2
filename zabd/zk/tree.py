"""The data tree and the session table: ZooKeeper's ``DataTree`` for zabd.

``apply`` takes committed txns (``zabd.zk.txn``) in zxid order and
decides nothing: the leader already turned every request into its outcome
(``zabd.zk.prep``). It returns the client's result and what changed, for
watches. The stat rules are ZooKeeper 3.8's:

- create: the node gets czxid = mzxid = pzxid = zxid, ctime = mtime = the
  txn's time; the parent's cversion becomes the txn's (the parent's cversion
  + 1 when the leader decided) and its pzxid the zxid;
- delete: the parent's pzxid becomes the zxid; its cversion does not change
  (so sequential suffixes never repeat);
- setData: mzxid, mtime and version from the txn; setACL: aversion.

Znodes are immutable records replaced on change (only a parent's set of
children is shared between its versions), so a snapshot is a shallow copy
of one dict taken between two applies, encoded later on another thread.
``digest`` is the sum of a 64-bit hash of every node (path, data, acl, stat)
and session, kept up to date on each change (ZooKeeper 3.6's
``digestEnabled``): two replicas at the same zxid compare it cheaply.
"""

from __future__ import annotations

import gc
import hashlib
import io
import struct
from collections.abc import Container, Iterable, Iterator
from typing import Any, Final, NamedTuple, cast

import msgpack
from crc32c import crc32c
from mypy_extensions import mypyc_attr

from zabd.machine import MalformedTxn
from zabd.zk import txn as tx
from zabd.zk.acl import ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE
from zabd.zk.acl import from_wire as acls_unwire
from zabd.zk.acl import to_wire as acls_wire
from zabd.zk.errors import Code
from zabd.zk.events import EventType, Trigger
from zabd.zk.paths import parent_of
from zabd.zk.records import (
    CONTAINER_OWNER,
    CheckResult,
    CreateResult,
    DeleteResult,
    ErrorResult,
    MultiResult,
    SessionResult,
    Stat,
    StatResult,
    WriteResult,
    ttl_of,
)
from zabd.zk.sessions import stored_digest
from zabd.zk.txn_check import check

MASK64 = (1 << 64) - 1
HASHES_KEPT = 4096  # hashes of recently placed znodes, kept to take them out of the digest again
# 5: sessions hold their password's digest (4 held the password); 4: CRC-32C node hashes (3 had
# CRC-32, 2 BLAKE2b: their digests do not carry over, restore recomputes them)
_SNAP_FORMAT = 6  # 6: an ACL in the first row that uses it (5: a table after the rows)
_RESTORE_STEP = 1 << 22
_OWNER = struct.Struct("<q")
_NO_OWNER = bytes(8)
_CHILDREN = struct.Struct("<i")
_SESSION = struct.Struct("<qq")
_NO_CHILDREN = _CHILDREN.pack(0)

CONFIG_PATH: Final = "/zookeeper/config"
SPECIAL_PATHS = frozenset({"/", "/zookeeper", "/zookeeper/quota", CONFIG_PATH})

# An IntEnum member read from compiled code is a lookup of ~85 ns, a Final
# constant ~17: every write triggers one or two
_CREATED: Final = EventType.NODE_CREATED
_DELETED: Final = EventType.NODE_DELETED
_DATA_CHANGED: Final = EventType.NODE_DATA_CHANGED
_CHILDREN_CHANGED: Final = EventType.NODE_CHILDREN_CHANGED


# A znode's stat fields, packed in front of its data in one bytes object:
# czxid mzxid pzxid ctime mtime version cversion aversion ephemeralOwner.
# One object instead of a dozen ints keeps a znode of 100 B data under
# ZooKeeper's own cost per znode (docs/zookeeper.md has the measurement).
HEADER = struct.Struct("<QQQqqiiiq")
HEADER_SIZE = HEADER.size
_OWNER_AT = HEADER_SIZE - 8  # ephemeralOwner: the header's last field


def _int32(v: int) -> int:
    return (v + (1 << 31)) % (1 << 32) - (1 << 31)


class _Keep:
    """``with_header``'s default: keep the node's data as it is."""


KEEP = _Keep()


class ZNode:
    """One znode. Never changed in place (a change makes a new one), except
    ``children``: the full paths of its children, shared by its versions."""

    __slots__ = ("blob", "acl", "children")

    def __init__(self, blob: bytes, acl: tuple[ACL, ...], children: set[str] | None) -> None:
        self.blob = blob
        self.acl = acl
        self.children = children

    @classmethod
    def make(cls, data: bytes | None, acl: tuple[ACL, ...], czxid: int, mzxid: int, pzxid: int, ctime: int,
             mtime: int, version: int, cversion: int, aversion: int, owner: int,
             children: set[str] | None) -> ZNode:
        head = HEADER.pack(czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner)
        if data is None:
            return NullDataZNode(head, acl, children)
        return cls(head + data, acl, children)

    def header(self) -> tuple[int, int, int, int, int, int, int, int, int]:
        """(czxid, mzxid, pzxid, ctime, mtime, version, cversion, aversion, owner)"""
        return HEADER.unpack_from(self.blob)

    @property
    def data(self) -> bytes | None:
        return self.blob[HEADER_SIZE:]

    @property
    def data_length(self) -> int:
        return len(self.blob) - HEADER_SIZE

    @property
    def czxid(self) -> int:
        return self.header()[0]

    @property
    def mzxid(self) -> int:
        return self.header()[1]

    @property
    def pzxid(self) -> int:
        return self.header()[2]

    @property
    def mtime(self) -> int:
        return self.header()[4]

    @property
    def version(self) -> int:
        return self.header()[5]

    @property
    def cversion(self) -> int:
        return self.header()[6]

    @property
    def aversion(self) -> int:
        return self.header()[7]

    @property
    def owner(self) -> int:
        return self.header()[8]

    def stat(self) -> Stat:
        """The Stat a client sees (ZooKeeper's ``DataNode.copyStat``): the
        stored cversion counts creates of children, a client's counts every
        change (``creates * 2 - children now``), and containers and TTL nodes
        show no ephemeral owner."""
        cz, mz, pz, ct, mt, ver, cv, av, owner = HEADER.unpack_from(self.blob)
        kids = len(self.children) if self.children else 0
        if owner < 0 and (owner == CONTAINER_OWNER or ttl_of(owner)):
            owner = 0
        return _tnew(Stat, (cz, mz, ct, mt, ver, _int32(cv * 2 - kids), av, owner, len(self.blob) - HEADER_SIZE, kids,
                            pz))

    def with_header(self, mzxid: int, pzxid: int, mtime: int, version: int, cversion: int, aversion: int,
                    children: set[str] | None, data: bytes | _Keep | None = KEEP,
                    acl: tuple[ACL, ...] | None = None) -> ZNode:
        """This node with a new header; ``data`` replaces its data (None: null data)."""
        cz, _, _, ct, _, _, _, _, owner = HEADER.unpack_from(self.blob)
        head = HEADER.pack(cz, mzxid, pzxid, ct, mtime, version, cversion, aversion, owner)
        acl = self.acl if acl is None else acl
        if isinstance(data, _Keep):
            return type(self)(head + self.blob[HEADER_SIZE:], acl, children)
        if data is None:
            return NullDataZNode(head, acl, children)
        return ZNode(head + data, acl, children)

    def child_stat(self, pzxid: int, cversion: int, children: set[str] | None) -> ZNode:
        _, mz, _, _, mt, ver, _, av, _ = HEADER.unpack_from(self.blob)
        return self.with_header(mz, pzxid, mt, ver, cversion, av, children)


class NullDataZNode(ZNode):
    """A znode whose data is null, not empty (ZooKeeper keeps the two apart:
    a client that created it with null data reads null back). The class is
    the flag: no byte more per znode."""

    __slots__ = ()

    @property
    def data(self) -> bytes | None:
        return None


class Session(NamedTuple):
    timeout_ms: int
    password_digest: bytes  # zabd.zk.sessions.password_digest: the password itself is nowhere here


class Applied(NamedTuple):
    kind: int  # the txn's type (zabd.zk.txn.T_*)
    session: int  # the requesting session
    result: WriteResult | None  # None: a setData whose session nobody here answers (see ``apply``)
    triggers: list[Trigger]


# tuple.__new__ directly: a NamedTuple's own __new__ is Python (a frame per
# call, even from compiled code); these are built on every write
_tnew: Final = tuple.__new__


def _low_hash(node: ZNode, head: int) -> int:
    low: int = crc32c(node.blob, head)
    return crc32c(b"null", low) if type(node) is NullDataZNode else low


def _data(raw: Any) -> bytes | None:
    """A txn's data: bytes, or None for null data."""
    if type(raw) is bytes:  # what msgpack gives: no bytes() call (~90 ns)
        return raw
    return None if raw is None else bytes(raw)


def _empty_node(acl: tuple[ACL, ...], aversion: int = 0) -> ZNode:
    return ZNode.make(b"", acl, 0, 0, 0, 0, 0, 0, 0, aversion, 0, None)


@mypyc_attr(allow_interpreted_subclasses=True)  # the simulator's tests plant bugs in subclasses
class DataTree:
    def __init__(self) -> None:
        self.nodes: dict[str, ZNode] = {}
        self.sessions: dict[int, Session] = {}
        self.ephemerals: dict[int, set[str]] = {}
        self.containers: set[str] = set()
        self.ttls: set[str] = set()
        self.applied = 0
        self.digest = 0
        self._acls: dict[tuple[ACL, ...], tuple[ACL, ...]] = {}
        self._acl_bytes: dict[tuple[ACL, ...], bytes] = {}
        self._hashes: dict[str, tuple[ZNode, int]] = {}
        # ZooKeeper's fixed nodes: /zookeeper/config is READ for anyone, set
        # with aversion -1 as its DataTree does
        for path, acl, aversion in (("/", OPEN_ACL_UNSAFE, 0), ("/zookeeper", OPEN_ACL_UNSAFE, 0),
                                    ("/zookeeper/quota", OPEN_ACL_UNSAFE, 0),
                                    ("/zookeeper/config", READ_ACL_UNSAFE, -1)):
            self._put(path, _empty_node(self._intern(acl), aversion))
            if path != "/":
                self._link(path)

    def set_config(self, data: bytes, zxid: int = 0, mtime: int = 0) -> None:
        """``/zookeeper/config``: the ensemble as this server is configured,
        in ZooKeeper's format. ZooKeeper sets it locally, not through its log,
        and so does this: every replica is configured alike, so their trees
        (and digests) agree. Stat as ZooKeeper's for a static ensemble
        (version -1, aversion -1); ``mtime`` is this server's (ZooKeeper's:
        its start time, or when it applied the reconfig), which the digest
        (``_node_hash``) and snapshots (``encode_view``) leave out, so that
        replicas still agree on both. A membership change sets it through the
        log (``zxid``: the change's). Its children stay (a superuser may
        create some): a node that lost them would leave them orphans, and the
        tree's snapshot unrestorable."""
        path = CONFIG_PATH
        old = self.nodes[path]
        self._put(path, ZNode.make(data, old.acl, 0, zxid, 0, 0, mtime, -1, 0, -1, 0, old.children))

    def stamp_config(self, mtime: int) -> None:
        """``/zookeeper/config`` as it is, with this server's ``mtime`` (a
        snapshot holds 0, ``encode_view``), if this server's configuration or
        a membership change set it (version -1), not a superuser's setData
        (whose mtime is the txn's, replicated; its version never returns to -1)."""
        node = self.nodes.get(CONFIG_PATH)
        if node is not None and node.version == -1:
            _, mz, pz, _, _, ver, cv, av, _ = node.header()
            self._put(CONFIG_PATH, node.with_header(mz, pz, mtime, ver, cv, av, node.children))

    def replicated_digest(self) -> int:
        """The digest without ``/zookeeper/config``'s share: a server sets that
        node from its own configuration (``set_config``), not through the
        log, so a tree rebuilt from the log alone (an audit's replay of a
        node without a snapshot) lacks it while a snapshot holds it. What the
        log made of the rest is what replicas are compared on."""
        node = self.nodes.get(CONFIG_PATH)
        return self.digest if node is None else (self.digest - self._hash(CONFIG_PATH, node)) & MASK64

    def reconfigured(self, data: bytes, zxid: int, mtime: int = 0) -> None:
        """A membership change committed at ``zxid``: ``/zookeeper/config``
        follows it, and the tree has applied ``zxid``, as after ZooKeeper's
        reconfig txn (a reply's zxid, a client's ``lastZxidSeen``, and the
        digest rows the audit compares all count it)."""
        self.set_config(data, zxid, mtime)
        self.applied = zxid

    # ------------------------------------------------------------ internals

    def _intern(self, acl: tuple[ACL, ...]) -> tuple[ACL, ...]:
        # one tuple per distinct ACL (ZooKeeper's ACL cache): a node holds a
        # reference, not a copy
        return self._acls.setdefault(acl, acl)

    def _hash(self, path: str, node: ZNode) -> int:
        """The share of the digest of a node in the tree."""
        h = self._hashes.get(path)
        if h is not None and h[0] is node:
            return h[1]
        return self._node_hash(path, node)

    def _node_hash(self, path: str, node: ZNode) -> int:
        """A CRC, as ZooKeeper's own ``DigestCalculator``: it only has to tell
        replicas apart, and a cryptographic hash of every write's data cost
        more than the rest of the apply. CRC-32C, which the CPU computes (a
        third of zlib's CRC-32 time for 1 KiB). The high half covers the path,
        ACL and children count, the low half all of it with the data and stat.
        ``/zookeeper/config``'s mtime is each server's own (ZooKeeper's digest
        leaves all of /zookeeper/ out): it is hashed as 0, so that replicas,
        and a snapshot restored elsewhere, still agree."""
        if path == CONFIG_PATH:
            cz, mz, pz, ct, _, ver, cv, av, owner = node.header()
            node = ZNode.make(node.data, node.acl, cz, mz, pz, ct, 0, ver, cv, av, owner, node.children)
        acl = node.acl
        ab = self._acl_bytes.get(acl)
        if ab is None:
            ab = self._acl_bytes[acl] = msgpack.packb(acls_wire(acl))
        kids = node.children
        head = crc32c(ab, crc32c(_CHILDREN.pack(len(kids) if kids else 0), crc32c(path.encode())))
        return (head << 32) | _low_hash(node, head)

    def _replace_data(self, path: str, old: ZNode, new: ZNode) -> None:
        """``new`` replaces ``old`` with the same path, ACL and children: the
        high half of its hash is ``old``'s (a setData hashes only its data)."""
        old_h = self._hash(path, old)
        head = old_h >> 32
        h = self._node_hash(path, new) if path == CONFIG_PATH else (head << 32) | _low_hash(new, head)
        self.nodes[path] = new
        self._remember(path, new, h)
        self.digest = (self.digest - old_h + h) & MASK64

    def _placed(self, path: str, node: ZNode) -> int:
        """The hash of a node put in the tree, remembered for its removal (a
        hot znode is set again soon): a node is never changed while it is in
        the tree, so its hash then is still the one it had when placed."""
        h = self._node_hash(path, node)  # a new node: never in the cache
        self._remember(path, node, h)
        return h

    def _remember(self, path: str, node: ZNode, h: int) -> None:
        cache = self._hashes
        if len(cache) >= HASHES_KEPT:
            cache.clear()
        cache[path] = (node, h)

    def _put(self, path: str, node: ZNode) -> None:
        old = self.nodes.get(path)
        digest = self.digest
        if old is not None:
            digest -= self._hash(path, old)
        self.nodes[path] = node
        self.digest = (digest + self._placed(path, node)) & MASK64

    def _drop(self, path: str) -> ZNode:
        node = self.nodes.pop(path)
        self.digest = (self.digest - self._hash(path, node)) & MASK64
        self._hashes.pop(path, None)
        return node

    def _relink(self, ppath: str, parent: ZNode, add: str | None, remove: str | None, pzxid: int,
                cversion: int) -> None:
        """The parent with a child added or removed and its new pzxid and
        cversion. Its old hash is taken before the shared set changes."""
        old = self._hash(ppath, parent)
        kids = parent.children
        if add is not None:
            if kids is None:
                kids = set()
            kids.add(add)
        if remove is not None and kids is not None:
            kids.discard(remove)
        new = parent.child_stat(pzxid, cversion, kids or None)
        self.nodes[ppath] = new
        self.digest = (self.digest - old + self._placed(ppath, new)) & MASK64

    def _link(self, path: str) -> None:
        """Add a fixed node to its parent's children."""
        ppath = parent_of(path)
        parent = self.nodes[ppath]
        _, _, pz, _, _, _, cv, _, _ = parent.header()
        self._relink(ppath, parent, path, None, pz, cv)

    def _index(self, path: str, owner: int) -> None:
        if owner == 0:
            return
        if owner == CONTAINER_OWNER:
            self.containers.add(path)
        elif ttl_of(owner):
            self.ttls.add(path)
        else:
            self.ephemerals.setdefault(owner, set()).add(path)

    def _unindex(self, path: str, owner: int) -> None:
        if owner == 0:
            return
        if owner == CONTAINER_OWNER:
            self.containers.discard(path)
        elif ttl_of(owner):
            self.ttls.discard(path)
        else:
            mine = self.ephemerals.get(owner)
            if mine is not None:
                mine.discard(path)
                if not mine:
                    del self.ephemerals[owner]

    @staticmethod
    def _session_hash(sid: int, timeout_ms: int, secret: bytes) -> int:
        h = hashlib.blake2b(_SESSION.pack(sid, timeout_ms), digest_size=8, person=b"session")
        h.update(secret)
        return int.from_bytes(h.digest(), "little")

    # ----------------------------------------------------------------- apply

    def apply(self, zxid: int, payload: bytes, answered: Container[int] | None = None) -> Applied:
        """Apply one committed ZK txn (MalformedTxn, a ValueError, if it is
        not one the tree can apply, ``zabd.zk.txn_check``: the same on
        every replica, and nothing changed). ``answered``: the
        sessions some client of this replica may be answered for; a setData
        of any other session gets no result (None). Most replicas answer
        none of a txn's sessions, and a setData's Stat is most of its
        apply's objects."""
        try:
            txn = tx.decode(payload)  # [type, time_ms, session, *fields], indexed: a star unpack copies the list
        except Exception as exc:  # msgpack's errors are of several kinds; any is a txn not to apply
            raise MalformedTxn(f"not a ZooKeeper txn ({type(exc).__name__}: {exc})") from None
        kind, time_ms, session = txn[0], txn[1], txn[2]
        if kind == tx.T_SET_DATA and len(txn) >= 6:  # most writes: their check inline
            path, data, version = txn[3], txn[4], txn[5]
            # exactly check()'s rules for a setData (session too: it reaches
            # the result and the server's hooks, and check refuses 2^63)
            if not (type(path) is str and (data is None or type(data) is bytes) and type(version) is int
                    and -0x80000000 <= version <= 0x7FFFFFFF and type(time_ms) is int
                    and -0x8000000000000000 <= time_ms <= 0x7FFFFFFFFFFFFFFF and type(session) is int
                    and -0x8000000000000000 <= session <= 0x7FFFFFFFFFFFFFFF):
                check(txn)  # says what is wrong
            triggers: list[Trigger] = []
            result: WriteResult | None = self._set_data(zxid, time_ms, path, data, version, triggers,
                                                        answered is None or session in answered)
        else:
            check(txn)
            triggers = []
            if kind == tx.T_MULTI:
                result = self._multi(zxid, time_ms, session, txn[3], triggers)
            elif kind == tx.T_CREATE_SESSION:
                result = self._create_session(session, txn[3], txn[4])
            elif kind == tx.T_CLOSE_SESSION:
                result = self._close_session(zxid, session, txn[3], triggers)
            else:
                result = self._op(zxid, time_ms, session, kind, txn[3:], triggers)
        self.applied = zxid
        return _tnew(Applied, (kind, session, result, triggers))

    def _op(self, zxid: int, time_ms: int, session: int, kind: int, f: list[Any],
            triggers: list[Trigger]) -> WriteResult:
        if kind == tx.T_CREATE:
            return self._create(zxid, time_ms, f[0], _data(f[1]), acls_unwire(f[2]), int(f[3]), int(f[4]),
                                triggers)
        if kind in (tx.T_DELETE, tx.T_DELETE_CONTAINER):
            return self._delete(zxid, f[0], triggers)
        if kind == tx.T_SET_DATA:
            result = self._set_data(zxid, time_ms, f[0], _data(f[1]), int(f[2]), triggers, True)
            assert result is not None
            return result
        if kind == tx.T_SET_ACL:
            return self._set_acl(f[0], acls_unwire(f[1]), int(f[2]))
        if kind == tx.T_CHECK:
            return CheckResult()
        if kind == tx.T_ERROR:
            return ErrorResult(Code(int(f[0])))
        raise ValueError(f"unknown ZooKeeper txn type {kind}")

    def _create(self, zxid: int, time_ms: int, path: str, data: bytes | None, acl: tuple[ACL, ...], owner: int,
                parent_cversion: int, triggers: list[Trigger]) -> WriteResult:
        ppath = parent_of(path)
        parent = self.nodes.get(ppath)
        if parent is None:
            return ErrorResult(Code.NO_NODE)
        if path in self.nodes:
            return ErrorResult(Code.NODE_EXISTS)
        node = ZNode.make(data, self._intern(acl), zxid, zxid, zxid, time_ms, time_ms, 0, 0, 0, owner, None)
        self._put(path, node)
        _, _, pz, _, _, _, cv, _, _ = parent.header()
        if parent_cversion > cv:
            self._relink(ppath, parent, path, None, zxid, parent_cversion)
        else:  # a replay over a newer parent (kept for idempotence, as ZooKeeper does)
            self._relink(ppath, parent, path, None, pz, cv)
        self._index(path, owner)
        triggers.append((_CREATED, path, node.acl))
        triggers.append((_CHILDREN_CHANGED, ppath, parent.acl))
        return CreateResult(path, node.stat())

    def _delete(self, zxid: int, path: str, triggers: list[Trigger]) -> WriteResult:
        node = self.nodes.get(path)
        if node is None or path in SPECIAL_PATHS:
            return ErrorResult(Code.NO_NODE)
        if node.children:  # never from a leader's prepare; a tree with an orphan would not restore
            return ErrorResult(Code.NOT_EMPTY)
        ppath = parent_of(path)
        parent = self.nodes[ppath]
        self._drop(path)
        _, _, pz, _, _, _, cv, _, _ = parent.header()
        self._relink(ppath, parent, None, path, max(zxid, pz), cv)
        self._unindex(path, node.owner)
        triggers.append((_DELETED, path, node.acl))  # its last ACL: who may read it hears it went
        triggers.append((_CHILDREN_CHANGED, ppath, parent.acl))
        return DeleteResult()

    def _set_data(self, zxid: int, time_ms: int, path: str, data: bytes | None, version: int,
                  triggers: list[Trigger], answer: bool) -> WriteResult | None:
        # the hottest write: one unpack, one pack, the stat from the same fields
        n = self.nodes.get(path)
        if n is None:
            return ErrorResult(Code.NO_NODE)
        cz, _, pz, ct, _, _, cv, av, owner = HEADER.unpack_from(n.blob)
        head = HEADER.pack(cz, zxid, pz, ct, time_ms, version, cv, av, owner)
        kids = n.children
        new = NullDataZNode(head, n.acl, kids) if data is None else ZNode(head + data, n.acl, kids)
        self._replace_data(path, n, new)
        triggers.append((_DATA_CHANGED, path, n.acl))
        if not answer:
            return None
        count = len(kids) if kids else 0
        if owner < 0 and (owner == CONTAINER_OWNER or ttl_of(owner)):
            owner = 0
        stat = _tnew(Stat, (cz, zxid, ct, time_ms, version, _int32(cv * 2 - count), av, owner,
                            len(data) if data is not None else 0, count, pz))
        return _tnew(StatResult, (stat,))

    def _set_acl(self, path: str, acl: tuple[ACL, ...], aversion: int) -> WriteResult:
        n = self.nodes.get(path)
        if n is None:
            return ErrorResult(Code.NO_NODE)
        _, mz, pz, _, mt, ver, cv, _, _ = n.header()
        new = n.with_header(mz, pz, mt, ver, cv, aversion, n.children, acl=self._intern(acl))
        self._put(path, new)
        return StatResult(new.stat())

    def _multi(self, zxid: int, time_ms: int, session: int, ops: list[list[Any]],
               triggers: list[Trigger]) -> MultiResult:
        if any(op[0] == tx.T_ERROR for op in ops):
            # decided failed at the leader: nothing is applied, each op reports its code
            return MultiResult(tuple(ErrorResult(Code(op[1])) for op in ops))
        results = []
        for op in ops:
            r = self._op(zxid, time_ms, session, op[0], op[1:], triggers)
            assert not isinstance(r, (MultiResult, SessionResult))
            results.append(r)
        return MultiResult(tuple(results))

    def _create_session(self, sid: int, timeout_ms: int, secret: bytes) -> WriteResult:
        old = self.sessions.get(sid)
        if old is not None:
            self.digest = (self.digest - self._session_hash(sid, *old)) & MASK64
        s = Session(timeout_ms, stored_digest(secret))
        self.sessions[sid] = s
        self.digest = (self.digest + self._session_hash(sid, *s)) & MASK64
        return SessionResult(sid)

    def _close_session(self, zxid: int, sid: int, paths: list[str], triggers: list[Trigger]) -> WriteResult:
        # the leader's list, then whatever the tree still holds of the session
        # (ZooKeeper's killSession does both)
        for path in [*paths, *sorted(self.ephemerals.get(sid, ()))]:
            node = self.nodes.get(path)
            if node is not None and node.owner == sid:
                self._delete(zxid, path, triggers)
        old = self.sessions.pop(sid, None)
        if old is not None:
            self.digest = (self.digest - self._session_hash(sid, *old)) & MASK64
        # each delete took its node out of the index; one still here has
        # children (NotEmpty: a txn no leader makes), and stays indexed as a
        # restore of the tree would index it
        return SessionResult(sid)

    # --------------------------------------------------------------- queries

    def stat(self, path: str) -> Stat | None:
        node = self.nodes.get(path)
        return node.stat() if node is not None else None

    def children_of(self, path: str) -> list[str]:
        """Names of the children of an existing node, sorted."""
        kids = self.nodes[path].children
        if not kids:
            return []
        cut = len(path) + 1 if path != "/" else 1
        return sorted(p[cut:] for p in kids)

    def descendants(self, path: str) -> int:
        if path == "/":
            return len(self.nodes) - 1
        count = 0
        stack = [path]
        nodes = self.nodes
        while stack:
            kids = nodes[stack.pop()].children
            if kids:
                count += len(kids)
                stack.extend(kids)
        return count

    def ephemerals_of(self, session: int) -> list[str]:
        return sorted(self.ephemerals.get(session, ()))

    def cleanup_candidates(self, now_ms: int) -> list[str]:
        """Containers that had children and have none left, and TTL nodes
        without children unchanged for longer than their ttl: what ZooKeeper's
        ContainerManager deletes (the leader proposes it)."""
        out = []
        for path in sorted(self.containers):
            n = self.nodes[path]
            if n.cversion > 0 and not n.children:
                out.append(path)
        for path in sorted(self.ttls):
            n = self.nodes[path]
            if not n.children and now_ms - n.mtime > ttl_of(n.owner):
                out.append(path)
        return out

    def __len__(self) -> int:
        return len(self.nodes)

    # ------------------------------------------------------------- snapshots

    def snapshot_view(self) -> object:
        return (self.applied, self.digest, dict(self.nodes), dict(self.sessions))

    @staticmethod
    def encode_view(view: object) -> bytes:
        return b"".join(DataTree.encode_chunks(view, 1 << 24))

    @staticmethod
    def encode_chunks(view: object, size: int) -> Iterator[bytes]:
        """A ``snapshot_view()`` encoded in pieces of about ``size`` bytes (a
        row more), in order: what a SNAP streams and the snapshotter writes,
        a bounded step at a time. Format 6: an ACL travels in the first row
        that uses it, so a reader builds every node as its row arrives."""
        applied, digest, nodes, sessions = cast(tuple[int, int, dict[str, ZNode], dict[int, Session]], view)
        acl_ids: dict[tuple[ACL, ...], int] = {}
        out = io.BytesIO()
        packer = msgpack.Packer(use_bin_type=True)
        out.write(packer.pack_array_header(7))
        for v in (_SNAP_FORMAT, applied, digest):
            out.write(packer.pack(v))
        out.write(packer.pack_array_header(len(nodes)))
        # /zookeeper/config's mtime is the writing server's own (``stamp_config``): written as 0,
        # so that replicas' snapshots of one zxid are the same bytes (the audit compares them)
        config = nodes.get(CONFIG_PATH)
        for path, n in nodes.items():
            blob = n.blob
            if n is config and n.version == -1:
                cz, mz, pz, ct, _, ver, cv, av, owner = n.header()
                blob = HEADER.pack(cz, mz, pz, ct, 0, ver, cv, av, owner) + blob[HEADER_SIZE:]
            null = 1 if type(n) is NullDataZNode else 0
            a = acl_ids.get(n.acl)
            if a is None:
                a = acl_ids[n.acl] = len(acl_ids)
                out.write(packer.pack([path, blob, a, null, acls_wire(n.acl)]))
            else:
                # a fourth field marks null data
                out.write(packer.pack([path, blob, a, 1] if null else [path, blob, a]))
            if out.tell() >= size:
                yield out.getvalue()
                out = io.BytesIO()
        out.write(packer.pack([]))  # format 5's ACL table: the rows hold it now
        out.write(packer.pack([[sid, s.timeout_ms, s.password_digest] for sid, s in sessions.items()]))
        out.write(packer.pack(len(nodes)))
        yield out.getvalue()

    def snapshot(self) -> bytes:
        return self.encode_view(self.snapshot_view())

    @classmethod
    def restore(cls, data: bytes) -> DataTree:
        """A tree from ``snapshot()`` bytes (ValueError if they are not one,
        or if the digest recomputed does not match the one recorded)."""
        builder = TreeBuilder()
        mv = memoryview(data)
        # a whole tree at once (a restart, a tool): a million new nodes would
        # set off collections over a growing heap, and they hold no cycles
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for off in range(0, len(data), _RESTORE_STEP):
                builder.feed(mv[off : off + _RESTORE_STEP])
            return builder.finish()
        finally:
            if gc_was_enabled:
                gc.enable()

    @classmethod
    def restore_whole(cls, data: bytes) -> DataTree:
        """Formats 2 to 5, whose ACL table follows the rows: all at once."""
        fmt, applied, digest, rows, acls, sessions, count = msgpack.unpackb(data, raw=False, use_list=False)
        if fmt not in (2, 3, 4, 5) or len(rows) != count:
            raise ValueError(f"ZooKeeper tree snapshot format {fmt} ({len(rows)}/{count} nodes) is not one of mine")
        acl_table = [acls_unwire(a) for a in acls]
        tree = cls._from_rows((path, blob, acl_table[a], bool(null)) for path, blob, a, *null in rows)
        total = tree.digest
        tree.add_sessions(fmt, digest, total, sessions)
        tree.applied = applied
        return tree

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, bytes, tuple[ACL, ...], bool]],
                  sessions: Iterable[tuple[int, int, bytes]], applied: int) -> DataTree:
        """A tree of ``rows`` (path, header + data, ACL, null data), parents
        before their children and the fixed nodes among them, and of
        ``sessions`` (id, timeout, password digest): a tree read from
        elsewhere (ZooKeeper's snapshot, ``zabd.migrate``). ValueError if a
        row's parent is missing or a row is short."""
        tree = cls._from_rows(rows)
        total = tree.digest
        for sid, timeout, secret in sessions:
            s = tree.sessions[sid] = Session(timeout, stored_digest(secret))
            total += tree._session_hash(sid, *s)
        tree.digest = total & MASK64
        tree.applied = applied
        return tree

    @classmethod
    def _from_rows(cls, rows: Iterable[tuple[str, bytes, tuple[ACL, ...], bool]]) -> DataTree:
        tree = cls()
        # the rows hold the fixed nodes too: start from nothing
        tree.nodes.clear()
        tree.digest = 0
        tree.clear_caches()
        nodes = tree.nodes
        intern = tree._intern
        for path, blob, acl, null in rows:
            if len(blob) < HEADER_SIZE:
                raise ValueError(f"ZooKeeper tree: node {path!r} is truncated")
            nodes[path] = (NullDataZNode if null else ZNode)(blob, intern(acl), None)
            owner = HEADER.unpack_from(blob)[8]
            if path != "/":
                parent = nodes.get(parent_of(path))
                if parent is None:
                    raise ValueError(f"ZooKeeper tree: node {path!r} comes before its parent")
                if parent.children is None:
                    parent.children = set()
                parent.children.add(path)
            tree._index(path, owner)
        total = 0
        for path, node in nodes.items():
            total += tree._hash(path, node)
        tree.digest = total & MASK64
        return tree

    def replayed_create_exists(self, path: str, parent_cversion: int, zxid: int) -> None:
        """A create replayed over a fuzzy snapshot that already holds its
        node: the parent's cversion and pzxid move as the create would have
        moved them (ZooKeeper's ``setCversionPzxid`` in ``processTxn``, for
        an import of its snapshot and logs). ``parent_cversion`` -1: one
        more than now."""
        ppath = parent_of(path)
        parent = self.nodes.get(ppath)
        if parent is None:
            return
        cv = parent.cversion
        if parent_cversion == -1:
            parent_cversion = cv + 1
        if parent_cversion > cv:
            self._relink(ppath, parent, None, None, zxid, parent_cversion)

    def add_sessions(self, fmt: int, digest: int, total: int, sessions: Any) -> None:
        """The session table, and the digest checked against the recorded one."""
        recorded = total  # the digest as the snapshot's writer computed it: format 4 hashed passwords
        for sid, timeout, secret in sessions:
            s = self.sessions[sid] = Session(timeout, stored_digest(secret))
            total += self._session_hash(sid, *s)
            recorded += self._session_hash(sid, timeout, secret)
        self.digest = total & MASK64
        # formats 2 and 3 recorded a digest of other hashes: nothing to compare it with
        if fmt >= 4 and recorded & MASK64 != digest:
            raise ValueError(f"ZooKeeper tree snapshot digest {digest:#x} does not match its content "
                             f"({recorded & MASK64:#x})")

    def clear_caches(self) -> None:
        self._acls.clear()
        self._acl_bytes.clear()
        self._hashes.clear()

    def walk(self) -> Iterator[tuple[str, ZNode]]:
        return iter(self.nodes.items())


class TreeBuilder:
    """A :class:`DataTree` from its snapshot fed in pieces of any size, each
    node built as its row arrives: a follower receiving a streamed SNAP (and a
    restart reading its snapshot file) does a bounded step of work per piece,
    and the whole tree is ready when the last one is in.

    The digest is summed as rows come. A node's hash covers its number of
    children, which is final only at the end: a row is hashed as a leaf, and a
    node that gains a child has that taken back and is hashed at ``finish``
    (the parents: few, in a tree of many leaves). Formats 2 to 5, whose ACL
    table comes after the rows, are kept whole and restored at ``finish``.
    """

    def __init__(self) -> None:
        self.tree = DataTree()
        tree = self.tree
        # the snapshot's rows hold the fixed nodes too: start from nothing
        tree.nodes.clear()
        tree.digest = 0
        tree.clear_caches()
        self._unpacker = msgpack.Unpacker(raw=False, use_list=False, max_buffer_size=0)
        self._stage = 0  # the next field of the snapshot's 7
        self._fmt = 0
        self._applied = 0
        self._digest = 0
        self._left = 0  # rows still to come
        self._count = 0
        self._acls: list[tuple[ACL, ...]] = []
        self._acl_bytes: list[bytes] = []
        self._total = 0
        self._deferred: set[str] = set()  # hashed at finish: parents, and /zookeeper/config
        self._sessions: Any = ()
        self._last_parent = ""
        self._last_kids: set[str] | None = None
        self._whole: list[bytes] | None = []  # the bytes, until the format is known (and for formats 2-5)
        self.rows = 0

    def feed(self, data: bytes | memoryview) -> None:
        """The next piece; ValueError if the bytes are not a tree snapshot."""
        whole = self._whole
        if whole is not None:
            whole.append(bytes(data))
            if self._fmt:  # an older format: restored whole at finish
                return
        up = self._unpacker
        up.feed(data)
        try:
            self._parse(up)
        except msgpack.OutOfData:
            return
        except (msgpack.UnpackException, TypeError, IndexError, KeyError) as exc:
            raise ValueError(f"ZooKeeper tree snapshot: malformed at row {self.rows}: {exc}") from None

    def _parse(self, up: msgpack.Unpacker) -> None:
        while self._stage < 7:
            stage = self._stage
            if stage == 0:
                if up.read_array_header() != 7:
                    raise ValueError("not a ZooKeeper tree snapshot (its header is not 7 fields)")
                self._stage = 1
            elif stage == 1:
                fmt = up.unpack()
                if fmt == _SNAP_FORMAT:
                    self._whole = None
                elif fmt in (2, 3, 4, 5):
                    self._fmt = fmt
                    return
                else:
                    raise ValueError(f"ZooKeeper tree snapshot format {fmt} is not one of mine")
                self._fmt = fmt
                self._stage = 2
            elif stage == 2:
                self._applied = up.unpack()
                self._stage = 3
            elif stage == 3:
                self._digest = up.unpack()
                self._stage = 4
            elif stage == 4:
                self._left = self._count = up.read_array_header()
                self._stage = 5
            elif stage == 5:
                self._rows(up)
                self._stage = 6
            elif stage == 6:
                up.unpack()  # format 5's ACL table, empty
                self._stage = 7
        if self._stage == 7:
            self._sessions = up.unpack()
            self._stage = 8
        if self._stage == 8:
            if up.unpack() != self._count:
                raise ValueError("ZooKeeper tree snapshot: its node count does not match its rows")
            self._stage = 9

    def _rows(self, up: msgpack.Unpacker) -> None:
        """Every row still to come that is in the buffer (OutOfData at the
        first that is not), each made its znode, linked to its parent and
        hashed. One loop with its state in locals: it runs a million times."""
        tree = self.tree
        nodes = tree.nodes
        acls = self._acls
        acl_bytes = self._acl_bytes
        total = 0
        left = self._left
        # siblings come together (a parent's children were mostly created in a row): its set, once looked up
        last_parent = self._last_parent
        last_kids = self._last_kids
        try:
            while left:
                row = up.unpack()
                left -= 1
                path = row[0]
                blob = row[1]
                a = row[2]
                n = len(row)
                if n == 5:
                    self._new_acl(path, a, row[4])
                if type(path) is not str or type(blob) is not bytes or len(blob) < HEADER_SIZE:
                    raise ValueError(f"ZooKeeper tree snapshot: node {path!r} is truncated")
                null = n > 3 and row[3]
                node = NullDataZNode(blob, acls[a], None) if null else ZNode(blob, acls[a], None)
                nodes[path] = node
                if path == CONFIG_PATH:
                    self._deferred.add(path)
                else:
                    head = crc32c(acl_bytes[a], crc32c(_NO_CHILDREN, crc32c(path.encode())))
                    low = crc32c(blob, head)
                    total += (head << 32) | (crc32c(b"null", low) if null else low)
                cut = path.rfind("/")
                if cut >= 0 and path != "/":
                    ppath = path[:cut] if cut else "/"
                    if ppath != last_parent or last_kids is None:
                        parent = nodes[ppath]
                        kids = parent.children
                        if kids is None:
                            kids = parent.children = set()
                            deferred = self._deferred
                            if ppath not in deferred:
                                # hashed as a leaf when it came: its hash counts its children, at finish
                                total -= tree._node_hash(ppath, parent)
                                deferred.add(ppath)
                        last_parent = ppath
                        last_kids = kids
                    last_kids.add(path)
                if blob[_OWNER_AT:HEADER_SIZE] != _NO_OWNER:
                    tree._index(path, _OWNER.unpack_from(blob, _OWNER_AT)[0])
        finally:
            self._left = left
            self._total = (self._total + total) & MASK64
            self.rows = self._count - left
            self._last_parent = last_parent
            self._last_kids = last_kids

    def _new_acl(self, path: str, a: int, wire: Any) -> None:
        if a != len(self._acls):
            raise ValueError(f"ZooKeeper tree snapshot: node {path!r} defines ACL {a} out of order")
        acl = self.tree._intern(acls_unwire(wire))
        self._acls.append(acl)
        self._acl_bytes.append(msgpack.packb(acls_wire(acl)))

    @property
    def done(self) -> bool:
        return self._stage == 9 or (self._whole is not None and self._fmt != 0)

    def finish(self) -> DataTree:
        """The tree; ValueError if the snapshot was cut short or its digest
        does not match its content."""
        if self._whole is not None and self._fmt:
            return DataTree.restore_whole(b"".join(self._whole))
        if self._stage != 9:
            raise ValueError(f"ZooKeeper tree snapshot cut short after {self.rows} rows")
        try:
            self._unpacker.unpack()
        except msgpack.OutOfData:
            pass
        else:
            raise ValueError("ZooKeeper tree snapshot: bytes after its end")
        tree = self.tree
        nodes = tree.nodes
        total = self._total
        for path in self._deferred:
            total += tree._node_hash(path, nodes[path])
        tree.add_sessions(self._fmt, self._digest, total, self._sessions)
        tree.applied = self._applied
        return tree

"""Requests, results and ``Stat``: ZooKeeper's records, as Python values.

Writes (``Create`` .. ``CloseSession``) are decided by the leader
(``zabd.zk.prep``) and reach every replica as txns; reads are served by
the replica that holds the session's connection (``zabd.zk.reads``).
Field names follow ZooKeeper's jute records so a wire codec maps them 1:1.

Requests are plain (not frozen) dataclasses, built once per request and
never changed after: mypyc builds a frozen one through the interpreted
``__init__`` (``object.__setattr__`` per field, ~410 ns for a ``SetData``),
a plain one natively (~160 ns), and the decoders build one per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from zabd.zk.acl import ACL, OPEN_ACL_UNSAFE
from zabd.zk.errors import Code

# CreateMode flags, ZooKeeper's numbers
PERSISTENT = 0
EPHEMERAL = 1
PERSISTENT_SEQUENTIAL = 2
EPHEMERAL_SEQUENTIAL = 3
CONTAINER = 4
PERSISTENT_WITH_TTL = 5
PERSISTENT_SEQUENTIAL_WITH_TTL = 6
CREATE_MODES = frozenset(range(7))
SEQUENTIAL_MODES = frozenset({PERSISTENT_SEQUENTIAL, EPHEMERAL_SEQUENTIAL, PERSISTENT_SEQUENTIAL_WITH_TTL})
EPHEMERAL_MODES = frozenset({EPHEMERAL, EPHEMERAL_SEQUENTIAL})
TTL_MODES = frozenset({PERSISTENT_WITH_TTL, PERSISTENT_SEQUENTIAL_WITH_TTL})

# ephemeralOwner values that are not sessions (ZooKeeper's EphemeralType)
CONTAINER_OWNER = -(1 << 63)
TTL_OWNER_BASE = -(1 << 56)  # 0xff00000000000000 as a signed long; | ttl
MAX_TTL = (1 << 40) - 1


def ttl_of(owner: int) -> int:
    """The ttl (ms) of a TTL node's ephemeralOwner, 0 if it is not one."""
    if owner < 0 and owner != CONTAINER_OWNER and (owner & ~MAX_TTL) == TTL_OWNER_BASE:
        return owner & MAX_TTL
    return 0


class Stat(NamedTuple):
    """Every field of ZooKeeper's ``Stat``, in its jute order."""

    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeralOwner: int
    dataLength: int
    numChildren: int
    pzxid: int


# --------------------------------------------------------------------- writes


@dataclass(slots=True)
class Create:
    path: str
    data: bytes | None = b""  # None: null data (ZooKeeper keeps it apart from empty)
    acl: tuple[ACL, ...] = OPEN_ACL_UNSAFE
    mode: int = PERSISTENT
    ttl: int = -1


@dataclass(slots=True)
class Delete:
    path: str
    version: int = -1


@dataclass(slots=True)
class SetData:
    path: str
    data: bytes | None
    version: int = -1


@dataclass(slots=True)
class SetACL:
    path: str
    acl: tuple[ACL, ...]
    version: int = -1


@dataclass(slots=True)
class Check:
    path: str
    version: int


MultiOp = Create | Delete | SetData | Check


@dataclass(slots=True)
class Multi:
    ops: tuple[MultiOp, ...]


@dataclass(slots=True)
class CreateSession:
    """Proposed by the server that holds the new session's connection; the
    timeout is already negotiated and the id already chosen (both there)."""

    session_id: int
    timeout_ms: int
    password_digest: bytes  # zabd.zk.sessions.password_digest: the password stays with its server


@dataclass(slots=True)
class CloseSession:
    """The requesting session ends (a client's close, or the leader's expiry)."""


@dataclass(slots=True)
class DeleteContainer:
    """The leader's cleanup of an empty container or an expired TTL node."""

    path: str


Write = Create | Delete | SetData | SetACL | Check | Multi | CreateSession | CloseSession | DeleteContainer

# ---------------------------------------------------------------------- reads


@dataclass(slots=True)
class GetData:
    path: str
    watch: bool = False


@dataclass(slots=True)
class Exists:
    path: str
    watch: bool = False


@dataclass(slots=True)
class GetChildren:
    path: str
    watch: bool = False
    with_stat: bool = False  # getChildren2


@dataclass(slots=True)
class GetACL:
    path: str


@dataclass(slots=True)
class GetEphemerals:
    prefix: str = "/"


@dataclass(slots=True)
class GetAllChildrenNumber:
    path: str


Read = GetData | Exists | GetChildren | GetACL | GetEphemerals | GetAllChildrenNumber

# -------------------------------------------------------------------- results


class CreateResult(NamedTuple):
    path: str
    stat: Stat


class DeleteResult(NamedTuple):
    pass


class StatResult(NamedTuple):
    """setData and setACL: the node's Stat after the change."""

    stat: Stat


class CheckResult(NamedTuple):
    pass


class ErrorResult(NamedTuple):
    code: Code


class MultiResult(NamedTuple):
    """One result per op; all ErrorResult when the multi failed (ZooKeeper's
    codes: OK before the failed op, its error, RUNTIME_INCONSISTENCY after)."""

    results: tuple[CreateResult | DeleteResult | StatResult | CheckResult | ErrorResult | DataResult
                   | ChildrenResult, ...]  # the last two: multiRead

    @property
    def failed(self) -> bool:
        return any(type(r) is ErrorResult and r.code != Code.OK for r in self.results)


class SessionResult(NamedTuple):
    session_id: int


class DataResult(NamedTuple):
    data: bytes | None  # None: the znode's data is null
    stat: Stat


class ExistsResult(NamedTuple):
    stat: Stat | None


class ChildrenResult(NamedTuple):
    children: list[str]
    stat: Stat | None  # getChildren2 only


class ACLResult(NamedTuple):
    acl: tuple[ACL, ...]
    stat: Stat


class PathsResult(NamedTuple):
    paths: list[str]


class CountResult(NamedTuple):
    number: int


WriteResult = CreateResult | DeleteResult | StatResult | CheckResult | ErrorResult | MultiResult | SessionResult
ReadResult = DataResult | ExistsResult | ChildrenResult | ACLResult | PathsResult | CountResult | ErrorResult

# ------------------------------------------------- session-layer requests
# Served by the server that holds the connection; none of them is a txn.


@dataclass(slots=True)
class Sync:
    path: str = "/"


@dataclass(slots=True)
class Ping:
    pass


@dataclass(slots=True)
class AddAuth:
    scheme: str
    auth: bytes


# addWatch modes, ZooKeeper's numbers
WATCH_PERSISTENT = 0
WATCH_PERSISTENT_RECURSIVE = 1


@dataclass(slots=True)
class AddWatch:
    path: str
    mode: int


@dataclass(slots=True)
class SetWatches:
    """Watches a client re-registers after a reconnect, with the last zxid it
    saw: changes after it fire now (ZooKeeper's setWatches/setWatches2)."""

    relative_zxid: int
    data: tuple[str, ...] = ()
    exist: tuple[str, ...] = ()
    child: tuple[str, ...] = ()
    persistent: tuple[str, ...] = ()
    persistent_recursive: tuple[str, ...] = ()


# removeWatches/checkWatches watcher types, ZooKeeper's numbers
WATCHER_CHILDREN = 1
WATCHER_DATA = 2
WATCHER_ANY = 3


@dataclass(slots=True)
class RemoveWatches:
    path: str
    watcher_type: int


@dataclass(slots=True)
class CheckWatches:
    path: str
    watcher_type: int


SessionOp = Sync | Ping | AddAuth | AddWatch | SetWatches | RemoveWatches | CheckWatches


class OkResult(NamedTuple):
    """A session-layer request that answers nothing but success."""


class SyncResult(NamedTuple):
    path: str

# ------------------------------------------- requests only ZooKeeper's port carries


@dataclass(slots=True)
class MultiRead:
    """ZooKeeper's multiRead: getData and getChildren ops answered together,
    each with its own result or error (ZooKeeper sets no watches for them)."""

    ops: tuple[GetData | GetChildren, ...]


@dataclass(slots=True)
class WhoAmI:
    """The ids the session has proved (ZooKeeper's whoAmI)."""


@dataclass(slots=True)
class Reconfig:
    """ZooKeeper's dynamic reconfiguration (incremental: joining/leaving, or
    a whole new_members list); -1 for cur_config_id means any."""

    joining: str | None
    leaving: str | None
    new_members: str | None
    cur_config_id: int = -1


class WhoAmIResult(NamedTuple):
    """whoAmI's answer: (auth scheme, user) per id the session holds."""

    ids: list[tuple[str, str]]


@dataclass(slots=True)
class Sasl:
    """A SASL token of the connection's exchange (ZooKeeper's GetSASLRequest);
    None where the client sent a null buffer."""

    token: bytes | None


class SaslResult(NamedTuple):
    """The server's next SASL token (ZooKeeper's SetSASLResponse; None: null)."""

    token: bytes | None

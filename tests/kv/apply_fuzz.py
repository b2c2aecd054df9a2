"""Fuzz the apply path: ``KVMachine.apply`` is total, deterministic, and
leaves a state that snapshots and restores.

Every committed payload is applied by every replica, whatever it holds: a
txn that raised would stop each of them, and again at each restart as the
log replays it. So the property, for any sequence of well-framed payloads
(a kind tag and a body; ``zabd.kv.kinds``) applied in the same order to
three independent ``KVMachine`` replicas:

- no exception escapes ``apply``, and ``machine.faults`` stays 0 (a txn the
  store or the tree cannot apply is refused with ``MalformedTxn``, counted
  in ``machine.errors``, and changes nothing);
- after every txn the replicas agree: the tree's ``digest``, the KV
  ``digest()``, ``zk.applied``, the session count, the results;
- the tree refuses a ZooKeeper txn exactly when ``txn_check.check`` does
  (the fast path of setData checks inline: it must agree);
- every ``SNAPSHOT_EVERY`` inputs: the three snapshots are the same bytes,
  the tree's structure holds (every node's parent has it as a child, the
  ephemeral/container/TTL indexes are what the owners say), a fresh
  ``KVMachine`` restores the snapshot to the same digests and indexes, and
  that restored machine replaces one replica from then on (a restart: a
  replica rebuilt from a snapshot must go on exactly like the others).

Inputs (``ApplyFuzz.next_input``) mix (a) legit txns the real leader path
makes (``ZKLeader.prepare`` over a deep ZooKeeper workload, the simulator's
request stream, ``KVLeader.prepare``), applied to the tree the leader reads;
(b) structure-aware mutations of legit txns (any field at any depth, multi
ops and ACL entries included, replaced by values of other types, boundary
ints, invalid paths; fields dropped, added, wrapped, swapped; type codes
changed to other or unknown ones); (c) random msgpack values, hand-made
msgpack oddities (invalid UTF-8, int map keys, ext types, lying lengths,
deep nesting) and random bytes behind each tag; (d) raw and membership
payloads, well formed or not.

Everything comes from ``random.Random(seed)`` and the replicas' own
(deterministic) state, so input ``index`` of ``seed`` is reproduced by
running the same seed up to it: ``python bench/apply_fuzz.py --seed S
--replay I`` prints it and applies it to fresh replicas in the state the run
had reached.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgpack
import structlog

from zabd.codec.members import encode_addresses
from zabd.kv.kinds import RAW_MAGIC
from zabd.kv.kvmachine import KV_MAGIC, KVMachine
from zabd.kv.store import Cas, Put
from zabd.kv.store import Delete as KVDelete
from zabd.machine import MalformedTxn
from zabd.protocol.membership import MAGIC as MEMBERSHIP_MAGIC
from zabd.protocol.membership import Membership
from zabd.protocol.membership import encode as encode_membership
from zabd.protocol.messages import Txn
from zabd.sim.zk_workload import ZKRequests
from zabd.zk import txn as tx
from zabd.zk import txn_check
from zabd.zk.acl import (
    ACL,
    ALL,
    ANYONE,
    CREATE,
    CREATOR_ALL_ACL,
    OPEN_ACL_UNSAFE,
    READ,
    READ_ACL_UNSAFE,
    SUPER,
    Id,
    digest_id,
)
from zabd.zk.paths import parent_of
from zabd.zk.prep import INT_MAX
from zabd.zk.records import (
    CONTAINER_OWNER,
    MAX_TTL,
    TTL_OWNER_BASE,
    Check,
    CloseSession,
    Create,
    CreateSession,
    Delete,
    DeleteContainer,
    Multi,
    MultiOp,
    SetACL,
    SetData,
    Write,
    ttl_of,
)
from zabd.zk.sessions import SessionIds, password_digest
from zabd.zk.tree import Applied, DataTree

START_MS: Final = 1_700_000_000_000
REPLICAS: Final = 3
SNAPSHOT_EVERY: Final = 1000  # inputs between two snapshot round trips (and replica restarts)
MAX_NODES: Final = 3000  # above this the workload deletes more than it creates
MAX_SESSIONS: Final = 40
MAX_KV_KEYS: Final = 48
TAGS: Final = (tx.ZK_MAGIC, KV_MAGIC, RAW_MAGIC, MEMBERSHIP_MAGIC)

ALICE: Final = Id("digest", digest_id("alice", "secret"))
BOB: Final = Id("digest", digest_id("bob", "pw"))
IP: Final = Id("ip", "10.0.0.7")
AUTHS: Final[tuple[tuple[Id, ...], ...]] = ((), (), (ALICE,), (BOB,), (ALICE, BOB), (IP,), (SUPER,), (ALICE, SUPER))
ACLS: Final[tuple[tuple[ACL, ...], ...]] = (
    OPEN_ACL_UNSAFE, OPEN_ACL_UNSAFE, OPEN_ACL_UNSAFE, CREATOR_ALL_ACL, READ_ACL_UNSAFE,
    (ACL(ALL ^ READ, ALICE),), (ACL(READ | CREATE, ANYONE), ACL(ALL, BOB)), (ACL(ALL, Id("ip", "10.0.0.0/8")),),
    (ACL(ALL, Id("ip", "10.0.0.7")), ACL(READ, ANYONE)), (ACL(ALL, ANYONE), ACL(ALL, ANYONE)),
)
NAMES: Final = ("n0", "n1", "n2", "n3", "a", "b", "c", "x.y", "..a", "ü", "日本", "lock-", "q", "node_", "z" * 40)

I32: Final = 1 << 31
I64: Final = 1 << 63
BOUNDARY_INTS: Final = (
    0, 1, -1, 2, 3, 5, 7, 13, 14, 20, -10, -11, 127, 128, 255, 256, -32, -33, 65535, 65536,
    I32 - 1, I32, -I32, -I32 - 1, (1 << 32) - 1, 1 << 32, 1 << 40, -(1 << 40), (1 << 40) - 1,
    I64 - 1, -I64, (1 << 64) - 1, CONTAINER_OWNER, TTL_OWNER_BASE | 50, TTL_OWNER_BASE | MAX_TTL,
    TTL_OWNER_BASE, START_MS, -START_MS,
)
TYPE_CODES: Final = (
    tx.T_ERROR, tx.T_CREATE, tx.T_DELETE, tx.T_SET_DATA, tx.T_SET_ACL, tx.T_CHECK, tx.T_MULTI, tx.T_DELETE_CONTAINER,
    tx.T_CREATE_SESSION, tx.T_CLOSE_SESSION,
    0, 3, 4, 6, 8, 9, 11, 12, 15, 16, 19, 21, 100, -2, -9, -12, I32 - 1, -I32, I64 - 1, (1 << 64) - 1,
)
BAD_PATHS: Final = (
    "", "a", "/", "/a/", "//", "/.", "/..", "/a/.", "/a/../b", "/a\x00b", "/\x00", "/zookeeper", "/zookeeper/config",
    "/zookeeper/quota", "/zookeeper/config/x", "/zookeeper/x", "/\x7f", "/\x1f", "/\u0085", "/\ud7ff\ue000",
    "/\ufff0", "/😀", "/a//b", "a/b", " /a", "/ ", "/\t",
)
LONG_STR: Final = "/" + "p" * 70_000
LONG_PATH: Final = "/" + "q" * 3000
LONG_BYTES: Final = b"\xab" * 20_000


def _deep_list(depth: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(depth):
        out = [out]
    return out


SCALARS: Final[tuple[Any, ...]] = (
    *BOUNDARY_INTS, True, False, None, 0.0, -0.0, 1.5, 5.0, -1.0, 1e300, math.inf, -math.inf, math.nan,
    *BAD_PATHS, "world", "anyone", "digest", "auth", "super", "ip", "x" * 1000, LONG_STR,
    b"", b"x", b"\x00" * 16, b"\x00" * 32, bytes(range(256)), LONG_BYTES, b"/n",
    msgpack.ExtType(5, b"xy"), msgpack.ExtType(127, b""), msgpack.Timestamp(1, 5),
)
# packed: each use unpacks a fresh copy (mutations change lists in place)
CONTAINERS: Final = tuple(msgpack.packb(v) for v in (
    [], [[]], [1, 2, 3], [[31, "world", "anyone"]], [[31, "world"]], [[I32, "world", "anyone"]],
    [[31, "world", "anyone", "extra"]], [["31", "world", "anyone"]], [[31, b"world", "anyone"]], [None],
    {}, {"a": 1}, {"path": "/n"}, {b"k": [1]}, {1: 2}, _deep_list(100), _deep_list(400), list(range(1000)),
    [tx.T_CREATE, "/m", b"", [[31, "world", "anyone"]], 0, 1], [tx.T_ERROR, 0], [tx.T_MULTI, []],
))

# byte strings spliced into a packed body: msgpack's odd corners
SNIPPETS: Final = (
    b"\xc1", b"\xa3\xed\xa0\x80", b"\xa2\xff\xfe", b"\xc4\x05ab", b"\xdd\xff\xff\xff\xff", b"\xdc\xff\xff",
    b"\xdf\x00\x00\x00\x01", b"\x81\x01\x02", b"\x81\xc0\x02", b"\x81\x91\x01\x02", b"\xd4\x05\x00",
    b"\xd6\xff\x00\x00\x00\x01", b"\xc7\x00\x05", b"\xc9\xff\xff\xff\xff\x05", b"\x91" * 600 + b"\xc0",
    b"\x91" * 5000 + b"\xc0", b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff", b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00",
    b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00", b"\xca\x7f\x80\x00\x00", b"\xc2", b"\xc3", b"\xc0",
    b"\xdb\x00\x00\x00\x10",
    b"\xd9\x03/\x00a", b"\xa1/", b"\x90", b"\x80",
)


class FuzzFailure(AssertionError):
    """A broken property: which input (seed, index), what broke, the payload."""

    def __init__(self, seed: int, index: int, what: str, detail: str, payload: bytes, strict: bool = False) -> None:
        self.seed, self.index, self.what, self.detail, self.payload = seed, index, what, detail, payload
        how = f"--replay {index}"
        if what in ("snapshot", "restore", "tree-structure") and not strict:
            detail += (f"\n  (found at the snapshot check after input {index}: one of the inputs since the last "
                       f"check did it; --locate {index} finds which)")
            how = f"--locate {index}"
        super().__init__(f"{what} at seed {seed} index {index}: {detail}\n  payload: {describe_payload(payload)}\n"
                         f"  reproduce: python bench/apply_fuzz.py --seed {seed} {how}")


def describe_payload(payload: bytes, limit: int = 600) -> str:
    """The payload's hex (cut at ``limit``) and, if it decodes, its body."""
    text = payload.hex()
    out = f"{len(payload)} B {text[:limit]}{'...' if len(text) > limit else ''}"
    try:
        body = msgpack.unpackb(payload[4:], raw=False, strict_map_key=False)
    except Exception as exc:
        return f"{out} (body does not decode: {type(exc).__name__})"
    shown = repr(body)
    return f"{out}\n  body: {shown[:limit]}{'...' if len(shown) > limit else ''}"


@dataclass
class Stats:
    inputs: int = 0
    refused: int = 0  # inputs replica 0 refused (MalformedTxn)
    snapshots: int = 0  # snapshot round trips checked (each a replica restart)
    by_source: dict[str, int] | None = None

    def __post_init__(self) -> None:
        if self.by_source is None:
            self.by_source = {}


def state_print(m: KVMachine) -> tuple[Any, ...]:
    """What the replicas are compared on after every txn (and a restored
    machine with the one it was restored from)."""
    zk = m.zk
    return (zk.digest, m.digest(), zk.applied, len(zk.sessions), m.store.applied, len(zk.nodes),
            len(m.membership_changes), len(m.store.data))


def fingerprint(m: KVMachine) -> tuple[Any, ...]:
    return (*state_print(m), m.errors, m.faults)


def indexes(tree: DataTree) -> tuple[Any, ...]:
    """The tree's derived indexes, compared between a replica and its restore."""
    return ({k: sorted(v) for k, v in sorted(tree.ephemerals.items())}, sorted(tree.containers), sorted(tree.ttls))


def tree_problems(tree: DataTree) -> list[str]:
    """Where the tree's structure does not hold (a snapshot of it would not
    restore, or would restore to another tree)."""
    out: list[str] = []
    nodes = tree.nodes
    for fixed in ("/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"):
        if fixed not in nodes:
            out.append(f"fixed node {fixed} is missing")
    ephemerals: dict[int, set[str]] = {}
    containers: set[str] = set()
    ttls: set[str] = set()
    for path, node in nodes.items():
        if path != "/":
            parent = nodes.get(parent_of(path))
            if parent is None:
                out.append(f"{path!r} has no parent")
            elif not parent.children or path not in parent.children:
                out.append(f"{path!r} is not among its parent's children")
        if node.children is not None:
            if not node.children:
                out.append(f"{path!r} has an empty (not None) set of children")
            for kid in node.children:
                if kid not in nodes or kid == "/" or parent_of(kid) != path:
                    out.append(f"{path!r} lists {kid!r} as a child")
        owner = node.owner
        if owner == CONTAINER_OWNER:
            containers.add(path)
        elif ttl_of(owner):
            ttls.add(path)
        elif owner != 0:
            ephemerals.setdefault(owner, set()).add(path)
    if ephemerals != {k: v for k, v in tree.ephemerals.items()}:
        out.append("the ephemerals index is not the nodes' owners")
    if containers != tree.containers:
        out.append("the containers index is not the nodes' owners")
    if ttls != tree.ttls:
        out.append("the TTL index is not the nodes' owners")
    return out[:10]


@contextlib.contextmanager
def quiet_logs() -> Iterator[list[str]]:
    """structlog below ERROR dropped for the duration (every refused txn logs
    a warning: a million of them is most of a run's time); errors (a fault's
    line) are kept in the list yielded."""
    saved = structlog.get_config()
    errors: list[str] = []

    def keep(_: Any, method: str, event: Any) -> Any:
        if len(errors) < 100:
            errors.append(f"{method}: {event}")
        raise structlog.DropEvent

    structlog.configure(processors=[keep], wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR),
                        logger_factory=structlog.ReturnLoggerFactory(), cache_logger_on_first_use=False)
    try:
        yield errors
    finally:
        structlog.configure(**saved)


class Workload:
    """Legit requests: what clients ask, decided by the leader's own prepare
    against replica 0's state (the leader's)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.ids = SessionIds(rng.randint(1, 254), START_MS)
        self.auth: dict[int, tuple[Id, ...]] = {}
        self.sim = ZKRequests(rng.getrandbits(32))
        self._paths: list[str] = ["/"]
        self._paths_at = -1

    def paths(self, tree: DataTree, index: int) -> list[str]:
        if index - self._paths_at >= 64 or index < self._paths_at:
            self._paths = list(tree.nodes)
            self._paths_at = index
        return self._paths

    def data(self) -> bytes | None:
        rng = self.rng
        r = rng.random()
        if r < 0.05:
            return None
        if r < 0.07:
            return rng.randbytes(rng.choice((1024, 4096, 70_000)))
        return rng.randbytes(rng.randint(0, 24))

    def version(self, current: int) -> int:
        return self.rng.choice((-1, -1, -1, current, current, current + 1, 0, INT_MAX))

    def zk(self, tree: DataTree, index: int, now: int) -> tuple[int, tuple[Id, ...], Write]:
        rng = self.rng
        sessions = tree.sessions
        r = rng.random()
        if r < 0.08:  # the simulator's stream: its sessions, its shallow paths
            sid, req = self.sim.next()
            return sid, self.sim.auth.get(sid, ()), req
        if not sessions or (r < 0.12 and len(sessions) < MAX_SESSIONS):
            sid = self.ids.next()
            self.auth[sid] = rng.choice(AUTHS)
            secret = rng.choice((password_digest(rng.randbytes(16)), rng.randbytes(16), b""))
            return sid, (), CreateSession(sid, rng.choice((0, 4000, 30_000, 1 << 30)), secret)
        sid = rng.choice(list(sessions))
        auth = self.auth.get(sid, ())
        if r < 0.15 or (len(sessions) > MAX_SESSIONS and r < 0.3):
            return sid, auth, CloseSession()
        if r < 0.18:
            cands = tree.cleanup_candidates(now)
            path = rng.choice(cands) if cands else rng.choice(self.paths(tree, index))
            return 0, (), DeleteContainer(path)
        if r < 0.30:
            ops = tuple(self.op(tree, index) for _ in range(rng.randint(1, 5)))
            return sid, auth, Multi(ops)
        if r < 0.35:
            path = rng.choice(self.paths(tree, index))
            n = tree.nodes.get(path)
            return sid, auth, SetACL(path, rng.choice(ACLS), self.version(n.aversion if n else 0))
        return sid, auth, self.op(tree, index)

    def leaf(self, tree: DataTree, path: str) -> str:
        """A leaf below ``path``: deletes happen deep as well."""
        rng = self.rng
        for _ in range(20):
            n = tree.nodes.get(path)
            if n is None or not n.children:
                return path
            path = rng.choice(sorted(n.children))
        return path

    def op(self, tree: DataTree, index: int) -> MultiOp:
        rng = self.rng
        paths = self.paths(tree, index)
        r = rng.random()
        grow = 0.40 if len(tree.nodes) < MAX_NODES else 0.05
        if r < grow:
            parent = rng.choice(paths)
            name = rng.choice(NAMES)
            path = f"{parent.rstrip('/')}/{name}"
            mode = rng.choice((0, 0, 0, 1, 1, 2, 2, 3, 4, 5, 6, 7))
            ttl = rng.choice((1, 50, 400, MAX_TTL, 0)) if mode in (5, 6) else rng.choice((-1, -1, -1, 5))
            return Create(path, self.data(), rng.choice(ACLS), mode, ttl)
        path = rng.choice(paths)
        n = tree.nodes.get(path)
        current = n.version if n is not None else 0
        if r < grow + 0.20:
            return Delete(self.leaf(tree, path), self.version(current))
        if r < grow + 0.52:
            return SetData(path, self.data(), self.version(current))
        return Check(path, self.version(current))

    def kv(self, store: dict[str, Any]) -> Put | Cas | KVDelete:
        rng = self.rng
        if len(store) > MAX_KV_KEYS:  # mutations made keys of their own: take some away
            return KVDelete(rng.choice(list(store)))
        key = rng.choice(("k0", "k1", "k2", "k3", "kü", "")) if rng.random() < 0.5 else f"k{rng.randrange(64)}"
        r = rng.random()
        if r < 0.45:
            return Put(key, rng.randbytes(rng.randint(0, 32)))
        if r < 0.75:
            return Cas(key, rng.choice((0, 1, 2, 3)), rng.randbytes(rng.randint(0, 32)))
        return KVDelete(key, rng.choice((-1, -1, 0, 1, 2)))

    def membership(self) -> bytes:
        rng = self.rng
        members = rng.sample(range(1, 8), rng.randint(1, 6))
        cut = rng.randint(1, len(members))
        voters, observers = frozenset(members[:cut]), frozenset(members[cut:])
        r = rng.random()
        if r < 0.5:
            extra = encode_addresses({i: f"10.0.0.{i}:2888" for i in members})
        elif r < 0.8:
            extra = ",".join(f"{i}=zk{i}:2888:3888:{'observer' if i in observers else 'participant'};2181"
                             for i in sorted(members)).encode()
        else:
            extra = b""
        return encode_membership(Membership(voters, observers, extra))


class ApplyFuzz:
    """The replicas, the input stream and the checks (``step``)."""

    def __init__(self, seed: int, snapshot_every: int = SNAPSHOT_EVERY, strict_from: int | None = None) -> None:
        """``strict_from``: from that input on, check after every input what
        is otherwise checked at snapshots (slow: to find the input that broke
        the tree, ``locate``)."""
        self.seed = seed
        self.strict_from = strict_from
        self.rng = random.Random(seed)
        self.snapshot_every = snapshot_every
        self.machines = [KVMachine() for _ in range(REPLICAS)]
        # replica 1 answers none of the sessions (its setData results are None), as most replicas
        self.machines[1].answer_only(frozenset())
        self.workload = Workload(random.Random(self.rng.getrandbits(64)))
        self.zxid = 1 << 32
        self.index = 0
        self.stats = Stats()
        self.last: tuple[str, bytes] = ("", b"")
        self.logged: list[str] = []  # error lines logged during the run (a fault's)

    # ------------------------------------------------------------- inputs

    def next_zxid(self) -> int:
        rng = self.rng
        if rng.random() < 0.0005:  # a new epoch
            self.zxid = ((self.zxid >> 32) + 1) << 32
        self.zxid += 1 if rng.random() < 0.99 else rng.randint(2, 1000)
        return self.zxid

    def legit(self, kind: str, now: int) -> bytes:
        """A txn as the leader makes it (its prepare must not raise either,
        whatever state the fuzzed txns left)."""
        try:
            return self._legit(kind, now)
        except Exception as exc:
            raise self.fail("leader", f"the leader's prepare raised: {''.join(traceback.format_exception(exc))}",
                            b"") from exc

    def _legit(self, kind: str, now: int) -> bytes:
        m = self.machines[0]
        if kind == "zk":
            sid, auth, req = self.workload.zk(m.zk, self.index, now)
            return m.zk_leader.prepare(sid, auth, req, now).payload
        if kind == "kv":
            return KV_MAGIC + m.leader.prepare(self.workload.kv(m.store.data))
        if kind == "membership":
            return self.workload.membership()
        return RAW_MAGIC + self.rng.randbytes(self.rng.randint(0, 40))

    def next_input(self) -> tuple[str, bytes]:
        """(source, payload) of the input at ``self.index``."""
        rng = self.rng
        now = START_MS + self.index * 7
        r = rng.random()
        if r < 0.30:
            return "legit-zk", self.legit("zk", now)
        if r < 0.40:
            return "odd-zk", self.odd_zk(now)
        if r < 0.46:
            return "legit-kv", self.legit("kv", now)
        if r < 0.47:
            return "legit-membership", self.legit("membership", now)
        if r < 0.48:
            return "legit-raw", self.legit("raw", now)
        if r < 0.78:
            kind = "zk" if rng.random() < 0.85 else "kv"
            return f"mutated-{kind}", self.mutate(self.legit(kind, now))
        if r < 0.86:
            kind = rng.choice(("zk", "zk", "kv", "membership"))
            return f"spliced-{kind}", self.splice(self.legit(kind, now))
        if r < 0.93:
            return "random-msgpack", rng.choice(TAGS[:2]) + self.random_body()
        if r < 0.96:
            return "random-bytes", rng.choice(TAGS) + rng.randbytes(rng.randint(0, 64))
        return "odd-frame", self.odd_frame(now)

    def value(self, depth: int = 0) -> Any:
        """Any msgpack value, mostly of the kinds that break assumptions."""
        rng = self.rng
        r = rng.random()
        if r < 0.45:
            return rng.choice(SCALARS)
        if r < 0.55:
            return msgpack.unpackb(rng.choice(CONTAINERS), raw=False, strict_map_key=False)
        if r < 0.65:
            return rng.randint(-I64, (1 << 64) - 1) if rng.random() < 0.5 else rng.randint(-1000, 1000)
        if r < 0.75:
            return self.path()
        if r < 0.82:
            return rng.randbytes(rng.randint(0, 40))
        if r < 0.88:
            return "".join(rng.choice("/ab.\x00\u00e9\u65e5\U0001f600\ufff5 ") for _ in range(rng.randint(0, 12)))
        if depth < 4:
            if r < 0.95:
                return [self.value(depth + 1) for _ in range(rng.randint(0, 6))]
            return {rng.choice(("a", "path", "")): self.value(depth + 1) for _ in range(rng.randint(0, 3))}
        return None

    def path(self) -> str:
        """A path: one of the tree's (a valid target), or a broken one."""
        rng = self.rng
        r = rng.random()
        tree = self.machines[0].zk
        if r < 0.5:
            paths = self.workload.paths(tree, self.index)
            p = rng.choice(paths)
            return p if rng.random() < 0.7 else f"{p.rstrip('/')}/{rng.choice(NAMES)}"
        if r < 0.9:
            return rng.choice(BAD_PATHS)
        return rng.choice(("/zookeeper/config/c", "/zookeeper/quota/q", "/zookeeper/z", LONG_PATH))

    def near(self, v: Any) -> Any:
        """A value of ``v``'s type that the apply may read differently."""
        rng = self.rng
        if type(v) is int:
            return rng.choice((*BOUNDARY_INTS, v + 1, v - 1, -v, v ^ (1 << rng.randrange(64))))
        if type(v) is str:
            return self.path()
        if type(v) is bytes or v is None:
            return rng.choice((None, b"", rng.randbytes(8), v))
        if type(v) is list:
            return rng.choice(([], v[:1], v * 2, [v], [x for x in reversed(v)]))
        return self.value()

    def mutate(self, payload: bytes) -> bytes:
        """A legit txn with 1..6 structure-aware mutations of its body."""
        rng = self.rng
        tag = payload[:4]
        try:
            body = msgpack.unpackb(payload[4:], raw=False)
        except Exception:
            return payload
        if type(body) is not list:
            return payload
        for _ in range(rng.choice((1, 1, 1, 1, 2, 2, 3, 6))):
            body = self._mutate_once(body)
        try:
            return tag + msgpack.packb(body, use_bin_type=True)
        except (ValueError, OverflowError, TypeError):  # nested too deep to pack (a cycle): what it would be
            return tag + b"\x91" * 600 + b"\xc0"

    def _positions(self, obj: list[Any], out: list[tuple[list[Any], int]], depth: int = 0) -> None:
        for i, v in enumerate(obj):
            out.append((obj, i))
            if type(v) is list and depth < 6 and len(out) < 500:
                self._positions(v, out, depth + 1)

    def _mutate_once(self, body: list[Any]) -> list[Any]:
        rng = self.rng
        spots: list[tuple[list[Any], int]] = []
        self._positions(body, spots)
        lists = [body] + [c[i] for c, i in spots if type(c[i]) is list]
        r = rng.random()
        if not spots or r < 0.08:  # a type code: the txn's, or a multi op's
            ops = [op for op in lists if op and type(op[0]) is int]
            target = rng.choice(ops) if ops else body
            if target:
                target[0] = rng.choice(TYPE_CODES)
            return body
        container, i = rng.choice(spots)
        if r < 0.40:
            container[i] = self.value()
        elif r < 0.62:
            container[i] = self.near(container[i])
        elif r < 0.70:
            del container[i]
        elif r < 0.76:
            container.insert(i, self.value())
        elif r < 0.82:
            target = rng.choice(lists)
            target.extend(self.value() for _ in range(rng.randint(1, 3)))
        elif r < 0.86:
            del container[i:]
        elif r < 0.90:
            container[i] = [container[i]]
        elif r < 0.94:
            j = rng.randrange(len(container))
            container[i], container[j] = container[j], container[i]
        elif r < 0.97:  # another field's value at this place (same txn)
            other, j = rng.choice(spots)
            container[i] = other[j]
        else:
            body = body[:3] + [self.value() for _ in range(rng.randint(0, 5))]
        return body

    def splice(self, payload: bytes) -> bytes:
        """Byte-level damage to a legit txn's packed body: cut, flipped, or
        with a msgpack oddity spliced in."""
        rng = self.rng
        tag, body = payload[:4], bytearray(payload[4:])
        r = rng.random()
        if r < 0.3:
            return tag + bytes(body[: rng.randrange(len(body) + 1)])
        if r < 0.55 and body:
            for _ in range(rng.randint(1, 4)):
                body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
            return tag + bytes(body)
        if r < 0.65:
            return tag + bytes(body) + rng.choice((b"\x00", b"\xc0", rng.randbytes(3), bytes(body)))
        at = rng.randrange(len(body) + 1)
        end = min(len(body), at + rng.randint(0, 3))
        return tag + bytes(body[:at]) + rng.choice(SNIPPETS) + bytes(body[end:])

    def random_body(self) -> bytes:
        rng = self.rng
        if rng.random() < 0.6:  # shaped like a txn: [type, time, session, ...]
            head: list[Any] = [rng.choice(TYPE_CODES), rng.choice((START_MS, 0, -1, I64 - 1)),
                               rng.choice((0, 1, -1, I64 - 1, -I64))]
            v: Any = head + [self.value() for _ in range(rng.randint(0, 6))]
        else:
            v = self.value()
        try:
            return msgpack.packb(v, use_bin_type=True)
        except (ValueError, OverflowError, TypeError):
            return b"\x91" * 600 + b"\xc0"

    # -------------------------- well-formed ZooKeeper txns no leader makes

    def odd_zk(self, now: int) -> bytes:
        """A txn that passes ``txn_check`` but that the leader would never
        decide: a child under an ephemeral or ``/zookeeper/config``, a delete
        of a node with children or of a fixed node, owners of other
        sessions, a closeSession listing other sessions' nodes, versions and
        cversions anywhere in int32, times and sessions anywhere in int64."""
        rng = self.rng
        tree = self.machines[0].zk
        r = rng.random()
        sid = self._odd_session(tree)
        time_ms = now if rng.random() < 0.9 else rng.choice((0, -1, I64 - 1, -I64, now - 10**9))
        if r < 0.15:
            return tx.encode(tx.T_MULTI, time_ms, sid, [self._odd_op(tree) for _ in range(rng.randint(0, 6))])
        if r < 0.2:
            ops = [[tx.T_ERROR, rng.choice(self._codes())] for _ in range(rng.randint(1, 4))]
            return tx.encode(tx.T_MULTI, time_ms, sid, ops)
        if r < 0.3:
            paths = self._odd_paths(tree, rng.randint(0, 4))
            if rng.random() < 0.5 and sid in tree.ephemerals:
                paths += sorted(tree.ephemerals[sid])
            return tx.encode(tx.T_CLOSE_SESSION, time_ms, sid, paths)
        if r < 0.37:
            secret = rng.choice((b"", rng.randbytes(16), rng.randbytes(32), rng.randbytes(33)))
            return tx.encode(tx.T_CREATE_SESSION, time_ms, sid, rng.choice((0, 1, 30_000, I32 - 1)), secret)
        if r < 0.42:
            return tx.encode(tx.T_SET_ACL, time_ms, sid, self._odd_target(tree), self._odd_acl(), self._i32())
        if r < 0.45:
            return tx.encode(tx.T_ERROR, time_ms, sid, rng.choice(self._codes()))
        op = self._odd_op(tree, top=True)
        return tx.encode(op[0], time_ms, sid, *op[1:])

    def _codes(self) -> list[int]:
        return sorted(txn_check._CODES)

    def _i32(self) -> int:
        rng = self.rng
        return rng.choice((0, 1, -1, 2, I32 - 1, -I32, rng.randint(-I32, I32 - 1)))

    def _odd_session(self, tree: DataTree) -> int:
        rng = self.rng
        r = rng.random()
        if r < 0.6 and tree.sessions:
            return rng.choice(list(tree.sessions))
        if r < 0.8 and tree.ephemerals:
            return rng.choice(list(tree.ephemerals))
        return rng.choice((0, 1, -1, CONTAINER_OWNER, TTL_OWNER_BASE | 50, I64 - 1, rng.randint(-I64, I64 - 1)))

    def _odd_target(self, tree: DataTree) -> str:
        """An existing node, ephemerals and fixed ones often."""
        rng = self.rng
        r = rng.random()
        if r < 0.25 and tree.ephemerals:
            return rng.choice(sorted(rng.choice(list(tree.ephemerals.values()))))
        if r < 0.35:
            return rng.choice(("/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"))
        if r < 0.45 and (tree.containers or tree.ttls):
            return rng.choice(sorted(tree.containers | tree.ttls))
        return rng.choice(self.workload.paths(tree, self.index))

    def _odd_paths(self, tree: DataTree, n: int) -> list[str]:
        return [self._odd_target(tree) for _ in range(n)]

    def _odd_acl(self) -> list[list[Any]]:
        rng = self.rng
        entries = [[31, "world", "anyone"], [1, "world", "anyone"], [0, "x", ""], [self._i32(), "digest", "u:h"],
                   [31, "ip", "10.0.0.0/8"], [31, "auth", ""], [31, "super", ""], [-1, "", "\x00"]]
        return [rng.choice(entries) for _ in range(rng.choice((0, 1, 1, 1, 2, 3)))]

    def _odd_op(self, tree: DataTree, top: bool = False) -> list[Any]:
        rng = self.rng
        r = rng.random()
        if r < 0.4:
            parent = self._odd_target(tree)
            path = f"{parent.rstrip('/')}/{rng.choice(NAMES)}"
            owner = self._odd_session(tree) if rng.random() < 0.6 else rng.choice((0, TTL_OWNER_BASE | MAX_TTL))
            data = rng.choice((b"", None, rng.randbytes(rng.randint(0, 16))))
            return [tx.T_CREATE, path, data, self._odd_acl(), owner, self._i32()]
        target = self._odd_target(tree)
        if r < 0.6:
            return [rng.choice((tx.T_DELETE, tx.T_DELETE, tx.T_DELETE_CONTAINER) if top else (tx.T_DELETE,)), target]
        if r < 0.85:
            return [tx.T_SET_DATA, target, rng.choice((b"", None, rng.randbytes(8))), self._i32()]
        return [tx.T_CHECK, target if rng.random() < 0.8 else rng.choice(BAD_PATHS)]

    def odd_frame(self, now: int) -> bytes:
        """Raw and membership payloads, and tags that nearly are."""
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            m = self.workload.membership()
            return m[: rng.randrange(len(MEMBERSHIP_MAGIC), len(m) + 1)]
        if r < 0.55:
            body = rng.choice((b";;", b"1;;", b"1,2;2;", b";1;", b"a;b;c", b"1;2;\xff\xfe", b"1;2;1=x", b"1;;1=h:1,=",
                               b"9" * 5000 + b";;", b"-1;;", b"1;;1=h:1:2:3:4;5", b"1;;2=h:1", b"\x00;;", b" 1 ;;"))
            return MEMBERSHIP_MAGIC + body + (rng.randbytes(4) if rng.random() < 0.3 else b"")
        if r < 0.7:
            return rng.randbytes(rng.randint(0, 40))  # a bare (version 1) raw payload
        if r < 0.85:
            tag = rng.choice(TAGS)
            return tag[: rng.randrange(len(tag))] + rng.randbytes(rng.randint(0, 8))
        return rng.choice(TAGS) + self.legit(rng.choice(("zk", "kv")), now)  # a tag twice

    # ------------------------------------------------------------- checks

    def step(self) -> None:
        """Make the input at ``self.index``, apply it to every replica, check."""
        source, payload = self.next_input()
        zxid = self.next_zxid()
        self.last = (source, payload)
        self.apply_and_check(zxid, payload)
        if self.strict_from is not None and self.index >= self.strict_from:
            m = self.machines[0]
            self.verify_restore(m, m.snapshot(), payload)
        stats = self.stats
        stats.inputs += 1
        assert stats.by_source is not None
        stats.by_source[source] = stats.by_source.get(source, 0) + 1
        self.index += 1
        if self.index % self.snapshot_every == 0:
            self.index -= 1  # a failure names the last input applied
            self.check_snapshots(payload)
            self.index += 1

    def fail(self, what: str, detail: str, payload: bytes) -> FuzzFailure:
        return FuzzFailure(self.seed, self.index, what, detail, payload, self.strict_from is not None)

    def apply_and_check(self, zxid: int, payload: bytes) -> None:
        machines = self.machines
        m0 = machines[0]
        before = (m0.zk.digest, m0.zk.applied, len(m0.zk.nodes), len(m0.zk.sessions), m0.errors)
        txn = Txn(zxid, payload)
        results = []
        for i, m in enumerate(machines):
            try:
                results.append(m.apply(txn))
            except Exception as exc:
                raise self.fail("exception", f"replica {i}: {''.join(traceback.format_exception(exc))}",
                                payload) from exc
            if m.faults:
                raise self.fail("fault", f"replica {i} counted a fault: {self.logged[-1:]}", payload)
        refused = m0.errors != before[4]
        if refused:
            self.stats.refused += 1
            if payload[:4] == tx.ZK_MAGIC and (m0.zk.digest, m0.zk.applied, len(m0.zk.nodes),
                                                len(m0.zk.sessions), m0.errors - 1) != before:
                raise self.fail("refused-changed", "a refused txn changed the tree", payload)
        if payload[:4] == tx.ZK_MAGIC:
            expected = _check_refuses(payload)
            if expected is not None and expected != refused:
                raise self.fail("check-mismatch", f"txn_check says {'refuse' if expected else 'apply'}, "
                                f"the tree {'refused' if refused else 'applied'} it", payload)
        prints = [fingerprint(m) for m in machines]
        if prints[1] != prints[0] or prints[2] != prints[0]:
            raise self.fail("divergence", f"replicas differ: {prints}", payload)
        # a ZooKeeper txn's Applied: the triggers agree everywhere, the result where it was built
        triggers = [r.triggers if isinstance(r, Applied) else None for r in results]
        results = [r.result if isinstance(r, Applied) else r for r in results]
        if triggers[1] != triggers[0] or triggers[2] != triggers[0]:
            raise self.fail("divergence", f"triggers differ: {triggers}", payload)
        if results[0] != results[2] or (results[1] is not None and results[1] != results[0]):
            raise self.fail("divergence", f"results differ: {results}", payload)

    def check_snapshots(self, payload: bytes) -> None:
        """The replicas' snapshots are equal, their trees well formed, and a
        fresh machine restores one to the same state; it then stands in for
        a replica (a restart), in turn. A failure here was caused by one of
        the inputs since the last check (``locate`` finds which)."""
        machines = self.machines
        snaps = []
        for i, m in enumerate(machines):
            try:
                snaps.append(m.snapshot())
            except Exception as exc:
                raise self.fail("snapshot", f"replica {i} cannot snapshot: {exc!r}", payload) from exc
        if snaps[1] != snaps[0] or snaps[2] != snaps[0]:
            raise self.fail("divergence", "the replicas' snapshots differ", payload)
        k = (self.index // self.snapshot_every) % REPLICAS
        old = machines[k]
        fresh = self.verify_restore(old, snaps[0], payload)
        # the counters are the process's, not the state's
        fresh.errors, fresh.faults, fresh.zk_answered = old.errors, old.faults, old.zk_answered
        machines[k] = fresh
        self.stats.snapshots += 1

    def final_check(self) -> None:
        """At the end of a run: the replicas agree, snapshot to the same
        bytes, and restore (what ``check_snapshots`` checks, no restart)."""
        payload = self.last[1]
        self.index -= 1
        try:
            prints = [fingerprint(m) for m in self.machines]
            if prints[1] != prints[0] or prints[2] != prints[0]:
                raise self.fail("divergence", f"replicas differ: {prints}", payload)
            snaps = [m.snapshot() for m in self.machines]
            if snaps[1] != snaps[0] or snaps[2] != snaps[0]:
                raise self.fail("divergence", "the replicas' snapshots differ", payload)
            self.verify_restore(self.machines[0], snaps[0], payload)
        finally:
            self.index += 1

    def verify_restore(self, m: KVMachine, snap: bytes, payload: bytes) -> KVMachine:
        """A fresh machine restored from ``m``'s snapshot ``snap``, checked
        to be ``m`` again; and ``m``'s tree well formed."""
        problems = tree_problems(m.zk)
        if problems:
            raise self.fail("tree-structure", "; ".join(problems), payload)
        fresh = KVMachine()
        try:
            fresh.restore(snap)
        except Exception as exc:
            raise self.fail("restore", f"the snapshot does not restore: {''.join(traceback.format_exception(exc))}",
                            payload) from exc
        if state_print(fresh) != state_print(m):
            raise self.fail("restore", f"restored {state_print(fresh)}, was {state_print(m)}", payload)
        if indexes(fresh.zk) != indexes(m.zk):
            raise self.fail("restore", "the restored tree's ephemeral/container/TTL indexes differ", payload)
        if fresh.membership_changes != m.membership_changes:
            raise self.fail("restore", "the restored membership changes differ", payload)
        if fresh.snapshot() != snap:
            raise self.fail("restore", "the restored machine snapshots to other bytes", payload)
        return fresh

    # ----------------------------------------------------------------- runs

    def run(self, inputs: int, progress: Callable[[ApplyFuzz], None] | None = None, every: int = 100_000) -> Stats:
        """``inputs`` more inputs (FuzzFailure at the first broken property)."""
        end = self.index + inputs
        with quiet_logs() as self.logged:
            while self.index < end:
                self.step()
                if progress is not None and self.index % every == 0:
                    progress(self)
        return self.stats


def _check_refuses(payload: bytes) -> bool | None:
    """Whether ``txn_check.check`` refuses a ZK payload (None: it does not
    decode, so check never sees it)."""
    try:
        txn = tx.decode(payload)
    except Exception:
        return None
    try:
        txn_check.check(txn)
    except MalformedTxn:
        return True
    return False


def replay(seed: int, index: int, snapshot_every: int = SNAPSHOT_EVERY) -> tuple[ApplyFuzz, str, bytes, int]:
    """The run of ``seed`` up to input ``index`` (not applied): the fuzzer in
    that state, and the input's source, payload and zxid."""
    fuzz = ApplyFuzz(seed, snapshot_every)
    fuzz.run(index)
    with quiet_logs():
        source, payload = fuzz.next_input()
    return fuzz, source, payload, fuzz.next_zxid()


def locate(seed: int, index: int, snapshot_every: int = SNAPSHOT_EVERY) -> FuzzFailure | None:
    """The first input that broke what the snapshot check after input
    ``index`` found broken: the run again, checked after every input from the
    check before (None: nothing broke)."""
    start = max(0, (index + 1) // snapshot_every * snapshot_every - snapshot_every)
    fuzz = ApplyFuzz(seed, snapshot_every, strict_from=start)
    try:
        fuzz.run(index + 1 - fuzz.index)
    except FuzzFailure as exc:
        return exc
    return None

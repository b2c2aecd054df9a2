"""ZooKeeper's quorum protocol as an observer speaks it: bytes in, packets out.

A learner's link to the leader's quorum port carries jute ``QuorumPacket``
records back to back (type, zxid, data buffer, authinfo vector; no frame
length), and a SNAP packet is followed on the stream by the leader's whole
database: the session table and the tree as in a snapshot file
(``zabd.zk.datadir``), without file header or seals, then the string
``BenWasHere``. :class:`ObserverWire` parses that stream from pieces of any
size (h11's style: the caller owns the socket), a resumable parser asking
for the bytes it needs next; :func:`packet` encodes what the observer says.

The conversation (``Learner.registerWithLeader``/``syncWithLeader``,
``Observer.processPacket`` in ZooKeeper 3.5-3.9): OBSERVERINFO -> LEADERINFO;
ACKEPOCH -> DIFF | TRUNC | SNAP (+ the database), then PROPOSAL/COMMIT pairs
and INFORMs up to the leader's point, NEWLEADER (ACK it), UPTODATE (ACK it
with the new epoch's zxid); then INFORM for every committed txn, PING (answer
it) and the rest.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
from typing import NamedTuple

from zabd.zk.acl import ACL, OPEN_ACL_UNSAFE, Id
from zabd.zk.datadir import OPEN_UNSAFE_ACL_ID, ZkFormatError
from zabd.zk.paths import problem as path_problem
from zabd.zk.tree import HEADER

PROPOSAL = 2
ACK = 3
COMMIT = 4
PING = 5
REVALIDATE = 6
SYNC = 7
INFORM = 8
COMMIT_AND_ACTIVATE = 9
NEWLEADER = 10
UPTODATE = 12
DIFF = 13
TRUNC = 14
SNAP = 15
OBSERVERINFO = 16
LEADERINFO = 17
ACKEPOCH = 18
INFORM_AND_ACTIVATE = 19
PROTOCOL_VERSION = 0x10000  # ZAB 1.0, what every 3.x learner sends

NAMES = {PROPOSAL: "PROPOSAL", ACK: "ACK", COMMIT: "COMMIT", PING: "PING", REVALIDATE: "REVALIDATE",
         SYNC: "SYNC", INFORM: "INFORM", COMMIT_AND_ACTIVATE: "COMMITANDACTIVATE", NEWLEADER: "NEWLEADER",
         UPTODATE: "UPTODATE", DIFF: "DIFF", TRUNC: "TRUNC", SNAP: "SNAP", OBSERVERINFO: "OBSERVERINFO",
         LEADERINFO: "LEADERINFO", ACKEPOCH: "ACKEPOCH", INFORM_AND_ACTIVATE: "INFORMANDACTIVATE"}

MAX_PACKET_DATA = 64 << 20  # a txn is at most jute.maxbuffer; a NEWLEADER's config is small
_HEAD = struct.Struct(">iqi")  # type, zxid, data length
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SESSION = struct.Struct(">qi")
_ACL_STAT = struct.Struct(">qqqqqiiiqq")  # the node's ACL id, then StatPersisted
_LEARNER_INFO = struct.Struct(">qiq")  # serverid, protocolVersion, configVersion
SIGNATURE = "BenWasHere"


class Packet(NamedTuple):
    type: int
    zxid: int
    data: bytes | None


class Database(NamedTuple):
    """The leader's database sent after SNAP, as DataTree rows (``zabd.zk.datadir``)."""

    sessions: dict[int, int]
    rows: list[tuple[str, bytes, tuple[ACL, ...], bool]]


def packet(kind: int, zxid: int, data: bytes | None = None) -> bytes:
    """A QuorumPacket as the observer writes it (no authinfo)."""
    body = _I32.pack(-1) if data is None else _I32.pack(len(data)) + data
    return _I32.pack(kind) + _I64.pack(zxid) + body + _I32.pack(-1)


def observer_info(server_id: int, accepted_epoch: int, config_version: int = 0) -> bytes:
    return packet(OBSERVERINFO, accepted_epoch << 32, _LEARNER_INFO.pack(server_id, PROTOCOL_VERSION, config_version))


def ack_epoch(last_zxid: int, current_epoch: int) -> bytes:
    return packet(ACKEPOCH, last_zxid, _I32.pack(current_epoch))


def leader_protocol(data: bytes | None) -> int:
    """A LEADERINFO's data: the leader's protocol version."""
    if not data or len(data) < 4:
        return 0
    v: int = _I32.unpack_from(data)[0]
    return v


# what the parser asks for: a number of bytes, answered with exactly those bytes
_Parse = Generator[int, bytes, None]


class ObserverWire:
    """Bytes from the leader in (``feed``), :class:`Packet` and
    :class:`Database` events out, in stream order."""

    def __init__(self, where: str = "leader") -> None:
        self.where = where  # named in errors
        self.offset = 0  # bytes consumed: errors name the offset in the stream
        self._buf = bytearray()
        self._pos = 0
        self._events: list[Packet | Database] = []
        self._parser = self._run()
        self._need = next(self._parser)

    def feed(self, data: bytes) -> list[Packet | Database]:
        """ZkFormatError if the stream is not a leader's."""
        buf = self._buf
        buf += data
        pos = self._pos
        need = self._need
        send = self._parser.send
        while len(buf) - pos >= need:
            chunk = bytes(buf[pos : pos + need])
            pos += need
            self.offset += need
            need = send(chunk)
        # compact rarely: a del at the front moves the whole rest
        if pos > (1 << 20) or pos == len(buf):
            del buf[:pos]
            pos = 0
        self._pos, self._need = pos, need
        out, self._events = self._events, []
        return out

    def _fail(self, what: str) -> ZkFormatError:
        return ZkFormatError(self.where, self.offset, what)

    def _run(self) -> _Parse:
        while True:
            kind, zxid, n = _HEAD.unpack((yield _HEAD.size))
            if n > MAX_PACKET_DATA:
                raise self._fail(f"packet data length {n} is not one a leader sends")
            data = (yield n) if n > 0 else (b"" if n == 0 else None)
            (count,) = _I32.unpack((yield 4))  # authinfo: Ids, skipped
            for _ in range(max(count, 0)):
                for _field in range(2):
                    (m,) = _I32.unpack((yield 4))
                    if m > 0:
                        yield m
            self._events.append(Packet(kind, zxid, data))
            if kind == SNAP:
                yield from self._database()

    def _string(self, raw_len: bytes, what: str) -> Generator[int, bytes, str]:
        (n,) = _I32.unpack(raw_len)
        if n < 0 or n > MAX_PACKET_DATA:
            raise self._fail(f"{what} length {n}")
        raw = (yield n) if n else b""
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise self._fail(f"{what} is not UTF-8") from None

    def _acl_list(self) -> Generator[int, bytes, tuple[ACL, ...]]:
        (n,) = _I32.unpack((yield 4))
        out = []
        for _ in range(max(n, 0)):
            (perms,) = _I32.unpack((yield 4))
            scheme = yield from self._string((yield 4), "an ACL's scheme")
            ident = yield from self._string((yield 4), "an ACL's id")
            out.append(ACL(perms, Id(scheme, ident)))
        return tuple(out)

    def _database(self) -> _Parse:
        (count,) = _I32.unpack((yield 4))
        sessions: dict[int, int] = {}
        for _ in range(max(count, 0)):
            sid, timeout = _SESSION.unpack((yield _SESSION.size))
            sessions[sid] = timeout
        (acl_count,) = _I32.unpack((yield 4))
        acls: dict[int, tuple[ACL, ...]] = {OPEN_UNSAFE_ACL_ID: OPEN_ACL_UNSAFE}
        for _ in range(max(acl_count, 0)):
            (acl_id,) = _I64.unpack((yield 8))
            acls[acl_id] = yield from self._acl_list()
        rows: list[tuple[str, bytes, tuple[ACL, ...], bool]] = []
        pack = HEADER.pack
        while True:
            path = yield from self._string((yield 4), "a node's path")
            if path == "/":
                break
            if path and path_problem(path) is not None:
                raise self._fail(f"node path {path!r}: {path_problem(path)}")
            (n,) = _I32.unpack((yield 4))
            if n > MAX_PACKET_DATA:
                raise self._fail(f"{path!r}'s data length {n}")
            data = (yield n) if n > 0 else b""
            acl_id, cz, mz, ct, mt, ver, cv, av, owner, pz = _ACL_STAT.unpack((yield _ACL_STAT.size))
            acl = acls.get(acl_id)
            if acl is None:
                raise self._fail(f"{path!r} names ACL {acl_id}, which the ACL cache does not hold")
            rows.append((path or "/", pack(cz, mz, pz, ct, mt, ver, cv, av, owner) + data, acl, n < 0))
        signature = yield from self._string((yield 4), "the snapshot's signature")
        if signature != SIGNATURE:
            raise self._fail(f"the database ends with {signature[:20]!r}, not ZooKeeper's signature")
        self._events.append(Database(sessions, rows))

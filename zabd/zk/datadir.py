"""ZooKeeper's data directory, read and written as its ``FileTxnSnapLog`` does.

The formats (ZooKeeper 3.5 to 3.9; all jute, big-endian):

- ``snapshot.<zxid hex>`` (``FileSnap``), optionally compressed whole: ``.gz``
  (gzip) or ``.snappy`` (snappy-java's stream), as
  ``zookeeper.snapshot.compression.method`` names them. Inside: a
  ``FileHeader`` (magic ``ZKSN``, version 2, dbid), the session table (count,
  then id and timeout each: ``SerializeUtils.serializeSnapshot``), the ACL
  cache (count, then a long id and an ACL vector each:
  ``ReferenceCountedACLCache``), the nodes parents first (path, then a
  ``DataNode``: data buffer, ACL id, ``StatPersisted``; the root's path is the
  empty string) up to the path ``/``, then a seal: the Adler-32 of every byte
  before it and the string ``/``. 3.6 adds a ``ZxidDigest`` and a second
  seal, 3.9 the last processed zxid and a third.
- ``log.<zxid hex>`` (``FileTxnLog``): a ``FileHeader`` (magic ``ZKLG``),
  then entries: the entry's Adler-32 (a long), its length and bytes (a
  ``TxnHeader``, the txn record, and from 3.6 a ``TxnDigest``), and the byte
  ``B``. Files are preallocated with zeros: a zero length ends a file, and
  so does a torn entry (cut short, or without its ``B``), as in ZooKeeper's
  ``FileTxnIterator``, which then goes on with the next file. A checksum that
  does not match is an error, as it is for ZooKeeper.

The snapshot's rows come out as :class:`zabd.zk.tree.DataTree` rows (the stat
packed into zabd's node header): the tree's own layout is ZooKeeper's
``StatPersisted`` (cversion counts creates), so nothing is converted but the
byte order.
"""

from __future__ import annotations

import gzip
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import IO, Any, NamedTuple

from zabd.zk.acl import ACL, OPEN_ACL_UNSAFE, Id
from zabd.zk.paths import problem as path_problem
from zabd.zk.tree import HEADER

SNAP_MAGIC = 0x5A4B534E  # "ZKSN"
LOG_MAGIC = 0x5A4B4C47  # "ZKLG"
FORMAT_VERSION = 2
OPEN_UNSAFE_ACL_ID = -1  # ReferenceCountedACLCache's id for world:anyone ALL, never in its table
MAX_BUFFER = 0xFFFFF + 1024  # jute.maxbuffer's default (1 MiB - 1) and the 1 KiB headroom ZooKeeper allows
SNAPPY_MAGIC = b"\x82SNAPPY\x00"

_FILE_HEADER = struct.Struct(">iiq")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SESSION = struct.Struct(">qi")
_STAT = struct.Struct(">qqqqiiiqq")  # StatPersisted: czxid mzxid ctime mtime version cversion aversion owner pzxid
_TXN_HEADER = struct.Struct(">qiqqi")  # TxnHeader: clientId cxid zxid time type
_ENTRY_HEAD = struct.Struct(">qi")  # an entry's checksum and length

# OpCode values of the txns a log holds
OP_ERROR = -1
OP_CREATE = 1
OP_DELETE = 2
OP_SET_DATA = 5
OP_SET_ACL = 7
OP_CHECK = 13
OP_MULTI = 14
OP_CREATE2 = 15
OP_RECONFIG = 16
OP_CREATE_CONTAINER = 19
OP_DELETE_CONTAINER = 20
OP_CREATE_TTL = 21
OP_CREATE_SESSION = -10
OP_CLOSE_SESSION = -11

_NAME = re.compile(r"^(snapshot|log)\.([0-9a-fA-F]+)(\.(gz|snappy))?$")


class ZkFormatError(ValueError):
    """A file that is not what ZooKeeper writes: one line naming it and the offset."""

    def __init__(self, path: str, offset: int, what: str) -> None:
        super().__init__(f"{path}: at byte {offset}: {what}")
        self.path = path
        self.offset = offset


class ZkSnapshot(NamedTuple):
    path: str
    zxid: int  # from its name: the txns after it are in the logs
    sessions: dict[int, int]  # id -> timeout ms
    rows: list[tuple[str, bytes, tuple[ACL, ...], bool]]  # DataTree rows: path, header + data, ACL, null data
    dbid: int


class ZkTxn(NamedTuple):
    """One log entry. ``ops``: (type, fields) pairs, one for a plain txn,
    the sub-txns for a multi (``type`` is then ``OP_MULTI``)."""

    zxid: int
    time_ms: int
    session: int
    type: int
    ops: tuple[tuple[int, tuple[Any, ...]], ...]
    file: str
    offset: int


def zxid_of_name(name: str, prefix: str) -> int | None:
    m = _NAME.match(name)
    if m is None or m.group(1) != prefix:
        return None
    return int(m.group(2), 16)


def find_version_dir(path: str) -> str:
    """ZooKeeper keeps its files in ``<dataDir>/version-2``: either is accepted."""
    inner = os.path.join(path, "version-2")
    return inner if os.path.isdir(inner) else path


def list_files(version_dir: str, prefix: str) -> list[tuple[int, str]]:
    """(zxid, path) of every ``prefix.<zxid>`` file, oldest first."""
    out = []
    for name in os.listdir(version_dir):
        z = zxid_of_name(name, prefix)
        if z is not None:
            out.append((z, os.path.join(version_dir, name)))
    return sorted(out)


# ---------------------------------------------------------------- reading


class _Cursor:
    """Jute's binary reads over one buffer, naming the file and offset of
    anything that does not fit."""

    __slots__ = ("buf", "pos", "path")

    def __init__(self, buf: bytes, path: str, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.path = path

    def fail(self, what: str, at: int | None = None) -> ZkFormatError:
        return ZkFormatError(self.path, self.pos if at is None else at, what)

    def need(self, n: int, what: str) -> int:
        at = self.pos
        if at + n > len(self.buf):
            raise self.fail(f"the file ends inside {what}")
        self.pos = at + n
        return at

    def i32(self, what: str) -> int:
        v: int = _I32.unpack_from(self.buf, self.need(4, what))[0]
        return v

    def i64(self, what: str) -> int:
        v: int = _I64.unpack_from(self.buf, self.need(8, what))[0]
        return v

    def boolean(self, what: str) -> bool:
        return self.buf[self.need(1, what)] != 0

    def buffer(self, what: str) -> bytes | None:
        at = self.pos
        n = self.i32(what)
        if n < 0:
            return None
        if n > len(self.buf) - self.pos:
            raise self.fail(f"{what}'s length {n} runs past the end of the file", at)
        start = self.need(n, what)
        return self.buf[start : start + n]

    def ustring(self, what: str) -> str | None:
        at = self.pos
        raw = self.buffer(what)
        if raw is None:
            return None
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8", at) from None

    def text(self, what: str) -> str:
        at = self.pos
        s = self.ustring(what)
        if s is None:
            raise self.fail(f"{what} is null", at)
        return s

    def acl_list(self, what: str) -> tuple[ACL, ...]:
        at = self.pos
        n = self.i32(what)
        if n < 0:
            return ()
        if n > (len(self.buf) - self.pos) // 12:
            raise self.fail(f"{what} claims {n} entries, more than the file holds", at)
        out = []
        for _ in range(n):
            perms = self.i32(what)
            scheme = self.text(what)
            ident = self.text(what)
            out.append(ACL(perms, Id(scheme, ident)))
        return tuple(out)

    def seal(self, what: str) -> None:
        """An Adler-32 of every byte before it, then the string ``/``."""
        at = self.pos
        expected = zlib.adler32(memoryview(self.buf)[:at])
        val = self.i64(what)
        if self.ustring(what) != "/":
            raise self.fail(f"{what} does not end with '/'", at)
        if val != expected:
            raise self.fail(f"checksum mismatch ({what}: recorded {val:#x}, the bytes give {expected:#x})", at)


def _snappy_stream(raw: bytes, path: str) -> bytes:
    """snappy-java's ``SnappyOutputStream``: its magic, two version ints,
    then blocks of (length, raw snappy)."""
    import cramjam  # only for .snappy files: cramjam is snappy's well-kept binding (Rust)

    if raw[:8] != SNAPPY_MAGIC:
        raise ZkFormatError(path, 0, "not a snappy-java stream (no \\x82SNAPPY header)")
    pos = 16
    out = []
    while pos < len(raw):
        if pos + 4 > len(raw):
            raise ZkFormatError(path, pos, "the file ends inside a snappy block length")
        (n,) = _I32.unpack_from(raw, pos)
        if n < 0 or pos + 4 + n > len(raw):
            raise ZkFormatError(path, pos, f"snappy block length {n} runs past the end of the file")
        try:
            out.append(bytes(cramjam.snappy.decompress_raw(raw[pos + 4 : pos + 4 + n])))
        except Exception as exc:  # cramjam's DecompressionError: a damaged block
            raise ZkFormatError(path, pos, f"snappy block does not decompress ({exc})") from None
        pos += 4 + n
    return b"".join(out)


def read_file_bytes(path: str) -> bytes:
    """A snapshot's bytes, decompressed as its name says."""
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".gz"):
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise ZkFormatError(path, 0, f"gzip stream does not decompress ({exc})") from None
    if path.endswith(".snappy"):
        return _snappy_stream(raw, path)
    return raw


def _file_header(c: _Cursor, magic: int, kind: str) -> int:
    m, version, dbid = _FILE_HEADER.unpack_from(c.buf, c.need(_FILE_HEADER.size, "the file header"))
    if m != magic:
        raise c.fail(f"not a ZooKeeper {kind} (magic {m & 0xFFFFFFFF:#x}, expected {magic:#x})", 0)
    if version != FORMAT_VERSION:
        raise c.fail(f"{kind} format version {version}, expected {FORMAT_VERSION}", 4)
    v: int = dbid
    return v


def read_snapshot(path: str, progress: Any = None) -> ZkSnapshot:
    """Every node of a snapshot file, checked against its seals.
    ``progress(done_bytes, total_bytes)`` is called every ~64k nodes."""
    zxid = zxid_of_name(os.path.basename(path), "snapshot")
    if zxid is None:
        raise ZkFormatError(path, 0, "not named snapshot.<zxid in hex>[.gz|.snappy]")
    buf = read_file_bytes(path)
    c = _Cursor(buf, path)
    dbid = _file_header(c, SNAP_MAGIC, "snapshot")
    count = c.i32("the session count")
    if count < 0 or count > (len(buf) - c.pos) // _SESSION.size:
        raise c.fail(f"session count {count} does not fit the file", c.pos - 4)
    sessions: dict[int, int] = {}
    for _ in range(count):
        sid, timeout = _SESSION.unpack_from(buf, c.need(_SESSION.size, "the session table"))
        sessions[sid] = timeout
    acl_count = c.i32("the ACL cache's size")
    if acl_count < 0:
        raise c.fail(f"ACL cache size {acl_count}", c.pos - 4)
    acls: dict[int, tuple[ACL, ...]] = {OPEN_UNSAFE_ACL_ID: OPEN_ACL_UNSAFE}
    for _ in range(acl_count):
        acl_id = c.i64("an ACL cache id")
        acls[acl_id] = c.acl_list("an ACL cache entry")
    rows: list[tuple[str, bytes, tuple[ACL, ...], bool]] = []
    pack = HEADER.pack
    stat_unpack = _STAT.unpack_from
    i32 = _I32.unpack_from
    i64 = _I64.unpack_from
    size = len(buf)
    pos = c.pos
    # the nodes: most of the file, read inline (a method call per field
    # would double the time of a million-node import)
    while True:
        at = pos
        if pos + 4 > size:
            raise ZkFormatError(path, at, "the file ends inside a node's path")
        (n,) = i32(buf, pos)
        pos += 4
        if n < 0 or pos + n > size:
            raise ZkFormatError(path, at, f"a node's path length {n} runs past the end of the file")
        try:
            node_path = buf[pos : pos + n].decode()
        except UnicodeDecodeError:
            raise ZkFormatError(path, at, "a node's path is not UTF-8") from None
        pos += n
        if node_path == "/":
            break
        if node_path and path_problem(node_path) is not None:
            # what ZooKeeper could never have created: refused, not served
            raise ZkFormatError(path, at, f"node path {node_path!r}: {path_problem(node_path)}")
        if pos + 4 > size:
            raise ZkFormatError(path, pos, f"the file ends inside {node_path!r}'s data")
        (n,) = i32(buf, pos)
        pos += 4
        null = n < 0
        if null:
            data = b""
        else:
            if pos + n > size:
                raise ZkFormatError(path, pos - 4, f"{node_path!r}'s data length {n} runs past the end of the file")
            data = buf[pos : pos + n]
            pos += n
        if pos + 8 + _STAT.size > size:
            raise ZkFormatError(path, pos, f"the file ends inside {node_path!r}'s ACL id and stat")
        (acl_id,) = i64(buf, pos)
        cz, mz, ct, mt, ver, cv, av, owner, pz = stat_unpack(buf, pos + 8)
        acl = acls.get(acl_id)
        if acl is None:
            raise ZkFormatError(path, pos, f"{node_path!r} names ACL {acl_id}, which the ACL cache does not hold")
        pos += 8 + _STAT.size
        if cz < 0 or mz < 0 or pz < 0:
            raise ZkFormatError(path, pos - _STAT.size, f"{node_path!r} has a negative zxid in its stat")
        rows.append((node_path or "/", pack(cz, mz, pz, ct, mt, ver, cv, av, owner) + data, acl, null))
        if progress is not None and not len(rows) & 0xFFFF:
            progress(pos, size)
    c.pos = pos
    c.seal("the snapshot's seal")
    # 3.6+: the digest of the tree at some zxid (ZooKeeper's own, recomputed
    # here only by ZooKeeper), then a seal; 3.9+: the last processed zxid
    if c.pos < size:
        c.i64("the digest's zxid")
        if c.i32("the digest's version") < 2:
            c.ustring("the digest")
        else:
            c.i64("the digest")
        c.seal("the digest's seal")
    if c.pos < size:
        c.i64("the last processed zxid")
        c.seal("the last processed zxid's seal")
    if c.pos != size:
        raise c.fail(f"{size - c.pos} bytes after the snapshot's last seal")
    if progress is not None:
        progress(size, size)
    return ZkSnapshot(path, zxid, sessions, rows, dbid)


def _create_fields(c: _Cursor, kind: int) -> tuple[Any, ...]:
    path = c.text("a create's path")
    data = c.buffer("a create's data")
    acl = c.acl_list("a create's ACL")
    if kind in (OP_CREATE, OP_CREATE2):
        ephemeral = c.boolean("a create's ephemeral flag")
        # CreateTxnV0 (before 3.3) has no parent cversion: -1, as ZooKeeper reads it
        pcv = c.i32("a create's parent cversion") if c.pos + 4 <= len(c.buf) else -1
        return (path, data, acl, ephemeral, pcv)
    pcv = c.i32("a create's parent cversion")
    if kind == OP_CREATE_TTL:
        return (path, data, acl, pcv, c.i64("a createTTL's ttl"))
    return (path, data, acl, pcv)


def _txn_fields(c: _Cursor, kind: int, in_multi: bool) -> tuple[Any, ...]:
    if kind in (OP_CREATE, OP_CREATE2, OP_CREATE_TTL, OP_CREATE_CONTAINER):
        return _create_fields(c, kind)
    if kind in (OP_DELETE, OP_DELETE_CONTAINER):
        return (c.text("a delete's path"),)
    if kind in (OP_SET_DATA, OP_RECONFIG):
        return (c.text("a setData's path"), c.buffer("a setData's data"), c.i32("a setData's version"))
    if kind == OP_SET_ACL and not in_multi:
        return (c.text("a setACL's path"), c.acl_list("a setACL's ACL"), c.i32("a setACL's version"))
    if kind == OP_CHECK:
        return (c.text("a check's path"), c.i32("a check's version"))
    if kind == OP_ERROR:
        return (c.i32("an error txn's code"),)
    if kind == OP_CREATE_SESSION and not in_multi:
        return (c.i32("a createSession's timeout"),)
    if kind == OP_CLOSE_SESSION and not in_multi:
        # CloseSessionTxn (3.6+, closeSessionTxnEnabled): the ephemerals to delete; before it, nothing
        if c.pos >= len(c.buf):
            return ((),)
        n = c.i32("a closeSession's path count")
        if n < 0:
            return ((),)
        return (tuple(c.text("a closeSession's path") for _ in range(n)),)
    raise c.fail(f"txn type {kind} is not one ZooKeeper logs{' in a multi' if in_multi else ''}")


def parse_txn(body: bytes, path: str, offset: int) -> ZkTxn:
    """One entry's bytes: ``TxnHeader``, the txn, and a digest we skip."""
    c = _Cursor(body, path)
    try:
        session, _cxid, zxid, time_ms, kind = _TXN_HEADER.unpack_from(body, c.need(_TXN_HEADER.size, "a TxnHeader"))
        if kind == OP_MULTI:
            n = c.i32("a multi's op count")
            if n < 0 or n > len(body):
                raise c.fail(f"a multi's op count {n}")
            ops = []
            for _ in range(n):
                sub = c.i32("a multi op's type")
                raw = c.buffer("a multi op's bytes") or b""
                ops.append((sub, _txn_fields(_Cursor(raw, path), sub, True)))
            return ZkTxn(zxid, time_ms, session, kind, tuple(ops), path, offset)
        return ZkTxn(zxid, time_ms, session, kind, ((kind, _txn_fields(c, kind, False)),), path, offset)
    except ZkFormatError as exc:
        # name the entry in the file, not the offset inside its bytes
        raise ZkFormatError(path, offset, f"entry: {str(exc).split(': ', 2)[-1]}") from None


def read_log(path: str, after: int = 0) -> Iterator[ZkTxn]:
    """The entries of one log file with a zxid above ``after``, in order.
    A zero length, an entry cut short or one without its end marker ends the
    file (ZooKeeper preallocates, and a crash tears the last entry); a checksum
    mismatch is a :class:`ZkFormatError`."""
    with open(path, "rb") as f:
        buf = f.read()
    c = _Cursor(buf, path)
    if len(buf) < _FILE_HEADER.size:
        return  # created, never written: ZooKeeper reads nothing from it either
    _file_header(c, LOG_MAGIC, "transaction log")
    pos = c.pos
    size = len(buf)
    while pos + _ENTRY_HEAD.size <= size:
        crc, n = _ENTRY_HEAD.unpack_from(buf, pos)
        if n == 0:
            return  # preallocated zeros: the end
        if n < 0 or n > MAX_BUFFER:
            if crc == 0:
                return
            raise ZkFormatError(path, pos, f"entry length {n} is not one ZooKeeper writes")
        start = pos + _ENTRY_HEAD.size
        if start + n + 1 > size or buf[start + n] != 0x42:  # b"B"
            return  # torn: ZooKeeper's "Last transaction was partial"
        body = buf[start : start + n]
        if zlib.adler32(body) != crc:
            raise ZkFormatError(path, pos, f"entry checksum mismatch (recorded {crc:#x}, "
                                           f"the bytes give {zlib.adler32(body):#x})")
        # the TxnHeader's zxid, at byte 12: entries the snapshot holds are checked, not parsed
        if n < _TXN_HEADER.size or _I64.unpack_from(body, 12)[0] > after:
            yield parse_txn(body, path, pos)
        pos = start + n + 1


def logs_after(version_dir: str, zxid: int) -> list[str]:
    """The log files that may hold txns after ``zxid``: the newest one that
    starts at or below it and every later one (``FileTxnLog.getLogFiles``)."""
    files = list_files(version_dir, "log")
    keep = [p for z, p in files if z > zxid]
    older = [p for z, p in files if z <= zxid]
    return older[-1:] + keep


def read_epoch_file(path: str) -> int | None:
    """``currentEpoch`` / ``acceptedEpoch``: a decimal number, if present."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    if not text.isdigit():
        raise ZkFormatError(path, 0, f"expected an epoch number, found {text[:40]!r}")
    return int(text)


# ---------------------------------------------------------------- writing


class _AdlerWriter:
    """A file written with the running Adler-32 of every byte, as
    ZooKeeper's ``CheckedOutputStream`` keeps it for the seals."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.adler = 1
        self.parts: list[bytes] = []
        self.held = 0

    def write(self, b: bytes) -> None:
        self.parts.append(b)
        self.held += len(b)
        if self.held >= 1 << 20:
            self.drain()

    def drain(self) -> None:
        chunk = b"".join(self.parts)
        self.adler = zlib.adler32(chunk, self.adler)
        self.f.write(chunk)
        self.parts.clear()
        self.held = 0

    def seal(self) -> None:
        self.drain()
        self.write(_I64.pack(self.adler) + _ustring("/"))


def _ustring(s: str) -> bytes:
    raw = s.encode()
    return _I32.pack(len(raw)) + raw


def _acl_bytes(acl: tuple[ACL, ...]) -> bytes:
    out = [_I32.pack(len(acl))]
    for a in acl:
        out.append(_I32.pack(a.perms) + _ustring(a.id.scheme) + _ustring(a.id.id))
    return b"".join(out)


class ExportNode(NamedTuple):
    path: str
    data: bytes | None
    acl: tuple[ACL, ...]
    # zabd's header order: czxid mzxid pzxid ctime mtime version cversion aversion owner
    header: tuple[int, int, int, int, int, int, int, int, int]


def write_snapshot(path: str, sessions: Iterable[tuple[int, int]], acls: Iterable[tuple[ACL, ...]],
                   nodes: Iterable[ExportNode], dbid: int = -1) -> None:
    """A ``snapshot.<zxid>`` ZooKeeper 3.5+ loads: ``nodes`` parents first,
    the root as ``/`` (written as ZooKeeper's empty path); ``acls``: every
    ACL a node uses. The ZxidDigest is the empty one (zxid 0), which tells
    ZooKeeper there is no digest to compare its own with; fsynced."""
    with open(path, "wb") as f:
        w = _AdlerWriter(f)
        w.write(_FILE_HEADER.pack(SNAP_MAGIC, FORMAT_VERSION, dbid))
        table = list(sessions)
        w.write(_I32.pack(len(table)))
        w.write(b"".join(_SESSION.pack(sid, timeout) for sid, timeout in table))
        ids: dict[tuple[ACL, ...], int] = {}
        for acl in acls:
            ids.setdefault(acl, len(ids) + 1)
        w.write(_I32.pack(len(ids)))
        for acl, i in ids.items():
            w.write(_I64.pack(i) + _acl_bytes(acl))
        for n in nodes:
            cz, mz, pz, ct, mt, ver, cv, av, owner = n.header
            data = _I32.pack(-1) if n.data is None else _I32.pack(len(n.data)) + n.data
            w.write(b"".join((_ustring("" if n.path == "/" else n.path), data, _I64.pack(ids[n.acl]),
                              _STAT.pack(cz, mz, ct, mt, ver, cv, av, owner, pz))))
        w.write(_ustring("/"))
        w.seal()
        w.write(_I64.pack(0) + _I32.pack(2) + _I64.pack(0))  # ZxidDigest: none
        w.seal()
        w.drain()
        f.flush()
        os.fsync(f.fileno())


def write_empty_log(path: str, dbid: int = 0) -> None:
    """A log file with its header only: ZooKeeper reads no entry from it."""
    with open(path, "wb") as f:
        f.write(_FILE_HEADER.pack(LOG_MAGIC, FORMAT_VERSION, dbid))
        f.flush()
        os.fsync(f.fileno())

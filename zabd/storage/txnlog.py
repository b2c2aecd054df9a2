"""The transaction log: append-only, checksummed, preallocated segment files.

Layout (``DATA/log/``)::

    00000001.log, 00000002.log, ...      consecutive sequence numbers
    segment  = header (32 bytes) | record* | zero-filled preallocated tail
    header   = magic "ZABLOG01" | u32 version | u64 seq | u64 base_zxid | u32 crc32c(previous 28 bytes)
    record   = u32 crc | u32 length | u64 zxid | payload[length]
               crc = crc32c(length | zxid | payload)   (one contiguous range)

``base_zxid`` is the zxid of the record just before the segment's first record
(0 when the log starts at the beginning of time). It chains the segments: a
segment's ``base_zxid`` must equal the previous segment's last zxid, so a
missing or stale segment is an error, never a silent hole. Segments are
created complete (header + a preallocated tail that reads as zeros, in a
temp file, fdatasync, rename, fsync of the directory), so a file under a
final name always has a valid header.

Version 2 (the one written) stores every payload behind the kind tag the
server chose (``zabd.kv.kinds``); version 1 stored raw proposals bare. Both
are read, and records are never appended to a version 1 segment: a log that
has one goes on in a new segment, so a segment's version says what all of its
records are.

Records are little-endian. Zxids follow the protocol's history order: strictly
increasing, counter + 1 within an epoch, counter 1 for the first txn of a new
epoch. A gap is a hole and is refused on write and on read.

Appends only overwrite preallocated zeros, so a crash mid-write leaves a
record followed only by zeros: a torn tail. Recovery cuts it (with a warning
naming file and offset) only in the newest segment and only if it is the last
non-zero data there; anything else that does not parse is an error naming
file, offset and what was wrong.

This module is the thread-side, physical log (one owner: the writer thread of
:class:`zabd.storage.disk.DiskStorage`) and the reader shared by recovery and
the tools.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import re
import struct
import threading
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import crc32c

from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn

log = logging.getLogger("zabd.storage")

SEG_MAGIC = b"ZABLOG01"
SEG_VERSION = 2  # 2: payloads tagged by kind (zabd.kv.kinds)
SEG_VERSIONS_READ = frozenset({1, 2})
SEG_HEADER = struct.Struct("<8sIQQI")  # magic, version, seq, base_zxid, crc
SEG_HEADER_SIZE = SEG_HEADER.size  # 32
REC_HEADER = struct.Struct("<IIQ")  # crc, length, zxid
REC_HEADER_SIZE = REC_HEADER.size  # 16
LEN_ZXID = struct.Struct("<IQ")
CRC = struct.Struct("<I")
MAX_RECORD = 64 << 20  # a larger length field is garbage, not a record

SEGMENT_NAME = re.compile(r"([0-9]{8,})\.log")
_ZERO_CHUNK = bytes(1 << 20)


class StorageError(Exception):
    """The data directory cannot be used as it is (one line: file, offset, what)."""


class LogCorruption(StorageError):
    def __init__(self, path: str, offset: int, what: str) -> None:
        super().__init__(f"{path}: offset {offset}: {what}")
        self.path = path
        self.offset = offset
        self.what = what


def segment_name(seq: int) -> str:
    return f"{seq:08d}.log"


def encode_record(zxid: int, payload: bytes) -> bytes:
    return record_head(zxid, payload) + payload


def record_head(zxid: int, payload: bytes) -> bytes:
    """The header of ``payload``'s record: a batch is its heads and payloads
    joined once, not a buffer grown a record at a time (each growth can move
    everything before it)."""
    lz = LEN_ZXID.pack(len(payload), zxid)
    return CRC.pack(crc32c.crc32c(payload, crc32c.crc32c(lz))) + lz


def encode_segment_header(seq: int, base_zxid: int, version: int = SEG_VERSION) -> bytes:
    head = struct.pack("<8sIQQ", SEG_MAGIC, version, seq, base_zxid)
    return head + CRC.pack(crc32c.crc32c(head))


def follows(prev: int, z: int) -> bool:
    """True if ``z`` may come right after ``prev`` in a history (no hole)."""
    pe, ze = prev >> 32, z >> 32
    if ze == pe:
        return z == prev + 1
    return ze > pe and (z & zx.U32_MAX) == 1


def order_problem(prev: int, z: int) -> str:
    if z <= prev:
        return f"zxid {zx.fmt(z)} is not above the previous zxid {zx.fmt(prev)}"
    return f"zxid {zx.fmt(z)} does not follow {zx.fmt(prev)} (a hole: missing txns)"


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


PURGED_PREFIX = ".tmp-purged-"  # a segment being deleted: the next load removes what a crash left
PURGE_STEP = 4 << 20  # bytes a purged segment shrinks by at a time
PURGE_PAUSE_S = 0.002  # between two steps


def delete_segments(paths: list[str], fsync: bool, pause: float = PURGE_PAUSE_S) -> None:
    """Delete segments ``detach_upto`` took out of a log.

    Each is first renamed to a temp name, oldest first: a crash part way
    leaves the log's oldest segments, never a gap, and no segment half cut
    under its own name. Then each shrinks ``PURGE_STEP`` at a time, ``pause``
    seconds apart, before its unlink. Unlinking a written 64 MiB segment frees
    all its blocks in one journal transaction, and every fdatasync on the
    file system waits for it: 19-24 ms for three segments on this VM's ext4,
    against at most 2.3 ms in 4 MiB steps (and a p99 of ZooKeeper setData
    through zabd of 21-22 ms with purges, 15 ms without)."""
    if not paths:
        return
    d = os.path.dirname(paths[0])
    doomed = []
    for path in paths:
        tmp = os.path.join(d, PURGED_PREFIX + os.path.basename(path))
        os.rename(path, tmp)
        doomed.append(tmp)
    if fsync:
        fsync_dir(d)
    for tmp in doomed:
        shrink_away(tmp, pause)
    if fsync:
        fsync_dir(d)


def shrink_away(path: str, pause: float) -> None:
    """Unlink ``path`` after cutting it down ``PURGE_STEP`` at a time (no
    pause: at once)."""
    if pause > 0:
        fd = os.open(path, os.O_WRONLY)
        try:
            size = os.fstat(fd).st_size
            while size > PURGE_STEP:
                size -= PURGE_STEP
                os.ftruncate(fd, size)
                time.sleep(pause)
        finally:
            os.close(fd)
    os.unlink(path)


def list_segments(log_dir: str) -> list[tuple[int, str]]:
    """(seq, path) of every segment file, ascending; temp files are not listed."""
    if not os.path.isdir(log_dir):
        return []
    out = []
    for name in os.listdir(log_dir):
        m = SEGMENT_NAME.fullmatch(name)
        if m:
            out.append((int(m.group(1)), os.path.join(log_dir, name)))
    out.sort()
    return out


def last_nonzero(buf: memoryview, start: int, end: int) -> int:
    """Offset just past the last non-zero byte in buf[start:end] (start if none)."""
    pos = end
    step = len(_ZERO_CHUNK)
    while pos > start:
        lo = max(start, pos - step)
        chunk = buf[lo:pos]
        if chunk != _ZERO_CHUNK[: pos - lo]:
            return lo + len(bytes(chunk).rstrip(b"\x00"))
        pos = lo
    return start


# ------------------------------------------------------------------ scanning


class SegmentHeader(NamedTuple):
    seq: int
    base_zxid: int
    version: int


def parse_segment_header(path: str, buf: memoryview) -> SegmentHeader:
    if len(buf) < SEG_HEADER_SIZE:
        raise LogCorruption(
            path, 0, f"file is {len(buf)} bytes, shorter than the {SEG_HEADER_SIZE}-byte segment header"
        )
    magic, version, seq, base, crc = SEG_HEADER.unpack_from(buf, 0)
    if magic != SEG_MAGIC:
        raise LogCorruption(path, 0, f"bad segment magic {magic!r} (expected {SEG_MAGIC!r})")
    if crc32c.crc32c(buf[: SEG_HEADER_SIZE - 4]) != crc:
        raise LogCorruption(path, 0, "segment header checksum mismatch")
    if version not in SEG_VERSIONS_READ:
        raise LogCorruption(path, 0, f"unsupported segment version {version} (expected one of "
                                     f"{sorted(SEG_VERSIONS_READ)}: a newer zabd wrote it)")
    return SegmentHeader(seq, base, version)


@dataclass(slots=True)
class ScanResult:
    """Where a scan of one segment stopped and why."""

    end: int  # offset just past the last good record
    problem: str | None  # None: clean end (zeros or EOF)
    last_zxid: int
    torn: bool = False  # the problem is a torn tail (newest segment only)


def scan_segment(
    path: str,
    buf: memoryview,
    prev_zxid: int,
    newest: bool,
    zxids: array[int],
    offsets: array[int],
    txns: list[Txn] | None,
    data: bytes | None = None,
) -> ScanResult:
    """Parse the records of one segment (header already checked) into
    ``zxids``/``offsets`` (and ``txns`` if given), verifying every checksum
    and the zxid order. Stops at the first record that does not verify.
    ``data``: the bytes under ``buf`` (payloads are sliced from it: one copy)."""
    raw = data if data is not None or txns is None else bytes(buf)
    unpack = REC_HEADER.unpack_from
    crc = crc32c.crc32c
    size = len(buf)
    limit = size - REC_HEADER_SIZE
    pos = SEG_HEADER_SIZE
    prev = prev_zxid
    zappend = zxids.append
    oappend = offsets.append
    tappend = txns.append if txns is not None else None
    tnew = tuple.__new__
    # Hot loop: recovery time is dominated by it (1M records per target).
    # Anything unusual breaks out to the careful checks below.
    while pos <= limit:
        c, n, z = unpack(buf, pos)
        stop = pos + REC_HEADER_SIZE + n
        if stop > size or crc(buf[pos + 4 : stop]) != c:
            break
        if z != prev + 1 and not (z > prev and (z >> 32) > (prev >> 32) and (z & 0xFFFFFFFF) == 1):
            break
        zappend(z)
        oappend(pos)
        if tappend is not None:
            tappend(tnew(Txn, (z, raw[pos + REC_HEADER_SIZE : stop])))  # type: ignore[index]
        prev = z
        pos = stop
    problem: str | None = None
    bad_end = pos  # where the bad record claims to end (torn-tail test)
    if pos > limit:
        if pos < size and last_nonzero(buf, pos, size) > pos:
            problem = f"record header cut short by the end of the file ({size - pos} bytes)"
            bad_end = size
    else:
        c, n, z = unpack(buf, pos)
        stop = pos + REC_HEADER_SIZE + n
        if z == 0 and n == 0 and c == 0:
            tail = last_nonzero(buf, pos, size)
            if tail > pos:
                problem = f"zero record header, but non-zero data follows up to offset {tail}"
                bad_end = pos + REC_HEADER_SIZE
        elif n > MAX_RECORD:
            problem = f"record length {n} is above the {MAX_RECORD}-byte limit"
            bad_end = pos + REC_HEADER_SIZE
        elif stop > size:
            problem = f"record length {n} runs past the end of the file ({size} bytes)"
            bad_end = size  # a record cut short by the file end is the last data there
        elif crc(buf[pos + 4 : stop]) != c:
            problem = f"checksum mismatch in record (zxid field {zx.fmt(z)}, length {n})"
            bad_end = stop
        else:
            problem = order_problem(prev, z)
            bad_end = -1  # never a torn tail: the record itself is intact
    result = ScanResult(pos, problem, prev)
    if problem is not None and newest and bad_end >= 0:
        # A crash mid-write leaves a prefix of the batch followed by the
        # preallocated zeros: the bad record is then the last non-zero data.
        result.torn = last_nonzero(buf, pos, size) <= max(bad_end, pos + REC_HEADER_SIZE)
    return result


def decode_records(path: str, data: bytes, offset: int) -> Iterator[Txn]:
    """The txns of whole records in ``data`` (read from ``path`` at
    ``offset``), each checksum verified: a bad one raises LogCorruption."""
    view = memoryview(data)
    pos = 0
    end = len(data)
    unpack = REC_HEADER.unpack_from
    crc = crc32c.crc32c
    while pos + REC_HEADER_SIZE <= end:
        c, n, z = unpack(view, pos)
        stop = pos + REC_HEADER_SIZE + n
        if stop > end or crc(view[pos + 4 : stop]) != c:
            raise LogCorruption(path, offset + pos, f"record {zx.fmt(z)} does not verify on a read")
        yield Txn(z, data[pos + REC_HEADER_SIZE : stop])
        pos = stop


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def map_file(path: str) -> mmap.mmap | None:
    """The file mapped read-only (None if it is empty: a map cannot be)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return None
        mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    mapped.madvise(mmap.MADV_SEQUENTIAL)  # read-ahead for a cold cache
    return mapped


# ------------------------------------------------------------------ the log


@dataclass(slots=True)
class Segment:
    seq: int
    path: str
    base_zxid: int
    end: int  # offset just past the last record
    alloc: int  # file size (preallocated)
    version: int = SEG_VERSION
    zxids: array[int] = field(default_factory=lambda: array("Q"))
    offsets: array[int] = field(default_factory=lambda: array("Q"))

    @property
    def last_zxid(self) -> int:
        return self.zxids[-1] if self.zxids else self.base_zxid


@dataclass(slots=True)
class Recovered:
    history: list[Txn]
    base_zxid: int  # zxid before the first retained record
    segments: list[Segment]
    warnings: list[str]


def recover_log(log_dir: str, *, repair: bool = True, load_txns: bool = True) -> Recovered:
    """Read every segment, verify it, and (``repair``) cut a torn tail of the
    newest one (zeroing the torn bytes, fdatasync). Raises LogCorruption."""
    segs = list_segments(log_dir)
    history: list[Txn] = []
    segments: list[Segment] = []
    warnings: list[str] = []
    base = 0
    prev_seq = -1
    prev_zxid = 0
    for i, (seq, path) in enumerate(segs):
        newest = i == len(segs) - 1
        if prev_seq >= 0 and seq != prev_seq + 1:
            missing = segment_name(prev_seq + 1)
            if seq > prev_seq + 2:
                missing += f"..{segment_name(seq - 1)}"
            raise LogCorruption(path, 0, f"missing segment {missing} before this one")
        mapped: mmap.mmap | None = None
        data: bytes | None = None
        if load_txns:
            data = read_file(path)
            buf = memoryview(data)
        else:
            # only each record's zxid and offset are kept: the records are checked where
            # they lie in the page cache, not copied out first (a server's start: copying
            # three 65 MiB segments was 0.12 s of a 0.23 s scan)
            mapped = map_file(path)
            buf = memoryview(mapped) if mapped is not None else memoryview(b"")
        size = len(buf)
        cut = -1
        try:
            header = parse_segment_header(path, buf)
            if header.seq != seq:
                raise LogCorruption(path, 0, f"header names segment {header.seq}, file name says {seq}")
            if i == 0:
                base = prev_zxid = header.base_zxid
            elif header.base_zxid != prev_zxid:
                raise LogCorruption(
                    path,
                    0,
                    f"segment starts after zxid {zx.fmt(header.base_zxid)} but the previous segment ends at "
                    f"{zx.fmt(prev_zxid)} (missing or stale records)",
                )
            seg = Segment(seq, path, header.base_zxid, SEG_HEADER_SIZE, size, header.version)
            res = scan_segment(
                path, buf, prev_zxid, newest, seg.zxids, seg.offsets, history if load_txns else None, data
            )
            if res.problem is not None:
                if not res.torn:
                    raise LogCorruption(path, res.end, res.problem)
                warnings.append(f"{path}: offset {res.end}: torn record at the end of the log cut ({res.problem})")
                log.warning("torn log tail cut: %s offset %d: %s", path, res.end, res.problem)
                if repair:
                    cut = res.end
            seg.end = res.end
            prev_zxid = res.last_zxid
        finally:
            buf.release()
            if mapped is not None:
                mapped.close()
        if cut >= 0:  # once the map is gone: a file cut under a map is a SIGBUS away
            _zero_tail(path, cut, size)
        segments.append(seg)
        prev_seq = seq
    return Recovered(history, base, segments, warnings)


def _zero_tail(path: str, start: int, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        cut_file(fd, start, size, True)
    finally:
        os.close(fd)


def cut_file(fd: int, cut: int, size: int, sync: bool) -> None:
    """Drop everything from ``cut`` on, then restore the preallocation up to
    ``size``. Zeroing in place could persist out of order (a zeroed header
    before a still-intact record after it: unreadable); a truncate is one
    metadata change, durable before the preallocation comes back, so every
    crash point leaves the old bytes or a clean end."""
    os.ftruncate(fd, cut)
    if sync:
        os.fdatasync(fd)
    preallocate(fd, cut, size)
    if sync:
        os.fdatasync(fd)


def preallocate(fd: int, start: int, end: int) -> None:
    """Reserve ``[start, end)`` (a range past the file's data: it reads as
    zeros) and grow the file to ``end``. ``fallocate`` marks the blocks
    allocated but unwritten, a metadata change: writing real zeros instead
    took 7.6-10.7 % of a node's perf samples under load (page-cache copies of
    64 MiB per segment) and put 65 MiB bursts on the disk beside the writer's
    fdatasyncs. The price is a journal entry when an fdatasync first covers
    a block (unwritten to written): ~0.07 ms more per fdatasync here."""
    if end > start:
        os.posix_fallocate(fd, start, end - start)


SPARE_NAME = ".tmp-spare-segment"  # removed with the other temp files when a log is loaded
SPARE_SLACK = 1 << 20  # a spare's room past segment_bytes


class SpareSegment:
    """The next segment's file, preallocated and synced by a thread of its
    own while the current segment fills, so that a rollover writes and syncs
    only a header. The sync of a fresh file's allocation is a journal commit:
    off the writer thread, no batch waits behind it."""

    def __init__(self, path: str, size: int, fsync: bool) -> None:
        self.path = path
        self.size = size
        self.error: BaseException | None = None
        self.maker = threading.Thread(target=self._make, args=(fsync,), name="zabd-log-spare", daemon=True)
        self.maker.start()

    def _make(self, fsync: bool) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                preallocate(fd, 0, self.size)
                if fsync:
                    os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:  # the rollover then makes its segment the slow way
            self.error = exc

    def ready(self) -> bool:
        """Wait for the file; True if it is complete."""
        self.maker.join()
        return self.error is None

    def discard(self) -> None:
        self.maker.join()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class PhysicalLog:
    """The writer thread's view of the segment files. Not thread-safe: one
    owner. Every method leaves the directory in a state recovery accepts."""

    def __init__(
        self,
        log_dir: str,
        segments: list[Segment],
        *,
        segment_bytes: int,
        prealloc_bytes: int,
        fsync: bool,
        base_zxid: int = 0,
    ) -> None:
        self.dir = log_dir
        self.segments = segments
        self.segment_bytes = segment_bytes
        self.prealloc_bytes = prealloc_bytes
        self.fsync = fsync
        self.syncs = 0
        self._fd = -1
        self._dirty = False
        self._empty_base = base_zxid
        self._spare: SpareSegment | None = None
        os.makedirs(log_dir, exist_ok=True)

    # -- helpers

    @property
    def last_zxid(self) -> int:
        return self.segments[-1].last_zxid if self.segments else self._empty_base

    def _sync_fd(self, fd: int) -> None:
        if self.fsync:
            os.fdatasync(fd)
            self.syncs += 1

    def _sync_dir(self) -> None:
        if self.fsync:
            fsync_dir(self.dir)
            self.syncs += 1

    def _open_current(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.segments[-1].path, os.O_WRONLY)
        return self._fd

    def _close_current(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _new_segment(self, base_zxid: int) -> None:
        """Create the next segment complete and durable before using it, so a
        final name never holds a half-written header."""
        self.sync()
        self._close_current()
        seq = self.segments[-1].seq + 1 if self.segments else self._next_seq_hint()
        final = os.path.join(self.dir, segment_name(seq))
        header = encode_segment_header(seq, base_zxid)
        spare, self._spare = self._spare, None
        if spare is not None and spare.ready():
            tmp, alloc = spare.path, spare.size
            fd = os.open(tmp, os.O_WRONLY)
            try:
                os.pwrite(fd, header, 0)
                self._sync_fd(fd)
            finally:
                os.close(fd)
        else:
            if spare is not None:
                spare.discard()
            tmp, alloc = os.path.join(self.dir, f".tmp-{segment_name(seq)}"), max(self.prealloc_bytes, SEG_HEADER_SIZE)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.pwrite(fd, header, 0)
                preallocate(fd, SEG_HEADER_SIZE, self.prealloc_bytes)
                self._sync_fd(fd)
            finally:
                os.close(fd)
        os.rename(tmp, final)
        self._sync_dir()
        self.segments.append(Segment(seq, final, base_zxid, SEG_HEADER_SIZE, alloc))

    def _prepare_spare(self) -> None:
        # halfway through a segment: a log that never gets there (tests, a
        # quiet cluster) never pays for a second segment
        if self._spare is None and self.segments and self.segments[-1].end >= self.segment_bytes // 2:
            # A segment's last record may run past segment_bytes: room for
            # one of up to SPARE_SLACK more (a larger one grows the file as
            # before). Not a whole prealloc chunk: with small segments (tests)
            # every spare would be 16 MiB.
            size = max(self.segment_bytes, SEG_HEADER_SIZE) + min(self.prealloc_bytes, SPARE_SLACK)
            self._spare = SpareSegment(os.path.join(self.dir, SPARE_NAME), size, self.fsync)

    _seq_floor = 0

    def _next_seq_hint(self) -> int:
        existing = list_segments(self.dir)
        return max([s for s, _ in existing] + [self._seq_floor]) + 1

    # -- operations (each called by the writer thread only)

    def append(self, blob: bytes, zxids: list[int], sizes: list[int]) -> None:
        """Write encoded records (``blob``), not yet synced. A batch that
        crosses ``segment_bytes`` is split at a record boundary and continues
        in a new segment, so segments stay near their configured size."""
        i = 0
        pos = 0
        n = len(zxids)
        while i < n:
            last = self.segments[-1] if self.segments else None
            if last is None or last.end >= self.segment_bytes or last.version != SEG_VERSION:
                self._new_segment(self.last_zxid)
            room = self.segment_bytes - self.segments[-1].end
            j = i
            size = 0
            while j < n and (j == i or size + sizes[j] <= room):
                size += sizes[j]
                j += 1
            self._append_part(blob[pos : pos + size] if (i or j < n) else blob, zxids[i:j], sizes[i:j])
            pos += size
            i = j
        self._prepare_spare()

    def _append_part(self, blob: bytes, zxids: list[int], sizes: list[int]) -> None:
        seg = self.segments[-1]
        fd = self._open_current()
        end = seg.end + len(blob)
        if end > seg.alloc:
            # Extend in large chunks; the allocation must be durable before
            # records land in it (a record past the durable size could be lost).
            new_alloc = max(end, seg.alloc + self.prealloc_bytes)
            preallocate(fd, seg.alloc, new_alloc)
            self._sync_fd(fd)
            seg.alloc = new_alloc
        os.pwrite(fd, blob, seg.end)
        pos = seg.end
        za = seg.zxids.append
        oa = seg.offsets.append
        for z, n in zip(zxids, sizes, strict=True):
            za(z)
            oa(pos)
            pos += n
        seg.end = end
        self._dirty = True

    def sync(self) -> None:
        if self._dirty:
            self._dirty = False
            if self._fd >= 0:
                self._sync_fd(self._fd)

    def truncate_after(self, keep_zxid: int) -> None:
        """Drop every record above ``keep_zxid``, durably, before anything new
        is written. Later segments are unlinked newest first and the directory
        synced before the kept segment is cut, so every crash point leaves a
        prefix of the old log that is at least the kept prefix (never a hole,
        never a stale segment behind a cut one)."""
        self.sync()
        segs = self.segments
        # Keep the last segment that holds records at or below keep_zxid (the
        # first one if none does); later ones hold only records above it.
        idx = 0
        for i, s in enumerate(segs):
            if s.base_zxid < keep_zxid:
                idx = i
        removed = False
        for seg in reversed(segs[idx + 1 :]):
            if seg is segs[-1]:
                self._close_current()
            os.unlink(seg.path)
            removed = True
        if removed:
            del segs[idx + 1 :]
            self._sync_dir()
        if not segs:
            return
        seg = segs[idx]
        zs = seg.zxids
        lo, hi = 0, len(zs)
        while lo < hi:
            mid = (lo + hi) // 2
            if zs[mid] <= keep_zxid:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(zs):
            return
        cut = seg.offsets[lo]
        fd = self._open_current()
        cut_file(fd, cut, seg.alloc, self.fsync)
        if self.fsync:
            self.syncs += 2
        del seg.zxids[lo:]
        del seg.offsets[lo:]
        seg.end = cut

    def reset(self, base_zxid: int) -> None:
        """Drop the whole log and start an empty one after ``base_zxid`` (a
        snapshot install; the snapshot is durable before this runs)."""
        self.sync()
        self._close_current()
        if self.segments:
            self._seq_floor = self.segments[-1].seq
        for seg in reversed(self.segments):
            os.unlink(seg.path)
        self.segments = []
        self._sync_dir()
        self._empty_base = base_zxid
        self._new_segment(base_zxid)

    def detach_upto(self, zxid: int) -> list[str]:
        """Take whole segments whose records are all <= ``zxid`` (covered by
        a retained snapshot) out of the log, oldest first, keeping the current
        one. Returns their paths, oldest first: the caller deletes them in
        that order (``delete_segments``), off the writer thread, so that the
        unlinks and their directory sync never hold up a flush."""
        paths = []
        segs = self.segments
        # The segment holding the last record always stays: a node restarts
        # with a non-empty history (the core votes with its last zxid).
        last = self.last_zxid
        while len(segs) >= 2 and segs[1].base_zxid <= zxid and segs[0].last_zxid < last:
            paths.append(segs.pop(0).path)
        return paths

    @property
    def base_zxid(self) -> int:
        return self.segments[0].base_zxid if self.segments else self._empty_base

    def close(self) -> None:
        self._close_current()
        if self._spare is not None:
            self._spare.discard()
            self._spare = None


# ------------------------------------------------------------------ reader API


class LogRecord(NamedTuple):
    zxid: int
    payload: bytes
    crc_ok: bool
    file: str
    offset: int


def iter_records(data_dir: str) -> Iterator[LogRecord]:
    """Every record of every segment of ``DATA/log``, in order, with its
    checksum status. Read-only and lenient (for tools and audits): a record
    whose length field is unusable ends that segment's iteration; use
    :func:`zabd.storage.tools.verify` to find every problem."""
    log_dir = os.path.join(data_dir, "log") if os.path.isdir(os.path.join(data_dir, "log")) else data_dir
    for _, path in list_segments(log_dir):
        data = read_file(path)
        buf = memoryview(data)
        size = len(buf)
        pos = SEG_HEADER_SIZE
        while pos + REC_HEADER_SIZE <= size:
            c, n, z = REC_HEADER.unpack_from(buf, pos)
            if c == 0 and n == 0 and z == 0:
                break
            stop = pos + REC_HEADER_SIZE + n
            if n > MAX_RECORD or stop > size:
                break
            ok = crc32c.crc32c(buf[pos + 4 : stop]) == c
            yield LogRecord(z, bytes(buf[pos + REC_HEADER_SIZE : stop]), ok, path, pos)
            pos = stop

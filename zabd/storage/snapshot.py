"""State-machine snapshots on disk: file format, writer, reader, purge.

(When to take one is the server's business: ``zabd.server.snapshots``.)

Layout: ``DATA/snap/snap.<zxid as 16 hex digits>``::

    header = magic "ZABSNAP1" | u32 version | u32 flags | u64 zxid | u64 length
             | u32 block_size | u32 crc32c(block table) | u32 crc32c(previous 40 bytes)
    data   = length bytes (the state machine's snapshot())
    table  = u32 crc32c per block_size block of data

Per-block checksums let a reader name the offset of a damaged block rather
than just "bad file". A snapshot is written to a temp file, fsynced, renamed
and the directory fsynced, so a file under a final name is complete: any
damage is refused with file and offset, never skipped.

Flag ``RECEIVED`` marks a snapshot installed from a leader (SNAP sync). Only
such a snapshot may be newer than the log (the log reset that follows the
install may not have happened before a crash); a local snapshot is taken of
committed, logged txns and must be covered by the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
import tempfile
from collections.abc import Iterable
from typing import BinaryIO, NamedTuple

import crc32c

from zabd.protocol import zxid as zx
from zabd.storage.txnlog import LogCorruption, fsync_dir

log = logging.getLogger("zabd.storage")

SNAP_MAGIC = b"ZABSNAP1"
SNAP_HEAD = struct.Struct("<8sIIQQII")  # magic, version, flags, zxid, length, block_size, table_crc
SNAP_HEADER_SIZE = SNAP_HEAD.size + 4
BLOCK_SIZE = 1 << 16
RECEIVED = 1
SNAP_NAME = re.compile(r"snap\.([0-9a-f]{16})")


class Snapshot(NamedTuple):
    zxid: int
    data: bytes
    received: bool
    path: str


def snapshot_name(zxid: int) -> str:
    return f"snap.{zxid:016x}"


def list_snapshots(snap_dir: str) -> list[tuple[int, str]]:
    """(zxid, path), ascending by zxid; temp files are not listed."""
    if not os.path.isdir(snap_dir):
        return []
    out = []
    for name in os.listdir(snap_dir):
        m = SNAP_NAME.fullmatch(name)
        if m:
            out.append((int(m.group(1), 16), os.path.join(snap_dir, name)))
    out.sort()
    return out


def write_snapshot(snap_dir: str, zxid: int, data: bytes | Iterable[bytes], *, received: bool = False,
                   fsync: bool = True) -> str:
    """Write ``snap.<zxid>`` atomically and durably; returns its path.
    ``data``: the snapshot, or its pieces in order (each written as it comes,
    so a snapshot encoded piece by piece is never whole in memory)."""
    writer = SnapshotWriter(snap_dir, zxid, received=received)
    try:
        for piece in (data,) if isinstance(data, bytes) else data:
            writer.write(piece)
        return writer.finish(fsync=fsync)
    except BaseException:
        writer.abort()
        raise


class SnapshotWriter:
    """One snapshot file written as its data comes: under a temp name, the
    block checksums computed on the way, the header (which holds the length)
    written last. ``finish`` makes it durable under its final name; ``abort``
    (or a crash: temp files go at the next start) leaves nothing behind."""

    def __init__(self, snap_dir: str, zxid: int, *, received: bool = False) -> None:
        os.makedirs(snap_dir, exist_ok=True)
        self.snap_dir = snap_dir
        self.zxid = zxid
        self.received = received
        self.final = os.path.join(snap_dir, snapshot_name(zxid))
        # a name of its own: two SNAPs of the same point can arrive back to back, the
        # second being written while the first's install renames its file on the writer thread
        fd, self.tmp = tempfile.mkstemp(prefix=(".tmp-recv-" if received else ".tmp-") + snapshot_name(zxid) + ".",
                                        dir=snap_dir)
        self._file = os.fdopen(fd, "wb")
        self._file.write(bytes(SNAP_HEADER_SIZE))
        self.length = 0
        self._table = bytearray()
        self._crc = 0  # of the block being filled
        self._fill = 0  # its bytes so far

    def write(self, data: bytes | memoryview) -> None:
        mv = memoryview(data)
        self._file.write(mv)
        self.length += len(mv)
        off = 0
        while off < len(mv):
            take = min(BLOCK_SIZE - self._fill, len(mv) - off)
            self._crc = crc32c.crc32c(mv[off : off + take], self._crc)
            self._fill += take
            off += take
            if self._fill == BLOCK_SIZE:
                self._table += struct.pack("<I", self._crc)
                self._crc = self._fill = 0

    def finish(self, fsync: bool = True) -> str:
        """Durable under ``snap.<zxid>``; returns its path."""
        f = self._file
        if self._fill:
            self._table += struct.pack("<I", self._crc)
            self._crc = self._fill = 0
        f.write(self._table)
        head = SNAP_HEAD.pack(SNAP_MAGIC, 1, RECEIVED if self.received else 0, self.zxid, self.length, BLOCK_SIZE,
                              crc32c.crc32c(self._table))
        f.seek(0)
        f.write(head + struct.pack("<I", crc32c.crc32c(head)))
        f.flush()
        if fsync:
            os.fsync(f.fileno())
        f.close()
        os.rename(self.tmp, self.final)
        if fsync:
            fsync_dir(self.snap_dir)
        return self.final

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)


def _read_exact(f: BinaryIO, n: int) -> bytes:
    """``n`` bytes (fewer only at the end of the file). An unbuffered file's
    ``read(n)`` reads into the bytes object it returns: no copy, unless a
    short read (not seen on a regular file) makes one join the pieces."""
    data = f.read(n)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = f.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def read_snapshot(path: str) -> Snapshot:
    """Read and verify one snapshot file. Raises LogCorruption (file, offset, what).

    The data part is read once, straight into the bytes object returned (a
    restart's whole state: 178 MB at 1M znodes), and checked block by block
    through a memoryview of it; nothing is copied."""
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        if size < SNAP_HEADER_SIZE:
            raise LogCorruption(path, 0, f"file is {size} bytes, shorter than the {SNAP_HEADER_SIZE}-byte header")
        with contextlib.suppress(OSError, AttributeError):  # advice only: a read-ahead hint for a cold cache
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        head = _read_exact(f, SNAP_HEADER_SIZE)
        if len(head) < SNAP_HEADER_SIZE:
            raise LogCorruption(path, len(head), "file ended inside the header while being read")
        (hcrc,) = struct.unpack_from("<I", head, SNAP_HEAD.size)
        if crc32c.crc32c(head[: SNAP_HEAD.size]) != hcrc:
            raise LogCorruption(path, 0, "snapshot header checksum mismatch")
        magic, version, flags, zxid, length, block, tcrc = SNAP_HEAD.unpack_from(head, 0)
        if magic != SNAP_MAGIC or version != 1 or block <= 0:
            raise LogCorruption(path, 0, f"not a snapshot file (magic {magic!r}, version {version})")
        m = SNAP_NAME.fullmatch(os.path.basename(path))
        if m and int(m.group(1), 16) != zxid:
            named = zx.fmt(int(m.group(1), 16))
            raise LogCorruption(path, 0, f"header says zxid {zx.fmt(zxid)}, file name says {named}")
        nblocks = (length + block - 1) // block
        expect = SNAP_HEADER_SIZE + length + 4 * nblocks
        if size != expect:
            raise LogCorruption(path, min(size, expect), f"file is {size} bytes, expected {expect}")
        data = _read_exact(f, length)
        table = _read_exact(f, 4 * nblocks)
    tstart = SNAP_HEADER_SIZE + length
    if len(data) != length or len(table) != 4 * nblocks:  # the file shrank while being read
        got = SNAP_HEADER_SIZE + len(data) + len(table)
        raise LogCorruption(path, got, f"file ended at {got} bytes while being read, expected {expect}")
    if crc32c.crc32c(table) != tcrc:
        raise LogCorruption(path, tstart, "snapshot block checksum table damaged")
    mv = memoryview(data)
    crc = crc32c.crc32c
    for i, (want,) in enumerate(struct.iter_unpack("<I", table)):
        lo = i * block
        if crc(mv[lo : lo + block]) != want:
            hi = min(lo + block, length)
            raise LogCorruption(path, SNAP_HEADER_SIZE + lo,
                                f"checksum mismatch in snapshot data block {i} "
                                f"(bytes {SNAP_HEADER_SIZE + lo}..{SNAP_HEADER_SIZE + hi})")
    return Snapshot(zxid, data, bool(flags & RECEIVED), path)


def newest_snapshot(snap_dir: str) -> Snapshot | None:
    snaps = list_snapshots(snap_dir)
    return read_snapshot(snaps[-1][1]) if snaps else None


def drop_snapshots_above(snap_dir: str, zxid: int, *, fsync: bool = True) -> int:
    """Delete the snapshots newer than ``zxid`` (a snapshot installed below
    them replaces the state they hold); returns how many."""
    doomed = [path for z, path in list_snapshots(snap_dir) if z > zxid]
    for path in doomed:
        os.unlink(path)
    if doomed and fsync:
        fsync_dir(snap_dir)
    return len(doomed)


def purge_snapshots(snap_dir: str, retain: int) -> tuple[int, int]:
    """Delete all but the newest ``retain`` snapshots. Returns (deleted, zxid
    of the oldest retained snapshot or 0)."""
    if retain < 1:
        raise ValueError(f"snapshot retention {retain} is below 1")
    snaps = list_snapshots(snap_dir)
    doomed = snaps[:-retain] if len(snaps) > retain else []
    for _, path in doomed:
        os.unlink(path)
    if doomed:
        fsync_dir(snap_dir)
    kept = snaps[len(doomed) :]
    return len(doomed), (kept[0][0] if kept else 0)


# ------------------------------------------------------------ snapshotting

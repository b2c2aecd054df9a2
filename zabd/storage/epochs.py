"""The epoch file and the commit-point file.

``DATA/epochs`` holds ``accepted_epoch``, ``epoch_leader`` and
``current_epoch`` together, replaced atomically (temp file, fsync, rename,
fsync of the directory): a reader sees the old triple or the new one, never a
mix, so ``accepted_epoch`` never falls below ``current_epoch`` on disk
(ZOOKEEPER-2307).

``DATA/commit`` holds the last commit point known when a flush ended. It is
written lazily (in place, no fsync): commits are re-learned from the leader,
so an older or unreadable value is safe; it is only ever lowered to 0 with a
warning, never raised. (A snapshot install below it lowers it with an fsync,
before the log restarts at the snapshot.)
"""

from __future__ import annotations

import logging
import os
import struct
from typing import NamedTuple

import crc32c

from zabd.storage.txnlog import LogCorruption, fsync_dir

log = logging.getLogger("zabd.storage")

EPOCH_MAGIC = b"ZABEPOCH"
EPOCH_FORMAT = struct.Struct("<8sIQQQ")  # magic, version, accepted, leader, current
EPOCH_SIZE = EPOCH_FORMAT.size + 4
COMMIT_FORMAT = struct.Struct("<QI")  # zxid, crc32c(zxid)


class Epochs(NamedTuple):
    accepted_epoch: int
    epoch_leader: int
    current_epoch: int


def encode_epochs(e: Epochs) -> bytes:
    body = EPOCH_FORMAT.pack(EPOCH_MAGIC, 1, e.accepted_epoch, e.epoch_leader, e.current_epoch)
    return body + struct.pack("<I", crc32c.crc32c(body))


def read_epochs(path: str) -> Epochs | None:
    """None if the file does not exist (a fresh node). Raises LogCorruption."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    if len(data) != EPOCH_SIZE:
        raise LogCorruption(path, 0, f"epoch file is {len(data)} bytes, expected {EPOCH_SIZE}")
    (crc,) = struct.unpack_from("<I", data, EPOCH_FORMAT.size)
    if crc32c.crc32c(data[: EPOCH_FORMAT.size]) != crc:
        raise LogCorruption(path, 0, "epoch file checksum mismatch")
    magic, version, accepted, leader, current = EPOCH_FORMAT.unpack_from(data, 0)
    if magic != EPOCH_MAGIC or version != 1:
        raise LogCorruption(path, 0, f"not an epoch file (magic {magic!r}, version {version})")
    if accepted < current:
        raise LogCorruption(path, 0, f"accepted_epoch {accepted} is below current_epoch {current}")
    return Epochs(accepted, leader, current)


def write_epochs(path: str, e: Epochs, fsync: bool = True) -> int:
    """Atomic replace; returns the number of fsync calls made."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, encode_epochs(e))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    if fsync:
        fsync_dir(os.path.dirname(path) or ".")
        return 2
    return 0


def read_commit(path: str) -> int:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0
    if len(data) != COMMIT_FORMAT.size:
        log.warning("commit point file %s: %d bytes, ignored (commits are re-learned)", path, len(data))
        return 0
    z, crc = COMMIT_FORMAT.unpack(data)
    if crc32c.crc32c(data[:8]) != crc:
        log.warning("commit point file %s: checksum mismatch, ignored (commits are re-learned)", path)
        return 0
    return int(z)


class CommitFile:
    """In-place 12-byte record; a torn write fails its checksum and reads as 0."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1

    def write(self, zxid: int, fsync: bool = False) -> None:
        """``fsync``: durable on return (a commit point lowered below the log
        a snapshot install is about to reset to must not come back)."""
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        z = struct.pack("<Q", zxid)
        os.pwrite(self._fd, z + struct.pack("<I", crc32c.crc32c(z)), 0)
        if fsync:
            os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

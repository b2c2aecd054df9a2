"""``zabd export-zookeeper``: a zabd data directory as a ZooKeeper one.

The state is the one this node would come back with: its newest snapshot
and every txn its log holds after it (as a restart replays it, and as
ZooKeeper's own restart replays its log). It is written as ZooKeeper 3.5+
writes a snapshot (``zabd.zk.datadir``), with an empty log after it and the
epoch files, so that ZooKeeper 3.8 started with ``dataDir`` = ``--out``
loads it as its own: the same tree, every Stat field and ACL, and the
sessions with their timeouts. A session ZooKeeper made (one imported from it)
can re-attach to ZooKeeper again; one zabd made cannot (ZooKeeper derives a
password from the id, zabd's are random), so ZooKeeper expires it after its
timeout and removes its ephemerals, as for any client that does not return.

The directory must not be in use: a running server holds its lock.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import NamedTuple

from zabd.kv.replay import Replay, SnapshotUnusable
from zabd.protocol import zxid as zx
from zabd.storage.epochs import read_commit, read_epochs
from zabd.storage.snapshot import list_snapshots, read_snapshot
from zabd.storage.txnlog import LogCorruption, iter_records
from zabd.zk import datadir as zd
from zabd.zk.acl import ACL
from zabd.zk.tree import DataTree

Progress = Callable[[str], None]


class ZooKeeperExportError(ValueError):
    """A data directory that cannot be exported: the message names the file."""


class ExportResult(NamedTuple):
    snapshot: str  # the file written
    zxid: int
    epoch: int
    znodes: int
    sessions: int
    txns: int  # log records replayed after zabd's snapshot
    above_commit: int  # of which above the commit point this node had recorded


def _check_unlocked(data_dir: str) -> None:
    path = os.path.join(data_dir, "lock")
    if not os.path.exists(path):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        raise ZooKeeperExportError(f"{data_dir}: in use by a running server (its lock is held); stop it first, "
                                   "or export a copy") from None
    finally:
        os.close(fd)


def _nodes(tree: DataTree) -> Iterator[zd.ExportNode]:
    # the tree's dict order has every parent before its children: a node is
    # put after its parent exists, and replacing it keeps its place
    for path, node in tree.walk():
        yield zd.ExportNode(path, node.data, node.acl, node.header())


def replayed(data_dir: str, progress: Progress) -> tuple[Replay, int, int]:
    """The node's state: its newest snapshot and every txn logged after it.
    Returns the replay, the txns replayed and how many of them were above the
    commit point on record."""
    snaps = list_snapshots(os.path.join(data_dir, "snap"))
    snap_zxid, data = 0, None
    if snaps:
        snap_zxid, path = snaps[-1]
        progress(f"reading {path}")
        try:
            data = read_snapshot(path).data
        except LogCorruption as exc:
            raise ZooKeeperExportError(str(exc)) from None
    try:
        replay = Replay(data)
    except SnapshotUnusable as exc:
        raise ZooKeeperExportError(f"{snaps[-1][1]}: not a ZooKeeper-tree snapshot ({exc})") from None
    commit = max(read_commit(os.path.join(data_dir, "commit")), snap_zxid)
    txns = above = 0
    for r in iter_records(data_dir):
        if r.zxid <= snap_zxid:
            continue
        if not r.crc_ok:
            raise ZooKeeperExportError(f"{r.file}: at byte {r.offset}: record {zx.fmt(r.zxid)} fails its checksum")
        failed = replay.apply(r.zxid, r.payload)
        if failed is not None:
            raise ZooKeeperExportError(f"{r.file}: at byte {r.offset}: record {zx.fmt(r.zxid)}: {failed}")
        txns += 1
        above += r.zxid > commit
        if not txns % 100_000:
            progress(f"replaying the log: {txns:,} txns")
    return replay, txns, above


def export_zookeeper(data_dir: str, out: str, progress: Progress = lambda _: None) -> ExportResult:
    if not os.path.isdir(data_dir) or not any(
            os.path.exists(os.path.join(data_dir, n)) for n in ("epochs", "log", "snap")):
        raise ZooKeeperExportError(f"{data_dir}: not a zabd data directory (no epochs file, log or snap folder)")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ZooKeeperExportError(f"{out}: already exists and is not an empty directory (the export writes a new one)")
    _check_unlocked(data_dir)
    try:
        epochs = read_epochs(os.path.join(data_dir, "epochs"))
    except LogCorruption as exc:
        raise ZooKeeperExportError(str(exc)) from None
    replay, txns, above = replayed(data_dir, progress)
    tree = replay.tree
    zxid = max(tree.applied, replay.last_zxid)
    epoch = max(zx.epoch_of(zxid), epochs.current_epoch if epochs is not None else 0)
    acls: dict[tuple[ACL, ...], None] = {}
    for _, node in tree.walk():
        acls.setdefault(node.acl)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out))}.exporting-", dir=parent)
    try:
        version_dir = os.path.join(tmp, "version-2")
        os.mkdir(version_dir)
        name = f"snapshot.{zxid:x}"
        progress(f"writing {name}: {len(tree.nodes):,} znodes")
        zd.write_snapshot(os.path.join(version_dir, name),
                          ((sid, s.timeout_ms) for sid, s in tree.sessions.items()), acls, _nodes(tree))
        zd.write_empty_log(os.path.join(version_dir, f"log.{zxid + 1:x}"))
        for epoch_file in ("acceptedEpoch", "currentEpoch"):
            with open(os.path.join(version_dir, epoch_file), "w") as f:
                f.write(f"{epoch}")
                f.flush()
                os.fsync(f.fileno())
        if os.path.isdir(out):
            os.rmdir(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(os.path.join(out, "version-2", name), zxid, epoch, len(tree.nodes), len(tree.sessions),
                        txns, above)

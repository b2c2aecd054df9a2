"""What the audit reads from a data directory, and only through ``zabd.storage``.

This is the one place that knows the storage module's reader API
(``iter_records``, ``list_snapshots``/``read_snapshot``, ``read_epochs``,
``read_commit``): the audit never parses the on-disk format itself, so a
format change in ``zabd/storage`` needs no change here beyond these calls.

Payloads are reduced to a 128-bit BLAKE2b digest on the executor; only the
digest travels to Spark. The ``tree-digest`` check replays each node on an
executor too (:func:`tree_batches`, ``zabd.kv.replay``): only the tree's
digest after each ZooKeeper txn travels.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zabd.zk.tree import DataTree

INT63 = 1 << 63


def payload_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


# (name, Spark type, nullable) of one log record row
RECORD_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("node", "int", False),  # position of the directory on the command line, 1-based
    ("pos", "long", False),  # record's position in the node's log (0-based, log order)
    ("zxid", "long", False),
    ("epoch", "long", False),
    ("counter", "long", False),
    ("size", "long", False),
    ("hash", "string", False),  # BLAKE2b-128 of the payload
    ("crc_ok", "boolean", False),
    ("file", "string", False),
    ("offset", "long", False),
)


def record_ddl() -> str:
    return _ddl(RECORD_COLUMNS)


def iter_record_rows(node: int, data_dir: str) -> Iterator[tuple[Any, ...]]:
    """One tuple per log record (``RECORD_COLUMNS`` order), via ``zabd.storage``'s lenient reader."""
    from zabd.storage.txnlog import iter_records

    for pos, rec in enumerate(iter_records(data_dir)):
        if rec.zxid >= INT63:  # epoch >= 2^31: not representable as a Spark long
            raise ValueError(f"{rec.file}: offset {rec.offset}: zxid {rec.zxid:#x} has an epoch above 2^31-1")
        yield (
            node,
            pos,
            rec.zxid,
            rec.zxid >> 32,
            rec.zxid & 0xFFFF_FFFF,
            len(rec.payload),
            payload_hash(rec.payload),
            rec.crc_ok,
            rec.file,
            rec.offset,
        )


def record_batches(nodes: dict[int, str], batches: Iterator[Any], rows_per_batch: int = 50_000) -> Iterator[Any]:
    """mapInArrow body: node ids in, Arrow batches of record rows out (bounded memory per batch)."""
    yield from _arrow_batches(RECORD_COLUMNS, batches, lambda n: iter_record_rows(n, nodes[n]), rows_per_batch)


def _arrow_batches(
    columns: tuple[tuple[str, str, bool], ...],
    batches: Iterator[Any],
    rows_of: Callable[[int], Iterator[tuple[Any, ...]]],
    rows_per_batch: int,
) -> Iterator[Any]:
    import pyarrow as pa

    types = {"int": pa.int32(), "long": pa.int64(), "string": pa.string(), "boolean": pa.bool_()}
    schema = pa.schema([pa.field(n, types[t], nullable) for n, t, nullable in columns])
    width = len(columns)

    def batch_of(cols: list[list[Any]]) -> Any:
        return pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
        )

    for batch in batches:
        for node in batch.column(0).to_pylist():
            cols: list[list[Any]] = [[] for _ in range(width)]
            for row in rows_of(int(node)):
                for i in range(width):
                    cols[i].append(row[i])
                if len(cols[0]) >= rows_per_batch:
                    yield batch_of(cols)
                    cols = [[] for _ in range(width)]
            if cols[0]:
                yield batch_of(cols)


@dataclass(slots=True)
class SnapshotInfo:
    zxid: int
    size: int
    hash: str
    received: bool
    path: str


@dataclass(slots=True)
class NodeMeta:
    node: int
    data_dir: str
    accepted_epoch: int | None = None
    current_epoch: int | None = None
    epoch_leader: int | None = None
    commit: int = 0  # the advisory commit point (0 if unknown): a lower bound
    snapshots: list[SnapshotInfo] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # unreadable files: reported as problems

    @property
    def snapshot_zxid(self) -> int:
        return max((s.zxid for s in self.snapshots), default=0)


def read_node_meta(node: int, data_dir: str) -> NodeMeta:
    """Epochs, commit point and snapshots of one data directory (small files, read on the driver)."""
    from zabd.storage.epochs import read_commit, read_epochs
    from zabd.storage.snapshot import list_snapshots, read_snapshot
    from zabd.storage.txnlog import StorageError

    meta = NodeMeta(node, data_dir)
    try:
        e = read_epochs(os.path.join(data_dir, "epochs"))
        if e is not None:
            meta.accepted_epoch, meta.epoch_leader, meta.current_epoch = (
                e.accepted_epoch,
                e.epoch_leader,
                e.current_epoch,
            )
    except StorageError as exc:
        meta.errors.append(str(exc))
    meta.commit = read_commit(os.path.join(data_dir, "commit"))
    for _, path in list_snapshots(os.path.join(data_dir, "snap")):
        try:
            snap = read_snapshot(path)
        except StorageError as exc:
            meta.errors.append(str(exc))
            continue
        meta.snapshots.append(SnapshotInfo(snap.zxid, len(snap.data), payload_hash(snap.data), snap.received, path))
    return meta


# (name, Spark type, nullable) of one tree-digest row: the ZooKeeper tree of
# one node after everything up to ``zxid`` was applied
TREE_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("node", "int", False),
    ("pos", "long", False),  # row order within the node (the replay's order)
    ("zxid", "long", False),
    ("digest", "string", False),  # DataTree.digest, 16 hex digits ("" on an error row)
    ("replicated", "string", False),  # DataTree.replicated_digest, what nodes are compared on
    ("znodes", "long", False),
    ("sessions", "long", False),
    ("file", "string", False),  # where the txn (or the snapshot) is
    ("error", "string", True),  # the replay stopped here: why (a txn no replica survives)
)


def _ddl(columns: tuple[tuple[str, str, bool], ...]) -> str:
    return ", ".join(f"`{n}` {t}" + ("" if nullable else " not null") for n, t, nullable in columns)


def tree_ddl() -> str:
    return _ddl(TREE_COLUMNS)


def iter_tree_rows(node: int, data_dir: str, commit: int) -> Iterator[tuple[Any, ...]]:
    """The node's ZooKeeper tree rebuilt as its server would at start-up: the
    newest snapshot, then its committed records (up to ``commit``) in log
    order. One row for the snapshot's tree (at the last ZooKeeper txn or
    membership change it holds: 0 for none), one after each of those; an error row ends a
    replay that fails, and stands for a txn whose apply raised (a fault: the
    replay goes on, as the server does). No rows when the node's snapshot is unreadable (the
    ``snapshot`` check says so) or not a KV machine's (nothing to compare)."""
    from zabd.kv.replay import Replay, SnapshotUnusable, changes_tree
    from zabd.storage.snapshot import list_snapshots, read_snapshot
    from zabd.storage.txnlog import StorageError, iter_records

    snaps = list_snapshots(os.path.join(data_dir, "snap"))
    snap_zxid, data, where = 0, None, data_dir
    if snaps:
        try:
            snap = read_snapshot(snaps[-1][1])
        except StorageError:
            return
        snap_zxid, data, where = snap.zxid, snap.data, snap.path
    try:
        replay = Replay(data)
    except SnapshotUnusable as exc:
        if exc.claimed:
            yield (node, 0, snap_zxid, "", "", 0, 0, where, f"snapshot does not restore: {exc}")
        return
    tree = replay.tree
    pos = 0
    yield (node, pos, tree.applied, *_digests(tree), len(tree), len(tree.sessions), where, None)
    for rec in iter_records(data_dir):
        if rec.zxid <= snap_zxid or rec.zxid > commit or not changes_tree(rec.payload):
            continue
        if not rec.crc_ok:  # the checksum check reports it; a server would not get past it
            return
        pos += 1
        why = replay.apply(rec.zxid, rec.payload)
        if why is not None:
            yield (node, pos, rec.zxid, "", "", len(tree), len(tree.sessions), rec.file, why)
            return
        if replay.faults and replay.faults[-1] == rec.zxid:
            yield (node, pos, rec.zxid, "", "", len(tree), len(tree.sessions), rec.file,
                   "applying raised (a bug in the state machine); answered with an error")
            continue
        yield (node, pos, rec.zxid, *_digests(tree), len(tree), len(tree.sessions), rec.file, None)


def _digests(tree: DataTree) -> tuple[str, str]:
    return f"{tree.digest:016x}", f"{tree.replicated_digest():016x}"


def tree_batches(
    nodes: dict[int, tuple[str, int]], batches: Iterator[Any], rows_per_batch: int = 50_000
) -> Iterator[Any]:
    """mapInArrow body: node ids in, Arrow batches of tree-digest rows out
    (``nodes``: id -> (data dir, commit point))."""
    yield from _arrow_batches(TREE_COLUMNS, batches, lambda n: iter_tree_rows(n, *nodes[n]), rows_per_batch)

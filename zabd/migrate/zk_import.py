"""``zabd import-zookeeper``: a ZooKeeper data directory as zabd's.

As ZooKeeper's ``FileTxnSnapLog.restore`` does: the newest snapshot that
reads whole (a damaged newer one is named and passed over, as ZooKeeper
passes over it), then every logged txn after it in zxid order, applied by
zabd's own tree with ZooKeeper's replay rules (a create over a fuzzy
snapshot that already holds the node still moves its parent's cversion).
The result is one zabd snapshot at ZooKeeper's last zxid, installed in each
new data directory with the epoch files set so that zabd's next epoch is
above ZooKeeper's: a client that saw ZooKeeper's last zxid is never in
zabd's future.

Sessions come along with their timeouts and the digest of the password
ZooKeeper derived for them (``zookeeper_password``), so a ZooKeeper client
can re-attach with its session id and password and keep its ephemerals; one
that does not come back is expired by zabd's leader after its timeout, as
ZooKeeper's would.

Everything is written under a temporary name beside ``--out`` and renamed
into place at the end: an error leaves nothing half-written.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any, NamedTuple

from zabd.kv.kvmachine import KVMachine
from zabd.protocol import zxid as zx
from zabd.storage.disk import DiskStorage
from zabd.zk import datadir as zd
from zabd.zk import txn as tx
from zabd.zk.acl import ACL, READ_ACL_UNSAFE
from zabd.zk.acl import to_wire as acls_wire
from zabd.zk.records import CONTAINER_OWNER, TTL_OWNER_BASE
from zabd.zk.sessions import password_digest, zookeeper_password
from zabd.zk.tree import CONFIG_PATH, HEADER, DataTree

Progress = Callable[[str], None]


class ZooKeeperImportError(ValueError):
    """Input that cannot be imported: the message names the file."""


class ImportResult(NamedTuple):
    snapshot: str
    snapshot_zxid: int
    txns: int  # log entries applied after the snapshot
    logs: int  # log files read
    zxid: int  # the zabd snapshot's zxid
    epoch: int
    znodes: int
    sessions: int
    skipped_snapshots: list[str]  # newer snapshots that did not read, each with why
    out: list[str]  # the data directories written


def _session_row(sid: int, timeout: int) -> tuple[int, int, bytes]:
    return (sid, timeout, password_digest(zookeeper_password(sid)))


def config_row(row: tuple[str, bytes, Any, bool]) -> tuple[str, bytes, Any, bool]:
    """``/zookeeper/config`` as zabd keeps it before a server sets it from its
    own configuration (``DataTree.set_config``): ZooKeeper's holds
    ZooKeeper's ensemble, which is not this one."""
    _, _, pz, _, _, _, cv, _, _ = HEADER.unpack_from(row[1])
    return (CONFIG_PATH, HEADER.pack(0, 0, pz, 0, 0, -1, cv, -1, 0), READ_ACL_UNSAFE, False)


def tree_from(rows: list[tuple[str, bytes, tuple[ACL, ...], bool]], sessions: dict[int, int], zxid: int) -> DataTree:
    """A ZooKeeper database (a snapshot file's, or a leader's SNAP) as zabd's
    tree: ``/zookeeper/config`` as :func:`config_row` keeps it (added if a
    3.4 database lacks it), each session with the digest of the password
    ZooKeeper derived for it. ValueError if a row has no parent."""
    rows = [config_row(r) if r[0] == CONFIG_PATH else r for r in rows]
    if not any(r[0] == CONFIG_PATH for r in rows) and any(r[0] == "/zookeeper" for r in rows):
        rows.append(config_row((CONFIG_PATH, HEADER.pack(0, 0, 0, 0, 0, -1, 0, -1, 0), (), False)))
    return DataTree.from_rows(rows, [_session_row(sid, t) for sid, t in sessions.items()], zxid)


def empty_tree() -> DataTree:
    """What an import of a ZooKeeper database without a txn builds: its empty
    tree (``/``, ``/zookeeper``, ``/zookeeper/quota``, as zabd's own) with
    ``/zookeeper/config`` as :func:`config_row` keeps it."""
    return tree_from([(p, n.blob, n.acl, n.data is None) for p, n in DataTree().nodes.items()], {}, 0)


def load_snapshot(version_dir: str, progress: Progress,
                  at_most: int | None = None) -> tuple[zd.ZkSnapshot | None, list[str]]:
    """The newest snapshot (at or below zxid ``at_most``) that reads whole,
    and why each newer one did not."""
    skipped: list[str] = []
    for z, path in reversed(zd.list_files(version_dir, "snapshot")):
        if at_most is not None and z > at_most:
            continue
        name = os.path.basename(path)

        def step(done: int, total: int, name: str = name) -> None:
            progress(f"reading {name}: {100 * done // max(total, 1)}%")

        try:
            return zd.read_snapshot(path, step), skipped
        except zd.ZkFormatError as exc:
            skipped.append(str(exc))
            progress(f"skipping {name}: {exc}")
    return None, skipped


def _owner(kind: int, fields: tuple[Any, ...], session: int) -> int:
    if kind in (zd.OP_CREATE, zd.OP_CREATE2):
        return session if fields[3] else 0
    if kind == zd.OP_CREATE_CONTAINER:
        return CONTAINER_OWNER
    ttl: int = fields[4]
    return TTL_OWNER_BASE | ttl


def _op(tree: DataTree, kind: int, fields: tuple[Any, ...], session: int, zxid: int) -> list[Any] | None:
    """A ZooKeeper txn as zabd's (``zabd.zk.txn``: outcomes, as ZooKeeper's
    are); None for what does not change zabd's tree."""
    if kind in (zd.OP_CREATE, zd.OP_CREATE2, zd.OP_CREATE_TTL, zd.OP_CREATE_CONTAINER):
        path, data, acl = fields[0], fields[1], fields[2]
        pcv: int = fields[4] if kind in (zd.OP_CREATE, zd.OP_CREATE2) else fields[3]
        if path in tree.nodes:
            if kind == zd.OP_CREATE:  # ZooKeeper adjusts for create only (not create2, TTL, container)
                tree.replayed_create_exists(path, pcv, zxid)
            return None
        if pcv == -1:  # a CreateTxnV0: one more than the parent's
            parent = tree.nodes.get(path.rpartition("/")[0] or "/")
            pcv = parent.cversion + 1 if parent is not None else 0
        return [tx.T_CREATE, path, data, acls_wire(acl), _owner(kind, fields, session), pcv]
    if kind in (zd.OP_DELETE, zd.OP_DELETE_CONTAINER):
        return [tx.T_DELETE, fields[0]]
    if kind == zd.OP_SET_DATA:
        return [tx.T_SET_DATA, fields[0], fields[1], fields[2]]
    if kind == zd.OP_SET_ACL:
        return [tx.T_SET_ACL, fields[0], acls_wire(fields[1]), fields[2]]
    if kind == zd.OP_CHECK:
        return [tx.T_CHECK, fields[0]]
    if kind == zd.OP_ERROR:
        return [tx.T_ERROR, fields[0]]
    return None  # a reconfig: /zookeeper/config is the new ensemble's


def zabd_payload(tree: DataTree, t: zd.ZkTxn) -> bytes:
    """ZooKeeper's txn ``t`` as zabd's, to apply to ``tree`` next (which it
    reads for ZooKeeper's replay rules, and for a fuzzy snapshot's create
    adjusts). A txn that changes nothing here (an error, a failed multi, a
    reconfig of ZooKeeper's own ensemble) is an error txn: the tree applies
    it as nothing, and a log that holds it keeps ZooKeeper's zxids whole."""
    if t.type == zd.OP_CREATE_SESSION:
        sid, timeout, secret = _session_row(t.session, t.ops[0][1][0])
        return tx.encode(tx.T_CREATE_SESSION, t.time_ms, sid, timeout, secret)
    if t.type == zd.OP_CLOSE_SESSION:
        return tx.encode(tx.T_CLOSE_SESSION, t.time_ms, t.session, list(t.ops[0][1][0]))
    if t.type == zd.OP_MULTI:
        failed = [fields[0] for kind, fields in t.ops if kind == zd.OP_ERROR and fields[0] != 0]
        if failed or any(kind == zd.OP_ERROR for kind, _ in t.ops):  # a multi that failed: nothing applies
            return tx.encode(tx.T_ERROR, t.time_ms, t.session, failed[0] if failed else 0)
        ops = [op for kind, fields in t.ops if (op := _op(tree, kind, fields, t.session, t.zxid)) is not None]
        if not ops:
            return tx.encode(tx.T_ERROR, t.time_ms, t.session, 0)
        return tx.encode(tx.T_MULTI, t.time_ms, t.session, ops)
    kind, fields = t.ops[0]
    op = _op(tree, kind, fields, t.session, t.zxid)
    if op is None:
        return tx.encode(tx.T_ERROR, t.time_ms, t.session, 0)
    return tx.encode(op[0], t.time_ms, t.session, *op[1:])


def apply_txn(tree: DataTree, t: zd.ZkTxn) -> bytes:
    """One ZooKeeper txn applied to ``tree`` as ZooKeeper's restore applies
    it; returns zabd's form of it (for a log)."""
    payload = zabd_payload(tree, t)
    try:
        tree.apply(t.zxid, payload)
    except ValueError as exc:
        where = f"{t.file}: at byte {t.offset}: txn {zx.fmt(t.zxid)}"
        raise ZooKeeperImportError(f"{where} does not apply: {exc}") from None
    return payload


def follows(prev: int, z: int) -> bool:
    """ZooKeeper's zxids count up by one within an epoch, and a new epoch's
    first txn is its number 1 (the leader's NEWLEADER is number 0)."""
    return z == prev + 1 or (zx.epoch_of(z) > zx.epoch_of(prev) and zx.counter_of(z) <= 1)


def build_tree(data_dir: str, log_dir: str | None, progress: Progress, *, snapshot_at: int | None = None,
               upto: int | None = None) -> tuple[DataTree, ImportResult]:
    """ZooKeeper's tree as its restore builds it: the newest snapshot (at or
    below ``snapshot_at``) and the logged txns after it (up to ``upto``)."""
    version_dir = zd.find_version_dir(data_dir)
    log_version_dir = zd.find_version_dir(log_dir) if log_dir else version_dir
    if not os.path.isdir(version_dir):
        raise ZooKeeperImportError(f"{data_dir}: not a directory")
    snap, skipped = load_snapshot(version_dir, progress, snapshot_at)
    if snap is None:
        if skipped:
            raise ZooKeeperImportError(f"{version_dir}: no snapshot reads whole; the newest: {skipped[0]}")
        raise ZooKeeperImportError(f"{version_dir}: no snapshot.<zxid> file: not a ZooKeeper data directory "
                                   "(give its dataDir, or the version-2 folder inside it)")
    progress(f"building the tree: {len(snap.rows):,} znodes, {len(snap.sessions):,} sessions")
    try:
        tree = tree_from(snap.rows, snap.sessions, snap.zxid)
    except ValueError as exc:
        raise ZooKeeperImportError(f"{snap.path}: {exc}") from None
    logs = zd.logs_after(log_version_dir, snap.zxid)
    applied = 0
    last = snap.zxid
    for n, path in enumerate(logs, 1):
        progress(f"replaying {os.path.basename(path)} ({n}/{len(logs)}): {applied:,} txns so far")
        for t in zd.read_log(path, last):
            if upto is not None and t.zxid > upto:
                break
            if not follows(last, t.zxid):
                raise ZooKeeperImportError(f"{path}: at byte {t.offset}: txn {zx.fmt(t.zxid)} follows "
                                           f"{zx.fmt(last)}: the txns between them are in no log here (a log file "
                                           "is missing)")
            apply_txn(tree, t)
            last = t.zxid
            applied += 1
    tree.applied = last
    epochs = [zd.read_epoch_file(os.path.join(version_dir, name)) for name in ("currentEpoch", "acceptedEpoch")]
    epoch = max([zx.epoch_of(last), *(e for e in epochs if e is not None)])
    # A client may have seen zxid (epoch, 0) from a leader that wrote nothing yet
    zxid = max(last, zx.make(epoch, 0))
    return tree, ImportResult(snap.path, snap.zxid, applied, len(logs), zxid, epoch, len(tree.nodes),
                              len(tree.sessions), skipped, [])


async def _seed(data_dir: str, zxid: int, state: bytes, epoch: int) -> None:
    storage = DiskStorage(data_dir)
    storage.load()
    try:
        storage.install_snapshot(zxid, state, zxid)
        storage.persist_epochs(epoch, 0, epoch)
        await storage.flush()
    finally:
        storage.close()


def import_zookeeper(data_dir: str, out: str, nodes: int | None, log_dir: str | None = None,
                     progress: Progress = lambda _: None) -> ImportResult:
    """Read ``data_dir`` (ZooKeeper's dataDir; ``log_dir``: its dataLogDir if
    apart) and write ``out``: one zabd data directory, or with ``nodes``,
    ``out/data1`` .. ``out/dataN`` (the layout of ``zabd cluster --dir``)."""
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ZooKeeperImportError(f"{out}: already exists and is not an empty directory (the import writes a new one)")
    # a million new rows and nodes hold no cycles: collections over the growing
    # heap would only cost (a third of a 1M import's time), as in a restore
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        tree, result = build_tree(data_dir, log_dir, progress)
        machine = KVMachine()
        machine.zk = tree
        machine.store.applied = result.zxid
        tree.applied = result.zxid
        progress(f"encoding zabd's snapshot at {zx.fmt(result.zxid)}")
        state = machine.snapshot()
    finally:
        if gc_was_enabled:
            gc.enable()
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out))}.importing-", dir=parent)
    try:
        names = [f"data{i}" for i in range(1, nodes + 1)] if nodes else [""]
        first = os.path.join(tmp, names[0])
        progress(f"writing {os.path.join(out, names[0])}")
        asyncio.run(_seed(first, result.zxid, state, result.epoch))
        for name in names[1:]:
            progress(f"writing {os.path.join(out, name)}")
            shutil.copytree(first, os.path.join(tmp, name))
        if os.path.isdir(out):
            os.rmdir(out)  # empty: checked above
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result._replace(out=[os.path.join(out, n) if n else out for n in names])

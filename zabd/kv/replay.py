"""Rebuild a replica's state machine offline: a snapshot, then committed txns.

For ``zabd log verify DIR`` (``zabd.storage.tools``, given :func:`replay_log`
by the CLI) and the audit's ``tree-digest`` check (``zabd.pipeline``). It
applies txns exactly as a server does (``KVMachine.apply``, which never
fails) and tells apart:

* a txn the machine *refuses*: a malformed KV or ZooKeeper txn that
  ``KVMachine.apply`` answers with an error and does not apply, the same on
  every replica (odd, never fatal);
* a *fault*: applying raised something else, a bug of the machine's (it is
  answered with an error too, but may have changed part of the state);
* an exception out of ``KVMachine.apply`` itself, which would stop a
  server's applier: a replay stops there, the state after it is undefined.

No import of ``zabd.storage``: the caller reads the files and hands over
bytes and records (anything with ``zxid``, ``payload``, ``crc_ok``, ``file``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from zabd.kv.kvmachine import SNAP_MAGIC, KVMachine
from zabd.protocol import zxid as zx
from zabd.protocol.membership import MAGIC as MEMBERSHIP_MAGIC
from zabd.protocol.messages import Txn
from zabd.zk.tree import DataTree
from zabd.zk.txn import ZK_MAGIC


class LogRecordLike(Protocol):
    @property
    def zxid(self) -> int: ...

    @property
    def payload(self) -> bytes: ...

    @property
    def crc_ok(self) -> bool: ...

    @property
    def file(self) -> str: ...


class SnapshotUnusable(ValueError):
    """The snapshot does not restore into a KVMachine. ``claimed``: it starts
    with ``SNAP_MAGIC`` (a KV + tree snapshot that is damaged), rather than
    being some other machine's state (a server with ``state_machine =
    "none"``, say), which a replay cannot check."""

    def __init__(self, message: str, claimed: bool) -> None:
        super().__init__(message)
        self.claimed = claimed


def _name(exc: BaseException) -> str:
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def restored(snapshot: bytes | None) -> KVMachine:
    """A KVMachine with ``snapshot`` restored (a fresh one for None)."""
    machine = KVMachine()
    if snapshot:
        try:
            machine.restore(snapshot)
        except Exception as exc:
            raise SnapshotUnusable(f"{_name(exc)}: {exc}", snapshot[:4] == SNAP_MAGIC) from exc
    return machine


class Replay:
    """A machine that committed txns are fed to, one at a time."""

    def __init__(self, snapshot: bytes | None = None) -> None:
        self.machine = restored(snapshot)
        self.applied = 0  # txns applied here
        self.last_zxid = 0
        self.tolerated = 0  # malformed txns the machine skipped, as every replica does
        self.first_tolerated = 0
        self.faults: list[int] = []  # zxids whose apply raised (a bug)
        self.failed: str | None = None  # why the replay stopped (a txn no replica survives)

    @property
    def tree(self) -> DataTree:
        return self.machine.zk

    def apply(self, zxid: int, payload: bytes) -> str | None:
        """Apply one txn; the reason if it is one a replica would not survive
        (and the replay is over: later calls do nothing)."""
        if self.failed is not None:
            return self.failed
        errors, faults = self.machine.errors, self.machine.faults
        try:
            self.machine.apply(Txn(zxid, payload))
        except Exception as exc:
            self.failed = f"{_name(exc)}: {exc}"
            return self.failed
        if self.machine.faults != faults:
            self.faults.append(zxid)
        elif self.machine.errors != errors:
            self.tolerated += 1
            self.first_tolerated = self.first_tolerated or zxid
        self.applied += 1
        self.last_zxid = zxid
        return None

    def summary(self) -> str:
        t = self.tree
        return (
            f"tree: {len(t)} znodes, {len(t.sessions)} sessions, digest {t.digest:016x} "
            f"at zxid {zx.fmt(t.applied)}; kv: {len(self.machine.store.data)} keys"
        )


def is_zk(payload: bytes) -> bool:
    return payload[: len(ZK_MAGIC)] == ZK_MAGIC


def changes_tree(payload: bytes) -> bool:
    """A ZooKeeper txn, or a membership change (it rewrites ``/zookeeper/config``)."""
    return is_zk(payload) or payload.startswith(MEMBERSHIP_MAGIC)


def replay_log(
    snapshot: bytes | None, snap_zxid: int, commit: int, records: Iterable[LogRecordLike]
) -> tuple[list[str], list[str]]:
    """Restore ``snapshot`` (taken at ``snap_zxid``) and apply every record
    above it up to ``commit`` (the committed ones), streaming. Returns
    (problems, notes) as ``zabd log verify`` prints them: a problem names the
    file and zxid."""
    problems: list[str] = []
    notes: list[str] = []
    try:
        r = Replay(snapshot)
    except SnapshotUnusable as exc:
        if exc.claimed:
            problems.append(f"snapshot {zx.fmt(snap_zxid)}: does not restore (KV + ZooKeeper tree): {exc}")
        else:
            notes.append(f"replay: skipped, snapshot {zx.fmt(snap_zxid)} is not a KV machine's ({exc})")
        return problems, notes
    tree_at = r.tree.applied
    if tree_at > snap_zxid:
        problems.append(
            f"snapshot {zx.fmt(snap_zxid)}: its ZooKeeper tree says it applied {zx.fmt(tree_at)}, beyond the snapshot"
        )
    above = 0
    for rec in records:
        if rec.zxid <= snap_zxid:
            continue
        if rec.zxid > commit:
            above += 1
            continue
        if r.failed is not None:
            continue
        if not rec.crc_ok:
            problems.append(f"{rec.file}: zxid {zx.fmt(rec.zxid)}: replay stops at a record that fails its checksum")
            r.failed = "checksum"
            continue
        why = r.apply(rec.zxid, rec.payload)
        if why is not None:
            kind = "ZooKeeper" if is_zk(rec.payload) else "txn"
            problems.append(
                f"{rec.file}: zxid {zx.fmt(rec.zxid)}: {kind} txn fails to apply ({why}); "
                "a replica's applier stops here"
            )
    for z in r.faults:
        problems.append(f"zxid {zx.fmt(z)}: applying raised (a bug in the state machine); it was answered with "
                        "an error and may have changed part of the state")
    notes.append(
        f"replay: snapshot {zx.fmt(snap_zxid)} + {r.applied} committed txns to {zx.fmt(r.last_zxid or snap_zxid)}"
        + (f", {above} above the commit point not applied" if above else "")
    )
    if r.tolerated:
        notes.append(
            f"replay: {r.tolerated} malformed txns skipped as every replica skips them "
            f"(first at {zx.fmt(r.first_tolerated)})"
        )
    notes.append(r.summary())
    return problems, notes

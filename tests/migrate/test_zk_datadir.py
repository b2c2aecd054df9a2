"""zabd import-zookeeper and export-zookeeper on data directories ZooKeeper
3.8 wrote itself (tests/data/zk38_datadirs, made by
scripts/make_zk_datadir_fixtures.py: one per snapshot compression, with the
tree ZooKeeper served when it stopped). The live ensemble round trip is in
test_zk_migration.py."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from zabd.kv.kvmachine import KVMachine
from zabd.migrate.zk_export import ZooKeeperExportError, export_zookeeper
from zabd.migrate.zk_import import ZooKeeperImportError, build_tree, import_zookeeper
from zabd.storage.disk import DiskStorage
from zabd.storage.snapshot import newest_snapshot
from zabd.zk import datadir as zd
from zabd.zk.acl import OPEN_ACL_UNSAFE
from zabd.zk.sessions import password_digest, password_matches, zookeeper_password
from zabd.zk.tree import CONFIG_PATH, DataTree

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "zk38_datadirs"
MODES = ("plain", "gz", "snappy")
ROOT = Path(__file__).resolve().parents[2]


def served(mode: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / mode / "tree.json").read_text())
    return doc


def view(tree: DataTree) -> dict[str, Any]:
    """The tree as a client reads it, in tree.json's shape."""
    out = {}
    for path, node in tree.walk():
        data = node.data
        out[path] = {"data": None if data is None else base64.b64encode(data).decode(),
                     "stat": list(node.stat()), "acl": [[a.perms, a.id.scheme, a.id.id] for a in node.acl]}
    return out


def differences(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    return [f"{p}: {want.get(p)} != {got.get(p)}" for p in sorted(set(want) | set(got))
            if p != CONFIG_PATH and want.get(p) != got.get(p)]


def copy_fixture(mode: str, tmp_path: Path) -> Path:
    dest = tmp_path / f"zk-{mode}"
    shutil.copytree(FIXTURES / mode, dest)
    return dest


def test_zookeeper_password_is_javas() -> None:
    # java.util.Random(id ^ 0xB3415C00).nextBytes(16), printed by Java 17 for these ids
    for sid, hexpw in ((0, "f22acd4a97e69d6d20a49bb638eadb38"), (1, "054cc74a37327db215e702e20c73f005"),
                       (72057594037927937, "054cc74a37327db215e702e20c73f005"),
                       (-8070450532247928831, "054cc74a37327db215e702e20c73f005"),
                       (123456789012345, "8bf4c71b6a74227de170ea4c5d4abf4c")):
        assert zookeeper_password(sid).hex() == hexpw


@pytest.mark.parametrize("mode", MODES)
def test_import_rebuilds_the_tree_zookeeper_served(mode: str, tmp_path: Path) -> None:
    doc = served(mode)
    tree, result = build_tree(str(FIXTURES / mode), None, lambda _: None)
    assert result.txns > 0 and result.logs >= 1  # the snapshot alone is not the end
    assert differences(doc["tree"], view(tree)) == []
    live = doc["live_session"]
    assert live["id"] in tree.sessions
    # the client's own password (the one ZooKeeper told it) re-attaches
    assert password_matches(tree.sessions[live["id"]].password_digest, base64.b64decode(live["password"]))
    assert tree.ephemerals_of(live["id"]) == ["/app/eph"]


def test_import_writes_a_data_dir_per_node(tmp_path: Path) -> None:
    out = tmp_path / "zabd"
    r = subprocess.run([sys.executable, "-m", "zabd", "import-zookeeper", str(FIXTURES / "plain"), "--out", str(out),
                        "--nodes", "3"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "imported 41 znodes" in r.stdout
    want = served("plain")["tree"]
    for i in (1, 2, 3):
        d = out / f"data{i}"
        snap = newest_snapshot(str(d / "snap"))
        assert snap is not None
        machine = KVMachine()
        machine.restore(snap.data)
        assert differences(want, view(machine.zk)) == []
        storage = DiskStorage(str(d))
        state = storage.load()  # what a server starts from: the snapshot, an empty log, ZooKeeper's epoch
        storage.close()
        assert state.snapshot_zxid == snap.zxid
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temp dir left


def test_a_torn_last_entry_ends_the_log_as_for_zookeeper(tmp_path: Path) -> None:
    src = copy_fixture("plain", tmp_path)
    newest = zd.list_files(str(src / "version-2"), "log")[-1][1]
    entries = list(zd.read_log(newest))
    whole, _ = build_tree(str(src), None, lambda _: None)
    last = entries[-1]
    with open(newest, "r+b") as f:  # cut inside the last entry: a crash mid-write
        f.truncate(last.offset + 20)
    torn, result = build_tree(str(src), None, lambda _: None)
    assert torn.applied == entries[-2].zxid if len(entries) > 1 else result.snapshot_zxid
    assert torn.applied < whole.applied


def test_a_damaged_entry_is_one_error_naming_file_and_offset(tmp_path: Path) -> None:
    src = copy_fixture("plain", tmp_path)
    newest = zd.list_files(str(src / "version-2"), "log")[-1][1]
    entry = next(iter(zd.read_log(newest)))
    with open(newest, "r+b") as f:
        f.seek(entry.offset + 12 + 30)  # inside the entry's bytes, after its checksum and length
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "zabd", "import-zookeeper", str(src), "--out", str(out), "-q"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip() == (f"zabd import-zookeeper: {newest}: at byte {entry.offset}: entry checksum mismatch"
                                + r.stderr.strip().split("entry checksum mismatch", 1)[1])
    assert "Traceback" not in r.stderr
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".")]


def test_a_damaged_newest_snapshot_is_passed_over_for_an_older_one(tmp_path: Path) -> None:
    src = copy_fixture("plain", tmp_path)
    whole, _ = build_tree(str(src), None, lambda _: None)
    snaps = zd.list_files(str(src / "version-2"), "snapshot")
    newest = snaps[-1][1]
    size = os.path.getsize(newest)
    with open(newest, "r+b") as f:
        f.seek(size // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x01]))
    tree, result = build_tree(str(src), None, lambda _: None)
    assert result.snapshot == snaps[-2][1]
    assert len(result.skipped_snapshots) == 1 and newest in result.skipped_snapshots[0]
    assert "checksum mismatch" in result.skipped_snapshots[0]
    assert tree.digest == whole.digest and tree.applied == whole.applied  # the logs cover the difference


def test_a_missing_log_file_is_a_gap_not_a_silent_loss(tmp_path: Path) -> None:
    src = copy_fixture("plain", tmp_path)
    snap_zxid = zd.list_files(str(src / "version-2"), "snapshot")[-3][0]
    for z, path in zd.list_files(str(src / "version-2"), "snapshot"):
        if z > snap_zxid:
            os.unlink(path)  # an older snapshot, so that two logs follow it
    logs = zd.logs_after(str(src / "version-2"), snap_zxid)
    assert len(logs) >= 3
    os.unlink(logs[1])
    with pytest.raises(ZooKeeperImportError, match="a log file is missing"):
        build_tree(str(src), None, lambda _: None)


def test_import_refuses_a_non_zookeeper_dir_and_an_existing_out(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperImportError, match="no snapshot"):
        import_zookeeper(str(tmp_path), str(tmp_path / "o"), None)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(ZooKeeperImportError, match="not an empty directory"):
        import_zookeeper(str(FIXTURES / "plain"), str(tmp_path / "busy"), None)


def test_snapshot_write_read_round_trip(tmp_path: Path) -> None:
    tree, _ = build_tree(str(FIXTURES / "gz"), None, lambda _: None)
    acls = {node.acl: None for _, node in tree.walk()}
    path = tmp_path / "snapshot.63"
    zd.write_snapshot(str(path), [(sid, s.timeout_ms) for sid, s in tree.sessions.items()], acls,
                      (zd.ExportNode(p, n.data, n.acl, n.header()) for p, n in tree.walk()))
    snap = zd.read_snapshot(str(path))
    again = DataTree.from_rows(snap.rows, [(sid, t, password_digest(zookeeper_password(sid)))
                                           for sid, t in snap.sessions.items()], tree.applied)
    assert view(again) == view(tree)
    assert again.digest == tree.digest


def test_export_refuses_a_directory_a_server_holds(tmp_path: Path) -> None:
    out = tmp_path / "zabd"
    import_zookeeper(str(FIXTURES / "plain"), str(out), None)
    storage = DiskStorage(str(out))
    storage.load()  # takes the lock, as a running server does
    try:
        with pytest.raises(ZooKeeperExportError, match="in use by a running server"):
            export_zookeeper(str(out), str(tmp_path / "zk"))
    finally:
        storage.close()
    r = export_zookeeper(str(out), str(tmp_path / "zk"))
    assert r.znodes == 41 and os.path.exists(r.snapshot)


def test_a_snapshot_row_with_a_path_zookeeper_never_makes_is_refused(tmp_path: Path) -> None:
    nodes = [zd.ExportNode("/", b"", OPEN_ACL_UNSAFE, (0, 0, 0, 0, 0, 0, 0, 0, 0)),
             zd.ExportNode("/a/", b"x", OPEN_ACL_UNSAFE, (1, 1, 1, 0, 0, 0, 0, 0, 0))]
    path = tmp_path / "snapshot.1"
    zd.write_snapshot(str(path), [], [OPEN_ACL_UNSAFE], nodes)
    with pytest.raises(zd.ZkFormatError, match=r"snapshot.1: at byte \d+: node path '/a/': path must not end"):
        zd.read_snapshot(str(path))


def test_only_imported_sessions_take_zookeepers_derived_password(tmp_path: Path) -> None:
    """The trust boundary of an import, tried as a hostile client on the same
    host would: the id of a session is in its ephemerals' Stat, and ZooKeeper
    derives the password from the id. On zabd that works for a session
    imported from ZooKeeper (as it did on ZooKeeper), and for no session
    zabd made, whose password is random."""
    from kazoo.client import KazooClient

    from zabd.client.spawn import LocalCluster

    out = tmp_path / "zabd"
    import_zookeeper(str(FIXTURES / "plain"), str(out), 1)
    imported = served("plain")["live_session"]["id"]
    with LocalCluster(1, storage="disk", base_dir=out) as c:  # started on entering
        asyncio.run(c.wait_leader(timeout=60))
        reader = KazooClient(hosts=c.zk_hosts, timeout=10)
        reader.start(timeout=30)
        try:
            stat = reader.exists("/app/eph")  # anyone who may read the node sees its owner
            assert stat is not None and stat.ephemeralOwner == imported
            native = reader.client_id[0]
            thief = KazooClient(hosts=c.zk_hosts, client_id=(imported, zookeeper_password(imported)), timeout=10)
            thief.start(timeout=30)
            assert thief.client_id[0] == imported  # as on ZooKeeper: the documented cost of carrying it over
            thief.stop()
            thief.close()
            forger = KazooClient(hosts=c.zk_hosts, client_id=(native, zookeeper_password(native)), timeout=10)
            forger.start(timeout=30)
            # refused as expired: kazoo then starts a session of its own, never the one it forged
            assert forger.client_id[0] != native
            forger.stop()
            forger.close()
            assert reader.exists("/") is not None and reader.client_id[0] == native  # untouched
        finally:
            reader.stop()
            reader.close()

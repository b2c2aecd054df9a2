"""The migration proof harness (``tests/zk/migration_harness.py``) checked
against the real thing: a 3-node ZooKeeper 3.8 ensemble runs the workload,
and a full restart on the same dirs, a read of its newest snapshot by
ZooKeeper's own formatter and a standalone ZooKeeper on a copy taken from a
live follower all give back the same tree. So when the migration tests find
a difference, it is the migration's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError

from tests.server.real_zk import needs_zookeeper
from tests.zk.migration_harness import (
    CREATE_MODES,
    TTL_MS,
    NodeView,
    Stat,
    WorkloadFacts,
    ZooKeeperEnsemble,
    backup_copy,
    check_facts,
    diff_trees,
    ensemble,
    node_kind,
    read_snapshot,
    read_tree,
    run_workload,
)

KIND_OF_MODE = {"persistent": "persistent", "persistent_sequential": "persistent", "ephemeral": "ephemeral",
                "ephemeral_sequential": "ephemeral", "container": "container", "persistent_with_ttl": "ttl",
                "persistent_sequential_with_ttl": "ttl"}


@needs_zookeeper
def test_workload_tree_survives_restart_snapshot_and_live_copy(tmp_path: Path) -> None:
    zk = ZooKeeperEnsemble(tmp_path / "zk", 3)
    facts: WorkloadFacts | None = None
    try:
        zk.start()
        facts = run_workload(zk.hosts)
        assert [m for m in CREATE_MODES if not facts.modes[m]] == []
        assert facts.writes >= 300 and len(facts.live) == 2 and len(facts.closed_sessions) == 2

        before = read_tree(zk.hosts)
        assert check_facts(before, facts) == []
        # kazoo shows null data as None, apart from b""; ZooKeeper keeps them apart
        assert before["/mig/data/null"].data is None and before["/mig/data/set-null"].data is None
        assert before["/mig/data/empty"].data == b"" and before["/mig/data/set-empty"].data == b""
        assert before[facts.acl["aversion"]].stat.aversion == 3
        assert before[facts.acl["auth"]].acl[0][1] == "digest"  # "auth" is stored as the creator's digest
        with pytest.raises(NoAuthError):  # the super user is what reads the digest-only node
            read_tree(zk.hosts, auth=None)

        # a backup tool's copy of a follower's files while it serves
        backup = backup_copy(zk.data_dir(zk.followers()[0]), tmp_path / "backup")
        for i in zk.ids:  # the workload crossed snapshots and log rolls on every server
            assert len(zk.files(i, "snapshot")) >= 2 and len(zk.files(i, "log")) >= 2, i

        zk.stop()
        zk.start(wipe=False)
        for s in facts.live:
            s.reattach()  # the same session: it outlived the restart
        assert diff_trees(before, read_tree(zk.hosts)) == []

        # the newest snapshot, read by ZooKeeper's formatter: the node types a Stat hides, the sessions
        snap = read_snapshot(zk.files(zk.leader(), "snapshot")[-1])
        for mode, paths in facts.modes.items():
            for p in paths:
                if p in snap.owners or mode != "persistent":
                    assert node_kind(snap.owners[p]) == KIND_OF_MODE[mode], (p, hex(snap.owners[p]))
        assert snap.owners[facts.modes["persistent_with_ttl"][0]] & ((1 << 56) - 1) == TTL_MS
        for s in facts.live:
            assert s.session_id in snap.sessions
            assert {p for p in s.ephemerals if snap.owners[p] == s.session_id} == set(s.ephemerals)
        assert not set(facts.closed_sessions) & set(snap.sessions)
    finally:
        if facts is not None:
            facts.close_live()
        zk.stop()

    # a standalone ZooKeeper restores the live copy, never wiping it: the same tree
    with ensemble(tmp_path / "restore", 1, data_dirs=[backup]) as one:
        assert one.mode(1) == "standalone"
        assert diff_trees(before, read_tree(one.hosts)) == []
    assert (backup / "version-2").is_dir()


@needs_zookeeper
def test_backup_of_a_separate_log_dir_is_one_data_dir(tmp_path: Path) -> None:
    """dataLogDir apart from dataDir (as production often has it): the copy
    puts the logs beside the snapshots, and ZooKeeper restores it as it is,
    standalone or as an ensemble on copies of it."""
    with ensemble(tmp_path / "zk", 1, separate_log_dir=True) as zk:
        facts = run_workload(zk.hosts, bulk=20)
        try:
            before = read_tree(zk.hosts)
            assert zk.files(1, "log") and not list((zk.data_dir(1) / "version-2").glob("log.*"))
            backup = backup_copy(zk.data_dir(1), tmp_path / "backup", zk.log_dir(1))
        finally:
            facts.close_live()
    copied = {f.name.split(".")[0] for f in (backup / "version-2").iterdir()}
    assert {"snapshot", "log"} <= copied
    with ensemble(tmp_path / "restore", 1, data_dirs=[backup]) as one:
        assert diff_trees(before, read_tree(one.hosts)) == []

    # an ensemble on three copies of it (as of an export): each gets its myid
    copies = [shutil.copytree(backup / "version-2", tmp_path / f"copy{i}" / "version-2").parent for i in (1, 2, 3)]
    with ensemble(tmp_path / "restore3", 3, data_dirs=copies) as three:
        assert diff_trees(before, read_tree(three.hosts)) == []
    assert [(d / "myid").read_text() for d in copies] == ["1\n", "2\n", "3\n"]
    (copies[0] / "myid").write_text("2\n")
    with pytest.raises(ValueError, match="expected server 1"):
        ZooKeeperEnsemble(tmp_path / "bad", 3, data_dirs=copies).start()


OPEN = ((31, "world", "anyone"),)


def _node(data: bytes | None = b"x", version: int = 0, acl: tuple[tuple[int, str, str], ...] = OPEN) -> NodeView:
    return NodeView(data, Stat(5, 5 + version, 1, 2, version, 0, 0, 0, len(data or b""), 0, 5), acl)


def test_diff_trees_names_each_difference() -> None:
    a = {"/": _node(), "/n": _node(None), "/v": _node(), "/only-a": _node(), "/zookeeper/config": _node(b"1"),
         "/acl": _node()}
    b = {"/": _node(), "/n": _node(b""), "/v": _node(version=1), "/only-b": _node(), "/zookeeper/config": _node(b"2"),
         "/acl": _node(acl=((1, "world", "anyone"),))}
    assert diff_trees(a, a) == []
    assert diff_trees(a, b) == [
        "/acl acl: [(31, 'world', 'anyone')] != [(1, 'world', 'anyone')]",
        "/n data: null != b'' (0 B)",
        "/only-a: only in a",
        "/only-b: only in b",
        "/v mzxid: 0x5 != 0x6",
        "/v version: 0 != 1",
    ]
    assert diff_trees(a, b, ignore=("/n", "/v", "/acl", "/only-a", "/only-b")) == [
        "/zookeeper/config data: b'1' (1 B) != b'2' (1 B)"]


def test_node_kind_reads_zookeepers_owner_encoding() -> None:
    assert node_kind(-(1 << 63)) == "container"
    assert node_kind(int.from_bytes(bytes.fromhex("ff0000000036ee80"), "big", signed=True)) == "ttl"
    assert node_kind(0x100027FF9EB0000) == "ephemeral"
    assert node_kind(0) == "persistent"

"""ZooKeeper -> zabd -> ZooKeeper, on real ensembles (issue 40's proof).

A 3-node ZooKeeper 3.8 ensemble runs the harness's workload (every create
mode, setData, delete, multi committed and failed, ACLs of each scheme,
sequential nodes, ephemerals of live and closed sessions, containers and TTL
nodes; snapCount 50, so several snapshots and log rolls), and a client holds
a lock. A copy of a live follower's files is taken as a backup would take
it, then the ensemble stops. Both the stopped server's directory and the
live copy are imported; a 3-node zabd cluster started on each serves the
same tree through the ZooKeeper protocol: every path, its data, every Stat
field and its ACL (read as the superuser: ZooKeeper shows a digest ACL's
hash only to who may administer the node). The lock's client re-attaches
its session to zabd and still holds the lock. Then zabd's data is exported,
and a ZooKeeper 3.8 ensemble started on copies of the export serves the same
tree again. ``/zookeeper/config`` is each ensemble's own and is left out.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kazoo.client import KazooClient

from tests.server.real_zk import needs_zookeeper
from tests.zk.migration_harness import (
    SUPER_AUTH,
    SUPER_PASSWORD,
    SUPER_USER,
    TTL_MS,
    WorkloadFacts,
    ZooKeeperEnsemble,
    backup_copy,
    connect,
    diff_trees,
    ensemble,
    read_tree,
    run_workload,
)
from zabd.client.spawn import LocalCluster
from zabd.migrate.zk_import import build_tree
from zabd.zk.acl import digest_id
from zabd.zk.records import CONTAINER_OWNER, ttl_of

ROOT = Path(__file__).resolve().parents[2]
LOCK = "/locks/leader"


def zabd(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "zabd", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return r.stdout


@contextmanager
def zabd_cluster(base: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(3, storage="disk", base_dir=base, extra={"zk_super_digest": digest_id(SUPER_USER, SUPER_PASSWORD)})
    try:
        c.start()
        asyncio.run(c.wait_leader(timeout=60))
        yield c
    finally:
        c.stop()


@needs_zookeeper
def test_zookeeper_to_zabd_and_back_with_zero_differences(tmp_path: Path) -> None:
    zk = ZooKeeperEnsemble(tmp_path / "zk", 3)
    facts: WorkloadFacts | None = None
    holder: KazooClient | None = None
    try:
        zk.start()
        facts = run_workload(zk.hosts)
        holder = connect(zk.hosts)
        lock = holder.Lock(LOCK, "holder")
        assert lock.acquire(timeout=30)
        held_by = holder.client_id
        before = read_tree(zk.hosts)
        seen = holder.last_zxid  # what the client saw last of ZooKeeper
        assert len(before) >= 150 and f"{LOCK}" in before
        backup = backup_copy(zk.data_dir(zk.followers()[0]), tmp_path / "backup")
        stopped = zk.data_dir(zk.leader())
        zk.stop()
    finally:
        zk.stop()
    # the clients lost their servers; ended here without a close, their sessions live on in the data
    for c in [holder, *(s.client for s in (facts.live if facts else []))]:
        if c is not None:
            c.stop()
            c.close()
    assert facts is not None

    # the node types a client's Stat hides, as imported
    tree, _ = build_tree(str(stopped), None, lambda _: None)
    for p in facts.modes["container"]:
        assert tree.nodes[p].owner == CONTAINER_OWNER
    for p in facts.modes["persistent_with_ttl"] + facts.modes["persistent_sequential_with_ttl"]:
        assert ttl_of(tree.nodes[p].owner) == TTL_MS
    for s in facts.live:
        assert set(tree.ephemerals_of(s.session_id)) >= set(s.ephemerals)

    # the copy a backup took from a live follower: the same tree, and the lock's session re-attaches
    out_backup = tmp_path / "zabd-backup"
    assert "imported" in zabd("import-zookeeper", str(backup), "--out", str(out_backup), "--nodes", "3", "-q")
    with zabd_cluster(out_backup) as c:
        assert diff_trees(before, read_tree(c.zk_hosts)) == []
        back = KazooClient(hosts=c.zk_hosts, client_id=held_by, timeout=30)
        back.last_zxid = seen  # refused if zabd's zxids were behind ZooKeeper's
        back.start(timeout=30)
        try:
            assert back.client_id[0] == held_by[0]  # the same session, not a new one
            [mine] = back.get_children(LOCK)
            stat = back.exists(f"{LOCK}/{mine}")
            assert stat is not None and stat.ephemeralOwner == held_by[0]
            rival = connect(c.zk_hosts)
            try:
                assert not rival.Lock(LOCK, "rival").acquire(blocking=False)  # still the holder's
            finally:
                rival.stop()
                rival.close()
        finally:
            back.stop()  # closes the session: the lock is released
            back.close()

    # the stopped server's own directory, then the way back: export, ZooKeeper on it
    out = tmp_path / "zabd"
    zabd("import-zookeeper", str(stopped), "--out", str(out), "--nodes", "3", "-q")
    with zabd_cluster(out) as c:
        assert diff_trees(before, read_tree(c.zk_hosts)) == []
    export = tmp_path / "export"
    assert "exported" in zabd("export-zookeeper", str(out / "data1"), "--out", str(export), "-q")
    copies = [shutil.copytree(export, tmp_path / f"zk-back{i}") for i in (1, 2, 3)]
    with ensemble(tmp_path / "zk-back", 3, data_dirs=copies) as again:
        assert diff_trees(before, read_tree(again.hosts, auth=SUPER_AUTH)) == []

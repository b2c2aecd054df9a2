"""The audit's ``tree-digest`` check: each node's ZooKeeper tree rebuilt on an
executor (snapshot + committed records), digests compared zxid by zxid.
Data directories written by ``DiskStorage`` with ZooKeeper txns from a
one-replica ZooKeeper (``tests/storage/zk_log.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.storage.zk_log import Recording, workload, write_dir
from zabd.kv import KVMachine
from zabd.pipeline.audit import audit, format_audit
from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn
from zabd.zk import txn as tx

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::FutureWarning")]


def zk_log() -> Recording:
    zk = Recording()
    workload(zk, 20)
    return zk


def test_replicas_with_the_same_trees_pass_and_report_the_digest(spark: Any, tmp_path: Path) -> None:
    zk = zk_log()
    txns, last = zk.txns, zk.txns[-1].zxid
    dirs = [tmp_path / f"n{i}" for i in (1, 2, 3)]
    write_dir(dirs[0], txns, commit=last, snap_at=zx.make(1, 12))  # a snapshot: its tree, then the log
    write_dir(dirs[1], txns, commit=last)
    write_dir(dirs[2], txns[:-5], commit=txns[-6].zxid)  # behind: an earlier tree, no disagreement
    report = audit(spark, [str(d) for d in dirs])
    assert report.ok, report.problems
    n1, n2, n3 = report.nodes
    want = f"{zk.tree.digest:016x}"
    assert (n1["tree_digest"], n1["tree_zxid"], n1["tree_znodes"], n1["tree_sessions"]) == (
        want, last, len(zk.tree), len(zk.tree.sessions))
    assert (n2["tree_digest"], n2["tree_zxid"]) == (want, last)
    assert n3["tree_zxid"] == txns[-6].zxid and n3["tree_digest"] != want
    assert want in format_audit(report)


def test_a_snapshot_of_a_different_tree_is_found(spark: Any, tmp_path: Path) -> None:
    zk = zk_log()
    txns, last = zk.txns, zk.txns[-1].zxid
    at = zx.make(1, 15)
    # node 2's snapshot at 1:15: the committed txns, but one more znode (a bad apply, a
    # bad install): a self-consistent snapshot that only node 2 has, over a log that
    # agrees with the others byte for byte -- no check on files or payloads sees it
    m = KVMachine()
    for t in txns:
        if t.zxid <= at:
            m.apply(t)
    m.zk.apply(at, tx.encode(tx.T_CREATE, 1, 0, "/ghost", b"never committed", [[31, "world", "anyone"]], 0, 9))
    dirs = [tmp_path / f"n{i}" for i in (1, 2, 3)]
    write_dir(dirs[0], txns, commit=last)
    write_dir(dirs[1], txns, commit=last, snap_at=at, snap_data=m.snapshot())
    write_dir(dirs[2], txns, commit=last)
    report = audit(spark, [str(d) for d in dirs])
    assert report.problem_counts == {"tree-digest": 2}, report.problems
    details = [p.detail for p in report.problems]
    assert details[0].startswith("nodes 1 and 2: ZooKeeper tree digests differ at zxid 1:15 (")
    assert details[1].startswith("nodes 2 and 3: ZooKeeper tree digests differ at zxid 1:15 (")
    assert "later zxids both hold" in details[0]
    n1, n2, n3 = report.nodes
    assert n1["tree_digest"] == n3["tree_digest"] == f"{zk.tree.digest:016x}" != n2["tree_digest"]
    # the two good replicas alone agree
    assert audit(spark, [str(dirs[0]), str(dirs[2])]).ok


def test_the_locally_configured_config_node_is_no_disagreement(spark: Any, tmp_path: Path) -> None:
    """A KV nemesis run reported "tree digests differ at zxid 0:0": only node
    1 had a snapshot, which holds /zookeeper/config as its server set it from
    its configuration; the others were replayed from their logs alone."""
    zk = zk_log()
    txns, last = zk.txns, zk.txns[-1].zxid
    at = zx.make(1, 12)
    m = KVMachine(zk_config=b"server.1=10.0.0.1:2888:3888:participant;0.0.0.0:2181\nversion=0")
    for t in txns:
        if t.zxid <= at:
            m.apply(t)
    dirs = [tmp_path / f"n{i}" for i in (1, 2, 3)]
    write_dir(dirs[0], txns, commit=last, snap_at=at, snap_data=m.snapshot())
    write_dir(dirs[1], txns, commit=last)
    write_dir(dirs[2], txns, commit=last)
    report = audit(spark, [str(d) for d in dirs])
    assert report.ok, report.problems
    n1, n2, _ = report.nodes
    assert n1["tree_digest"] != n2["tree_digest"] == f"{zk.tree.digest:016x}"  # shown as each server holds it


def test_a_committed_txn_no_server_can_apply_is_refused_alike_on_every_node(spark: Any, tmp_path: Path) -> None:
    """An ephemeral owner beyond 64 signed bits once raised struct.error in
    every replica's apply, at every restart; now every replica refuses it
    whole, and the trees after it still agree."""
    zk = zk_log()
    last = zk.txns[-1].zxid
    unstorable = Txn(last + 1, tx.encode(tx.T_CREATE, 1, 5, "/bad", b"", [[31, "world", "anyone"]], 2**64 - 1, 9))
    after = Txn(last + 2, tx.encode(tx.T_CREATE, 1, 5, "/after", b"", [[31, "world", "anyone"]], 0, 1))
    dirs = [tmp_path / f"n{i}" for i in (1, 2)]
    for d in dirs:
        write_dir(d, [*zk.txns, unstorable, after], commit=last + 2)
    report = audit(spark, [str(d) for d in dirs])
    assert report.ok, report.problems
    n1, n2 = report.nodes
    assert n1["tree_zxid"] == n2["tree_zxid"] == last + 2 and n1["tree_digest"] == n2["tree_digest"]

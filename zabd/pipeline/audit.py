"""``zabd pipeline audit DIR...``: do the replicas' logs agree?

Each data directory is read on an executor (one task per directory) through
``zabd.storage``'s reader (:mod:`zabd.pipeline.logsource`) into one
DataFrame of log records; the small per-node files (epochs, commit point,
snapshots) are read on the driver. Checks, each a Spark query:

* ``checksum``: a record whose CRC does not verify.
* ``gap``: within one node's log, a zxid that does not follow the previous
  one (strictly increasing, counter + 1 within an epoch, counter 1 for the
  first txn of a new epoch); the first record must follow the newest
  snapshot (or the start of time) unless a snapshot already covers it.
* ``divergent``: the same zxid with different payloads on two nodes (a zxid
  names one proposal of one epoch's leader, so this is never legitimate).
* ``missing-committed``: a zxid committed somewhere (at or below some node's
  commit point, in its log) that another node whose commit point is at or
  above it does not hold (outside what its snapshot covers). With the two
  checks above this is "committed prefixes agree".
* ``commit-past-log``: a commit point beyond both the log and the snapshot.
* ``snapshot``: an unreadable snapshot or epoch file, or two nodes'
  snapshots of the same zxid with different contents.
* ``tree-digest``: two nodes whose ZooKeeper trees differ at the same zxid.
  Each node's tree is rebuilt on an executor (one task per directory, like
  the records) as its server rebuilds it: the newest snapshot, then the
  committed records after it; its digest (``DataTree.digest``, incremental)
  after every ZooKeeper txn is joined with the other nodes' by zxid. This
  catches a tree that went wrong where the payloads agree: a snapshot taken
  of (or installed as) a different state. One problem per pair of nodes,
  naming the first zxid where they differ.
* ``tree-replay``: a node whose tree cannot be rebuilt: its (KV + tree)
  snapshot does not restore, or applying a committed txn raised (a bug of
  the state machine's, not a malformed txn every replica refuses alike).
  A node whose snapshot is not a KV machine's (``state_machine = "none"``)
  has no tree to compare and is left out.

The commit file is advisory (written lazily), so commit points are lower
bounds: the audit can miss a disagreement above a stale commit point, never
invent one.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from zabd.pipeline.logsource import NodeMeta, read_node_meta, record_batches, record_ddl, tree_batches, tree_ddl

MAX_LISTED = 50


@dataclass(frozen=True, slots=True)
class Problem:
    kind: str
    detail: str


@dataclass(slots=True)
class AuditReport:
    nodes: list[dict[str, Any]]
    epochs: list[dict[str, Any]]
    problems: list[Problem] = field(default_factory=list)
    problem_counts: dict[str, int] = field(default_factory=dict)  # kind -> total (problems lists at most MAX_LISTED)

    @property
    def ok(self) -> bool:
        return not self.problem_counts


def fmt_zxid(z: int | None) -> str:
    return "-" if z is None else f"{z >> 32}:{z & 0xFFFF_FFFF}"


def _follows(prev: int, z: int) -> bool:
    pe, ze = prev >> 32, z >> 32
    if ze == pe:
        return z == prev + 1
    return ze > pe and (z & 0xFFFF_FFFF) == 1


def load_records(spark: Any, metas: list[NodeMeta]) -> Any:
    nodes = {m.node: m.data_dir for m in metas}

    def read(batches: Any) -> Any:
        return record_batches(nodes, batches)

    ids = spark.range(1, len(metas) + 1, 1, numPartitions=len(metas)).selectExpr("cast(id as int) as node")
    return ids.mapInArrow(read, record_ddl())


def load_trees(spark: Any, metas: list[NodeMeta]) -> Any:
    """Tree-digest rows (``logsource.TREE_COLUMNS``) of every node, replayed
    up to its commit point (or its snapshot, whichever is later)."""
    nodes = {m.node: (m.data_dir, max(m.commit, m.snapshot_zxid)) for m in metas}

    def replay(batches: Any) -> Any:
        return tree_batches(nodes, batches)

    ids = spark.range(1, len(metas) + 1, 1, numPartitions=len(metas)).selectExpr("cast(id as int) as node")
    return ids.mapInArrow(replay, tree_ddl())


def tree_checks(trees: Any) -> tuple[dict[int, dict[str, Any]], list[str], list[tuple[int, str]]]:
    """(per node: its tree after the last row; one detail per pair of nodes
    whose digests differ at some zxid, with the total; replay failures)."""
    from pyspark.sql import functions as F

    ok = trees.where(F.col("error").isNull())
    last = {
        r["node"]: r["last"].asDict()
        for r in ok.groupBy("node")
        .agg(F.max_by(F.struct("zxid", "digest", "znodes", "sessions"), "pos").alias("last"))
        .collect()
    }
    # compared without /zookeeper/config: each server sets it from its own
    # configuration, and a node replayed without a snapshot has none
    a = ok.select(F.col("node").alias("a"), "zxid", F.col("replicated").alias("da"))
    b = ok.select(F.col("node").alias("b"), "zxid", F.col("replicated").alias("db"))
    pairs = (
        a.join(b, "zxid")
        .where((F.col("a") < F.col("b")) & (F.col("da") != F.col("db")))
        .groupBy("a", "b")
        .agg(
            F.min_by(F.struct("zxid", "da", "db"), "zxid").alias("first"),
            F.count("*").alias("zxids"),
        )
        .orderBy("a", "b")
        .collect()
    )
    diffs = [
        f"nodes {r['a']} and {r['b']}: ZooKeeper tree digests differ at zxid {fmt_zxid(r['first']['zxid'])} "
        f"({r['first']['da']} vs {r['first']['db']})"
        + (f", and at {r['zxids'] - 1} later zxids both hold" if r["zxids"] > 1 else "")
        for r in pairs
    ]
    failed = [
        (r["node"], f"node {r['node']}: {r['file']}: zxid {fmt_zxid(r['zxid'])}: {r['error']}")
        for r in trees.where(F.col("error").isNotNull()).orderBy("node").collect()
    ]
    return last, diffs, failed


def audit(spark: Any, data_dirs: list[str], out_dir: str | None = None) -> AuditReport:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    metas = [read_node_meta(i + 1, os.path.abspath(d)) for i, d in enumerate(data_dirs)]
    n = len(metas)
    records = load_records(spark, metas)
    if out_dir is not None:
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "records.parquet")
        records.write.mode("overwrite").parquet(path)
        records = spark.read.parquet(path)
    else:
        records = records.cache()

    problems: list[Problem] = []
    counts: dict[str, int] = {}

    def add(kind: str, total: int, details: list[str]) -> None:
        if total:
            counts[kind] = counts.get(kind, 0) + total
            problems.extend(Problem(kind, d) for d in details)

    # per-node facts (one small job)
    node_facts = {
        r["node"]: r.asDict()
        for r in records.groupBy("node")
        .agg(
            F.count("*").alias("records"),
            F.min_by("zxid", "pos").alias("first"),
            F.max_by("zxid", "pos").alias("last"),
            F.sum("size").alias("bytes"),
            F.sum(F.when(~F.col("crc_ok"), 1).otherwise(0)).alias("bad_crc"),
        )
        .collect()
    }

    # checksum
    bad = records.where(~F.col("crc_ok"))
    nbad = sum(int(f["bad_crc"]) for f in node_facts.values())
    add(
        "checksum",
        nbad,
        [
            f"node {r['node']}: {r['file']} offset {r['offset']}: record {fmt_zxid(r['zxid'])} fails its CRC-32C"
            for r in bad.orderBy("node", "pos").limit(MAX_LISTED).collect()
        ]
        if nbad
        else [],
    )

    # gap / order within each node's log
    w = Window.partitionBy("node").orderBy("pos")
    prev = F.lag("zxid").over(w)
    seq = records.select("node", "pos", "zxid", "epoch", "counter", "file", "offset", prev.alias("prev"))
    prev_epoch = F.shiftright(F.col("prev"), 32)
    prev_counter = F.col("prev").bitwiseAND(0xFFFF_FFFF)
    follows = ((F.col("epoch") == prev_epoch) & (F.col("counter") == prev_counter + 1)) | (
        (F.col("epoch") > prev_epoch) & (F.col("counter") == 1)
    )
    gaps = seq.where(F.col("prev").isNotNull() & ~follows)
    ngaps = gaps.count()
    add(
        "gap",
        ngaps,
        [
            f"node {r['node']}: {r['file']} offset {r['offset']}: zxid {fmt_zxid(r['zxid'])} follows "
            f"{fmt_zxid(r['prev'])}" + (" (a hole: missing txns)" if r["zxid"] > r["prev"] else " (out of order)")
            for r in gaps.orderBy("node", "pos").limit(MAX_LISTED).collect()
        ]
        if ngaps
        else [],
    )
    for m in metas:
        f = node_facts.get(m.node)
        if f is None:
            continue
        first, snap = int(f["first"]), m.snapshot_zxid
        if not (first <= snap or _follows(snap, first)):
            base = f"snapshot {fmt_zxid(snap)}" if snap else "the start of the log (no snapshot)"
            add("gap", 1, [f"node {m.node}: the log starts at {fmt_zxid(first)}, which does not follow {base}"])

    # divergent payloads for one zxid
    variants = (
        records.groupBy("zxid")
        .agg(
            F.countDistinct("hash").alias("variants"),
            F.sort_array(F.collect_set(F.struct("hash", "node"))).alias("copies"),
        )
        .where(F.col("variants") > 1)
    )
    ndiv = variants.count()
    details = []
    if ndiv:
        for r in variants.orderBy("zxid").limit(MAX_LISTED).collect():
            by_hash: dict[str, list[int]] = {}
            for c in r["copies"]:
                by_hash.setdefault(c["hash"], []).append(c["node"])
            parts = "; ".join(f"nodes {','.join(map(str, sorted(v)))}: payload {h[:12]}" for h, v in by_hash.items())
            details.append(f"zxid {fmt_zxid(r['zxid'])} has {r['variants']} different payloads ({parts})")
    add("divergent", ndiv, details)

    # committed somewhere => held by every node whose commit point covers it
    commits = spark.createDataFrame(
        [(m.node, m.commit, m.snapshot_zxid) for m in metas], "node int, commit long, snap long"
    )
    committed = (
        records.join(commits, "node")
        .where(F.col("zxid") <= F.col("commit"))
        .groupBy("zxid")
        .agg(F.min("node").alias("witness"))
    )
    expected = committed.crossJoin(commits.withColumnRenamed("node", "holder")).where(
        (F.col("zxid") <= F.col("commit")) & (F.col("zxid") > F.col("snap"))
    )
    held = records.select(F.col("node").alias("holder"), "zxid")
    missing = expected.join(held, ["holder", "zxid"], "left_anti")
    nmiss = missing.count()
    add(
        "missing-committed",
        nmiss,
        [
            f"node {r['holder']} (commit point {fmt_zxid(r['commit'])}) lacks zxid {fmt_zxid(r['zxid'])}, "
            f"committed at node {r['witness']}"
            for r in missing.orderBy("holder", "zxid").limit(MAX_LISTED).collect()
        ]
        if nmiss
        else [],
    )

    # commit point past the log; unreadable files; snapshots that disagree
    for m in metas:
        f = node_facts.get(m.node)
        last = int(f["last"]) if f is not None else 0
        if m.commit > max(last, m.snapshot_zxid):
            add(
                "commit-past-log",
                1,
                [f"node {m.node}: commit point {fmt_zxid(m.commit)} is beyond its log's end {fmt_zxid(last)}"],
            )
        for err in m.errors:
            add("snapshot", 1, [f"node {m.node}: {err}"])
    snaps: dict[int, dict[str, list[int]]] = {}
    for m in metas:
        for s in m.snapshots:
            snaps.setdefault(s.zxid, {}).setdefault(s.hash, []).append(m.node)
    for z, by_hash in sorted(snaps.items()):
        if len(by_hash) > 1:
            parts = "; ".join(f"nodes {','.join(map(str, v))}: {h[:12]}" for h, v in by_hash.items())
            add("snapshot", 1, [f"snapshots of zxid {fmt_zxid(z)} differ ({parts})"])

    # the ZooKeeper trees, rebuilt per node, compared zxid by zxid
    tree_last, tree_diffs, tree_failed = tree_checks(load_trees(spark, metas))
    add("tree-digest", len(tree_diffs), tree_diffs[:MAX_LISTED])
    add("tree-replay", len(tree_failed), [d for _, d in tree_failed[:MAX_LISTED]])

    epochs = epoch_stats(records, commits, n)
    nodes = []
    for m in metas:
        f = node_facts.get(m.node, {})
        t = tree_last.get(m.node)
        nodes.append(
            {
                "node": m.node,
                "dir": m.data_dir,
                "records": int(f.get("records", 0)),
                "bytes": int(f.get("bytes") or 0),
                "first": f.get("first"),
                "last": f.get("last"),
                "commit": m.commit,
                "snapshot": m.snapshot_zxid,
                "snapshots": len(m.snapshots),
                "accepted_epoch": m.accepted_epoch,
                "current_epoch": m.current_epoch,
                # the ZooKeeper tree after its last committed txn (None: no tree rebuilt)
                "tree_zxid": t["zxid"] if t else None,
                "tree_digest": t["digest"] if t else None,
                "tree_znodes": t["znodes"] if t else None,
                "tree_sessions": t["sessions"] if t else None,
            }
        )
    report = AuditReport(nodes, epochs, problems, counts)
    if out_dir is not None:
        with open(os.path.join(out_dir, "audit.json"), "w") as fh:
            json.dump(
                {
                    "dirs": [m.data_dir for m in metas],
                    "ok": report.ok,
                    "problem_counts": counts,
                    "problems": [asdict(p) for p in problems],
                    "nodes": nodes,
                    "epochs": epochs,
                },
                fh,
                indent=2,
            )
            fh.write("\n")
    if out_dir is None:
        records.unpersist()
    return report


def epoch_stats(records: Any, commits: Any, nodes: int) -> list[dict[str, Any]]:
    """Per epoch: txns, committed txns, bytes, replication, and each node's count."""
    from pyspark.sql import functions as F

    max_commit = commits.agg(F.max("commit")).first()[0] or 0
    per_txn = records.groupBy("epoch", "zxid").agg(
        F.count("*").alias("copies"), F.max("size").alias("size"), F.min("counter").alias("counter")
    )
    rows = (
        per_txn.groupBy("epoch")
        .agg(
            F.count("*").alias("txns"),
            F.sum(F.when(F.col("zxid") <= F.lit(max_commit), 1).otherwise(0)).alias("committed"),
            F.min("counter").alias("first_counter"),
            F.max("counter").alias("last_counter"),
            F.sum("size").alias("bytes"),
            F.avg("copies").alias("copies_mean"),
        )
        .orderBy("epoch")
        .collect()
    )
    per_node = {(r["epoch"], r["node"]): r["count"] for r in records.groupBy("epoch", "node").count().collect()}
    total = sum(r["txns"] for r in rows) or 1
    out = []
    for r in rows:
        d = r.asDict()
        d["share_pct"] = 100.0 * d["txns"] / total
        d["committed_pct"] = 100.0 * d["committed"] / d["txns"]
        d["replication_pct"] = 100.0 * d["copies_mean"] / nodes
        d["missing_counters"] = d["last_counter"] - d["first_counter"] + 1 - d["txns"]
        d["bytes_per_txn"] = d["bytes"] / d["txns"]
        d["per_node"] = {str(k): per_node.get((d["epoch"], k), 0) for k in range(1, nodes + 1)}
        out.append(d)
    return out


def format_audit(report: AuditReport) -> str:
    lines = ["nodes:"]
    lines.append(
        f"  {'node':>4}  {'records':>9}  {'first':>9}  {'last':>9}  {'commit':>9}  {'snapshot':>9}  "
        f"{'acc/cur epoch':>13}  {'tree digest':>16}  {'at':>9}  dir"
    )
    for nd in report.nodes:
        ep = f"{nd['accepted_epoch']}/{nd['current_epoch']}" if nd["accepted_epoch"] is not None else "-"
        digest = nd.get("tree_digest") or "-"
        lines.append(
            f"  {nd['node']:>4}  {nd['records']:>9,}  {fmt_zxid(nd['first']):>9}  {fmt_zxid(nd['last']):>9}  "
            f"{fmt_zxid(nd['commit']):>9}  {fmt_zxid(nd['snapshot'] or None):>9}  {ep:>13}  "
            f"{digest:>16}  {fmt_zxid(nd.get('tree_zxid')):>9}  {nd['dir']}"
        )
    lines.append("epochs:")
    node_ids = [str(nd["node"]) for nd in report.nodes]
    lines.append(
        f"  {'epoch':>5}  {'txns':>8}  {'share%':>6}  {'commit%':>7}  {'repl%':>6}  {'B/txn':>7}  {'holes':>5}  "
        + "  ".join(f"{'n' + k:>7}" for k in node_ids)
    )
    for e in report.epochs:
        lines.append(
            f"  {e['epoch']:>5}  {e['txns']:>8,}  {e['share_pct']:>6.1f}  {e['committed_pct']:>7.1f}  "
            f"{e['replication_pct']:>6.1f}  {e['bytes_per_txn']:>7.1f}  {e['missing_counters']:>5}  "
            + "  ".join(f"{e['per_node'][k]:>7,}" for k in node_ids)
        )
    if report.ok:
        lines.append("audit: OK (same zxid => same payload; committed prefixes agree; no gaps; same trees)")
    else:
        total = sum(report.problem_counts.values())
        summary = ", ".join(f"{k}: {v}" for k, v in sorted(report.problem_counts.items()))
        lines.append(f"audit: {total} problem(s) ({summary})")
        for p in report.problems:
            lines.append(f"  {p.kind}: {p.detail}")
        if total > len(report.problems):
            lines.append(f"  ... {total - len(report.problems)} more")
    return "\n".join(lines)

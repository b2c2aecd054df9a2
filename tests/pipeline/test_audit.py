"""``zabd pipeline audit`` over data directories written by zabd.storage's own DiskStorage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from zabd.pipeline.audit import audit
from zabd.pipeline.cli import main as pipeline_main
from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn
from zabd.storage.disk import DiskStorage
from zabd.storage.txnlog import iter_records, list_segments

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::FutureWarning")]


def payload(e: int, c: int) -> bytes:
    return b"txn-%d-%d:" % (e, c) + bytes(range(256))[: 40 + (c % 50)]


def write_node(
    d: Path,
    epochs: list[tuple[int, int]],
    commit: tuple[int, int],
    *,
    diverge: tuple[int, int] | None = None,
    snapshot: tuple[tuple[int, int], bytes] | None = None,
) -> None:
    """A replica's data directory, written the way the server writes it (small segments: many files)."""
    s = DiskStorage(str(d), segment_bytes=4096, prealloc_bytes=4096)
    s.load()
    for i, (e, n) in enumerate(epochs):
        s.persist_epochs(e, 1, e)
        for c in range(1, n + 1):
            s.append(Txn(zx.make(e, c), b"EVIL" if (e, c) == diverge else payload(e, c)))
            if c % 10 == 0 and c < n:
                s.flush_sync(30)  # batches, as group commit makes them: segments roll between batches
        if i == len(epochs) - 1:
            s.commit_to(zx.make(*commit))  # the commit file is written when a batch ends
        s.flush_sync(30)
    if snapshot is not None:
        s.write_snapshot(zx.make(*snapshot[0]), snapshot[1])
    s.close()


@pytest.fixture
def agreeing(tmp_path: Path) -> list[Path]:
    dirs = [tmp_path / f"node{i}" for i in (1, 2, 3)]
    write_node(dirs[0], [(1, 120), (2, 60)], (2, 55), snapshot=((1, 100), b"state at 1:100"))
    write_node(dirs[1], [(1, 120), (2, 60)], (2, 50), snapshot=((1, 100), b"state at 1:100"))
    write_node(dirs[2], [(1, 120), (2, 41)], (2, 40))  # a follower behind: fewer records, lower commit point
    return dirs


def test_agreeing_replicas_pass_with_per_epoch_counts(spark: Any, agreeing: list[Path], tmp_path: Path) -> None:
    assert len(list_segments(str(agreeing[0] / "log"))) > 3  # the reader crosses segment boundaries
    report = audit(spark, [str(d) for d in agreeing], out_dir=str(tmp_path / "out"))
    assert report.ok, report.problems
    assert [n["records"] for n in report.nodes] == [180, 180, 161]
    assert [(n["commit"], n["snapshot"]) for n in report.nodes] == [
        (zx.make(2, 55), zx.make(1, 100)),
        (zx.make(2, 50), zx.make(1, 100)),
        (zx.make(2, 40), 0),
    ]
    e1, e2 = report.epochs
    assert (e1["epoch"], e1["txns"], e1["committed"], e1["missing_counters"]) == (1, 120, 120, 0)
    assert e1["per_node"] == {"1": 120, "2": 120, "3": 120} and e1["replication_pct"] == 100.0
    assert (e2["epoch"], e2["txns"], e2["committed"]) == (2, 60, 55)
    assert e2["per_node"] == {"1": 60, "2": 60, "3": 41}
    assert e2["replication_pct"] == pytest.approx(100 * (41 * 3 + 19 * 2) / 60 / 3)
    assert e1["share_pct"] == pytest.approx(200 / 3)
    # the records landed in Parquet with the payload checksums the reader sees
    table = pq.read_table(tmp_path / "out" / "records.parquet").to_pylist()
    assert len(table) == 521
    rec = next(r for r in iter_records(str(agreeing[2])))
    row = next(r for r in table if r["node"] == 3 and r["pos"] == 0)
    assert (row["zxid"], row["file"], row["offset"], row["size"]) == (rec.zxid, rec.file, rec.offset, len(rec.payload))
    meta = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert meta["ok"] is True and len(meta["epochs"]) == 2


def test_divergent_replica_is_flagged(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dirs = [tmp_path / f"node{i}" for i in (1, 2, 3)]
    write_node(dirs[0], [(1, 120), (2, 60)], (2, 55), snapshot=((1, 100), b"state at 1:100"))
    write_node(dirs[1], [(1, 120), (2, 60)], (2, 50))
    # node 3: a different payload under zxid 2:7, and it never got 1:111..1:120 although its
    # commit point (2:45) covers them -- a log that is gap-free on its own (2:1 may follow 1:110)
    write_node(dirs[2], [(1, 110), (2, 60)], (2, 45), diverge=(2, 7), snapshot=((1, 100), b"another state"))
    rc = pipeline_main(["audit", *map(str, dirs)])
    captured = capsys.readouterr()
    assert rc == 1
    assert "replicas disagree" in captured.err
    out = captured.out
    assert "divergent: zxid 2:7 has 2 different payloads (nodes 1,2: payload" in out or (
        "divergent: zxid 2:7 has 2 different payloads (nodes 3: payload" in out
    )
    for c in range(111, 121):
        assert f"missing-committed: node 3 (commit point 2:45) lacks zxid 1:{c}, committed at node 1" in out
    assert "snapshot: snapshots of zxid 1:100 differ" in out
    assert "audit: 12 problem(s) (divergent: 1, missing-committed: 10, snapshot: 1)" in out

    report = audit(spark, [str(d) for d in dirs[:2]])  # the two good replicas alone agree
    assert report.ok


def test_damaged_record_and_gap_are_flagged(spark: Any, agreeing: list[Path], tmp_path: Path) -> None:
    # flip one payload byte of node 2's 30th record, in place, as a bad disk would
    rec = list(iter_records(str(agreeing[1])))[29]
    with open(rec.file, "r+b") as fh:
        fh.seek(rec.offset + 16 + 3)
        b = fh.read(1)
        fh.seek(rec.offset + 16 + 3)
        fh.write(bytes([b[0] ^ 0xFF]))
    report = audit(spark, [str(d) for d in agreeing])
    assert report.problem_counts.get("checksum") == 1
    assert report.problem_counts.get("divergent") == 1  # the damaged payload also differs from the others
    detail = next(p.detail for p in report.problems if p.kind == "checksum")
    assert detail == f"node 2: {rec.file} offset {rec.offset}: record 1:30 fails its CRC-32C"
    # a log that starts past 1:1 with no snapshot to cover the start: its first segment is gone
    first_seg = list_segments(str(agreeing[2] / "log"))[0][1]
    Path(first_seg).unlink()
    report = audit(spark, [str(d) for d in agreeing])
    gaps = [p.detail for p in report.problems if p.kind == "gap"]
    assert len(gaps) == 1 and gaps[0].startswith("node 3: the log starts at 1:") and "no snapshot" in gaps[0]
    assert report.problem_counts.get("missing-committed", 0) > 0


def test_an_executor_failure_is_one_line_exit_1(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an epoch above 2^31-1 does not fit the audit's signed 64-bit zxid column: the
    # executor raises, and the CLI reports the executor's error, not a Py4J page
    s = DiskStorage(str(tmp_path / "n1"))
    s.load()
    s.persist_epochs(2**31, 1, 2**31)
    s.append(Txn(zx.make(2**31, 1), b"x"))
    s.flush_sync(30)
    s.close()
    rc = pipeline_main(["audit", str(tmp_path / "n1")])
    captured = capsys.readouterr()
    assert rc == 1
    assert captured.err.splitlines() == [
        f"zabd pipeline audit: failed: ValueError: {tmp_path / 'n1' / 'log' / '00000001.log'}: offset 32: "
        "zxid 0x8000000000000001 has an epoch above 2^31-1"
    ]

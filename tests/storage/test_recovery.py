"""Recovery refuses damage and cuts only a torn tail (real files, real fsync)."""

from __future__ import annotations

import logging
import os

import pytest

from tests.storage.helpers import flip_byte, run, segments, z
from zabd.protocol.messages import Txn
from zabd.storage.disk import DiskStorage
from zabd.storage.txnlog import (
    REC_HEADER_SIZE,
    SEG_HEADER_SIZE,
    LogCorruption,
    StorageError,
    encode_record,
    encode_segment_header,
    iter_records,
    record_head,
)

SMALL = {"segment_bytes": 4096, "prealloc_bytes": 4096}


def fill(path: str, txns: list[Txn], batch: int = 10, **kw: int) -> None:
    s = DiskStorage(path, **kw)  # type: ignore[arg-type]
    s.load()
    for i, t in enumerate(txns):
        s.append(t)
        if i % batch == batch - 1:
            s.flush_sync()
    s.close()


def reload(path: str, **kw: int) -> tuple[DiskStorage, list[Txn]]:
    s = DiskStorage(path, **kw)  # type: ignore[arg-type]
    st = s.load()
    return s, st.history


def last_record(data_dir: str) -> tuple[str, int, int]:
    recs = list(iter_records(data_dir))
    r = recs[-1]
    return r.file, r.offset, 16 + len(r.payload)


def test_torn_record_at_end_is_cut_with_warning(tmp_path: object, caplog: pytest.LogCaptureFixture) -> None:
    d = str(tmp_path)
    txns = run(1, 1, 50, b"payload-of-some-length")
    fill(d, txns)
    path, off, size = last_record(d)
    # a crash mid-write: the first half of the last record reached the disk
    with open(path, "r+b") as f:
        f.seek(off + size // 2)
        f.write(bytes(size - size // 2))
    with caplog.at_level(logging.WARNING, logger="zabd.storage"):
        s, history = reload(d)
    assert history == txns[:-1]
    assert any(path in w and f"offset {off}" in w for w in s.warnings), s.warnings
    assert any("torn" in r.getMessage() and path in r.getMessage() for r in caplog.records)
    # the cut is durable and clean: appending a short record and reopening works
    s.append(Txn(z(1, 50), b"x"))
    s.close()
    s2, history2 = reload(d)
    assert history2 == [*txns[:-1], Txn(z(1, 50), b"x")]
    assert s2.warnings == []
    s2.close()


def test_torn_header_and_short_file_are_cut(tmp_path: object) -> None:
    d = str(tmp_path)
    txns = run(2, 1, 20, b"p")
    fill(d, txns)
    path, off, _ = last_record(d)
    with open(path, "r+b") as f:  # only 8 of the 16 header bytes written
        f.seek(off + 8)
        f.write(bytes(64))
    s, history = reload(d)
    assert history == txns[:-1]
    s.close()
    path, off, _ = last_record(d)
    os.truncate(path, off + 20)  # the file itself ends inside the record
    s, history = reload(d)
    assert history == txns[:-2]
    assert any(f"offset {off}" in w for w in s.warnings)
    s.close()


def test_flipped_byte_in_middle_of_old_segment_is_refused(tmp_path: object) -> None:
    d = str(tmp_path)
    fill(d, run(1, 1, 400, b"some-payload-bytes"), **SMALL)
    segs = segments(d)
    assert len(segs) >= 3
    recs = [r for r in iter_records(d) if r.file == segs[1]]
    victim = recs[len(recs) // 2]
    flip_byte(victim.file, victim.offset + 16 + 3)
    with pytest.raises(LogCorruption) as ei:
        DiskStorage(d, **SMALL).load()  # type: ignore[arg-type]
    assert ei.value.path == victim.file and ei.value.offset == victim.offset
    assert "checksum" in str(ei.value) and victim.file in str(ei.value)


def test_flipped_byte_in_middle_of_newest_segment_is_refused(tmp_path: object) -> None:
    d = str(tmp_path)
    fill(d, run(1, 1, 40, b"payload"))
    recs = list(iter_records(d))
    victim = recs[10]
    flip_byte(victim.file, victim.offset + 18)
    with pytest.raises(LogCorruption) as ei:
        DiskStorage(d).load()
    assert ei.value.offset == victim.offset and "checksum mismatch" in ei.value.what


def test_flipped_segment_header_is_refused(tmp_path: object) -> None:
    d = str(tmp_path)
    fill(d, run(1, 1, 5))
    flip_byte(segments(d)[0], 20)
    with pytest.raises(LogCorruption, match="offset 0: segment header checksum mismatch"):
        DiskStorage(d).load()


def test_missing_middle_segment_is_refused(tmp_path: object) -> None:
    d = str(tmp_path)
    fill(d, run(1, 1, 400, b"some-payload-bytes"), **SMALL)
    segs = segments(d)
    os.unlink(segs[1])
    with pytest.raises(LogCorruption, match=r"missing segment 00000002\.log") as ei:
        DiskStorage(d, **SMALL).load()  # type: ignore[arg-type]
    assert ei.value.path == segs[2]


def test_missing_first_segment_without_snapshot_is_refused(tmp_path: object) -> None:
    d = str(tmp_path)
    fill(d, run(1, 1, 400, b"some-payload-bytes"), **SMALL)
    os.unlink(segments(d)[0])
    with pytest.raises(StorageError, match="no snapshot"):
        DiskStorage(d, **SMALL).load()  # type: ignore[arg-type]


def test_missing_last_segment_is_refused_via_commit_point(tmp_path: object) -> None:
    d = str(tmp_path)
    s = DiskStorage(d, **SMALL)  # type: ignore[arg-type]
    s.load()
    for t in run(1, 1, 400, b"some-payload-bytes"):
        s.append(t)
    s.commit_to(z(1, 400))
    s.close()
    os.unlink(segments(d)[-1])
    with pytest.raises(StorageError, match="commit point 1:400 was recorded but the log ends"):
        DiskStorage(d, **SMALL).load()  # type: ignore[arg-type]


def test_zxid_out_of_order_and_hole_are_refused(tmp_path: object) -> None:
    for bad, what in ((z(1, 2), "not above"), (z(1, 5), "hole"), (z(2, 2), "hole")):
        d = os.path.join(str(tmp_path), f"d{bad}")
        os.makedirs(os.path.join(d, "log"))
        path = os.path.join(d, "log", "00000001.log")
        recs = [encode_record(z(1, 1), b"a"), encode_record(z(1, 2), b"b"), encode_record(bad, b"c")]
        with open(path, "wb") as f:
            f.write(encode_segment_header(1, 0) + b"".join(recs) + bytes(4096))
        with pytest.raises(LogCorruption, match=what) as ei:
            DiskStorage(d).load()
        assert ei.value.offset == SEG_HEADER_SIZE + len(recs[0]) + len(recs[1])


def test_stale_segment_after_chain_break_is_refused(tmp_path: object) -> None:
    d = str(tmp_path)
    fill(d, run(1, 1, 400, b"some-payload-bytes"), **SMALL)
    segs = segments(d)
    # replace segment 2 by one whose header claims another predecessor
    with open(segs[1], "r+b") as f:
        f.write(encode_segment_header(2, z(1, 1)))
    with pytest.raises(LogCorruption, match="previous segment ends at"):
        DiskStorage(d, **SMALL).load()  # type: ignore[arg-type]


def test_appends_that_break_order_are_refused(tmp_path: object) -> None:
    s = DiskStorage(str(tmp_path))
    s.load()
    s.append(Txn(z(1, 1), b""))
    with pytest.raises(ValueError, match="hole"):
        s.append(Txn(z(1, 3), b""))
    with pytest.raises(ValueError, match="not above"):
        s.append(Txn(z(1, 1), b""))
    with pytest.raises(ValueError, match="below current_epoch"):
        s.persist_epochs(1, 1, 2)
    s.close()


def test_a_record_is_its_head_then_its_payload() -> None:
    records = [encode_record(z(1, k), b"p" * k) for k in (0, 1, 1024)]
    heads = [record_head(z(1, k), b"p" * k) for k in (0, 1, 1024)]
    assert [len(h) for h in heads] == [REC_HEADER_SIZE] * 3
    assert records == [h + b"p" * k for h, k in zip(heads, (0, 1, 1024), strict=True)]

"""``zabd log dump DIR`` and ``zabd log verify DIR`` (dispatched by the
``zabd log`` CLI), and :func:`verify`, the end-to-end check behind them.

Both are read-only: they never repair (recovery at start does, for a torn
tail only).

What the records mean is the state machine's business, a layer above this
one: the ``zabd log`` CLI hands ``dump_main`` a decoder (``describe``,
``zabd.kv.txnfmt.txn_text``) and ``verify`` a replay (``replay``,
``zabd.kv.replay.replay_log``: the newest snapshot restored, every committed
txn after it applied). Without them they check the files only.
"""

from __future__ import annotations

import argparse
import os
import sys
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator

from zabd.protocol import zxid as zx
from zabd.storage.epochs import read_commit, read_epochs
from zabd.storage.snapshot import list_snapshots, read_snapshot
from zabd.storage.txnlog import (
    SEG_HEADER_SIZE,
    LogCorruption,
    LogRecord,
    iter_records,
    list_segments,
    parse_segment_header,
    read_file,
    scan_segment,
    segment_name,
)

# (newest snapshot's data or None, its zxid, commit point, committed-or-not records) -> (problems, notes)
Replay = Callable[[bytes | None, int, int, Iterator[LogRecord]], tuple[list[str], list[str]]]
# a payload -> its decoded line (None: nothing to show)
Describe = Callable[[bytes], str | None]


def _dirs(data_dir: str) -> tuple[str, str]:
    return os.path.join(data_dir, "log"), os.path.join(data_dir, "snap")


def verify(data_dir: str, replay: Replay | None = None) -> tuple[list[str], list[str]]:
    """Check everything in ``data_dir``. Returns (problems, notes); every
    problem is one line naming file and offset (or zxid). A torn tail in the
    newest segment is a problem too (recovery would cut it). With ``replay``,
    the state machine is rebuilt from the newest snapshot and the committed
    txns after it (the commit point: the commit file or the snapshot, as at
    start-up), streamed from the log."""
    problems: list[str] = []
    notes: list[str] = []
    if not os.path.isdir(data_dir):
        return [f"{data_dir}: not a directory"], notes
    log_dir, snap_dir = _dirs(data_dir)
    epoch_path = os.path.join(data_dir, "epochs")
    try:
        e = read_epochs(epoch_path)
        notes.append(f"epochs: {'absent' if e is None else e}")
    except LogCorruption as exc:
        problems.append(str(exc))
    newest_snap = 0
    newest_received = False
    newest_data: bytes | None = None
    newest_ok = True
    newest_path = snap_dir
    for z, path in list_snapshots(snap_dir):
        try:
            snap = read_snapshot(path)
            newest_snap, newest_received, newest_data, newest_ok = z, snap.received, snap.data, True
            newest_path = path
            notes.append(f"snapshot {path}: zxid {zx.fmt(z)}, {len(snap.data)} bytes, ok")
        except LogCorruption as exc:
            problems.append(str(exc))
            newest_ok = False
    segs = list_segments(log_dir)
    zxids: array[int] = array("Q")
    base = 0
    prev_seq = -1
    prev_zxid = 0
    for i, (seq, path) in enumerate(segs):
        if prev_seq >= 0 and seq != prev_seq + 1:
            problems.append(f"{path}: offset 0: missing segment {segment_name(prev_seq + 1)} before this one")
        prev_seq = seq
        buf = memoryview(read_file(path))
        try:
            header = parse_segment_header(path, buf)
        except LogCorruption as exc:
            problems.append(str(exc))
            continue
        if header.seq != seq:
            problems.append(f"{path}: offset 0: header names segment {header.seq}, file name says {seq}")
        if i == 0:
            base = prev_zxid = header.base_zxid
        elif header.base_zxid != prev_zxid:
            problems.append(
                f"{path}: offset 0: segment starts after zxid {zx.fmt(header.base_zxid)} but the previous "
                f"segment ends at {zx.fmt(prev_zxid)}"
            )
            prev_zxid = header.base_zxid
        offsets: array[int] = array("Q")
        n_before = len(zxids)
        res = scan_segment(path, buf, prev_zxid, i == len(segs) - 1, zxids, offsets, None)
        notes.append(f"segment {path}: base {zx.fmt(header.base_zxid)}, {len(zxids) - n_before} records")
        if res.problem is not None:
            kind = "torn tail at the end of the log (start-up recovery cuts it)" if res.torn else "corrupt"
            problems.append(f"{path}: offset {res.end}: {kind}: {res.problem}")
        prev_zxid = res.last_zxid
        buf.release()
    last = zxids[-1] if zxids else base
    if segs and base > 0 and newest_snap < base:
        problems.append(
            f"{segs[0][1]}: offset {SEG_HEADER_SIZE}: log starts after {zx.fmt(base)}, no snapshot covers it"
        )
    if newest_snap and segs:
        i = bisect_left(zxids, newest_snap)
        in_log = newest_snap == base or (i < len(zxids) and zxids[i] == newest_snap)
        if not in_log and not newest_received:
            problems.append(
                f"{snap_dir}: offset 0: snapshot {zx.fmt(newest_snap)} is not a txn of the log "
                f"({zx.fmt(base)}..{zx.fmt(last)})"
            )
    commit = read_commit(os.path.join(data_dir, "commit"))
    if commit > last and segs:
        problems.append(
            f"{os.path.join(data_dir, 'commit')}: offset 0: commit point {zx.fmt(commit)} "
            f"is beyond the log end {zx.fmt(last)}"
        )
    notes.append(f"log: {len(zxids)} records, {zx.fmt(base)}..{zx.fmt(last)}; commit point {zx.fmt(commit)}")
    if replay is not None:
        if newest_ok:
            more, said = replay(newest_data, newest_snap, max(commit, newest_snap), iter_records(data_dir))
            problems += [f"{newest_path}: {p}" if p.startswith("snapshot ") else p for p in more]
            notes += said
        else:
            notes.append("replay: skipped (the newest snapshot is unreadable)")
    return problems, notes


def verify_main(argv: list[str], replay: Replay | None = None) -> int:
    p = argparse.ArgumentParser(prog="zabd log verify", description="check a data directory end to end")
    p.add_argument("dir", help="the server's data directory")
    p.add_argument("-v", "--verbose", action="store_true", help="also print what was checked")
    args = p.parse_args(argv)
    if not os.path.isdir(args.dir):
        print(f"zabd log verify: {args.dir}: not a directory", file=sys.stderr)
        return 2
    if not any(os.path.exists(os.path.join(args.dir, name)) for name in ("epochs", "log", "snap")):
        print(f"zabd log verify: {args.dir}: not a zabd data directory (no epochs file, log or snap folder)",
              file=sys.stderr)
        return 2
    problems, notes = verify(args.dir, replay)
    if args.verbose:
        for n in notes:
            print(n)
    for line in problems:
        print(line)
    if not problems:
        print(f"{args.dir}: ok")
    return 1 if problems else 0


def dump_main(argv: list[str], describe: Describe | None = None) -> int:
    p = argparse.ArgumentParser(prog="zabd log dump", description="print the records of a data directory")
    p.add_argument("dir", help="the server's data directory")
    p.add_argument("--payload", action="store_true", help="also print each payload (repr, first 80 bytes)")
    args = p.parse_args(argv)
    if not os.path.isdir(args.dir):
        print(f"zabd log dump: {args.dir}: not a directory", file=sys.stderr)
        return 2
    _, snap_dir = _dirs(args.dir)
    bad = 0
    for z, path in list_snapshots(snap_dir):
        try:
            s = read_snapshot(path)
            print(f"snapshot {path} zxid={zx.fmt(z)} size={len(s.data)} checksum=ok received={s.received}")
        except LogCorruption as exc:
            print(f"snapshot {path} zxid={zx.fmt(z)} checksum=BAD ({exc})")
            bad += 1
    current = ""
    try:
        for r in iter_records(args.dir):
            if r.file != current:
                current = r.file
                print(f"segment {r.file}")
            status = "ok" if r.crc_ok else "BAD"
            line = f"zxid={zx.fmt(r.zxid)} offset={r.offset} size={len(r.payload)} checksum={status}"
            if args.payload:
                line += f" payload={r.payload[:80]!r}"
            text = describe(r.payload) if describe is not None and r.crc_ok else None
            if text is not None:
                line += f"\t{text}"
            print(line)
            bad += not r.crc_ok
    except BrokenPipeError:  # `| head`
        return 0
    return 1 if bad else 0

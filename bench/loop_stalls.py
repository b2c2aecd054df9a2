"""What a server does on its event loop that grows with the state: timed at N znodes.

    python3 bench/loop_stalls.py                      # 20k, 200k and 1M znodes (~3 min, ~3 GiB)
    python3 bench/loop_stalls.py --sizes 20000,100000 # quicker

Issue 39's inventory. A tree of ``parents x children`` znodes of 100 bytes
(ZooKeeper's shape in the issue: 1,000 parents) is built in process
(``tests.zk.standalone``), put in a ``KVMachine``, and each thing a server
does with the whole state is timed, as the longest single step the event
loop takes for it (what stalls heartbeats, proposals and clients) and in all:

* a leader's SNAP (``zabd/server/sync.py``): the view, on the loop, then the
  stream, ``STREAM_STEP`` bytes of encoding a loop turn;
* the follower's restore, a step per ``SNAP_PIECE`` frame, its check at the
  plan's end and the swap at install;
* a restart's whole restore (before the loop serves);
* the snapshotter: the view on the loop, the encode and write on a thread,
  with the longest gap between two wake-ups of a 1 ms timer on the main
  thread meanwhile (a thread spares the loop only if it lets go of the GIL).

Numbers are from one run on this machine: compare sizes, not machines.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.zk.standalone import Standalone
from zabd.kv.kvmachine import KVMachine
from zabd.server.peer_session import STREAM_STEP
from zabd.server.snapshots import SNAPSHOT_PIECE
from zabd.server.status import freeze_now
from zabd.server.sync import SNAP_PIECE
from zabd.storage.snapshot import write_snapshot
from zabd.zk.acl import OPEN_ACL_UNSAFE
from zabd.zk.prep import ZKLeader
from zabd.zk.records import Create

PARENTS = 1000
DATA = b"x" * 100


def build(n: int) -> KVMachine:
    """A machine whose tree holds about ``n`` znodes: PARENTS parents, the rest their children."""
    sa = Standalone()
    sid = sa.session()
    parents = min(PARENTS, max(1, n // 100))
    children = max(0, n - parents) // parents
    acl = tuple(OPEN_ACL_UNSAFE)
    for p in range(parents):
        sa.write(sid, Create(f"/p{p:04d}", DATA, acl, 0))
        for c in range(children):
            sa.write(sid, Create(f"/p{p:04d}/c{c:05d}", DATA, acl, 0))
    m = KVMachine()
    m.zk = sa.tree
    m.zk_leader = ZKLeader(m.zk)
    return m


def timed(fn: Any) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def lag_while(work: Any) -> tuple[float, float]:
    """``work()`` on a thread while this thread wakes every millisecond, as an
    event loop's timers would: (the work's ms, the longest gap between two
    wake-ups, ms). A thread helps the loop only if the work lets go of the GIL."""
    done = threading.Event()
    took = [0.0]

    def run() -> None:
        t0 = time.perf_counter()
        work()
        took[0] = (time.perf_counter() - t0) * 1000
        done.set()

    gc.collect()
    worker = threading.Thread(target=run)
    last = time.perf_counter()
    worst = 0.0
    worker.start()
    while not done.is_set():
        time.sleep(0.001)
        now = time.perf_counter()
        worst = max(worst, now - last)
        last = now
    worker.join()
    return took[0], worst * 1000


def steps(pieces: Any, per_step: int) -> tuple[float, float, int]:
    """Pull ``pieces`` (an iterator of bytes) as a link takes them, ``per_step``
    bytes a turn: (longest turn ms, total ms, bytes)."""
    gc.collect()
    longest = total = 0.0
    size = 0
    it = iter(pieces)
    while True:
        t0 = time.perf_counter()
        took = 0
        for piece in it:
            took += len(piece)
            if took >= per_step:
                break
        dt = (time.perf_counter() - t0) * 1000
        longest, total, size = max(longest, dt), total + dt, size + took
        if took < per_step:
            return longest, total, size


def measure(n: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    m = build(n)
    built_s = time.perf_counter() - t0
    znodes = len(m.zk.nodes)
    view_ms, view = timed(m.snapshot_view)
    # the leader: a SNAP streamed, STREAM_STEP bytes a loop turn
    snap_step_ms, snap_total_ms, size = steps(m.encode_chunks(view, SNAP_PIECE), STREAM_STEP)
    data = m.encode_view(view)
    # the follower: a bounded step per frame, the check at the plan's end, the swap at install
    fresh = KVMachine()
    restoring = fresh.restoring()
    feed_max = feed_total = 0.0
    gc.collect()
    gc.set_threshold(50_000, 20, 100)  # the server's (zabd.server.status)
    for off in range(0, len(data), SNAP_PIECE):
        t1 = time.perf_counter()
        restoring.feed(data[off : off + SNAP_PIECE])
        freeze_now()  # as the server does after each piece
        dt = (time.perf_counter() - t1) * 1000
        feed_max, feed_total = max(feed_max, dt), feed_total + dt
    check_ms, _ = timed(restoring.check)
    install_ms, _ = timed(lambda: fresh.restore_from(restoring))
    assert fresh.zk.digest == m.zk.digest, "the restored tree differs"
    whole_ms, _ = timed(lambda: KVMachine().restore(data))
    with tempfile.TemporaryDirectory() as d:
        write_ms, encode_lag_ms = lag_while(
            lambda: write_snapshot(d, 1, m.encode_chunks(view, SNAPSHOT_PIECE), fsync=False))
    return {"znodes": znodes, "build_s": round(built_s, 1), "snapshot_bytes": size,
            "loop": {"snapshot view (leader SNAP, snapshotter)": round(view_ms, 1),
                     "SNAP stream: longest step (leader)": round(snap_step_ms, 1),
                     "SNAP stream: all steps (leader)": round(snap_total_ms, 1),
                     "SNAP restore: longest step (follower)": round(feed_max, 1),
                     "SNAP restore: all steps (follower)": round(feed_total, 1),
                     "SNAP check at the plan's end (follower)": round(check_ms, 1),
                     "SNAP install swap (follower)": round(install_ms, 1)},
            "restart": {"restore whole (before the loop serves)": round(whole_ms, 1)},
            "thread": {"snapshotter encode+write": round(write_ms, 1),
                       "longest loop gap while it runs": round(encode_lag_ms, 1)},
            "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "check": len(data) == size}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="20000,200000,1000000", help="comma list of znode counts")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes {args.sizes!r}: expected a comma list of integers")
    if not sizes or min(sizes) < 1:
        p.error(f"--sizes {args.sizes!r}: expected positive counts")
    rows = []
    for n in sizes:
        print(f"[loop_stalls] building {n:,} znodes ...", file=sys.stderr, flush=True)
        r = measure(n)
        rows.append(r)
        print(f"[loop_stalls] {r['znodes']:,} znodes built in {r['build_s']} s: {json.dumps(r['loop'])}",
              file=sys.stderr, flush=True)
    keys = [*rows[0]["loop"], *rows[0]["restart"], *rows[0]["thread"]]
    print("| ms | " + " | ".join(f"{r['znodes']:,} znodes ({r['snapshot_bytes'] / 1e6:.0f} MB)" for r in rows) + " |")
    print("| --- |" + " ---: |" * len(rows))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{({**r['loop'], **r['restart'], **r['thread']})[k]:,}" for r in rows) + " |")
    print(json.dumps({"command": " ".join(sys.argv), "rows": rows}))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

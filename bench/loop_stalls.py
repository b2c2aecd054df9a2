"""What a server does on its event loop that grows with the state: timed at N znodes.

    python3 bench/loop_stalls.py                      # 20k, 200k and 1M znodes (~3 min, ~3 GiB)
    python3 bench/loop_stalls.py --sizes 20000,100000 # quicker

Issue 39's inventory, before anything moves off the loop. A tree of
``parents x children`` znodes of 100 bytes (ZooKeeper's shape in the issue:
1,000 parents) is built in process (``tests.zk.standalone``), put in a
``KVMachine``, and each operation the server runs on its event loop today is
timed on it, with where it runs:

* ``SyncService.plan`` (``zabd/server/sync.py``): a leader's SNAP to a follower
  encodes the whole state (``machine.snapshot()``) on the loop;
* ``SyncService.install``: the follower restores it (``machine.restore``) on the loop;
* ``Snapshotter`` (``zabd/server/snapshots.py``): the view (``snapshot_view``) is
  taken on the loop, then encoded and written on a thread (timed for comparison);
* a restart's ``recover`` restores the newest snapshot before the loop serves.

For the snapshotter's thread it also prints the longest gap between two
wake-ups of a 1 ms timer on the main thread while the encode runs: a thread
spares the loop only if the work lets go of the GIL.

Every one of these is a stall of the whole node (heartbeats, proposals, every
client) for as long as it takes: the time printed is that stall. Numbers are
from one run on this machine: compare sizes, not machines.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.zk.standalone import Standalone
from zabd.kv.kvmachine import KVMachine
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


def measure(n: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    m = build(n)
    built_s = time.perf_counter() - t0
    znodes = len(m.zk.nodes)
    view_ms, view = timed(m.snapshot_view)
    encode_ms, encoded = timed(lambda: m.encode_view(view))
    snap_ms, data = timed(m.snapshot)
    fresh = KVMachine()
    restore_ms, _ = timed(lambda: fresh.restore(data))
    assert fresh.zk.digest == m.zk.digest, "the restored tree differs"
    _, encode_lag_ms = lag_while(lambda: m.encode_view(view))
    return {"znodes": znodes, "build_s": round(built_s, 1), "snapshot_bytes": len(data),
            "loop": {"sync SNAP encode (leader)": round(snap_ms, 1),
                     "sync install restore (follower)": round(restore_ms, 1),
                     "snapshotter view": round(view_ms, 1)},
            "thread": {"snapshotter encode": round(encode_ms, 1),
                       "longest loop gap while it runs": round(encode_lag_ms, 1)},
            "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "check": len(encoded) == len(data)}


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
    print("| znodes | snapshot MB | SNAP encode on the leader's loop, ms | restore on the follower's loop, ms "
          "| snapshotter view on the loop, ms | snapshotter encode (thread), ms | longest loop gap meanwhile, ms |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        loop, thread = r["loop"], r["thread"]
        print(f"| {r['znodes']:,} | {r['snapshot_bytes'] / 1e6:.1f} | {loop['sync SNAP encode (leader)']:,} "
              f"| {loop['sync install restore (follower)']:,} | {loop['snapshotter view']:,} "
              f"| {thread['snapshotter encode']:,} | {thread['longest loop gap while it runs']:,} |")
    print(json.dumps({"command": " ".join(sys.argv), "rows": rows}))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

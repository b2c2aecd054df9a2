"""KV workload with background snapshots and purge, SIGKILLed by the test.

``python -m tests.storage.kv_crash_workload DIR MAX_FLUSHES MAX_SECONDS``:
appends KV txns, flushes, commits, applies and snapshots (every ~40 txns,
keeping 2); prints the number of txns durable after each flush.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator

from zabd.kv import Cas, KVLeader, KVStore, Put
from zabd.protocol.messages import Txn
from zabd.server.snapshots import Snapshotter
from zabd.storage.disk import DiskStorage

SEG = {"segment_bytes": 4096, "prealloc_bytes": 4096}


def txns() -> Iterator[Txn]:
    """The deterministic txn sequence (versions come from the proposals,
    not from commit timing)."""
    leader = KVLeader(KVStore())
    i = 0
    while True:
        key = f"k{i % 23}"
        req = Put(key, b"v%d" % i) if i % 4 else Cas(key, leader.version(key), b"c%d" % i)
        payload = leader.prepare(req)
        z = (1 << 32) | (i + 1)
        leader.proposed(z, payload)
        yield Txn(z, payload)
        i += 1


async def main(data_dir: str, max_flushes: int, max_seconds: float) -> None:
    s = DiskStorage(data_dir, **SEG)  # type: ignore[arg-type]
    s.load()
    store = KVStore()
    snapper = Snapshotter(s, store, snap_count=40, retain=2, seed=3)
    gen = txns()
    log: list[Txn] = []
    deadline = time.monotonic() + max_seconds
    for k in range(max_flushes):
        if time.monotonic() > deadline:
            break
        for _ in range(1 + k % 7):
            t = next(gen)
            s.append(t)
            log.append(t)
        await s.flush()
        sys.stdout.write(f"{len(log)}\n")
        sys.stdout.flush()
        s.commit_to(log[-1].zxid)
        while len(log) > (store.applied & 0xFFFFFFFF):
            t = log[store.applied & 0xFFFFFFFF]
            store.apply(t)
            snapper.applied(t.zxid)
    snapper.wait(30)
    s.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))

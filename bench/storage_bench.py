"""Storage benchmark: append throughput with fsync on/off (group commit),
fsyncs/s and txns per fsync, and recovery time of a large log.

    python3 bench/storage_bench.py                       # defaults below
    python3 bench/storage_bench.py --load-txns 1000000 --payload 100

Prints numbers; asserts nothing (targets live here, not in timed tests).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zabd.protocol.messages import Txn
from zabd.storage.disk import DiskStorage


def bench_append(base: str, fsync: bool, writers: int, txns: int, payload_size: int) -> None:
    d = tempfile.mkdtemp(dir=base)
    s = DiskStorage(d, fsync=fsync)
    s.load()
    s.append(Txn((1 << 32) | 1, b"warm"))  # segment creation outside the timing
    s.flush_sync()
    s.stats.syncs = s.stats.flushes = s.stats.records_synced = 0
    payload = os.urandom(payload_size)
    t0 = time.perf_counter()

    async def go() -> None:
        # zxids continue after the warm-up record
        counter = 1

        async def one(n: int) -> None:
            nonlocal counter
            for _ in range(n):
                counter += 1
                s.append(Txn((1 << 32) | counter, payload))
                await s.flush()

        await asyncio.gather(*(one(txns // writers) for _ in range(writers)))

    asyncio.run(go())
    dt = time.perf_counter() - t0
    st = s.stats
    s.close()
    shutil.rmtree(d)
    per_sync = st.records_synced / st.syncs if st.syncs else float("inf")
    print(
        f"append fsync={'on ' if fsync else 'off'} writers={writers:4d} payload={payload_size}B: "
        f"{st.records_synced / dt:10.0f} txns/s  {st.syncs / dt:8.0f} fsyncs/s  "
        f"{per_sync:7.1f} txns/fsync  ({st.records_synced} txns in {dt:.2f} s, {st.flushes} flushes)"
    )


def bench_load(base: str, n: int, payload_size: int) -> None:
    d = tempfile.mkdtemp(dir=base)
    s = DiskStorage(d, fsync=False)
    s.load()
    payload = os.urandom(payload_size)
    t0 = time.perf_counter()
    for i in range(1, n + 1):
        s.append(Txn((1 << 32) | i, payload))
        if i % 10_000 == 0:
            s.flush_sync()
    s.commit_to((1 << 32) | n)
    s.close()
    write_s = time.perf_counter() - t0
    size = sum(os.path.getsize(os.path.join(d, "log", f)) for f in os.listdir(os.path.join(d, "log")))
    # drop nothing from the page cache (not allowed/portable here): this is a warm-cache restart
    t0 = time.perf_counter()
    s2 = DiskStorage(d)
    st = s2.load()
    load_s = time.perf_counter() - t0
    s2.close()
    assert len(st.history) == n
    print(
        f"load: {n} txns ({payload_size}B payload, {size / 2**20:.0f} MiB of segments) recovered in "
        f"{load_s:.2f} s ({n / load_s:,.0f} txns/s); writing them took {write_s:.1f} s (fsync off)"
    )
    shutil.rmtree(d)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=None, help="where to put the temp data dirs (default: system temp)")
    p.add_argument("--payload", type=int, default=100, help="payload bytes per txn")
    p.add_argument("--txns", type=int, default=20_000, help="txns per append run")
    p.add_argument("--writers", default="1,16,256", help="comma-separated concurrent producers")
    p.add_argument("--load-txns", type=int, default=1_000_000, help="txns in the recovery test (0: skip)")
    args = p.parse_args()
    base = args.dir or tempfile.gettempdir()
    for fsync in (True, False):
        for w in (int(x) for x in args.writers.split(",")):
            n = args.txns if (fsync is False or w > 1) else min(args.txns, 2000)
            bench_append(base, fsync, w, n, args.payload)
    if args.load_txns:
        bench_load(base, args.load_txns, args.payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

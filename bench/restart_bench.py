"""Restart time against history: a node that committed 1M txns and one that
committed 5M should come back equally fast (snapshot + the log after it).

    python3 bench/restart_bench.py [--txns 1000000,5000000] [--keys 100000] [--repeat 3]

For each size a data directory is written as a running server leaves it: KV
puts of 100-byte values over ``--keys`` keys, through ``DiskStorage`` with the
server's own snapshotter (snap_count 100,000, three snapshots kept,
autopurge). Then one ``zabd serve`` process starts on it and the times to its
first status answer and to its first committed write are measured, ``--repeat``
times (page cache warm after the first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zabd.client import Client, ZabdError
from zabd.client.spawn import LocalCluster
from zabd.kv import KV_MAGIC, KVMachine
from zabd.kv.store import Put
from zabd.protocol import zxid as zx
from zabd.protocol.messages import Txn
from zabd.server.snapshots import Snapshotter
from zabd.storage.disk import DiskStorage


def build(data_dir: str, n: int, keys: int) -> dict[str, Any]:
    t0 = time.monotonic()
    disk = DiskStorage(data_dir, fsync=False)
    disk.load()
    disk.persist_epochs(1, 1, 1)
    machine = KVMachine()
    snapper = Snapshotter(disk, machine, snap_count=100_000, retain=3, seed=1)
    rng = random.Random(n)
    value = b"v" * 100
    for c in range(1, n + 1):
        payload = KV_MAGIC + machine.leader.prepare(Put(f"key-{rng.randrange(keys):07d}", value))
        txn = Txn(zx.make(1, c), payload)
        disk.append(txn)
        if c % 20_000 == 0:
            disk.flush_sync()
            disk.commit_to(txn.zxid)
        machine.apply(txn)
        snapper.applied(txn.zxid)
    disk.commit_to(zx.make(1, n))
    disk.flush_sync()
    snapper.wait()
    disk.close()
    os.sync()
    size = sum(f.stat().st_size for f in Path(data_dir).rglob("*") if f.is_file())
    return {"build_s": round(time.monotonic() - t0, 1), "dir_mib": round(size / (1 << 20), 1),
            "snapshots": snapper.stats.taken}


async def restart_once(cluster: LocalCluster) -> dict[str, float]:
    t0 = time.monotonic()
    cluster.start_node(1)
    first_status = first_commit = None
    try:
        while time.monotonic() - t0 < 120 and first_commit is None:
            if not cluster.alive(1):
                raise RuntimeError(cluster.log_text(1)[-500:])
            try:
                async with await Client.connect(cluster.client_addr(1), timeout=1, read_retry=0) as c:
                    await c.status()
                    if first_status is None:
                        first_status = time.monotonic() - t0
                    await c.propose(b"after restart", retry_for=30)
                    first_commit = time.monotonic() - t0
            except (ZabdError, OSError, TimeoutError):
                await asyncio.sleep(0.01)
    finally:
        cluster.terminate(1)
    assert first_status is not None and first_commit is not None
    return {"status_s": first_status, "serving_s": first_commit}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--txns", default="1000000,5000000")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    results = []
    for n in (int(x) for x in args.txns.split(",")):
        with tempfile.TemporaryDirectory(prefix="zabd-restart-") as tmp:
            cluster = LocalCluster(1, base_dir=Path(tmp), storage="disk", log_level="warning")
            cluster.write_configs()
            built = build(str(Path(tmp) / "data1"), n, args.keys)
            runs = [asyncio.run(restart_once(cluster)) for _ in range(args.repeat)]
            row = {"txns": n, **built,
                   "status_s": round(statistics.median(r["status_s"] for r in runs), 3),
                   "serving_s": round(statistics.median(r["serving_s"] for r in runs), 3),
                   "serving_all": [round(r["serving_s"], 3) for r in runs]}
            print(row, flush=True)
            results.append(row)
    print("\n| txns committed | data dir | first status | serving again (median) | runs |")
    print("| ---: | ---: | ---: | ---: | --- |")
    for r in results:
        print(f"| {r['txns']:,} | {r['dir_mib']} MiB | {r['status_s']:.2f} s | {r['serving_s']:.2f} s | "
              f"{', '.join(f'{x:.2f}' for x in r['serving_all'])} |")
    if len(results) >= 2:
        a, b = results[0]["serving_s"], results[-1]["serving_s"]
        print(f"\n{results[-1]['txns']:,} vs {results[0]['txns']:,}: {100 * (b - a) / a:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

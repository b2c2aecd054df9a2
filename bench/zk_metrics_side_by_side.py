"""ZooKeeper 3.8 (Debian's) and a standalone zabd side by side: the same
small workload on each, then the ``mntr`` keys both print, one line each.

    python -m bench.zk_metrics_side_by_side [--writes 200]

Both servers are started here and stopped by PID at the end. The keys only
ZooKeeper prints are counted at the bottom; ``zabd.server.zk.metrics.NOT_MEASURED``
says why each is not measured (docs/zookeeper.md).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
from pathlib import Path

from kazoo.client import KazooClient

from tests.server.real_zk import StandaloneZooKeeper, four_letter, zookeepers
from zabd.client.spawn import LocalCluster


def mntr(addr: str) -> dict[str, str]:
    text = four_letter(addr, b"mntr").decode()
    return dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)


def workload(addr: str, writes: int) -> None:
    zk = KazooClient(hosts=addr, timeout=10.0)
    zk.start(timeout=30)
    try:
        zk.create("/bench", b"")
        zk.create("/bench/eph", b"", ephemeral=True)
        for k in range(writes):
            zk.set("/bench", str(k).encode())
            zk.get("/bench", watch=lambda event: None)
        rows.update({addr: mntr(addr)})  # while the session, its watch and ephemeral are there
    finally:
        zk.stop()
        zk.close()


rows: dict[str, dict[str, str]] = {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=200, help="setData (and getData) requests on each server")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="zk-metrics-"))
    ours = LocalCluster(1, base_dir=base / "zabd", storage="disk", extra={"zk_4lw_whitelist": "*"})
    ours.start()
    try:
        asyncio.run(ours.wait_leader())
        theirs = StandaloneZooKeeper(base / "zk", ["4lw.commands.whitelist=*"])
        with zookeepers(theirs):
            for addr in (theirs.addr, ours.zk_addr(1)):
                workload(addr, args.writes)
    finally:
        ours.stop()
    zk, zabd = rows[theirs.addr], rows[ours.zk_addr(1)]
    both = [k for k in zk if k in zabd]
    width = max(map(len, both))
    print(f"{'key':{width}}  {'ZooKeeper 3.8':>22}  {'zabd':>22}")
    for key in both:
        if not re.match(r"zk_(min|max|cnt|sum|p\d+)_", key):  # a summary's avg stands for its parts
            print(f"{key:{width}}  {zk[key][:22]:>22}  {zabd[key][:22]:>22}")
    print(f"\n{len(both)} keys printed by both; {len(zk) - len(both)} only by ZooKeeper (see NOT_MEASURED)")


if __name__ == "__main__":
    main()

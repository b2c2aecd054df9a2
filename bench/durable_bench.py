"""Durable-server benchmark: zabd (disk log, fsync on/off) next to Apache
ZooKeeper 3.8 in the same run, plus the restart time of a big log.

    python3 bench/durable_bench.py                       # everything (~10 min)
    python3 bench/durable_bench.py --no-zk               # zabd only
    python3 bench/durable_bench.py --only restart --restart-txns 1000000

Workload: 3 nodes on 127.0.0.1, 1 KiB payloads, closed loop, clients spread
over the nodes (client i on node i mod 3): 1 client x window 1, 8 clients x
window 16, 8 clients x window 256. zabd: ``zabd bench --spawn 3`` (fsync
on, then ``--no-fsync``); its fsyncs/s and txns/fsync are the leader's
``storage_stats`` over the measured window. ZooKeeper: the shared
``anchors/zookeeper/run.sh`` (Java client, async setData, forceSync=yes);
fsyncs/s = the leader's ``cnt_fsynctime`` over warmup + window, txns/fsync
= its average ``sync_processor_batch_size``.

Restart: a data dir holding N txns of 100 bytes (written with DiskStorage),
one ``zabd serve`` process started on it; times to the first status answer
and to the first committed proposal (= serving again).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ZK_DIR = Path(os.environ.get("ZK_ANCHORS", ROOT.parent / "shared" / "anchors" / "zookeeper"))
SHAPES = [(1, 1), (8, 16), (8, 256)]


def run_zabd(
    clients: int, window: int, fsync: bool, duration: float, warmup: float, early_propose: bool = False
) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "zabd", "bench", "--spawn", "3", "--clients", str(clients), "--window", str(window),
        "--payload", "1024", "--duration", str(duration), "--warmup", str(warmup), "--json", "--no-progress",
    ]  # fmt: skip
    if not fsync:
        cmd.append("--no-fsync")
    if early_propose:
        cmd += ["--set", "leader_early_propose=true"]
    print("$ " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + warmup + 120, cwd=ROOT)
    if out.returncode != 0:
        return {"error": out.stderr.strip()[-300:]}
    r: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return r


def run_zk(clients: int, window: int, duration: float, warmup: float) -> dict[str, Any]:
    cmd = [
        str(ZK_DIR / "run.sh"), "--nodes", "3", "--client", "java", "--sessions", str(clients),
        "--window", str(window), "--payload", "1024", "--warmup", str(int(warmup)), "--duration", str(int(duration)),
    ]  # fmt: skip
    print("$ QUIET_MAX_WAIT=20 ZKB_BUILD=/tmp/zkb_build " + " ".join(cmd), file=sys.stderr, flush=True)
    # cluster.sh start wipes /tmp/zkbench, run.sh's default build dir: build elsewhere
    env = dict(os.environ, QUIET_MAX_WAIT="20", ZKB_BUILD=os.environ.get("ZKB_BUILD", "/tmp/zkb_build"))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + warmup + 400, env=env)
    if out.returncode != 0:
        return {"error": out.stderr.strip()[-300:]}
    r: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return r


def zabd_row(label: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"| {label} | error: {r['error'][:80]} |"
    return (
        f"| {label} | {r['clients']}x{r['window']} | {r['ops_per_s']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
        f"{r.get('fsyncs_per_s')} | {r.get('txns_per_fsync')} | {r.get('other_cpu_pct')} |"
    )


def zk_row(clients: int, window: int, r: dict[str, Any], warmup: float, duration: float) -> str:
    if "error" in r:
        return f"| ZooKeeper 3.8 fsync | {clients}x{window} | error: {r['error'][:80]} |"
    lat = r.get("lat_ms", {})
    m = r.get("leader_mntr", {})
    cnt = m.get("cnt_fsynctime")
    fs = round(cnt / (warmup + duration), 1) if cnt else None
    batch = m.get("avg_sync_processor_batch_size")
    other = r.get("cpu", {}).get("foreign_procs_pct") if isinstance(r.get("cpu"), dict) else None
    return (
        f"| ZooKeeper 3.8 fsync | {clients}x{window} | {r['ops_per_s']:.0f} | {lat.get('p50')} | {lat.get('p99')} | "
        f"~{fs} | {batch} | {other} |"
    )


# ------------------------------------------------------------------ restart


def build_log(data_dir: str, n: int, payload: int = 100) -> float:
    from zabd.protocol import zxid as zx
    from zabd.protocol.messages import Txn
    from zabd.storage.disk import DiskStorage

    t0 = time.monotonic()
    st = DiskStorage(data_dir, fsync=False)
    st.load()
    st.persist_epochs(1, 1, 1)
    body = b"r" * payload
    for c in range(1, n + 1):
        st.append(Txn(zx.make(1, c), body))
        if c % 50_000 == 0:
            st.flush_sync()
    st.commit_to(zx.make(1, n))
    st.close()
    os.sync()
    return time.monotonic() - t0


async def time_restart(n: int) -> dict[str, Any]:
    from zabd.client import Client, ZabdError
    from zabd.client.spawn import LocalCluster

    base = Path(tempfile.mkdtemp(prefix="zabd-restart-"))
    try:
        cluster = LocalCluster(1, base_dir=base, storage="disk", log_level="warning")
        cluster.write_configs()
        built = build_log(str(base / "data1"), n)
        t0 = time.monotonic()
        cluster.start_node(1)
        first_status = first_commit = None
        deadline = t0 + 60
        try:
            while time.monotonic() < deadline and first_commit is None:
                if not cluster.alive(1):
                    return {"error": cluster.log_text(1)[-300:]}
                try:
                    async with await Client.connect(cluster.client_addr(1), timeout=1) as c:
                        st = await c.status()
                        if first_status is None:
                            first_status = time.monotonic() - t0
                        z = await c.propose(b"after-restart", retry_for=30)
                        first_commit = time.monotonic() - t0
                        return {
                            "txns": n,
                            "build_s": round(built, 2),
                            "status_s": round(first_status, 3),
                            "serving_s": round(first_commit, 3),
                            "last_committed_before": st.last_committed,
                            "zxid": z,
                        }
                except (ZabdError, OSError, TimeoutError):
                    await asyncio.sleep(0.02)
            return {"error": "not serving within 60 s"}
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=10.0, help="zabd measured seconds per run")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--zk-duration", type=float, default=15.0)
    p.add_argument("--zk-warmup", type=float, default=20.0, help="ZooKeeper needs ~15-20 s of JIT warmup")
    p.add_argument("--no-zk", action="store_true")
    p.add_argument("--only", choices=("zabd", "zk", "restart"))
    p.add_argument("--restart-txns", type=int, default=1_000_000)
    p.add_argument("--json", help="also write every raw result to this file")
    args = p.parse_args()
    raw: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rows = [
        "| system | C x W | ops/s | p50 ms | p99 ms | fsyncs/s (leader) | txns/fsync | other CPU % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if args.only in (None, "zabd"):
        # strict persist-before-speak (the default), the opt-in early Propose, and no fsync
        for fsync, early, label in ((True, False, "on"), (True, True, "on, early propose"), (False, False, "off")):
            for c, w in SHAPES:
                r = run_zabd(c, w, fsync, args.duration, args.warmup, early)
                raw[f"zabd-fsync{int(fsync)}-early{int(early)}-{c}x{w}"] = r
                rows.append(zabd_row(f"zabd disk fsync={label}", r))
                print(rows[-1], file=sys.stderr, flush=True)
    if args.only in (None, "zk") and not args.no_zk:
        for c, w in SHAPES:
            r = run_zk(c, w, args.zk_duration, args.zk_warmup)
            raw[f"zk-{c}x{w}"] = r
            rows.append(zk_row(c, w, r, args.zk_warmup, args.zk_duration))
            print(rows[-1], file=sys.stderr, flush=True)
    restart: dict[str, Any] | None = None
    if args.only in (None, "restart"):
        restart = asyncio.run(time_restart(args.restart_txns))
        raw["restart"] = restart
    print("\n".join(rows))
    if restart is not None:
        print(f"\nrestart: {json.dumps(restart)}")
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

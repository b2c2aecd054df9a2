"""Memory under sustained load: every server's RSS, sampled, for N minutes.

    python3 bench/memory_soak.py [--minutes 30] [--nodes 3] [--clients 8] [--window 32]
                                 [--payload 1024] [--sample 5] [--out DIR] [--kv-keys 1000000]

A fresh cluster on disk with fsync on (the defaults: history_window, snapshots,
autopurge) takes full write load from ``zabd bench`` (a separate process) for
the whole run. Every ``--sample`` seconds the RSS of each server
(``/proc/PID/status``) and the cluster's commit point are read. The table is
printed, and ``DIR/memory_soak.json`` and ``DIR/memory_soak.png`` (RSS and
writes/s against time) are written. ``--kv-keys N`` then measures the KV
state machine with N keys in this process (RSS before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zabd.client.spawn import LocalCluster

MiB = 1 << 20


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


async def soak(args: argparse.Namespace, base: Path) -> list[dict[str, Any]]:
    cluster = LocalCluster(args.nodes, storage="disk", fsync=True, base_dir=base)
    cluster.start()
    rows: list[dict[str, Any]] = []
    try:
        await cluster.wait_leader(timeout=60)
        duration = args.minutes * 60
        load = subprocess.Popen(
            [sys.executable, "-m", "zabd", "bench", "--servers", ",".join(cluster.servers), "--clients",
             str(args.clients), "--window", str(args.window), "--payload", str(args.payload), "--duration",
             str(duration), "--warmup", "0", "--json", "--no-progress"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        t0 = time.monotonic()
        last_commit, last_t = 0, t0
        try:
            while load.poll() is None and time.monotonic() - t0 < duration + 60:
                await asyncio.sleep(args.sample)
                now = time.monotonic()
                sts = await cluster.statuses()
                commit = max((st["last_committed"] & 0xFFFF_FFFF) for st in sts.values() if st) if sts else 0
                row = {
                    "t": round(now - t0, 1),
                    "rss_mib": {i: round(rss_bytes(p.pid) / MiB, 1) for i, p in cluster.procs.items()},
                    "writes_per_s": round((commit - last_commit) / (now - last_t)) if commit >= last_commit else 0,
                    "disk_mib": round(sum(f.stat().st_size for f in base.rglob("*") if f.is_file()) / MiB, 1),
                }
                last_commit, last_t = commit, now
                rows.append(row)
                rss = " ".join(f"{v:7.1f}" for v in row["rss_mib"].values())
                print(f"{row['t']:7.1f} s  rss MiB {rss}  {row['writes_per_s']:7d} writes/s  "
                      f"disk {row['disk_mib']:8.1f} MiB", flush=True)
        finally:
            if load.poll() is None:
                load.terminate()
            out, _ = load.communicate(timeout=60)
        summary = json.loads(out) if out.strip() else {}
        rows.append({"bench": summary})
    finally:
        cluster.stop()
    return rows


def kv_memory(keys: int) -> dict[str, Any]:
    from zabd.kv import KVMachine
    from zabd.kv.kvmachine import KV_MAGIC
    from zabd.kv.store import Put
    from zabd.protocol.messages import Txn

    machine = KVMachine()
    before = rss_bytes(os.getpid())
    for k in range(keys):
        payload = machine.leader.prepare(Put(f"key-{k:08d}", b"v" * 100))
        machine.apply(Txn((1 << 32) | (k + 1), KV_MAGIC + payload))
    machine.results.clear()
    after = rss_bytes(os.getpid())
    snap = len(machine.snapshot())
    return {"keys": keys, "value_bytes": 100, "rss_mib": round((after - before) / MiB, 1),
            "bytes_per_key": round((after - before) / keys), "snapshot_mib": round(snap / MiB, 1)}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = [r for r in rows if "t" in r]
    t = [r["t"] / 60 for r in samples]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for node in samples[0]["rss_mib"]:
        a1.plot(t, [r["rss_mib"][node] for r in samples], label=f"node {node}")
    a1.set_ylabel("RSS (MiB)")
    a1.set_ylim(bottom=0)
    a1.legend()
    a1.set_title("zabd under sustained write load (3 nodes, disk, fsync)")
    a2.plot(t, [r["writes_per_s"] for r in samples], color="tab:green")
    a2.set_ylabel("writes/s")
    a2.set_xlabel("minutes")
    a2.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--payload", type=int, default=1024)
    p.add_argument("--sample", type=float, default=5.0)
    p.add_argument("--out", default="out/memory_soak")
    p.add_argument("--kv-keys", type=int, default=1_000_000)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memsoak-") as tmp:
        rows = asyncio.run(soak(args, Path(tmp)))
    samples = [r for r in rows if "t" in r]
    kv = kv_memory(args.kv_keys) if args.kv_keys else None
    (out / "memory_soak.json").write_text(json.dumps({"args": vars(args), "rows": rows, "kv": kv}, indent=1))
    if samples:
        plot(rows, out / "memory_soak.png")
        first = next((r for r in samples if r["t"] >= 60), samples[0])
        last = samples[-1]
        print("\n| node | RSS after 1 min (MiB) | RSS at the end (MiB) | end / 1 min |")
        print("| --- | ---: | ---: | ---: |")
        for node, v in last["rss_mib"].items():
            v1 = first["rss_mib"][node]
            print(f"| {node} | {v1:.1f} | {v:.1f} | {v / v1 if v1 else 0:.2f} |")
        rates = [r["writes_per_s"] for r in samples[1:]]
        print(f"\nwrites/s: median {sorted(rates)[len(rates) // 2] if rates else 0}, bench: {rows[-1].get('bench')}")
    if kv:
        print(f"KV state machine, {kv['keys']} keys of {kv['value_bytes']} B: {kv['rss_mib']} MiB "
              f"({kv['bytes_per_key']} B a key), snapshot {kv['snapshot_mib']} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

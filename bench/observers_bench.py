"""Observers and reads: 3 voters, 3 voters + 2 observers, and 5 voters, in one run.

    python3 bench/observers_bench.py                          # 3 rounds, 8 s each (~5 min)
    python3 bench/observers_bench.py --server-cpu 0.25        # each server capped at 1/4 of a core
    python3 bench/observers_bench.py --rounds 1 --duration 2 --warmup 1   # smoke run

Each cell is what ``zabd bench --spawn N [--observers K] --zookeeper get|set``
does (a fresh local cluster, disk storage, fsync on, 8 clients x 32
outstanding, 1 KiB, clients spread over every node, observers included), so
reads are ZooKeeper getData served by the node a client is on and writes are
setData that every node applies. Rounds interleave the set-ups (the order
rotates every round) so drift on the machine hurts all of them alike; the
table has medians.

An observer serves reads like a follower but adds nothing to what a write
waits for (a commit needs a majority of the 3 voters, not of 5 nodes). On a
machine with fewer cores than servers, every extra server shares the same
cores, so adding servers cannot add read capacity there. ``--server-cpu F``
stands in for a machine per server: each server runs in a cgroup of its own
(cgroup v1 ``cpu`` controller, ``cpu.cfs_quota_us``) capped at F of a core,
so capacity grows with the servers as it would across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

from zabd.client.bench import run_bench
from zabd.client.spawn import LocalCluster

CGROUP_CPU = Path("/sys/fs/cgroup/cpu")

SETUPS = (("3 voters", 3, 0), ("3 voters + 2 observers", 5, 2), ("5 voters", 5, 0))


def capped_spawner(share: float) -> Any:
    """Start each server in a cpu cgroup of its own, capped at ``share`` of a core."""
    period = 100_000

    def spawn(i: int, argv: list[str], env: dict[str, str], out: BinaryIO) -> subprocess.Popen[bytes]:
        group = CGROUP_CPU / f"zabd-observers-bench-{os.getpid()}-{i}"
        group.mkdir(exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(str(period))
        (group / "cpu.cfs_quota_us").write_text(str(int(share * period)))
        procs = str(group / "cgroup.procs")

        def enter() -> None:  # in the child, before exec: the server and its threads live in the group
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))

        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                preexec_fn=enter)  # fmt: skip

    return spawn


def remove_groups() -> None:
    for group in CGROUP_CPU.glob(f"zabd-observers-bench-{os.getpid()}-*"):
        with contextlib.suppress(OSError):  # a process still in it: removed with the last one
            group.rmdir()


async def run_one(nodes: int, observers: int, op: str, args: argparse.Namespace) -> dict[str, Any]:
    extra: dict[str, Any] = {"observers": list(range(nodes - observers + 1, nodes + 1))} if observers else {}
    spawn = capped_spawner(args.server_cpu) if args.server_cpu else None
    cluster = LocalCluster(nodes, storage="disk", fsync=True, log_level="warning", extra=extra, spawn=spawn)
    try:
        cluster.start()
        await cluster.wait_leader(timeout=60)
        pids = [proc.pid for proc in cluster.procs.values()]
        return await run_bench(
            cluster.servers, clients=args.clients, window=args.window, payload_size=args.payload,
            duration=args.duration, warmup=args.warmup, target="spread", progress=False, server_pids=pids,
            zookeeper=op,
        )  # fmt: skip
    finally:
        cluster.stop()
        remove_groups()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--payload", type=int, default=1024)
    p.add_argument("--server-cpu", type=float, default=0.0, metavar="F",
                   help="cap each server at F of a core (a cgroup each), as if each had a machine")  # fmt: skip
    p.add_argument("--json", metavar="FILE", help="write every run's result here")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.duration <= 0:
        p.error("--rounds must be at least 1 and --duration positive")
    if args.server_cpu and not (0.01 <= args.server_cpu <= 64 and (CGROUP_CPU / "cpu.cfs_quota_us").exists()):
        p.error(f"--server-cpu {args.server_cpu}: needs 0.01..64 and the cgroup v1 cpu controller at {CGROUP_CPU}")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    cells = [(label, n, k, op) for op in ("get", "set") for label, n, k in SETUPS]
    started = time.monotonic()
    for rnd in range(args.rounds):
        order = cells[rnd % len(cells) :] + cells[: rnd % len(cells)]
        for i, (label, n, k, op) in enumerate(order):
            r = asyncio.run(run_one(n, k, op, args))
            runs.setdefault((label, op), []).append(r)
            print(f"[observers_bench] round {rnd + 1}/{args.rounds}, {i + 1}/{len(order)}: {label}, {op}: "
                  f"{r['ops_per_s']:.0f} ops/s, p99 {r['p99_ms']} ms ({time.monotonic() - started:.0f} s)",
                  file=sys.stderr, flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({f"{label}|{op}": rs for (label, op), rs in runs.items()}, fh, indent=1)
    print("| op | set-up | ops/s | p50 ms | p99 ms | servers' CPU, % of a core | µs of servers' CPU per op |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for label, _, _, op in cells:
        rs = runs[(label, op)]
        ops = statistics.median(r["ops_per_s"] for r in rs)
        cpu = statistics.median(sum(v for key, v in r["cpu_pct"].items() if key != "client") for r in rs)
        print(f"| {'getData' if op == 'get' else 'setData'} | {label} | {ops:,.0f} | "
              f"{statistics.median(r['p50_ms'] for r in rs)} | {statistics.median(r['p99_ms'] for r in rs)} | "
              f"{cpu:.0f} | {cpu / 100 / ops * 1e6:.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

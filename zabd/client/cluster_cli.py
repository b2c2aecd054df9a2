"""``zabd cluster``: a local cluster in the foreground, for trying zabd out.

Starts N ``zabd serve`` processes on this machine (free ports, data in a
directory of its own), waits for a leader, prints the addresses of zabd's
client port and ZooKeeper's, and runs until Ctrl-C (or SIGTERM), which stops
every server it started. A server that dies on its own is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import BinaryIO

from zabd.client.spawn import LocalCluster


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zabd cluster", description="run a local cluster in the foreground until Ctrl-C")
    p.add_argument("--nodes", type=int, default=3, help="cluster size, 1..7 (default 3)")
    p.add_argument("--dir", help="data and logs here, kept afterwards (default: a temporary directory, removed)")
    p.add_argument("--storage", choices=("disk", "memory"), default="disk", help="default disk (fsync'd log)")
    return p


def _own_session(i: int, argv: list[str], env: dict[str, str], out: BinaryIO) -> subprocess.Popen[bytes]:
    # a process group of its own: a terminal's Ctrl-C reaches this command
    # only, which then stops the servers in order
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            start_new_session=True)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not 1 <= args.nodes <= 7:
        print(f"zabd cluster: --nodes {args.nodes}: expected 1..7", file=sys.stderr)
        return 2
    if args.dir is not None and Path(args.dir).exists() and any(Path(args.dir).iterdir()):
        print(f"zabd cluster: --dir {args.dir}: not empty; expected a new or empty directory", file=sys.stderr)
        return 2
    cluster = LocalCluster(args.nodes, base_dir=args.dir, storage=args.storage, spawn=_own_session)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        cluster.start()
        try:
            leader = asyncio.run(cluster.wait_leader(timeout=30))
        except (TimeoutError, AssertionError) as exc:
            print(f"zabd cluster: no leader within 30 s ({exc}); logs in {cluster.base}", file=sys.stderr)
            return 1
        if stop.is_set():
            return 0
        n = args.nodes
        print(f"zabd cluster: {n} nodes up, leader node {leader}; data and logs in {cluster.base}")
        print(f"  zabd clients:  {','.join(cluster.servers)}")
        print(f"  ZooKeeper:     {cluster.zk_hosts}")
        print(f"  try:           zabd status --servers {cluster.client_addr(1)}")
        print(f"                 zkCli.sh -server {cluster.zk_addr(1)}")
        print(f"  server pids:   {' '.join(str(cluster.procs[i].pid) for i in range(1, n + 1))}")
        print("Ctrl-C stops every server.", flush=True)
        reported: set[int] = set()
        while not stop.wait(0.5):
            for i in range(1, n + 1):
                if i not in reported and not cluster.alive(i):
                    reported.add(i)
                    print(f"zabd cluster: node {i} exited (code {cluster.procs[i].returncode}); its log: "
                          f"{cluster.base / f'node{i}.log'}", flush=True)
    finally:
        cluster.stop()
    print("zabd cluster: stopped", flush=True)
    return 0

"""The same ``zabd bench`` for two source trees, interleaved in one run.

    python3 bench/ab_bench.py --old /tmp/zabd_old [--new .] [--reps 2] [--duration 10]
                              [--shapes 8x32,8x256] [--storages memory,disk] [--zookeeper set]

``--old`` is a checkout of another revision (``git worktree add /tmp/zabd_old
REV``). Each (storage, shape) cell runs old, new, old, new, ... so a noisy
machine hurts both alike; each run spawns its own 3-node cluster from that
tree (``PYTHONPATH`` puts the tree first). Prints one line per run and a
table of medians with new/old ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_bench(tree: Path, storage: str, clients: int, window: int, duration: float, warmup: float,
              extra: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    argv = [sys.executable, "-m", "zabd", "bench", "--spawn", "3", "--storage", storage, "--clients", str(clients),
            "--window", str(window), "--payload", "1024", "--duration", str(duration), "--warmup", str(warmup),
            "--json", "--no-progress", *extra]
    out = subprocess.run(argv, env=env, cwd=tree, capture_output=True, text=True, timeout=duration + warmup + 120)
    if out.returncode != 0:
        raise SystemExit(f"ab_bench: {tree}: zabd bench exited {out.returncode}: {out.stderr.strip()[-400:]}")
    result: dict[str, Any] = json.loads(out.stdout)
    # the cluster's CPU per op: what a write costs, whatever else shares the cores
    servers = sum(v for k, v in result["cpu_pct"].items() if k.startswith("server"))
    result["cpu_us_per_op"] = servers / 100 / result["ops_per_s"] * 1e6 if result["ops_per_s"] else 0.0
    return result


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", type=Path, required=True)
    p.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1])
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--warmup", type=float, default=3)
    p.add_argument("--shapes", default="8x32,8x256")
    p.add_argument("--storages", default="memory,disk")
    p.add_argument("--zookeeper", choices=("set", "get", "create"),
                   help="load ZooKeeper's port (zabd bench --zookeeper)")
    args = p.parse_args(argv)
    extra = ["--zookeeper", args.zookeeper] if args.zookeeper else []
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    cells: dict[tuple[str, int, int, str], list[dict[str, Any]]] = {}
    for storage in args.storages.split(","):
        for clients, window in shapes:
            for rep in range(args.reps):
                for name, tree in (("old", args.old), ("new", args.new)):
                    r = run_bench(tree, storage, clients, window, args.duration, args.warmup, extra)
                    cells.setdefault((storage, clients, window, name), []).append(r)
                    print(f"{storage} {clients}x{window} {name} rep {rep}: {r['ops_per_s']:,.0f} ops/s "
                          f"p50 {r['p50_ms']:.1f} ms p99 {r['p99_ms']:.1f} ms errors {r['errors']} "
                          f"servers' CPU {r['cpu_us_per_op']:.0f} us/op", flush=True)
    print()
    print("| storage | C x W | old ops/s | new ops/s | new/old | old p99 ms | new p99 ms "
          "| old CPU us/op | new CPU us/op |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for storage in args.storages.split(","):
        for clients, window in shapes:
            med = {}
            for name in ("old", "new"):
                runs = cells[(storage, clients, window, name)]
                med[name] = (statistics.median(r["ops_per_s"] for r in runs),
                             statistics.median(r["p99_ms"] for r in runs),
                             statistics.median(r["cpu_us_per_op"] for r in runs))
            print(f"| {storage} | {clients} x {window} | {med['old'][0]:,.0f} | {med['new'][0]:,.0f} | "
                  f"{med['new'][0] / med['old'][0]:.2f} | {med['old'][1]:.1f} | {med['new'][1]:.1f} | "
                  f"{med['old'][2]:.0f} | {med['new'][2]:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

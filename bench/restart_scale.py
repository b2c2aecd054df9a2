"""Whole-cluster restart of a 3-node zabd holding N znodes, broken down (issue 39).

    python3 bench/restart_scale.py --dir /tmp/rs --znodes 1000000            # build once, restart 3 times
    python3 bench/restart_scale.py --dir /tmp/rs --znodes 1000000 --repeat 5 # again on the same template
    python3 bench/restart_scale.py --dir /tmp/rs --repeat 1 --code /work/main   # main's servers: a before
    python3 bench/restart_scale.py --dir /tmp/rs --repeat 0 --parts --parts-node 2  # one node, in process

The first run builds a template in ``--dir``: a 3-node cluster (LocalCluster, disk, fsync on)
loaded with bench/zk_scale.py's tree of N leaves through ZooKeeper's Java client
(bench/ZkTreeLoad.java), then ``--set-seconds`` of ZkBench setData (1 KiB) so that the log holds
a tail after the newest snapshot, as a cluster that served writes leaves it; stopped by SIGTERM.
Later runs reuse the template (its data dirs hold no ports).

Each restart copies the template's data dirs into a fresh run dir, starts the three servers and
polls (zk_scale's kazoo poll: one connection per try) until one reads the last leaf with the right
bytes: that is zk_scale's "whole-cluster restart until a read is served". Each server's log then
gives its part of it, from its spawn (wall clock) to: ``recovered`` (the storage load, the snapshot
restore and the replay, each timed by the server) and its ``serving again`` (the election and the
sync done), and its CPU seconds when the read was served (from /proc: steadier than the wall
times on a shared box). The page cache is warm (the copy just wrote the files), as after
zk_scale's stop. ``--code DIR`` runs the servers from another checkout (the harness stays
this one's); ``--parts`` times one node's restart piece by piece in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from zk_memory import compile_loader  # noqa: E402
from zk_scale import last_leaf, poll_get, run_loader, wait_progress, zkbench_argv  # noqa: E402
from zk_side_by_side import compile_zkbench  # noqa: E402

from zabd import compiled  # noqa: E402
from zabd.client.spawn import LocalCluster  # noqa: E402

IDS = (1, 2, 3)


def log(msg: str) -> None:
    print(f"[restart_scale] {msg}", file=sys.stderr, flush=True)


def cluster(base: Path) -> LocalCluster:
    return LocalCluster(3, storage="disk", fsync=True, base_dir=base, log_level="info",
                        extra={"zk_4lw_whitelist": "*"})


def build_template(args: argparse.Namespace, template: Path) -> None:
    work = args.dir / "build-run"
    shutil.rmtree(work, ignore_errors=True)
    c = cluster(work)
    try:
        c.start()
        leader = asyncio.run(c.wait_leader(timeout=120))
        connect = ",".join(c.zk_addr(i) for i in IDS)
        log(f"loading {args.znodes:,} znodes")
        load = run_loader(args.dir / "java", connect, args.znodes, 100, 1800)
        log(f"loaded in {load['seconds']:.1f} s; setData for {args.set_seconds:g} s")
        ns = argparse.Namespace(payload=1024)
        argv = zkbench_argv(args.dir / "java", ns, "set", connect, c.zk_addr(leader), [c.procs[i].pid for i in IDS],
                            1.0, args.set_seconds)
        err = args.dir / "set.err"
        with open(err, "w") as fe:
            bench = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=fe, stdin=subprocess.DEVNULL)
            try:
                wait_progress(err, 1.0, bench, 60.0)
                bench.wait(args.set_seconds + 120)
            finally:
                if bench.poll() is None:
                    bench.kill()
                    bench.wait(10)
        for i in IDS:
            c.terminate(i, 120)
        template.mkdir(parents=True)
        for i in IDS:
            shutil.copytree(work / f"data{i}", template / f"data{i}")
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)


def stamp(line: dict[str, Any]) -> float:
    return datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()


def node_breakdown(text: str, spawned: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw in text.splitlines():
        if not raw.startswith("{"):
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        ev = line.get("event")
        if ev == "recovered" and "recovered_at_s" not in out:
            out["recovered_at_s"] = round(stamp(line) - spawned, 3)
            for k in ("load_seconds", "snapshot_read_seconds", "restore_seconds", "replay_seconds", "replayed",
                      "seconds"):
                if k in line:
                    out[k] = line[k]
        elif ev == "server started" and "started_at_s" not in out:
            out["started_at_s"] = round(stamp(line) - spawned, 3)
        elif ev == "serving again" and "serving_at_s" not in out:
            out["serving_at_s"] = round(stamp(line) - spawned, 3)
            out["role"] = line.get("role")
    return out


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU of a live process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)


def restart_once(args: argparse.Namespace, template: Path, k: int) -> dict[str, Any]:
    run = args.dir / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    for i in IDS:
        shutil.copytree(template / f"data{i}", run / f"data{i}")
    subprocess.run(["sync"], check=False, timeout=120)
    c = cluster(run)
    leaf, want = last_leaf(args.znodes, 100)
    try:
        c.write_configs()
        spawned = time.time()
        t0 = time.monotonic()
        for i in IDS:
            c.start_node(i)
        up = poll_get(",".join(c.zk_addr(i) for i in IDS), leaf, want, sync=False, deadline_s=300)
        serve_s = None if up is None else round(time.monotonic() - t0, 2)
        cpu = {i: cpu_seconds(c.procs[i].pid) for i in IDS}  # load-independent: what each server spent
        # the other nodes' lines, bounded: each has been started for as long as the read took
        deadline = time.monotonic() + 60
        nodes = {}
        while time.monotonic() < deadline:
            nodes = {i: node_breakdown(c.log_text(i), spawned) for i in IDS}
            if all("serving_at_s" in b for b in nodes.values()):
                break
            time.sleep(0.2)
    finally:
        c.stop()
        kept = args.dir / "logs" / f"run-{k}"
        shutil.rmtree(kept, ignore_errors=True)
        kept.mkdir(parents=True)
        for i in IDS:
            (kept / f"node{i}.log").write_text(c.log_text(i))
        shutil.rmtree(run, ignore_errors=True)
    for i in IDS:
        nodes[i]["cpu_at_serve_s"] = cpu[i]
    r = {"run": k, "serve_s": serve_s, "load_avg": round(os.getloadavg()[0], 1), "nodes": nodes}
    print(json.dumps(r), flush=True)
    return r


def parts(args: argparse.Namespace, template: Path) -> dict[str, Any]:
    """One node's restart in this process, piece by piece, on a copy of node 1's data (warm cache)."""
    import gc

    scratch = args.dir / "parts"
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(template / f"data{args.parts_node}", scratch)
    out: dict[str, Any] = {}
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import zabd.server.cli, zabd.server.replica, zabd.kv.kvmachine"],
                   check=True, timeout=120)
    out["python start + imports s"] = round(time.perf_counter() - t, 3)
    from zabd.kv.kvmachine import KVMachine
    from zabd.protocol.node import Node
    from zabd.protocol.options import for_server
    from zabd.server.recovery import recover
    from zabd.server.zlog import get_logger
    from zabd.storage.disk import DiskStorage
    from zabd.storage.snapshot import list_snapshots, read_snapshot
    from zabd.storage.txnlog import recover_log

    newest = list_snapshots(str(scratch / "snap"))[-1][1]
    gc.collect()
    t = time.perf_counter()
    snap = read_snapshot(newest)
    out["read_snapshot s"] = round(time.perf_counter() - t, 3)
    out["snapshot MB"] = round(len(snap.data) / 1e6, 1)
    del snap
    gc.collect()
    t = time.perf_counter()
    rec = recover_log(str(scratch / "log"), load_txns=False)
    out["log scan s"] = round(time.perf_counter() - t, 3)
    out["log txns"] = sum(len(s.zxids) for s in rec.segments)
    del rec
    gc.collect()
    disk = DiskStorage(str(scratch), fsync=False, window=10_000)  # the server's default history_window
    t = time.perf_counter()
    state = disk.load()
    out["storage load s"] = round(time.perf_counter() - t, 3)
    machine = KVMachine()
    node = Node(1, [2, 3], 1, for_server(10_000, 100_000, 10))
    r = recover(state, disk, node, machine, get_logger("parts"), [])
    out["restore s"] = round(r.snapshot_seconds or 0.0, 3)
    out["replay s"] = round(r.replay_seconds, 3)
    out["replayed"] = r.replayed
    disk.close()
    shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps({"parts": out}), flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, required=True, help="work dir; the template is kept in DIR/template")
    p.add_argument("--znodes", type=int, default=1_000_000)
    p.add_argument("--set-seconds", type=float, default=10.0, help="setData load after the tree load (10)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--code", type=Path, help="run the servers from this checkout (its zabd), e.g. main for a before")
    p.add_argument("--parts", action="store_true", help="also time one node's restart piece by piece in process")
    p.add_argument("--parts-node", type=int, default=1, choices=IDS, help="whose data --parts uses (1)")
    args = p.parse_args()
    if args.znodes < 1 or args.repeat < 0 or args.set_seconds <= 0:
        p.error("--znodes and --set-seconds must be positive, --repeat at least 0")
    args.dir = args.dir.resolve()
    args.dir.mkdir(parents=True, exist_ok=True)
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries are our polls
    template = args.dir / f"template-{args.znodes}"
    print(f"$ {' '.join(sys.argv)}  ({compiled.describe()})", flush=True)
    if not template.exists():
        compile_loader(args.dir / "java")
        compile_zkbench(args.dir / "java")
        build_template(args, template)
    if args.parts:
        parts(args, template)
    if args.code is not None:
        # the servers run `python -m zabd`: their cwd comes first on their path, then PYTHONPATH
        os.environ["PYTHONPATH"] = str(args.code.resolve())
        os.chdir(args.dir)
        print(f"servers run {args.code.resolve()}'s code", flush=True)
    runs = [restart_once(args, template, k) for k in range(args.repeat)]
    served = [r["serve_s"] for r in runs if r["serve_s"] is not None]
    if served:
        print(f"restart until a read is served: median {statistics.median(served):.2f} s of {served}")
    return 0 if len(served) == len(runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())

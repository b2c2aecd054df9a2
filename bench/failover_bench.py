"""Failover time, zabd and ZooKeeper side by side, one procedure, one run.

    python3 bench/failover_bench.py [--trials 5] [--nodes 3,5] [--cases kill,isolate]
                                    [--systems zabd,zookeeper] [--json FILE]

Each trial starts a fresh cluster on disk with fsync on, every server in its
own network namespace (``zabd.nemesis.netlab``; the ``kill`` case falls back
to 127.0.0.1 when namespaces cannot be made). One client in the root namespace
connects to one follower only and writes in a loop (zabd: a KV ``put``;
ZooKeeper: kazoo ``set``), each write waiting for its answer, a failed write
retried after 5 ms. After 200 writes the fault is injected:

* ``kill``: SIGKILL of the leader (its sockets close: the followers see it);
* ``isolate``: the leader's packets to and from the other servers are dropped
  (iptables DROP, no RST; the client keeps reaching every server), so only
  timers can find out.

The failover time is from the fault to the completion of the first write
that was issued after the fault and succeeded. Trials alternate between the
systems (zabd, ZooKeeper, zabd, ...) so a noisy machine hurts both alike.
ZooKeeper is configured as ``../shared/anchors/zookeeper/cluster.sh`` does
(tickTime=2000, syncLimit=5); zabd runs its defaults (tick_ms=10).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import zkcluster

from zabd.client import Client, ZabdError
from zabd.client.spawn import LocalCluster

WARMUP_WRITES = 200
RETRY_PAUSE = 0.005
GIVE_UP_S = 60.0


class Writer:
    """Timestamps of a write loop; ``failover(fault_at)`` reads the answer."""

    def __init__(self) -> None:
        self.ok: list[tuple[float, float]] = []  # (issued, completed) of successful writes
        self.errors = 0
        self.stop = threading.Event()
        self.progress = threading.Event()

    def record(self, issued: float, ok: bool) -> None:
        if ok:
            self.ok.append((issued, time.monotonic()))
            self.progress.set()
        else:
            self.errors += 1

    def failover(self, fault_at: float) -> float | None:
        for issued, completed in self.ok:
            if issued >= fault_at:
                return completed - fault_at
        return None

    def wait_writes(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.ok) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.ok)} of {count} writes in {timeout}s")
            self.progress.wait(0.1)
            self.progress.clear()

    def wait_after(self, fault_at: float, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.failover(fault_at)
            if got is not None:
                return got
            self.progress.wait(0.1)
            self.progress.clear()
        return None


# ------------------------------------------------------------------ networks


@contextlib.contextmanager
def network(n: int, kind: str) -> Iterator[Any]:
    """A NetLab of n hosts, or None for 127.0.0.1."""
    if kind == "loopback":
        yield None
        return
    from zabd.nemesis.netlab import NetLab

    with NetLab(n) as lab:
        yield lab


# ---------------------------------------------------------------------- zabd


def zabd_trial(n: int, case: str, lab: Any, base: Path) -> dict[str, Any]:
    hosts = {i: lab.addr(i) for i in range(1, n + 1)} if lab is not None else None
    spawn = None
    if lab is not None:

        def spawn(i: int, argv: list[str], env: dict[str, str], out: BinaryIO) -> Any:
            return lab.spawn(i, argv, env=env, stdout=out, stderr=out)

    cluster = LocalCluster(n, storage="disk", fsync=True, base_dir=base, hosts=hosts, spawn=spawn)
    cluster.start()
    writer = Writer()
    try:
        leader = asyncio.run(cluster.wait_leader(timeout=60))
        follower = next(i for i in range(1, n + 1) if i != leader)
        thread = threading.Thread(target=lambda: asyncio.run(_zabd_writes(cluster.client_addr(follower), writer)))
        thread.start()
        try:
            writer.wait_writes(WARMUP_WRITES, 60)
            fault_at = inject(case, lambda: cluster.kill(leader), lab, leader)
            took = writer.wait_after(fault_at, GIVE_UP_S)
        finally:
            writer.stop.set()
            thread.join(30)
        stepped_down = None
        if case == "isolate":
            st = asyncio.run(cluster.status(leader))
            stepped_down = st is not None and st["role"] != "leading"
        return {"leader": leader, "writer_on": follower, "failover_s": took, "old_leader_stepped_down": stepped_down,
                "errors": writer.errors, "writes": len(writer.ok)}
    finally:
        if lab is not None:
            lab.heal()
        cluster.stop()


async def _zabd_writes(addr: str, writer: Writer) -> None:
    client = await Client.connect(addr, timeout=2.0)
    k = 0
    try:
        while not writer.stop.is_set():
            k += 1
            issued = time.monotonic()
            try:
                await client.put("failover", b"%d" % k)
                writer.record(issued, True)
            except ZabdError:
                writer.record(issued, False)
                await asyncio.sleep(RETRY_PAUSE)
    finally:
        await client.close()


# ----------------------------------------------------------------- ZooKeeper


def zk_trial(n: int, case: str, lab: Any, base: Path) -> dict[str, Any]:
    from kazoo.client import KazooClient

    hosts = {i: lab.addr(i) for i in range(1, n + 1)} if lab is not None else None
    spawn = None
    if lab is not None:

        def spawn(i: int, argv: list[str], out: Path) -> Any:
            with open(out, "ab") as f:
                return lab.spawn(i, argv, stdout=f, stderr=f)

    cluster = zkcluster.ZkCluster(n, base, hosts=hosts, spawn=spawn)
    writer = Writer()
    try:
        leader = cluster.start()
        follower = next(i for i in range(1, n + 1) if i != leader)
        # a fast reconnect, so the client is not what we measure
        zk = KazooClient(
            hosts=cluster.client_addr(follower),
            timeout=10.0,
            connection_retry={"max_tries": -1, "delay": 0.01, "max_delay": 0.05},
        )
        zk.start(timeout=30)
        zk.ensure_path("/failover")

        def loop() -> None:
            k = 0
            while not writer.stop.is_set():
                k += 1
                issued = time.monotonic()
                try:
                    zk.set("/failover", b"%d" % k)
                    writer.record(issued, True)
                except Exception:  # kazoo raises ConnectionLoss, SessionExpired, timeouts...
                    writer.record(issued, False)
                    time.sleep(RETRY_PAUSE)

        thread = threading.Thread(target=loop)
        thread.start()
        try:
            writer.wait_writes(WARMUP_WRITES, 60)
            fault_at = inject(case, lambda: cluster.kill(leader), lab, leader)
            took = writer.wait_after(fault_at, GIVE_UP_S)
        finally:
            writer.stop.set()
            thread.join(30)
            with contextlib.suppress(Exception):
                zk.stop()
                zk.close()
        stepped_down = None
        if case == "isolate":
            stepped_down = cluster.mode(leader) != "leader"
        return {"leader": leader, "writer_on": follower, "failover_s": took, "old_leader_stepped_down": stepped_down,
                "errors": writer.errors, "writes": len(writer.ok)}
    finally:
        if lab is not None:
            lab.heal()
        cluster.stop()


def inject(case: str, kill: Callable[[], None], lab: Any, leader: int) -> float:
    """The fault, and the moment it is complete. A SIGKILL is one call; a
    partition is written host by host (an iptables-restore each), and writes
    that slipped through before the last host had its rules would count as a
    failover of a few milliseconds."""
    if case == "kill":
        fault_at = time.monotonic()
        kill()
        return fault_at
    lab.isolate(leader, clients=True)
    return time.monotonic()


# ---------------------------------------------------------------------- main


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = sorted({(r["case"], r["nodes"], r["system"]) for r in rows})
    for case, nodes, system in keys:
        mine = [r for r in rows if (r["case"], r["nodes"], r["system"]) == (case, nodes, system)]
        times = [r["failover_s"] for r in mine if r["failover_s"] is not None]
        out.append(
            {
                "case": case,
                "nodes": nodes,
                "system": system,
                "trials": len(mine),
                "median_s": statistics.median(times) if times else None,
                "max_s": max(times) if times else None,
                "no_recovery": len(mine) - len(times),
            }
        )
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--nodes", default="3,5")
    p.add_argument("--cases", default="kill,isolate")
    p.add_argument("--systems", default="zabd,zookeeper")
    p.add_argument("--net", choices=("netns", "loopback"), default="netns")
    p.add_argument("--json", help="append one JSON line per trial to this file")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # kazoo is chatty on connection loss
    systems = args.systems.split(",")
    cases = args.cases.split(",")
    if "zookeeper" in systems:
        ok, why = zkcluster.available()
        if not ok:
            print(f"failover_bench: {why}", file=sys.stderr)
            return 2
    net = args.net
    if net == "netns":
        from zabd.nemesis.netlab import available

        ok, why = available()
        if not ok:
            if "isolate" in cases:
                print(f"failover_bench: the isolate case needs network namespaces: {why}", file=sys.stderr)
                return 2
            print(f"failover_bench: no network namespaces ({why}); using 127.0.0.1", file=sys.stderr)
            net = "loopback"
    rows: list[dict[str, Any]] = []
    trial_fns = {"zabd": zabd_trial, "zookeeper": zk_trial}
    for nodes in (int(x) for x in args.nodes.split(",")):
        for case in cases:
            for trial in range(args.trials):
                for system in systems:
                    with tempfile.TemporaryDirectory(prefix="failover-") as tmp, network(nodes, net) as lab:
                        t0 = time.monotonic()
                        row = trial_fns[system](nodes, case, lab, Path(tmp))
                    row |= {"system": system, "nodes": nodes, "case": case, "trial": trial, "net": net,
                            "wall_s": round(time.monotonic() - t0, 1)}
                    rows.append(row)
                    took = row["failover_s"]
                    shown = f"{took * 1000:.0f} ms" if took is not None else f"no write within {GIVE_UP_S:.0f} s"
                    print(f"{case} n={nodes} {system} trial {trial}: {shown} (errors {row['errors']})", flush=True)
                    if args.json:
                        with open(args.json, "a") as f:
                            f.write(json.dumps(row) + "\n")
    print()
    print("| case | nodes | system | trials | median | max |")
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for s in summarize(rows):
        med = f"{s['median_s']:.3f} s" if s["median_s"] is not None else "-"
        mx = f"{s['max_s']:.3f} s" if s["max_s"] is not None else "-"
        extra = f" ({s['no_recovery']} never recovered)" if s["no_recovery"] else ""
        print(f"| {s['case']} | {s['nodes']} | {s['system']} | {s['trials']}{extra} | {med} | {mx} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Scale benchmark: zabd and ZooKeeper 3.8 holding N znodes, side by side (issue 39).

    python3 bench/zk_scale.py                          # N = 20000 and 1000000 (tens of minutes)
    python3 bench/zk_scale.py --sizes 20000 --quick    # smoke run (a few minutes, numbers rough)
    python3 bench/zk_scale.py --sizes 1000000 --json /tmp/scale.json
    python3 bench/zk_scale.py --sizes 1000000 --runs 3  # the table gives each metric's median (min-max)

For each N in --sizes and each system (interleaved: ZooKeeper first for the first size,
zabd first for the next, ...) a fresh 3-node cluster (zabd: LocalCluster, disk storage,
fsync on, log level info so that its "role changed" lines are there to count; ZooKeeper:
bench/zkcluster.py's settings, forceSync=yes, --zk-heap) is started, and then, in order:

1. load: bench/ZkTreeLoad.java (ZooKeeper's Java client, 4 sessions x 200 outstanding async
   creates over the whole connect string) builds bench/zk_memory.py's deterministic tree of
   N leaves of --data-bytes bytes; creates/s and seconds.
2. size: RSS of every server (/proc VmRSS, sum and max) and the bytes every server's data
   directories take on disk (allocated blocks, not apparent size: sum and max).
3. reads and writes at size: bench/ZkBench.java getData, then setData, of --payload bytes
   (8 sessions x 32 outstanding, spread over the three servers), short window; ops/s, p50, p99.
4. whole-cluster restart: SIGTERM to all three (by PID, SIGKILL after 120 s), start them
   again on the same data, time until a Java-client-free poll (kazoo, one connection per try,
   bounded) reads the last leaf of the tree with the right bytes.
5. follower rebuild: ZkBench setData runs against the leader and the other follower only;
   once its warm-up is over one follower is stopped (SIGTERM), its data is wiped (ZooKeeper:
   version-2 dirs, myid kept; zabd: the whole data dir) and it is started again. Rebuild time =
   from that start until the rebuilt server alone answers sync + getData of the last leaf
   (kazoo connected to it only). Reported with the healthy servers' write p99 and max latency
   over the load's window (which includes the stop, wipe and rebuild) and the elections seen
   meanwhile in the two healthy servers' logs: zabd's "role changed" lines, ZooKeeper's
   QuorumPeer "LOOKING" lines; for zabd also its "peer link silent" lines (a healthy server
   closing and redialling its link to the rebuilding one: not an election, counted apart).

Output: one line per step on stdout (progress on stderr), a markdown table per N with both
systems and the zabd/ZooKeeper ratio, and a final JSON line (--json PATH writes it too).
Every process started here is stopped by PID in finally blocks; every wait has a deadline.
Needs ``apt-get install zookeeper libslf4j-java default-jdk-headless``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from zk_memory import compile_loader, rss_bytes, tree_shape  # noqa: E402
from zk_side_by_side import busy_pct, compile_zkbench  # noqa: E402
from zkcluster import JARS, ZkCluster, available  # noqa: E402

from zabd import compiled  # noqa: E402
from zabd.client.spawn import LocalCluster, free_ports  # noqa: E402

ZK_JAR = "/usr/share/java/zookeeper.jar"
SLF4J = "/usr/share/java/slf4j-simple.jar"
SYSTEMS = ("zookeeper", "zabd")
LABEL = {"zookeeper": "ZooKeeper 3.8", "zabd": "zabd"}
FANOUT = 1000
MiB = 1 << 20


def log(msg: str) -> None:
    print(f"[zk_scale] {msg}", file=sys.stderr, flush=True)


def step(system: str, n: int, msg: str) -> None:
    print(f"{LABEL[system]} N={n:,}: {msg}", flush=True)


def dir_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path``: ZooKeeper preallocates its txn logs sparsely
    (64 MiB each), so their apparent size counts holes."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / f).stat().st_blocks * 512
    return total


# ------------------------------------------------------------------ the two clusters


class ZkSide:
    """A 3-node ZooKeeper ensemble (zkcluster.py's config) that can also restart and rebuild nodes."""

    system = "zookeeper"

    def __init__(self, base: Path, heap: str) -> None:
        self.c = ZkCluster(3, base, heap=heap)
        ports = free_ports(9)  # zkcluster's fixed ports may be held by other ensembles on this box
        for k, i in enumerate(sorted(self.c.hosts)):
            self.c.client_ports[i], self.c.quorum_ports[i], self.c.election_ports[i] = ports[3 * k : 3 * k + 3]
        self.ids = sorted(self.c.hosts)

    def start(self) -> int:
        return self.c.start(timeout=120)

    def addr(self, i: int) -> str:
        return self.c.client_addr(i)

    def pid(self, i: int) -> int:
        return self.c.procs[i].pid

    def data_dir(self, i: int) -> Path:
        return self.c.base / str(i)

    def disk(self, i: int) -> int:
        d = self.data_dir(i)
        return dir_bytes(d / "data") + dir_bytes(d / "datalog")

    def terminate(self, i: int, timeout: float = 120.0) -> bool:
        """SIGTERM by PID; True if it exited on its own within ``timeout``."""
        proc = self.c.procs[i]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            return False

    def start_node(self, i: int) -> None:
        # the argv of zkcluster.py's start(), on the config and data it wrote
        d = self.data_dir(i)
        argv = ["java", f"-Xms{self.c.heap}", f"-Xmx{self.c.heap}",
                f"-Dlog4j.configuration=file:{d / 'log4j.properties'}", f"-Dzookeeper.log.dir={d}",
                "-cp", JARS, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(d / "zoo.cfg")]  # fmt: skip
        with open(d / "stdout.log", "ab") as out:
            self.c.procs[i] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def wipe(self, i: int) -> None:
        d = self.data_dir(i)  # myid stays: it is the server's identity, not its data
        shutil.rmtree(d / "data" / "version-2", ignore_errors=True)
        shutil.rmtree(d / "datalog" / "version-2", ignore_errors=True)

    def log_text(self, i: int) -> str:
        try:
            return (self.data_dir(i) / "zookeeper.log").read_text(errors="replace")
        except OSError:
            return ""

    def elections(self, text: str) -> list[str]:
        # QuorumPeer logs exactly "LOOKING" each time it enters an election; the election's
        # notifications name the state too, so a plain count would also see the rebuilt peer's
        return [ln for ln in text.splitlines() if ln.endswith("] - LOOKING")]

    def stop(self) -> None:
        self.c.stop()


class ZabdSide:
    """A 3-node zabd cluster (LocalCluster, disk, fsync)."""

    system = "zabd"

    def __init__(self, base: Path) -> None:
        self.c = LocalCluster(3, storage="disk", fsync=True, base_dir=base, log_level="info",
                              extra={"zk_4lw_whitelist": "*"})
        self.ids = [1, 2, 3]

    def start(self) -> int:
        self.c.start()
        return asyncio.run(self.c.wait_leader(timeout=120))

    def addr(self, i: int) -> str:
        return self.c.zk_addr(i)

    def pid(self, i: int) -> int:
        return self.c.procs[i].pid

    def data_dir(self, i: int) -> Path:
        return self.c.base / f"data{i}"

    def disk(self, i: int) -> int:
        return dir_bytes(self.data_dir(i))

    def terminate(self, i: int, timeout: float = 120.0) -> bool:
        return self.c.terminate(i, timeout) != -9

    def start_node(self, i: int) -> None:
        self.c.start_node(i)

    def wipe(self, i: int) -> None:
        shutil.rmtree(self.data_dir(i), ignore_errors=True)

    def log_text(self, i: int) -> str:
        return self.c.log_text(i)

    def elections(self, text: str) -> list[str]:
        return [ln for ln in text.splitlines() if "role changed" in ln]

    def silent_links(self, text: str) -> list[str]:
        # not an election: a healthy node closing (and redialling) a peer link that went
        # quiet, which during a rebuild is the link to the node being rebuilt
        return [ln for ln in text.splitlines() if "peer link silent" in ln]

    def stop(self) -> None:
        self.c.stop()


Side = ZkSide | ZabdSide


# ------------------------------------------------------------------ clients


def last_leaf(n: int, data_bytes: int) -> tuple[str, bytes]:
    p, c = divmod(n - 1, FANOUT)
    path = f"/m/p{p:04d}/n{c:06d}"
    k = p * FANOUT + c
    ramp = bytes(i & 0xFF for i in range(256 + data_bytes))
    off = (k * 31) & 0xFF
    return path, ramp[off : off + data_bytes]


def try_get(hosts: str, path: str, want: bytes, sync: bool, timeout: float = 3.0) -> bool:
    """One bounded attempt: connect to ``hosts``, optionally sync, read ``path``; True if it holds ``want``."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts, timeout=timeout, connection_retry={"max_tries": 0}, command_retry={"max_tries": 0})
    try:
        zk.start(timeout=timeout)
        if sync:
            zk.sync("/")
        data, _ = zk.get(path)
        return bool(data == want)
    except Exception:  # any failure is "not yet"; the caller's deadline bounds the retries
        return False
    finally:
        with contextlib.suppress(Exception):
            zk.stop()
            zk.close()


def poll_get(hosts: str, path: str, want: bytes, sync: bool, deadline_s: float) -> float | None:
    """Seconds until ``try_get`` succeeds, None if it did not within ``deadline_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        if try_get(hosts, path, want, sync):
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def run_loader(build: Path, connect: str, n: int, data_bytes: int, max_s: float) -> dict[str, Any]:
    argv = ["java", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error",
            "-cp", f"{build}:{ZK_JAR}:{SLF4J}", "ZkTreeLoad", "--connect", connect, "--znodes", str(n),
            "--fanout", str(FANOUT), "--data-bytes", str(data_bytes), "--sessions", "4", "--window", "200",
            "--max-seconds", str(max_s)]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=max_s + 120)
    lines = r.stdout.strip().splitlines()
    load: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if r.returncode != 0 or not load.get("complete"):
        raise RuntimeError(f"ZkTreeLoad failed ({r.returncode}): {r.stdout.strip()[-300:]} {r.stderr.strip()[-500:]}")
    return load


def zkbench_argv(build: Path, args: argparse.Namespace, op: str, connect: str, leader: str, pids: list[int],
                 warmup: float, duration: float) -> list[str]:
    return ["java", "-Xms512m", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error",
            "-cp", f"{build}:{ZK_JAR}:{SLF4J}", "ZkBench", "--connect", connect, "--leader", leader,
            "--target", "spread", "--sessions", "8", "--window", "32", "--payload", str(args.payload),
            "--op", op, "--warmup", str(warmup), "--duration", str(duration),
            "--cpu-pids", ",".join(map(str, pids)), "--clk-tck", str(os.sysconf("SC_CLK_TCK")),
            "--max-seconds", str(int(warmup + duration + 60)), "--progress", "1"]  # fmt: skip


def parse_zkbench(stdout: str, rc: int, stderr: str) -> dict[str, Any]:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        return {"error": f"ZkBench exited {rc}: {stderr.strip()[-400:]}"}
    r: dict[str, Any] = json.loads(lines[-1])
    r.pop("per_session", None)
    return r


def run_zkbench(build: Path, args: argparse.Namespace, op: str, side: Side, leader: int) -> dict[str, Any]:
    ids = side.ids
    argv = zkbench_argv(build, args, op, ",".join(side.addr(i) for i in ids), side.addr(leader),
                        [side.pid(i) for i in ids], args.warmup, args.duration)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=args.warmup + args.duration + 150)
    return parse_zkbench(out.stdout, out.returncode, out.stderr)


# ------------------------------------------------------------------ one system at one size


def measure(side: Side, n: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    system = side.system
    res: dict[str, Any] = {"system": system, "n": n}
    leaf, leaf_data = last_leaf(n, args.data_bytes)
    leader = side.start()
    connect = ",".join(side.addr(i) for i in side.ids)
    step(system, n, f"cluster up, leader {leader}, pids {[side.pid(i) for i in side.ids]}")

    log(f"{system} N={n:,}: loading the tree (at most {args.load_max_seconds:.0f} s)")
    load = run_loader(work / "build", connect, n, args.data_bytes, args.load_max_seconds)
    res["load"] = {"creates": load["creates"], "seconds": load["seconds"], "creates_per_s": load["creates_per_s"]}
    step(system, n, f"loaded {load['creates']:,} znodes in {load['seconds']:.1f} s ({load['creates_per_s']:,.0f}/s)")

    rss = [rss_bytes(side.pid(i)) for i in side.ids]
    disk = [side.disk(i) for i in side.ids]
    res["rss"] = {"sum": sum(rss), "max": max(rss), "per_server": rss}
    res["disk"] = {"sum": sum(disk), "max": max(disk), "per_server": disk}
    step(system, n, f"RSS sum {sum(rss) / MiB:.0f} MiB max {max(rss) / MiB:.0f} MiB; "
                    f"disk sum {sum(disk) / MiB:.0f} MiB max {max(disk) / MiB:.0f} MiB")

    for op in ("get", "set"):
        log(f"{system} N={n:,}: {op}Data load, {args.warmup:g} s + {args.duration:g} s")
        r = run_zkbench(work / "build", args, op, side, leader)
        res[op] = r
        if "error" in r:
            step(system, n, f"{op}: ERROR {r['error']}")
        else:
            step(system, n, f"{op}Data {args.payload} B: {r['ops_per_s']:,.0f} ops/s p50 {r['lat_ms']['p50']:.2f} "
                            f"p99 {r['lat_ms']['p99']:.2f} ms, errors {r['errors']}")

    # whole-cluster restart
    log(f"{system} N={n:,}: whole-cluster restart (at most {args.restart_max_seconds:.0f} s to serve)")
    t0 = time.monotonic()
    clean = [side.terminate(i) for i in side.ids]
    stop_s = time.monotonic() - t0
    t1 = time.monotonic()
    for i in side.ids:
        side.start_node(i)
    up = poll_get(connect, leaf, leaf_data, sync=False, deadline_s=args.restart_max_seconds)
    res["restart"] = {"stop_s": round(stop_s, 2), "stopped_on_sigterm": all(clean),
                      "serve_s": None if up is None else round(time.monotonic() - t1, 2)}
    step(system, n, f"restart: stopped in {stop_s:.1f} s (clean: {all(clean)}), "
                    + (f"serves {leaf} after {res['restart']['serve_s']:.1f} s" if up is not None
                       else f"does NOT serve {leaf} within {args.restart_max_seconds:.0f} s"))
    if up is None:
        return res

    # follower rebuild under load on the two healthy servers
    leader = find_leader(side, args.restart_max_seconds)
    victim = next(i for i in side.ids if i != leader)
    healthy = [i for i in side.ids if i != victim]
    offsets = {i: len(side.log_text(i)) for i in healthy}
    warm = 3.0
    argv = zkbench_argv(work / "build", args, "set", ",".join(side.addr(i) for i in healthy), side.addr(leader),
                        [side.pid(i) for i in healthy], warm, args.rebuild_load_seconds)
    bench_out, bench_err = work / f"rebuild-{system}-{n}.out", work / f"rebuild-{system}-{n}.err"
    with open(bench_out, "w") as fo, open(bench_err, "w") as fe:
        bench = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
    rebuild: dict[str, Any] = {"victim": victim, "leader": leader}
    try:
        if not wait_progress(bench_err, warm, bench, 60.0):
            raise RuntimeError(f"rebuild load did not get past its warm-up: {bench_err.read_text()[-400:]}")
        log(f"{system} N={n:,}: stopping follower {victim}, wiping its data, starting it (load on {healthy})")
        side.terminate(victim)
        side.wipe(victim)
        t2 = time.monotonic()
        side.start_node(victim)
        done = poll_get(side.addr(victim), leaf, leaf_data, sync=True, deadline_s=args.rebuild_max_seconds)
        rebuild["rebuild_s"] = None if done is None else round(time.monotonic() - t2, 2)
        rebuild["load_running_at_end"] = bench.poll() is None
        try:
            bench.wait(warm + args.rebuild_load_seconds + 120)
        except subprocess.TimeoutExpired:
            bench.kill()
            bench.wait(10)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait(10)
    r = parse_zkbench(bench_out.read_text(), bench.returncode or 0, bench_err.read_text())
    rebuild["write_load"] = r
    seen = {i: side.elections(side.log_text(i)[offsets[i]:]) for i in healthy}
    rebuild["elections"] = sum(len(v) for v in seen.values())
    # the lines themselves: a count alone does not say who took over or which link went quiet
    rebuild["election_lines"] = {i: v[:20] for i, v in seen.items() if v}
    if isinstance(side, ZabdSide):
        silent = {i: side.silent_links(side.log_text(i)[offsets[i]:]) for i in healthy}
        rebuild["silent_links"] = sum(len(v) for v in silent.values())
        rebuild["silent_link_lines"] = {i: v[:20] for i, v in silent.items() if v}
    res["rebuild"] = rebuild
    lat = r.get("lat_ms", {})
    step(system, n, f"follower {victim} rebuild: "
                    + (f"{rebuild['rebuild_s']:.1f} s" if rebuild["rebuild_s"] is not None else "NOT done")
                    + (f"; healthy writes {r['ops_per_s']:,.0f} ops/s p99 {lat['p99']:.1f} max {lat['max']:.1f} ms, "
                       f"errors {r['errors']}" if "error" not in r else f"; load ERROR {r['error']}")
                    + f"; role changes on the healthy servers {rebuild['elections']}"
                    + (f", peer links closed as silent {rebuild['silent_links']}" if "silent_links" in rebuild else "")
                    + ("" if rebuild["load_running_at_end"] else " (load window ended before the rebuild did)"))
    return res


def find_leader(side: Side, deadline_s: float) -> int:
    if isinstance(side, ZabdSide):
        return asyncio.run(side.c.wait_leader(timeout=deadline_s))
    return side.c.wait_leader(side.ids, deadline_s)


_PROGRESS = re.compile(r"t=(\d+)s completed/s=")


def wait_progress(stderr_file: Path, warm: float, proc: subprocess.Popen[bytes], deadline_s: float) -> bool:
    """Wait (bounded) until ZkBench's progress passes its warm-up: the measured window has begun."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s and proc.poll() is None:
        ts = [int(m.group(1)) for m in _PROGRESS.finditer(stderr_file.read_text(errors="replace"))]
        if ts and max(ts) > warm:
            return True
        time.sleep(0.2)
    return False


# ------------------------------------------------------------------ report


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "n/a"


def number_at(r: dict[str, Any], *keys: str) -> float | None:
    """The number at ``r[k1][k2]...``, None if a key is missing or it is not a
    number (a flag is not one). The benches' result trees share this lookup."""
    v: Any = r
    for k in keys:
        if not isinstance(v, dict) or k not in v:
            return None
        v = v[k]
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def rows(r: dict[str, Any]) -> dict[str, float | None]:
    def g(*keys: str) -> float | None:
        return number_at(r, *keys)

    rss, disk = g("rss", "sum"), g("disk", "sum")
    rss_max, disk_max = g("rss", "max"), g("disk", "max")
    return {
        "load creates/s": g("load", "creates_per_s"),
        "load s": g("load", "seconds"),
        "RSS sum MiB": None if rss is None else rss / MiB,
        "RSS max MiB": None if rss_max is None else rss_max / MiB,
        "disk sum MiB": None if disk is None else disk / MiB,
        "disk max MiB": None if disk_max is None else disk_max / MiB,
        "getData ops/s": g("get", "ops_per_s"),
        "getData p50 ms": g("get", "lat_ms", "p50"),
        "getData p99 ms": g("get", "lat_ms", "p99"),
        "setData ops/s": g("set", "ops_per_s"),
        "setData p50 ms": g("set", "lat_ms", "p50"),
        "setData p99 ms": g("set", "lat_ms", "p99"),
        "restart stop s": g("restart", "stop_s"),
        "restart until serving s": g("restart", "serve_s"),
        "follower rebuild s": g("rebuild", "rebuild_s"),
        "healthy writes during rebuild ops/s": g("rebuild", "write_load", "ops_per_s"),
        "healthy write p99 during rebuild ms": g("rebuild", "write_load", "lat_ms", "p99"),
        "healthy write max during rebuild ms": g("rebuild", "write_load", "lat_ms", "max"),
        "elections during rebuild (healthy servers' role changes)": g("rebuild", "elections"),
        "peer links closed as silent during rebuild (zabd only)": g("rebuild", "silent_links"),
    }


def fmt(v: float | None, metric: str) -> str:
    if v is None:
        return "n/a"
    if "during rebuild (" in metric or v >= 100:
        return f"{v:,.0f}"
    return f"{v:,.2f}"


def medians(runs: list[dict[str, Any]]) -> tuple[dict[str, float | None], dict[str, tuple[float, float]]]:
    """Each metric's median over the runs (None if no run has it), and its (min, max)."""
    per = [rows(r) for r in runs]
    med: dict[str, float | None] = {}
    spread: dict[str, tuple[float, float]] = {}
    for k in rows({}):
        vals = [v for r in per if (v := r[k]) is not None]
        med[k] = statistics.median(vals) if vals else None
        if len(vals) > 1:
            spread[k] = (min(vals), max(vals))
    return med, spread


def table(n: int, runs: list[dict[str, dict[str, Any]]], args: argparse.Namespace) -> list[str]:
    """The metrics at ``n``: each system's median over ``runs`` (min-max beside it when
    there are several), and the ratio of the medians."""
    zk, zk_spread = medians([r.get("zookeeper", {}) for r in runs])
    zb, zb_spread = medians([r.get("zabd", {}) for r in runs])
    what = f"median of {len(runs)} runs (min-max)" if len(runs) > 1 else "one run"
    lines = [f"### N = {n:,} leaves of {args.data_bytes} B (fanout {FANOUT}), 3 nodes each; "
             f"reads/writes {args.payload} B, {args.warmup:g} s warm-up + {args.duration:g} s; {what}",
             "", "| metric | ZooKeeper 3.8 | zabd | zabd/ZooKeeper |", "|---|---:|---:|---:|"]

    def cell(v: float | None, spread: dict[str, tuple[float, float]], k: str) -> str:
        lo_hi = spread.get(k)
        return fmt(v, k) + (f" ({fmt(lo_hi[0], k)}-{fmt(lo_hi[1], k)})" if lo_hi else "")

    for k in zk:
        a, b = zb[k], zk[k]
        lines.append(f"| {k} | {cell(b, zk_spread, k)} | {cell(a, zb_spread, k)} "
                     f"| {_ratio(a, b) if 'during rebuild (' not in k else ''} |")
    for i, results in enumerate(runs):
        for system in SYSTEMS:
            if "error" in results.get(system, {}):
                lines.append(f"\n{LABEL[system]} (run {i + 1}): ERROR {results[system]['error']}")
    return lines


# ------------------------------------------------------------------ main


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(f"signal {signum}")


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s.replace("_", "")) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers, not {text!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError("positive integers only")
    for s in sizes:
        try:
            tree_shape(s, FANOUT)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s} is over the tree's 10,000,000 leaves") from None
    return sizes


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=parse_sizes, default=None, help="comma list of N (default 20000,1000000)")
    p.add_argument("--systems", default="zookeeper,zabd", help="comma list of zookeeper,zabd")
    p.add_argument("--data-bytes", type=int, default=100, help="bytes per leaf (100)")
    p.add_argument("--payload", type=int, default=1024, help="bytes per getData/setData of the load (1024)")
    p.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds of the read/write loads (5)")
    p.add_argument("--duration", type=float, default=10.0, help="measured seconds of the read/write loads (10)")
    p.add_argument("--rebuild-load-seconds", type=float, default=30.0,
                   help="measured seconds of the write load during the follower rebuild (30)")
    p.add_argument("--zk-heap", default="2g", help="ZooKeeper -Xms/-Xmx (2g)")
    p.add_argument("--load-max-seconds", type=float, default=1800.0, help="cap on each tree load (1800)")
    p.add_argument("--restart-max-seconds", type=float, default=300.0, help="cap on the restart wait (300)")
    p.add_argument("--rebuild-max-seconds", type=float, default=600.0, help="cap on the rebuild wait (600)")
    p.add_argument("--quick", action="store_true", help="smoke run: N=20000, 2 s + 3 s loads, 10 s rebuild load")
    p.add_argument("--runs", type=int, default=1, help="runs of everything; the table gives medians (1)")
    p.add_argument("--json", type=Path, help="also write the final JSON to this file")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error(f"--runs {args.runs}: expected at least 1")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not systems or any(s not in SYSTEMS for s in systems):
        p.error("--systems takes zookeeper and/or zabd")
    if args.data_bytes < 0 or args.payload < 1 or args.warmup < 0 or args.duration <= 0:
        p.error("--data-bytes >= 0, --payload >= 1, --warmup >= 0, --duration > 0")
    if args.quick:
        args.warmup, args.duration, args.rebuild_load_seconds = 2.0, 3.0, 10.0
    sizes = args.sizes or ([20000] if args.quick else [20000, 1000000])
    ok, why = available()
    if not ok or not Path(SLF4J).exists():
        print(f"zk_scale: {why or SLF4J + ' missing'}", file=sys.stderr)
        return 2
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries are our polls; their warnings are noise
    command = shlex.join([sys.executable, *sys.argv])
    print(f"$ {command}", flush=True)
    print(f"zabd's servers run on Python {sys.version.split()[0]}, {compiled.describe()}", flush=True)
    signal.signal(signal.SIGTERM, _sigterm)

    base = Path(tempfile.mkdtemp(prefix="zk-scale-"))
    results: dict[int, list[dict[str, dict[str, Any]]]] = {n: [] for n in sizes}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        compile_loader(base / "build")
        compile_zkbench(base / "build")
        for k, (run, n) in enumerate((run, n) for run in range(args.runs) for n in sizes):
            results[n].append({})
            for system in systems if k % 2 == 0 else systems[::-1]:
                log(f"{system} N={n:,} run {run + 1}/{args.runs}: box {busy_pct():.0f}% busy before the run")
                work = base / f"{system}-{n}-{run}"
                work.mkdir()
                (work / "build").symlink_to(base / "build")
                side: Side = ZkSide(work / "zk", args.zk_heap) if system == "zookeeper" else ZabdSide(work / "zabd")
                t0 = time.monotonic()
                try:
                    r = measure(side, n, args, work)
                except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError, ValueError) as e:
                    r = {"system": system, "n": n, "error": f"{type(e).__name__}: {e}"}
                    step(system, n, f"ERROR {r['error']}")
                finally:
                    side.stop()
                r["wall_s"] = round(time.monotonic() - t0, 1)
                results[n][-1][system] = r
                shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print()
    print(f"Command: `{command}`")
    for n in results:
        print()
        print("\n".join(table(n, results[n], args)))
    out = {"bench": "zk_scale", "command": command, "started": started,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
           "zabd_build": compiled.describe(), "config": {k: (str(v) if isinstance(v, Path) else v)
                                                         for k, v in vars(args).items()},
           "results": {str(n): v for n, v in results.items()}}
    line = json.dumps(out, separators=(",", ":"))
    print()
    if args.json:
        args.json.write_text(line + "\n")
    print(line, flush=True)
    return 1 if any("error" in r for v in results.values() for run in v for r in run.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

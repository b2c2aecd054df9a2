"""zabd next to Apache ZooKeeper 3.8, both driven by ZooKeeper's own Java client.

    python3 bench/zk_side_by_side.py                    # set + get, 2 rounds each (~10 min)
    python3 bench/zk_side_by_side.py --quick            # smoke run (~2 min, numbers meaningless)
    python3 bench/zk_side_by_side.py --ops get --rounds 3 --json /tmp/zkss.json

The issue's acceptance: ``bench/ZkBench.java`` (a copy of the anchor's
``../shared/anchors/zookeeper/ZkBench.java`` that adds ``--op get``) against
a 3-node zabd (disk storage, fsync on) and a 3-node ZooKeeper 3.8 (the anchor's
cluster.sh settings, forceSync=yes, 1 GiB heap) in one interleaved run:
8 sessions x 32 outstanding, ``--target spread`` (session i on server i mod 3),
1 KiB async ``setData`` of /zkbench/s<i>, and the same for async ``getData``.
Goal: zabd's throughput at least 1.5x ZooKeeper's for writes and at least
ZooKeeper's for reads, with a p99 no worse.

Method:

* For each op, rounds are interleaved: round 0 runs ZooKeeper then zabd, round
  1 zabd then ZooKeeper, and so on (ABBA), so a drift in the machine's load
  hurts both systems alike.
* Every run gets a fresh cluster (empty data dirs), started before and stopped
  after that one run. This is what the anchor does (every run on a fresh
  ensemble), it keeps one run's log/snapshot growth out of the next, and it
  means only one system's servers exist while the other is measured: an idle
  ensemble is not free (pings, ticks, JIT and GC threads) and would show up as
  foreign load. The price is ZooKeeper's JIT warm-up in every run, hence the
  warm-up below.
* Warm-up: the same for both systems (default 20 s, what ZooKeeper's JIT needs
  on this box, see the anchor's README). zabd needs far less, but an equal
  warm-up keeps the schedules identical; the measured window is the same too.
* Before each run the script waits (bounded, ``--quiet-wait``) until the box is
  at most ``--quiet-pct`` % busy, like the anchor's run.sh, and each row reports
  the CPU that other processes used during its measured window
  (``foreign_procs_pct`` from ZkBench's /proc accounting, % of one core).
  Runs are not rejected for it: read that column before trusting a number.
* CPU columns are % of ONE core over the measured window (servers summed, the
  Java client alone). zabd's servers run at ``log_level = "warning"`` as
  ``zabd bench --spawn`` runs them; ZooKeeper logs INFO to a file, as the
  anchor's cluster does (neither logs per request).

Output: the command, one line per run, a markdown table per op (median over
rounds), zabd/ZooKeeper ratios, and at the end one JSON line with everything
(``--json PATH`` writes it to a file too). Every process started here is
stopped by PID in ``finally`` blocks (SIGTERM is turned into an exception so
they run). Needs ``apt-get install zookeeper libslf4j-java default-jdk-headless``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

from zkcluster import ZkCluster, available, four_letter  # noqa: E402

from zabd import compiled  # noqa: E402
from zabd.client.spawn import LocalCluster, free_ports  # noqa: E402

JAVA_SRC = ROOT / "bench" / "ZkBench.java"
ZK_JAR = "/usr/share/java/zookeeper.jar"
SLF4J = "/usr/share/java/slf4j-simple.jar"
SYSTEMS = ("zookeeper", "zabd")
LABEL = {"zookeeper": "ZooKeeper 3.8", "zabd": "zabd"}
# goal per op: (min zabd/ZooKeeper ops/s ratio, max zabd/ZooKeeper p99 ratio)
GOALS = {"set": (1.5, 1.0), "get": (1.0, 1.0)}


def log(msg: str) -> None:
    print(f"[zk_side_by_side] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ machine


def busy_pct(interval: float = 2.0) -> float:
    """% of all cores busy over ``interval`` seconds (from /proc/stat)."""

    def snap() -> tuple[int, int]:
        f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
        return sum(f), f[3] + f[4]

    t0, i0 = snap()
    time.sleep(interval)
    t1, i1 = snap()
    return 100.0 * ((t1 - t0) - (i1 - i0)) / (t1 - t0) if t1 > t0 else 0.0


def wait_quiet(max_wait: float, pct: float) -> dict[str, float]:
    t0 = time.monotonic()
    busy = busy_pct()
    while busy > pct and time.monotonic() - t0 < max_wait:
        log(f"box busy ({busy:.0f}% of all cores); waiting (at most {max_wait - (time.monotonic() - t0):.0f}s more)")
        busy = busy_pct(5.0)
    return {"pre_run_busy_pct_of_all_cores": round(busy, 1), "quiet_wait_s": round(time.monotonic() - t0, 1)}


def _tail(path: Path, n: int) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


# ------------------------------------------------------------------ ZkBench


def compile_zkbench(build: Path) -> None:
    cls = build / "ZkBench.class"
    if cls.exists() and cls.stat().st_mtime >= JAVA_SRC.stat().st_mtime:
        return
    log(f"compiling {JAVA_SRC} into {build}")
    build.mkdir(parents=True, exist_ok=True)
    for old in build.glob("ZkBench*.class"):
        old.unlink()
    cmd = ["javac", "-implicit:none", "-Xlint:all,-path", "-cp", ZK_JAR, "-d", str(build), str(JAVA_SRC)]
    subprocess.run(cmd, check=True, timeout=180)


def run_zkbench(
    build: Path, args: argparse.Namespace, op: str, connect: str, leader: str, pids: list[int], label: str
) -> dict[str, Any]:
    argv = [
        "java", "-Xms512m", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.ClientCnxn=error",
        "-cp", f"{build}:{ZK_JAR}:{SLF4J}", "ZkBench",
        "--connect", connect, "--leader", leader, "--target", "spread",
        "--sessions", str(args.sessions), "--window", str(args.window), "--payload", str(args.payload),
        "--op", op, "--warmup", str(args.warmup), "--duration", str(args.duration),
        "--cpu-pids", ",".join(map(str, pids)), "--clk-tck", str(os.sysconf("SC_CLK_TCK")),
        "--label", label, "--max-seconds", str(int(args.warmup + args.duration + 60)), "--progress", "1",
    ]  # fmt: skip
    limit = args.warmup + args.duration + 150
    # subprocess.run kills (by PID) the client on timeout or on an exception here
    out = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": f"ZkBench exited {out.returncode}", "stderr_tail": out.stderr.strip()[-3000:]}
    r: dict[str, Any] = json.loads(lines[-1])
    rates = per_second_rates(out.stderr, args.warmup, args.duration)
    if rates:
        # how the rate moved inside the window: a run's median hides stretches of seconds
        r["per_second"] = {"min": rates[0], "median": rates[len(rates) // 2], "max": rates[-1], "seconds": len(rates)}
    # anything the Java client complained about (exceptions, disconnects) is worth keeping
    noise = [ln for ln in out.stderr.splitlines() if "Exception" in ln or "state " in ln or "WARN" in ln]
    if noise:
        r["client_stderr"] = noise[:40]
    return r


_PROGRESS = re.compile(r"t=(\d+)s completed/s=(\d+)")


def per_second_rates(stderr: str, warmup: float, duration: float) -> list[int]:
    """ZkBench's completed ops of each whole second inside the measured window, sorted."""
    rates = []
    for m in _PROGRESS.finditer(stderr):
        t = int(m.group(1))  # the second that ended t s after the load began
        if warmup < t <= warmup + duration:
            rates.append(int(m.group(2)))
    return sorted(rates)


# ------------------------------------------------------------------ one run per system


def run_zookeeper(build: Path, args: argparse.Namespace, op: str, base: Path, label: str) -> dict[str, Any]:
    cluster = ZkCluster(3, base / "zk", heap="1g")
    # zkcluster.py's fixed 2181x/2281x/2381x ports may be held by other ensembles on this box
    # (the anchor's, kazoo's test harness): take free ones instead, nothing else changes
    ports = free_ports(9)
    for k, i in enumerate(sorted(cluster.hosts)):
        cluster.client_ports[i], cluster.quorum_ports[i], cluster.election_ports[i] = ports[3 * k : 3 * k + 3]
    try:
        leader = cluster.start(timeout=90)
        pids = [cluster.procs[i].pid for i in sorted(cluster.procs)]
        connect = ",".join(cluster.client_addr(i) for i in sorted(cluster.hosts))
        r = run_zkbench(build, args, op, connect, cluster.client_addr(leader), pids, label)
        r["server_pids"] = pids
        if "error" in r:  # the data dir goes away with the run: keep the servers' last words
            r["server_log_tails"] = {
                i: _tail(cluster.base / str(i) / "zookeeper.log", 1500) for i in sorted(cluster.procs)
            }
        dead = [i for i, p in cluster.procs.items() if p.poll() is not None]
        if dead:
            r["dead_servers"] = dead
        return r
    finally:
        cluster.stop()


def run_zabd(build: Path, args: argparse.Namespace, op: str, base: Path, label: str) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    for item in args.zabd_set:  # as zabd bench --set: a server config field for every zabd node
        key, _, value = item.partition("=")
        extra[key] = int(value) if value.isdigit() else {"true": True, "false": False}.get(value, value)
    # every four-letter word, as the ZooKeeper side's zoo.cfg (bench/zkcluster.py); the wait below reads ruok
    extra.setdefault("zk_4lw_whitelist", "*")
    cluster = LocalCluster(3, storage=extra.pop("storage", "disk"), fsync=True, base_dir=base / "zabd",
                           log_level="warning", extra=extra)
    try:
        cluster.start()
        leader = asyncio.run(cluster.wait_leader(timeout=60))
        # the leader is known on zabd's own port; the ZooKeeper port must answer too
        deadline = time.monotonic() + 30
        deaf = list(range(1, cluster.n + 1))
        while deaf and time.monotonic() < deadline:
            deaf = [i for i in deaf if four_letter("127.0.0.1", cluster.zk_ports[i], "ruok").strip() != "imok"]
            if deaf:
                time.sleep(0.2)
        pids = [cluster.procs[i].pid for i in sorted(cluster.procs)]
        if deaf:
            r = {"error": f"zabd nodes {deaf}: ZooKeeper port does not answer ruok within 30 s"}
        else:
            r = run_zkbench(build, args, op, cluster.zk_hosts, cluster.zk_addr(leader), pids, label)
        r["server_pids"] = pids
        if "error" in r:  # the data dir goes away with the run: keep the servers' last words
            r["server_log_tails"] = {i: cluster.log_text(i)[-1500:] for i in sorted(cluster.procs)}
        dead = [i for i in sorted(cluster.procs) if not cluster.alive(i)]
        if dead:
            r["dead_servers"] = dead
            r["dead_server_log_tail"] = cluster.log_text(dead[0])[-2000:]
        return r
    finally:
        cluster.stop()


# ------------------------------------------------------------------ tables


def clean(run: dict[str, Any]) -> bool:
    """A round that measured what it was meant to: it ran, completed writes,
    and no request failed (a disconnected client is not a slow server)."""
    return "error" not in run and run["errors"] == 0 and run["ops_per_s"] > 0


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if clean(r)]
    if not ok:
        return {"runs": len(runs), "ok_runs": 0}

    def med(f: Any) -> float:
        return round(statistics.median(f(r) for r in ok), 3)

    return {
        "runs": len(runs),
        "ok_runs": len(ok),
        "ops_per_s": med(lambda r: r["ops_per_s"]),
        "p50_ms": med(lambda r: r["lat_ms"]["p50"]),
        "p99_ms": med(lambda r: r["lat_ms"]["p99"]),
        "p999_ms": med(lambda r: r["lat_ms"]["p999"]),
        "servers_cpu_pct": med(lambda r: r["cpu"]["servers_pct"]),
        "client_cpu_pct": med(lambda r: r["cpu"]["client_pct"]),
        "foreign_cpu_pct": med(lambda r: r["cpu"]["foreign_procs_pct"]),
        "foreign_cpu_pct_max": max(r["cpu"]["foreign_procs_pct"] for r in ok),
        "errors": sum(r.get("errors", 0) for r in runs),
        "all_drained": all(r["drained"] for r in ok),
        "ops_per_s_all": [r["ops_per_s"] for r in ok],
        "p99_ms_all": [r["lat_ms"]["p99"] for r in ok],
    }


def table(op: str, summ: dict[str, dict[str, Any]], args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    what = {"set": "setData", "get": "getData"}[op]
    lines = [
        f"### {args.payload} B {what}, 3 nodes, {args.sessions} sessions x {args.window} outstanding, "
        f"spread, median of {args.rounds} round(s) ({args.warmup:g} s warm-up, {args.duration:g} s window)",
        "",
        "| system | ops/s | p50 ms | p99 ms | p99.9 ms | server CPU % | client CPU % | foreign CPU % | errors "
        "| ops/s per round |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for system in SYSTEMS:
        s = summ[system]
        if not s.get("ok_runs"):
            lines.append(f"| {LABEL[system]} | no successful run | | | | | | | | |")
            continue
        per = ", ".join(f"{v:.0f}" for v in s["ops_per_s_all"])
        lines.append(
            f"| {LABEL[system]} | {s['ops_per_s']:.0f} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {s['p999_ms']:.2f} "
            f"| {s['servers_cpu_pct']:.0f} | {s['client_cpu_pct']:.0f} | {s['foreign_cpu_pct']:.0f} "
            f"(max {s['foreign_cpu_pct_max']:.0f}) | {s['errors']} | {per} |"
        )
    ratios: dict[str, Any] = {}
    zk, zb = summ["zookeeper"], summ["zabd"]
    if zk.get("ok_runs") and zb.get("ok_runs"):
        ops_ratio = zb["ops_per_s"] / zk["ops_per_s"] if zk["ops_per_s"] else float("nan")
        p99_ratio = zb["p99_ms"] / zk["p99_ms"] if zk["p99_ms"] else float("nan")
        min_ops, max_p99 = GOALS[op]
        failed = sum(summ[system]["runs"] - summ[system]["ok_runs"] for system in SYSTEMS)
        met = ops_ratio >= min_ops and p99_ratio <= max_p99 and not failed
        ratios = {
            "ops_per_s": round(ops_ratio, 3),
            "p99": round(p99_ratio, 3),
            "goal": f"ops/s ratio >= {min_ops}, p99 ratio <= {max_p99}",
            "goal_met": met,
        }
        lines += [
            "",
            f"zabd/ZooKeeper: ops/s x{ops_ratio:.2f} (goal >= {min_ops}), p99 x{p99_ratio:.2f} (goal <= {max_p99})"
            f" -> goal {'MET' if met else 'NOT met'}"
            + (f" ({failed} round(s) failed or had errors: not a clean run)" if failed else ""),
        ]
    return lines, ratios


# ------------------------------------------------------------------ main


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(f"signal {signum}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2, help="runs per system and op, interleaved (default 2)")
    p.add_argument("--warmup", type=float, default=20.0, help="unmeasured seconds per run, both systems (20)")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per run (20)")
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--window", type=int, default=32, help="outstanding requests per session (32)")
    p.add_argument("--payload", type=int, default=1024, help="bytes per znode (1024)")
    p.add_argument("--ops", default="set,get", help="comma list of set,get (default set,get)")
    p.add_argument("--systems", default="zookeeper,zabd", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="smoke run: 1 round, 3 s warm-up, 5 s window")
    p.add_argument("--json", type=Path, help="also write the final JSON to this file")
    p.add_argument("--zabd-set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a zabd server config field (repeatable), e.g. leader_early_propose=true")
    p.add_argument(
        "--build",
        type=Path,
        default=Path(tempfile.gettempdir()) / "zk_side_by_side_build",
        help="where ZkBench.java is compiled (recompiled when stale)",
    )
    p.add_argument("--quiet-wait", type=float, default=120.0, help="max seconds to wait for a quiet box per run")
    p.add_argument("--quiet-pct", type=float, default=15.0, help="%% of all cores busy counted as quiet (15)")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup, args.duration = 1, 3.0, 5.0
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    if not ops or any(o not in GOALS for o in ops):
        p.error("--ops takes set and/or get")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    command = shlex.join([sys.executable, *sys.argv])
    print(f"$ {command}", flush=True)
    # the servers run on this interpreter, and its build changes their CPU a write (docs/zookeeper.md)
    python = f"Python {sys.version.split()[0]} of {sys.base_prefix}"
    # a source edited after the mypyc build makes every module pure Python: ~25 % slower servers
    build = compiled.describe()
    print(f"zabd's servers run on {python}, {build}", flush=True)
    ok, why = available()
    if not ok or not Path(SLF4J).exists():
        print(f"zk_side_by_side: {why or SLF4J + ' missing'}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _sigterm)
    compile_zkbench(args.build)

    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results: dict[str, dict[str, list[dict[str, Any]]]] = {op: {s: [] for s in SYSTEMS} for op in ops}
    base = Path(tempfile.mkdtemp(prefix="zk-side-by-side-"))
    try:
        for op in ops:
            for rnd in range(args.rounds):
                order = systems if rnd % 2 == 0 else systems[::-1]
                for system in order:
                    quiet = wait_quiet(args.quiet_wait, args.quiet_pct)
                    label = f"{system} {op} round {rnd}"
                    log(
                        f"{label}: starting a fresh 3-node cluster (box {quiet['pre_run_busy_pct_of_all_cores']}% "
                        "busy before)"
                    )
                    t0 = time.monotonic()
                    try:
                        run = run_zookeeper if system == "zookeeper" else run_zabd
                        r = run(args.build, args, op, base / f"{op}-{rnd}", label)
                    except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError, ValueError) as e:
                        r = {"error": f"{type(e).__name__}: {e}"}
                    r.update(quiet, system=system, round=rnd, op=op, wall_s=round(time.monotonic() - t0, 1))
                    results[op][system].append(r)
                    if "error" in r:
                        log(f"{label}: ERROR {r['error']}\n{r.get('stderr_tail', '')}")
                        for i, tail in r.get("server_log_tails", {}).items():
                            log(f"{label}: server {i} log tail:\n{tail[-600:]}")
                    else:
                        print(
                            f"{label}: {r['ops_per_s']:,.0f} ops/s p50 {r['lat_ms']['p50']:.2f} p99 "
                            f"{r['lat_ms']['p99']:.2f} p99.9 {r['lat_ms']['p999']:.2f} ms, errors {r['errors']}, "
                            f"servers {r['cpu']['servers_pct']:.0f}% client {r['cpu']['client_pct']:.0f}% "
                            f"foreign {r['cpu']['foreign_procs_pct']:.0f}% {r['cpu']['foreign_top']}"
                            + (f", per second {r['per_second']['min']:,}-{r['per_second']['max']:,}"
                               if "per_second" in r else ""),
                            flush=True,
                        )
                        for line in r.get("client_stderr", [])[:10]:
                            log(f"{label}: client stderr: {line}")
    finally:
        shutil.rmtree(base, ignore_errors=True)

    out: dict[str, Any] = {
        "command": command,
        "started": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cores": os.cpu_count(),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "zabd": {"nodes": 3, "storage": "disk", "fsync": True, "log_level": "warning", "set": args.zabd_set,
                 "python": python, "build": build},
        "zookeeper": {"nodes": 3, "version": "3.8.0 (Debian)", "forceSync": "yes", "heap": "1g"},
        "ops": {},
    }
    print()
    print(f"Command: `{command}`")
    if args.warmup < 15:
        print("\nNOTE: warm-up under 15 s: ZooKeeper is still JIT-cold, so these ratios mean nothing (smoke run).")
    for op in ops:
        summ = {s: summary(results[op][s]) for s in SYSTEMS}
        lines, ratios = table(op, summ, args)
        print()
        print("\n".join(lines))
        out["ops"][op] = {"summary": summ, "ratio_zabd_over_zookeeper": ratios, "runs": results[op]}
    print()
    line = json.dumps(out, separators=(",", ":"))
    if args.json:
        args.json.write_text(line + "\n")
    print(line, flush=True)
    failed = any("error" in r for op in ops for s in SYSTEMS for r in results[op][s])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

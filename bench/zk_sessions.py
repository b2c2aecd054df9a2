"""Session storms: 10,000 sessions with a watch each on one 3-node cluster, zabd beside ZooKeeper 3.8 (issue 39).

    python3 bench/zk_sessions.py                       # 10,000 sessions, both systems (a few minutes)
    python3 bench/zk_sessions.py --quick               # 1,000 sessions
    python3 bench/zk_sessions.py --sessions 3000 --systems zabd --json /tmp/s.json

The clients are real: ``bench/zk_sessions/main.go``, built here against go-zookeeper/zk
v1.0.4 (``--src``/``$GOZK_SRC``, default the copy in third_party/go-zookeeper-zk; Debian's go 1.19, no module proxy),
one process holding every session, each its own ``*zk.Conn`` (own TCP connection, pings,
reconnects, SetWatches). Session i lists the servers in a fixed order, server i%3 first and the
other two alternating, so the clients of a dead server split over the other two.

For each system (interleaved: ZooKeeper first, then zabd; ``--runs`` alternates the order), a fresh
3-node cluster with fsync on (zabd: LocalCluster, disk storage, ``max_client_cnxns = 0``;
ZooKeeper: bench/zkcluster.py's settings plus ``maxClientCnxns=0``), session timeout
``--timeout-ms`` (10 s: tickTime 2000 allows 4-40 s), then:

1. connect storm: all sessions start at once; each connects, sets a data watch on the shared
   znode /zs/w (GetW) and creates its ephemeral /zs/e/<name>; seconds until all are connected,
   watching, holding their ephemeral; sessions per server; servers' RSS.
2. reconnect storm, follower: SIGKILL one follower; seconds from the first disconnection seen
   until every one of its sessions is attached again to another server; then one setData of
   /zs/w: notifications received / expected (every live session, once). The follower is
   restarted and rejoins.
3. reconnect storm, leader: the same with the leader (the others elect a new one meanwhile);
   it is restarted too.
4. expire storm: ``--expire`` sessions (default a fifth) stop without closing: their TCP
   connections close and they dial no more (as a killed process's); seconds until the servers
   removed all their ephemerals, and the other sessions' ephemerals all still there.

"Told expired" counts every live session that saw StateExpired (a re-attach refused as
expired, or the server's expiry event) or got a new session id: its client never stopped
trying, so each one is a session wrongly expired. The run fails (exit 1) if any is.

Output: progress on stderr, a markdown table with both systems and the zabd/ZooKeeper ratio,
a final JSON line (``--json PATH`` writes it too). Every process started here is stopped by
PID in finally blocks; every wait has a deadline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from zk_scale import number_at  # noqa: E402
from zkcluster import ZkCluster, available, mode  # noqa: E402

from zabd import compiled  # noqa: E402
from zabd.client.spawn import LocalCluster, free_ports  # noqa: E402

DRIVER_SRC = ROOT / "bench" / "zk_sessions" / "main.go"
DEFAULT_SRC = os.environ.get("GOZK_SRC", str(ROOT / "third_party" / "go-zookeeper-zk"))
SYSTEMS = ("zookeeper", "zabd")
LABEL = {"zookeeper": "ZooKeeper 3.8", "zabd": "zabd"}
MiB = 1 << 20


class SetupError(Exception):
    pass


def log(msg: str) -> None:
    print(f"[zk_sessions] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the driver


def driver_available(src: str | Path) -> tuple[bool, str]:
    """Whether the driver can be built here: go on the PATH and the go-zookeeper source at ``src``."""
    if shutil.which("go") is None:
        return False, "no go on the PATH (apt-get install -y golang-go)"
    if not (Path(src) / "conn.go").exists():
        return False, f"no go-zookeeper/zk v1.0.4 source at {src} (set GOZK_SRC; see docs/zookeeper.md)"
    return True, ""


def build_driver(dest: Path, src: str | Path) -> Path:
    """Build the driver in ``dest`` against the source at ``src`` (a module replace: no proxy)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(DRIVER_SRC, dest / "main.go")
    (dest / "go.mod").write_text(
        "module zksessions\n\ngo 1.19\n\nrequire github.com/go-zookeeper/zk v1.0.4\n\n"
        f"replace github.com/go-zookeeper/zk => {Path(src).resolve()}\n"
    )
    env = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    r = subprocess.run(["go", "build", "-o", "driver", "."], cwd=dest, env=env, capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        raise SetupError(f"building the driver failed: {r.stderr.strip()[-800:]}")
    return dest / "driver"


class Driver:
    """The driver process: one command a line in, one JSON line out."""

    def __init__(self, binary: Path, servers: list[str], timeout_ms: int, expire: int, deadline_s: float,
                 stderr: IO[bytes] | None = None) -> None:
        argv = [str(binary), "-servers", ",".join(servers), "-timeout", f"{timeout_ms}ms",
                "-deadline", f"{deadline_s:g}s", "-expire-group", str(expire)]
        self.deadline_s = deadline_s
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                     preexec_fn=_raise_nofile)
        self.ready = self._read(60.0)

    def _read(self, timeout: float) -> dict[str, Any]:
        import selectors

        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            if not sel.select(timeout):
                raise TimeoutError(f"the driver did not answer within {timeout:.0f} s")
        finally:
            sel.close()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the driver exited ({self.proc.wait(10)})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def cmd(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        # every wait in the driver is bounded by its deadline; fire waits twice
        return self._read(3 * self.deadline_s + 30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


def _raise_nofile() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def nofile_needed(sessions: int) -> str:
    """Empty if this process may open enough descriptors for ``sessions``, else why not."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = sessions + 1000
    return "" if hard == resource.RLIM_INFINITY or hard >= need else (
        f"ulimit -Hn is {hard}; {sessions} sessions need about {need} descriptors")


# ------------------------------------------------------------------ the two clusters


class ZkSide:
    """A 3-node ZooKeeper ensemble: zkcluster.py's config with maxClientCnxns=0 (60 per address by default)."""

    system = "zookeeper"

    def __init__(self, base: Path, heap: str) -> None:
        self.c = ZkCluster(3, base, heap=heap, spawn=self._spawn)
        ports = free_ports(9)  # zkcluster's fixed ports may be held by other ensembles on this box
        for k, i in enumerate(sorted(self.c.hosts)):
            self.c.client_ports[i], self.c.quorum_ports[i], self.c.election_ports[i] = ports[3 * k : 3 * k + 3]
        self.ids = sorted(self.c.hosts)
        self.argv: dict[int, list[str]] = {}

    def _spawn(self, i: int, argv: list[str], out: Path) -> subprocess.Popen[bytes]:
        cfg = Path(argv[-1])  # written by ZkCluster.start just before
        if "maxClientCnxns" not in cfg.read_text():
            with open(cfg, "a") as f:
                f.write("maxClientCnxns=0\n")
        self.argv[i] = argv
        with open(out, "ab") as f:
            return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    preexec_fn=_raise_nofile)

    def start(self) -> None:
        self.c.start(timeout=120)

    def addr(self, i: int) -> str:
        return self.c.client_addr(i)

    def pid(self, i: int) -> int:
        return self.c.procs[i].pid

    def kill(self, i: int) -> None:
        self.c.kill(i)

    def restart(self, i: int) -> None:
        self.c.procs[i] = self._spawn(i, self.argv[i], self.c.base / str(i) / "stdout.log")

    def stop(self) -> None:
        self.c.stop()


class ZabdSide:
    """A 3-node zabd cluster (LocalCluster, disk, fsync), no per-address connection limit."""

    system = "zabd"

    def __init__(self, base: Path, extra: dict[str, Any] | None = None) -> None:
        self.c = LocalCluster(3, storage="disk", fsync=True, base_dir=base, log_level="info",
                              extra={"zk_4lw_whitelist": "*", "max_client_cnxns": 0, **(extra or {})})
        self.ids = [1, 2, 3]

    def start(self) -> None:
        self.c.start()

    def addr(self, i: int) -> str:
        return self.c.zk_addr(i)

    def pid(self, i: int) -> int:
        return self.c.procs[i].pid

    def kill(self, i: int) -> None:
        self.c.kill(i)

    def restart(self, i: int) -> None:
        self.c.start_node(i)

    def stop(self) -> None:
        self.c.stop()


Side = ZkSide | ZabdSide


def wait_serving(side: Side, nodes: list[int], deadline_s: float) -> int:
    """Wait until ``nodes`` all serve (srvr's Mode), one of them leading; return the leader."""
    t0 = time.monotonic()
    modes: dict[int, str] = {}
    while time.monotonic() - t0 < deadline_s:
        modes = {i: mode(host, int(port)) for i in nodes for host, port in [side.addr(i).rsplit(":", 1)]}
        leaders = [i for i, m in modes.items() if m == "leader"]
        if len(leaders) == 1 and all(m in ("leader", "follower") for m in modes.values()):
            return leaders[0]
        time.sleep(0.1)
    raise TimeoutError(f"{side.system} not serving on {nodes} after {deadline_s:.0f} s: {modes}")


def rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# ------------------------------------------------------------------ one system


def expect_ok(answer: dict[str, Any], what: str) -> dict[str, Any]:
    if not answer.get("ok", True):
        raise RuntimeError(f"{what}: {json.dumps(answer)[:600]}")
    return answer


def storm(side: Side, drv: Driver, victim: int, res: dict[str, Any], key: str) -> None:
    """SIGKILL ``victim``; wait until its sessions are attached elsewhere; fire the shared watch once."""
    addr = side.addr(victim)
    armed = drv.cmd(f"arm {addr}")
    log(f"{side.system}: SIGKILL server {victim} ({key}), {armed['affected']} sessions on it")
    side.kill(victim)
    moved = drv.cmd("moved")
    fire = drv.cmd("fire")
    res[key] = {"server": victim, "affected": armed["affected"], "moved": moved, "fire": fire}
    log(f"{side.system}: {moved['moved']}/{armed['affected']} moved in {moved.get('moved_s', -1):.2f} s, "
        f"told expired so far {moved['sessions_told_expired']}; watch fired for {fire['sessions_notified']}/"
        f"{fire['expected']} ({fire['received']} notifications) in {fire.get('all_notified_s', -1):.2f} s")
    expect_ok(moved, f"{key}: not every session moved")
    expect_ok(fire, f"{key}: not every watch fired")


def measure(side: Side, binary: Path, args: argparse.Namespace, work: Path, res: dict[str, Any]) -> None:
    """Fills ``res`` as it goes: a failure keeps what was measured before it."""
    res["servers"] = {side.addr(i): f"server {i}" for i in side.ids}
    side.start()
    leader = wait_serving(side, side.ids, 120)
    log(f"{side.system}: cluster up, leader {leader}, pids {[side.pid(i) for i in side.ids]}")
    with open(work / "driver.err", "wb") as err:
        drv = Driver(binary, [side.addr(i) for i in side.ids], args.timeout_ms, args.expire, args.deadline, err)
        try:
            run_storms(side, drv, leader, args, res)
        finally:
            drv.stop()


def run_storms(side: Side, drv: Driver, leader: int, args: argparse.Namespace, res: dict[str, Any]) -> None:
    # 1. connect storm
    log(f"{side.system}: connect storm of {args.sessions} sessions")
    opened = drv.cmd(f"open {args.sessions}")
    res["connect"] = opened
    res["rss_mib"] = {i: round(rss(side.pid(i)) / MiB, 1) for i in side.ids}
    log(f"{side.system}: all connected {opened['connected_s']:.2f} s, watching {opened['watching_s']:.2f} s, "
        f"ephemerals {opened['ready_s']:.2f} s; per server {opened['per_server']}; RSS MiB {res['rss_mib']}")
    expect_ok(opened, "connect storm: not every session connected and watched")

    # 2. a follower dies: its clients move at once
    follower = next(i for i in side.ids if i != leader)
    storm(side, drv, follower, res, "follower_kill")
    side.restart(follower)
    leader = wait_serving(side, side.ids, 120)

    # 3. the leader dies: its clients move while the others elect
    if not args.no_leader_kill:
        storm(side, drv, leader, res, "leader_kill")
        side.restart(leader)
        wait_serving(side, side.ids, 120)

    # 4. the expire group stops without closing
    log(f"{side.system}: expire storm, {args.expire} sessions stop without closing")
    drv.cmd("abandon")
    gone = drv.cmd("gone")
    census = drv.cmd("census")
    res["expire"] = {"gone": gone, "census": census}
    left = census.get("ephemerals", {})
    log(f"{side.system}: expire group's ephemerals gone after {gone['gone_s']:.2f} s; ephemerals left {left} "
        f"(kept sessions: {args.sessions - args.expire}); told expired {census.get('sessions_told_expired')}")
    expect_ok(gone, "expire storm: the expire group's ephemerals did not all go")
    if left.get("m") != args.sessions - args.expire:
        raise RuntimeError(f"expire storm: {left.get('m')} of the kept sessions' "
                           f"{args.sessions - args.expire} ephemerals left")


# ------------------------------------------------------------------ report


def metric_rows(r: dict[str, Any]) -> dict[str, float | None]:
    def g(*keys: str) -> float | None:
        return number_at(r, *keys)

    rss_sum = sum(r["rss_mib"].values()) if "rss_mib" in r else None
    return {
        "connect storm: all connected s": g("connect", "connected_s"),
        "connect storm: all watching s": g("connect", "watching_s"),
        "connect storm: all ephemerals created s": g("connect", "ready_s"),
        "servers' RSS sum at N sessions MiB": rss_sum,
        "follower killed: sessions on it": g("follower_kill", "affected"),
        "follower killed: all re-attached s": g("follower_kill", "moved", "moved_s"),
        "follower killed: watch notifications / expected": _frac(r, "follower_kill"),
        "follower killed: all notified s": g("follower_kill", "fire", "all_notified_s"),
        "leader killed: sessions on it": g("leader_kill", "affected"),
        "leader killed: all re-attached s": g("leader_kill", "moved", "moved_s"),
        "leader killed: sessions the followers dropped (no leader)": g("leader_kill", "moved", "others_dropped"),
        "leader killed: every dropped session back s": g("leader_kill", "moved", "all_back_s"),
        "leader killed: watch notifications / expected": _frac(r, "leader_kill"),
        "leader killed: all notified s": g("leader_kill", "fire", "all_notified_s"),
        "expire storm: all ephemerals gone s": g("expire", "gone", "gone_s"),
        "sessions told expired (must be 0)": _told(r),
        "client dials that timed out (1 s), whole run": _last(r, "dial_timeouts"),
        "client connect attempts, whole run": _last(r, "connect_attempts"),
    }


def _frac(r: dict[str, Any], key: str) -> float | None:
    f = r.get(key, {}).get("fire")
    return f["received"] / f["expected"] if f and f.get("expected") else None


def _told(r: dict[str, Any]) -> float | None:
    return _last(r, "sessions_told_expired")


def _last(r: dict[str, Any], key: str) -> float | None:
    """``key`` of the driver's last answer: its counts are cumulative over the run."""
    for keys in (("expire", "census"), ("expire", "gone"), ("leader_kill", "fire"), ("leader_kill", "moved"),
                 ("follower_kill", "fire"), ("follower_kill", "moved"), ("connect",)):
        v: Any = r
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        if isinstance(v, dict) and key in v:
            return float(v[key])
    return None


def fmt(v: float | None, metric: str) -> str:
    if v is None:
        return "n/a"
    if "/ expected" in metric:
        return f"{v:.4f}"
    if "sessions" in metric or "client" in metric:
        return f"{v:,.0f}"
    return f"{v:,.2f}"


def table(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[str]:
    zk, zb = metric_rows(results.get("zookeeper", {})), metric_rows(results.get("zabd", {}))
    lines = [f"### {args.sessions:,} sessions (each a data watch and an ephemeral), 3 nodes, fsync on, "
             f"session timeout {args.timeout_ms} ms; expire group {args.expire:,}",
             "", "| metric | ZooKeeper 3.8 | zabd | zabd/ZooKeeper |", "|---|---:|---:|---:|"]
    for k in zk:
        a, b = zb[k], zk[k]
        ratio = f"{a / b:.2f}" if a is not None and b and k.endswith(" s") else ""
        lines.append(f"| {k} | {fmt(b, k)} | {fmt(a, k)} | {ratio} |")
    for system in SYSTEMS:
        r = results.get(system, {})
        if "connect" in r:
            names = r.get("servers", {})
            per = dict(sorted((names.get(a, a), n) for a, n in r["connect"].get("per_server", {}).items()))
            lines.append(f"\n{LABEL[system]}: sessions per server after the connect storm {per}; "
                         f"servers' RSS MiB {r.get('rss_mib')}")
        if "error" in r:
            lines.append(f"\n{LABEL[system]}: ERROR {r['error']}")
    return lines


# ------------------------------------------------------------------ main


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(f"signal {signum}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=10_000, help="concurrent sessions (10000)")
    p.add_argument("--expire", type=int, default=None, help="sessions of the expire storm (a fifth)")
    p.add_argument("--timeout-ms", type=int, default=10_000, help="session timeout asked for (10000)")
    p.add_argument("--deadline", type=float, default=120.0, help="bound on each wait, seconds (120)")
    p.add_argument("--systems", default="zookeeper,zabd", help="comma list of zookeeper,zabd")
    p.add_argument("--no-leader-kill", action="store_true", help="skip the leader's reconnect storm")
    p.add_argument("--zk-heap", default="1g", help="ZooKeeper -Xms/-Xmx (1g)")
    p.add_argument("--src", default=DEFAULT_SRC,
                   help="go-zookeeper/zk v1.0.4 source ($GOZK_SRC; default third_party/go-zookeeper-zk)")
    p.add_argument("--quick", action="store_true", help="1,000 sessions")
    p.add_argument("--json", type=Path, help="also write the final JSON to this file")
    p.add_argument("--zabd-set", action="append", default=[], metavar="FIELD=JSON",
                   help="a zabd config field for this run, e.g. client_backlog=100 (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep the servers' logs and data (the path is printed)")
    args = p.parse_args(argv)
    if args.quick:
        args.sessions = 1000
    args.zabd_extra = {}
    for item in args.zabd_set:
        field, eq, value = item.partition("=")
        try:
            args.zabd_extra[field.strip()] = json.loads(value)
        except ValueError:
            p.error(f"--zabd-set {item!r}: FIELD=JSON, e.g. client_backlog=100")
        if not eq:
            p.error(f"--zabd-set {item!r}: FIELD=JSON, e.g. client_backlog=100")
    if args.expire is None:
        args.expire = args.sessions // 5
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not systems or any(s not in SYSTEMS for s in systems):
        p.error("--systems takes zookeeper and/or zabd")
    if args.sessions < 3 or not 0 < args.expire < args.sessions:
        p.error("--sessions >= 3 and 0 < --expire < --sessions")
    if not 4000 <= args.timeout_ms <= 40000:
        p.error("--timeout-ms between 4000 and 40000 (tickTime 2000: what both servers allow)")
    for ok, why in (driver_available(args.src), available() if "zookeeper" in systems else (True, ""),
                    (not nofile_needed(args.sessions), nofile_needed(args.sessions))):
        if not ok:
            print(f"zk_sessions: {why}", file=sys.stderr)
            return 2
    command = shlex.join([sys.executable, *sys.argv])
    print(f"$ {command}", flush=True)
    print(f"zabd's servers run on Python {sys.version.split()[0]}, {compiled.describe()}", flush=True)
    signal.signal(signal.SIGTERM, _sigterm)
    _raise_nofile()  # zabd's servers inherit it

    base = Path(tempfile.mkdtemp(prefix="zk-sessions-"))
    results: dict[str, dict[str, Any]] = {}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        binary = build_driver(base / "driver", args.src)
        for system in systems:
            work = base / system
            work.mkdir()
            side: Side = (ZkSide(work / "zk", args.zk_heap) if system == "zookeeper"
                          else ZabdSide(work / "zabd", args.zabd_extra))
            t0 = time.monotonic()
            r: dict[str, Any] = {"system": system, "sessions": args.sessions, "expire_group": args.expire}
            try:
                measure(side, binary, args, work, r)
            except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError, ValueError) as e:
                r["error"] = f"{type(e).__name__}: {e}"
                log(f"{system}: ERROR {r['error']}")
                with contextlib.suppress(OSError):
                    log(f"{system}: driver stderr tail: {(work / 'driver.err').read_text()[-600:]}")
            finally:
                side.stop()
            r["wall_s"] = round(time.monotonic() - t0, 1)
            results[system] = r
    except SetupError as e:
        print(f"zk_sessions: {e}", file=sys.stderr)
        return 2
    finally:
        if args.keep:
            log(f"servers' logs and data kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)

    print()
    print(f"Command: `{command}`")
    print()
    print("\n".join(table(results, args)))
    out = {"bench": "zk_sessions", "command": command, "started": started,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
           "zabd_build": compiled.describe(), "config": {k: (str(v) if isinstance(v, Path) else v)
                                                         for k, v in vars(args).items()},
           "results": results}
    line = json.dumps(out, separators=(",", ":"))
    print()
    if args.json:
        args.json.write_text(line + "\n")
    print(line, flush=True)
    wrong = any((_told(r) or 0) > 0 for r in results.values())
    return 1 if wrong or any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

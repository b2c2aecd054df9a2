"""Import speed at N znodes: ``zabd import-zookeeper`` against ZooKeeper 3.8's own restart (issue 40).

    python3 bench/zk_import.py                           # N = 1,000,000 (the scale benchmark's tree)
    python3 bench/zk_import.py --znodes 20000            # smoke run (about a minute)
    python3 bench/zk_import.py --runs 3 --json /tmp/zk_import.json
    python3 bench/zk_import.py --znodes 20000 --keep --work /tmp/zi    # keep the data dirs and logs
    python3 bench/zk_import.py --profile 25              # also a cProfile of the import, top 25 by cumtime

The issue's proof: "Import speed at 1M znodes (the data set of the scale benchmark) against
ZooKeeper's own restart from the same directory: a figure and a ratio." Each run:

1. A 3-node ZooKeeper 3.8 ensemble (bench/zk_scale.py's ZkSide: bench/zkcluster.py's settings,
   forceSync=yes, separate dataDir and dataLogDir, --zk-heap) is started empty and loaded with
   zk_scale's tree through bench/ZkTreeLoad.java (1,000 parents x 1,000 leaves of 100 B at 1M).
2. --set-data setData on random leaves (seeded), the last one on the last leaf, so that the log
   after the newest snapshot is not empty and the last leaf's bytes are only in that log.
3. The reference: through kazoo, after a sync, data + Stat (all 11 fields) + ACL of /m, every
   parent, --sample random leaves, up to 100 of the leaves the setData changed and the last leaf.
   Then all three servers are stopped (SIGTERM by PID, SIGKILL after 120 s).
4. ``python -m zabd import-zookeeper`` on the leader's data (snapshots and logs) with --nodes 3,
   timed: wall, CPU (user + sys) and peak RSS from ``os.wait4``'s rusage, also the largest RSS
   sum of its process tree seen by sampling; its own output kept in the run dir.
5. zabd on the import: LocalCluster on the output dir (as zk_scale's zabd side: disk, fsync on),
   timed from the spawn until all three answer 4lw ``srvr`` as leader/follower, then until a
   kazoo poll (zk_scale's: one connection per try) reads the last leaf with the reference's
   bytes. The reference paths are read again and compared field by field (0 expected).
6. ZooKeeper's restart from the same directories, timed the same way; its tree is compared too.

The import runs before ZooKeeper's restart because that restart rewrites the directory: the
leader takes a snapshot of what it loaded and every server moves to a new epoch. Run first, the
import reads exactly what the restart then reads (page cache warm for both: the files were just
written). "Serves" = all three report leader/follower and the last leaf reads back.

Output: progress on stderr, one line per step on stdout, a markdown table (medians over --runs,
min-max beside them), the import's own output (tail), and one JSON line (--json writes it too).
Every process is stopped by PID in finally blocks; every wait has a deadline.
Needs ``apt-get install zookeeper libslf4j-java default-jdk-headless`` and kazoo.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from zk_memory import compile_loader, rss_bytes, tree_shape  # noqa: E402
from zk_scale import FANOUT, SLF4J, ZkSide, dir_bytes, last_leaf, number_at, poll_get, run_loader  # noqa: E402
from zk_side_by_side import busy_pct  # noqa: E402
from zkcluster import available, four_letter  # noqa: E402

from zabd import compiled  # noqa: E402
from zabd.client.spawn import LocalCluster  # noqa: E402

MiB = 1 << 20
TIME = "/usr/bin/time"  # GNU time: the import's own peak RSS and CPU
IDS = (1, 2, 3)
STAT_FIELDS = ("czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion", "ephemeralOwner",
               "dataLength", "numChildren", "pzxid")  # fmt: skip

# (data, Stat as a tuple in STAT_FIELDS order, ACL as sorted (perms, scheme, id))
NodeView = tuple[bytes, tuple[int, ...], tuple[tuple[int, str, str], ...]]


def log(msg: str) -> None:
    print(f"[zk_import] {msg}", file=sys.stderr, flush=True)


def step(msg: str) -> None:
    print(msg, flush=True)


def load_avg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def box(res: dict[str, Any], key: str) -> str:
    """How busy the box is just before a timed step, when none of this run's processes runs: % of
    all cores over 1 s (others' load; the load average still holds this run's own tree load)."""
    busy = busy_pct(1.0)
    res[key] = {"busy_pct": round(busy, 1), "load_avg": load_avg()}
    return f"box {busy:.0f}% busy, load average {res[key]['load_avg']}"


def leaf_path(k: int) -> str:
    p, c = divmod(k, FANOUT)
    return f"/m/p{p:04d}/n{c:06d}"


# ------------------------------------------------------------------ kazoo


def _client(hosts: str, timeout: float = 10.0) -> Any:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts, timeout=timeout, connection_retry={"max_tries": 3},
                     command_retry={"max_tries": 3})  # fmt: skip
    zk.start(timeout=30)
    return zk


def _close(zk: Any) -> None:
    with contextlib.suppress(Exception):
        zk.stop()
        zk.close()


def set_data(hosts: str, n: int, count: int, seed: int, max_s: float) -> tuple[list[str], bytes]:
    """``count`` setData on random leaves (200 outstanding), the last on the last leaf: the
    paths changed, in order, and the last leaf's new bytes."""
    rng = random.Random(seed)
    paths = [leaf_path(rng.randrange(n)) for _ in range(max(0, count - 1))]
    leaf, _ = last_leaf(n, 0)
    marker = f"setData {count} of {count}: written after the tree's load".encode()
    zk = _client(hosts)
    deadline = time.monotonic() + max_s
    try:
        pending: list[Any] = []
        for i, path in enumerate(paths):
            pending.append(zk.set_async(path, f"setData {i + 1} of {count}".encode()))
            if len(pending) >= 200:
                pending.pop(0).get(timeout=max(0.1, deadline - time.monotonic()))
        for r in pending:
            r.get(timeout=max(0.1, deadline - time.monotonic()))
        if count > 0:
            zk.set(leaf, marker)  # last, after every other write has been answered
    finally:
        _close(zk)
    return paths, marker


def read_nodes(hosts: str, paths: list[str], max_s: float) -> dict[str, NodeView | None]:
    """Data, Stat and ACL of each path through one session, after a sync (None: no such node)."""
    from kazoo.exceptions import NoNodeError

    zk = _client(hosts)
    deadline = time.monotonic() + max_s
    out: dict[str, NodeView | None] = {}
    try:
        zk.sync("/")
        for k in range(0, len(paths), 250):
            batch = [(p, zk.get_async(p), zk.get_acls_async(p)) for p in paths[k : k + 250]]
            for p, g, a in batch:
                left = max(0.1, deadline - time.monotonic())
                try:
                    data, st = g.get(timeout=left)
                    acls, _ = a.get(timeout=left)
                except NoNodeError:
                    out[p] = None
                    continue
                out[p] = (data if data is not None else b"", tuple(int(v) for v in st),
                          tuple(sorted((int(x.perms), str(x.id.scheme), str(x.id.id)) for x in acls)))  # fmt: skip
    finally:
        _close(zk)
    return out


def diff_nodes(ref: dict[str, NodeView | None], got: dict[str, NodeView | None]) -> list[str]:
    """One line per difference: path, field, reference value, other value."""
    lines: list[str] = []
    for path, want in ref.items():
        have = got.get(path)
        if want is None or have is None:
            if (want is None) != (have is None):
                lines.append(f"{path}: exists {want is not None} vs {have is not None}")
            continue
        if want[0] != have[0]:
            lines.append(f"{path}: data {want[0][:40]!r} vs {have[0][:40]!r}")
        for name, a, b in zip(STAT_FIELDS, want[1], have[1], strict=True):
            if a != b:
                lines.append(f"{path}: {name} {a} vs {b}")
        if want[2] != have[2]:
            lines.append(f"{path}: acl {want[2]} vs {have[2]}")
    return lines


def sample_paths(n: int, sample: int, changed: list[str], seed: int) -> list[str]:
    parents, _ = tree_shape(n, FANOUT)
    rng = random.Random(seed + 1)
    leaves = {leaf_path(rng.randrange(n)) for _ in range(min(sample, n))}
    leaves |= set(changed[:100]) | {last_leaf(n, 0)[0]}
    return ["/m", *(f"/m/p{p:04d}" for p in range(parents)), *sorted(leaves)]


# ------------------------------------------------------------------ servers


def srvr(addr: str) -> dict[str, str]:
    """4lw ``srvr`` as a dict (``Mode``, ``Zxid``, ``Node count``, ...); empty if not serving."""
    host, port = addr.rsplit(":", 1)
    out: dict[str, str] = {}
    for line in four_letter(host, int(port), "srvr").splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            out[key.strip()] = value.strip()
    return out


def wait_serving(addrs: list[str], alive: Callable[[], str | None], deadline_s: float) -> float | None:
    """Seconds until every server answers ``srvr`` as leader or follower with exactly one leader;
    None past ``deadline_s``. ``alive`` names a server that exited (then this raises)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        dead = alive()
        if dead:
            raise RuntimeError(dead)
        modes = [srvr(a).get("Mode", "") for a in addrs]
        if modes.count("leader") == 1 and all(m in ("leader", "follower") for m in modes):
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def time_to_serve(addrs: list[str], alive: Callable[[], str | None], leaf: str, want: bytes,
                  deadline_s: float, t0: float) -> dict[str, Any]:
    """From ``t0`` (the spawn): all three serving, then the last leaf read back."""
    serving = wait_serving(addrs, alive, deadline_s)
    if serving is None:
        return {"serving_s": None, "read_s": None}
    serving_s = time.monotonic() - t0
    left = max(1.0, deadline_s - serving_s)
    read = poll_get(",".join(addrs), leaf, want, sync=False, deadline_s=left)
    return {"serving_s": round(serving_s, 2), "read_s": None if read is None else round(time.monotonic() - t0, 2)}


def zk_alive(zk: ZkSide) -> Callable[[], str | None]:
    def check() -> str | None:
        for i in IDS:
            if zk.c.procs[i].poll() is not None:
                return f"ZooKeeper server {i} exited ({zk.c.procs[i].returncode}); see {zk.data_dir(i)}"
        return None

    return check


def zabd_cluster(base: Path) -> LocalCluster:
    # zk_scale's zabd side: disk, fsync on, info logs; 4lw on for the same srvr probe as ZooKeeper's
    return LocalCluster(3, storage="disk", fsync=True, base_dir=base, log_level="info",
                        extra={"zk_4lw_whitelist": "*"})  # fmt: skip


def zabd_alive(c: LocalCluster) -> Callable[[], str | None]:
    def check() -> str | None:
        for i in IDS:
            if not c.alive(i):
                tail = c.log_text(i).strip().splitlines()[-1:] or ["(no output)"]
                return f"zabd node {i} exited ({c.procs[i].returncode}): {tail[0][:300]}"
        return None

    return check


def zk_files(zk: ZkSide, i: int) -> dict[str, Any]:
    """The leader's snapshots and logs: names, newest snapshot's zxid, bytes on disk."""
    snaps = sorted((zk.data_dir(i) / "data" / "version-2").glob("snapshot.*"), key=lambda p: int(p.suffix[1:], 16))
    logs = sorted((zk.data_dir(i) / "datalog" / "version-2").glob("log.*"), key=lambda p: int(p.suffix[1:], 16))
    return {"snapshots": [p.name for p in snaps], "logs": [p.name for p in logs],
            "newest_snapshot_zxid": int(snaps[-1].suffix[1:], 16) if snaps else None,
            "snapshot_bytes": sum(p.stat().st_size for p in snaps),
            "newest_snapshot_bytes": snaps[-1].stat().st_size if snaps else 0,
            "log_bytes_allocated": sum(p.stat().st_blocks * 512 for p in logs)}  # fmt: skip


# ------------------------------------------------------------------ the import


def tree_rss(pid: int) -> int:
    """RSS of ``pid`` and its descendants (a parallel import may fork workers)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss_bytes(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError):
                    todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
    return total


def run_timed(argv: list[str], out_file: Path, max_s: float) -> dict[str, Any]:
    """Run ``argv`` (its output to ``out_file``) with a deadline: wall s, exit code, and through
    /usr/bin/time its CPU s (user + sys) and peak RSS (the largest of it and its children). Not
    ``wait4`` from here: a child's ru_maxrss starts at its parent's RSS at the fork (this
    process's), which ``time``'s is small enough to ignore. Also the largest RSS of its process
    tree seen by sampling every 50 ms (a sum, should the import run workers side by side)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZABD_")}  # the build the tree has
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    usage = out_file.with_suffix(".time")
    t0 = time.monotonic()
    with open(out_file, "wb") as out:
        proc = subprocess.Popen([TIME, "-f", "%M %U %S", "-o", str(usage), *argv], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)  # fmt: skip
    peak_tree, killed = 0, False
    while proc.poll() is None:
        if time.monotonic() - t0 > max_s:
            # time's child first (time itself would wait for it), then time
            with contextlib.suppress(OSError):
                for child in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
                    os.kill(int(child), signal.SIGKILL)
            proc.wait(30)
            killed = True
            break
        peak_tree = max(peak_tree, tree_rss(proc.pid) - rss_bytes(proc.pid))
        time.sleep(0.05)
    wall = time.monotonic() - t0
    fields = (usage.read_text().strip().splitlines() or [""])[-1].split() if usage.exists() else []
    try:
        rss_kib, user, sys_s = int(fields[0]), float(fields[1]), float(fields[2])
    except (IndexError, ValueError):
        rss_kib, user, sys_s = 0, 0.0, 0.0
    return {"wall_s": round(wall, 2), "cpu_s": round(user + sys_s, 2), "peak_rss_bytes": rss_kib * 1024,
            "peak_tree_rss_sampled_bytes": peak_tree, "exit": proc.returncode,
            "killed_at_deadline": killed}  # fmt: skip


def import_argv(zk: ZkSide, i: int, out: Path) -> list[str]:
    d = zk.data_dir(i)
    return [sys.executable, "-m", "zabd", "import-zookeeper", str(d / "data"), "--log-dir", str(d / "datalog"),
            "--out", str(out), "--nodes", "3"]  # fmt: skip


def tail(path: Path, n: int) -> list[str]:
    try:
        return path.read_text(errors="replace").strip().splitlines()[-n:]
    except OSError:
        return []


def profile_import(zk: ZkSide, leader: int, work: Path, top: int, max_s: float) -> list[str]:
    """The import again under cProfile (not the timed run: the profiler slows it), top lines by cumtime."""
    out = work / "profiled-import"
    argv = import_argv(zk, leader, out)
    argv = [sys.executable, "-m", "cProfile", "-s", "cumtime", *argv[1:]]
    # `python -m cProfile -m zabd ...` (3.11 takes -m after cProfile's own options)
    r = run_timed(argv, work / "profiled-import.out", max_s)
    shutil.rmtree(out, ignore_errors=True)
    lines = tail(work / "profiled-import.out", 100_000)
    first = next((k for k, ln in enumerate(lines) if "function calls" in ln), None)
    header = next((k for k, ln in enumerate(lines) if ln.strip().startswith("ncalls")), None)
    head = [f"profiled import: exit {r['exit']}, {r['wall_s']} s under the profiler"]
    return head + ([] if first is None or header is None else lines[first : header + 1 + top])


# ------------------------------------------------------------------ one run


def run_once(args: argparse.Namespace, build: Path, work: Path, res: dict[str, Any], profile: int) -> None:
    """One run, its results into ``res`` as they come (a failed step leaves the ones before it);
    ``profile``: lines of a cProfile of the import to keep (0: none)."""
    n = args.znodes
    res |= {"n": n, "load_avg_start": load_avg()}
    leaf, _ = last_leaf(n, args.data_bytes)
    zk = ZkSide(work / "zk", args.zk_heap)
    zb: LocalCluster | None = None
    try:
        leader = zk.start()
        addrs = [zk.addr(i) for i in IDS]
        connect = ",".join(addrs)
        log(f"ZooKeeper up, leader {leader}; loading {n:,} leaves (at most {args.load_max_seconds:.0f} s)")
        load = run_loader(build, connect, n, args.data_bytes, args.load_max_seconds)
        res["load"] = {"creates": load["creates"], "seconds": load["seconds"]}
        step(f"ZooKeeper: loaded {load['creates']:,} znodes in {load['seconds']:.1f} s")

        changed, marker = set_data(connect, n, args.set_data, args.seed, args.step_max_seconds)
        paths = sample_paths(n, args.sample, changed, args.seed)
        ref = read_nodes(connect, paths, args.step_max_seconds)
        want = ref[leaf][0] if ref.get(leaf) else b""
        if args.set_data and want != marker:
            raise RuntimeError(f"ZooKeeper's {leaf} holds {want[:60]!r}, not the last setData's bytes")
        before = {i: srvr(zk.addr(i)) for i in IDS}
        res["zk_before_stop"] = {i: {k: s.get(k) for k in ("Mode", "Zxid", "Node count")} for i, s in before.items()}
        step(f"ZooKeeper: {args.set_data:,} setData done; reference: {len(ref):,} paths; "
             f"srvr {[(s.get('Mode'), s.get('Zxid'), s.get('Node count')) for s in before.values()]}")

        t0 = time.monotonic()
        clean = [zk.terminate(i) for i in IDS]
        files = zk_files(zk, leader)
        zxid = int(before[leader].get("Zxid", "0x0"), 16)
        snap = files["newest_snapshot_zxid"]
        files["txns_after_newest_snapshot"] = (zxid - snap) if snap is not None and zxid >> 32 == snap >> 32 else None
        res["zk_stop"] = {"s": round(time.monotonic() - t0, 2), "clean": all(clean)}
        res["zk_files"] = files
        res["disk_zk_one_server_bytes"] = zk.disk(leader)
        res["disk_zk_three_bytes"] = sum(zk.disk(i) for i in IDS)
        step(f"ZooKeeper: stopped in {res['zk_stop']['s']:.1f} s (on SIGTERM: {all(clean)}); leader {leader}'s "
             f"dir: {len(files['snapshots'])} snapshots ({files['snapshot_bytes'] / MiB:.0f} MiB), "
             f"{len(files['logs'])} logs, newest snapshot 0x{snap or 0:x}, zxid 0x{zxid:x} "
             f"({files['txns_after_newest_snapshot']} txns after it)")

        # (b) the import, of the leader's dir as the stop left it
        out = work / "zabd"
        log(f"import-zookeeper of server {leader}'s dir; {box(res, 'box_before_import')}")
        imp = run_timed(import_argv(zk, leader, out), work / "import.out", args.import_max_seconds)
        imp["output_tail"] = tail(work / "import.out", 12)
        res["import"] = imp
        if imp["exit"] != 0:
            raise RuntimeError(f"import-zookeeper exited {imp['exit']}"
                               + (" (killed at the deadline)" if imp["killed_at_deadline"] else "")
                               + f": {' | '.join(imp['output_tail'][-3:])}")
        res["disk_zabd_one_node_bytes"] = max(dir_bytes(out / f"data{i}") for i in IDS)
        res["disk_zabd_three_bytes"] = sum(dir_bytes(out / f"data{i}") for i in IDS)
        step(f"import: {imp['wall_s']:.2f} s wall, {imp['cpu_s']:.2f} s CPU, peak RSS "
             f"{imp['peak_rss_bytes'] / MiB:.0f} MiB; zabd data dirs {res['disk_zabd_three_bytes'] / MiB:.0f} MiB")

        # (c) zabd on the import
        zb = zabd_cluster(out)
        log(f"zabd cluster on the import; {box(res, 'box_before_zabd_start')}")
        t1 = time.monotonic()
        zb.start()
        up = time_to_serve([zb.zk_addr(i) for i in IDS], zabd_alive(zb), leaf, want, args.serve_max_seconds, t1)
        res["zabd_start"] = up
        res["zabd_rss_bytes"] = sum(rss_bytes(zb.procs[i].pid) for i in IDS)
        if up["read_s"] is not None:
            got = read_nodes(zb.zk_hosts, paths, args.step_max_seconds)
            diffs = diff_nodes(ref, got)
            res["zabd_compare"] = {"paths": len(ref), "differences": len(diffs), "first": diffs[:20]}
            res["zabd_node_count"] = [srvr(zb.zk_addr(i)).get("Node count") for i in IDS]
        step(f"zabd on the import: all serve {up['serving_s']} s, last leaf read {up['read_s']} s; RSS "
             f"{res['zabd_rss_bytes'] / MiB:.0f} MiB; node count {res.get('zabd_node_count')}; "
             f"compare: {res.get('zabd_compare', {}).get('differences', 'n/a')} differences in {len(ref):,} paths")
        for line in res.get("zabd_compare", {}).get("first", [])[:10]:
            step(f"  zabd differs: {line}")
        zb.stop()
        zb = None
        if profile:
            res["profile"] = profile_import(zk, leader, work, profile, args.import_max_seconds * 3)

        # (a) ZooKeeper's restart from the same directories
        log(f"ZooKeeper restart; {box(res, 'box_before_zk_restart')}")
        t2 = time.monotonic()
        for i in IDS:
            zk.start_node(i)
        up = time_to_serve(addrs, zk_alive(zk), leaf, want, args.serve_max_seconds, t2)
        res["zk_restart"] = up
        res["zk_rss_bytes"] = sum(rss_bytes(zk.pid(i)) for i in IDS)
        if up["read_s"] is not None:
            diffs = diff_nodes(ref, read_nodes(connect, paths, args.step_max_seconds))
            res["zk_compare"] = {"paths": len(ref), "differences": len(diffs), "first": diffs[:20]}
        step(f"ZooKeeper restart: all serve {up['serving_s']} s, last leaf read {up['read_s']} s; RSS "
             f"{res['zk_rss_bytes'] / MiB:.0f} MiB; compare with before the stop: "
             f"{res.get('zk_compare', {}).get('differences', 'n/a')} differences")
        res["zk_files_after_restart"] = zk_files(zk, leader)["snapshots"]
    finally:
        if zb is not None:
            zb.stop()
        zk.stop()


# ------------------------------------------------------------------ report


def metrics(r: dict[str, Any]) -> dict[str, float | None]:
    def g(*keys: str) -> float | None:
        return number_at(r, *keys)

    def mib(v: float | None) -> float | None:
        return None if v is None else v / MiB

    zk, imp, start = g("zk_restart", "read_s"), g("import", "wall_s"), g("zabd_start", "read_s")
    both = None if imp is None or start is None else imp + start
    return {
        "ZooKeeper restart: all 3 serve, s": g("zk_restart", "serving_s"),
        "ZooKeeper restart to serve (last leaf read), s": zk,
        "import wall, s": imp,
        "import CPU (user+sys), s": g("import", "cpu_s"),
        "import peak RSS, MiB": mib(g("import", "peak_rss_bytes")),
        "zabd start on the import: all 3 serve, s": g("zabd_start", "serving_s"),
        "zabd start to serve (last leaf read), s": start,
        "import + start, s": both,
        "import / ZooKeeper restart": None if imp is None or not zk else imp / zk,
        "(import + start) / ZooKeeper restart": None if both is None or not zk else both / zk,
        "ZooKeeper dataDir+dataLogDir, one server, MiB": mib(g("disk_zk_one_server_bytes")),
        "ZooKeeper's newest snapshot (what both read, with the logs after it), MiB":
            mib(g("zk_files", "newest_snapshot_bytes")),
        "zabd data dir, one node, MiB": mib(g("disk_zabd_one_node_bytes")),
        "servers' RSS serving, ZooKeeper (3), MiB": mib(g("zk_rss_bytes")),
        "servers' RSS serving, zabd (3), MiB": mib(g("zabd_rss_bytes")),
        "box busy before the import, % of all cores": g("box_before_import", "busy_pct"),
        "box busy before zabd's start, % of all cores": g("box_before_zabd_start", "busy_pct"),
        "box busy before ZooKeeper's restart, % of all cores": g("box_before_zk_restart", "busy_pct"),
        "sample differences zabd vs ZooKeeper before the stop": g("zabd_compare", "differences"),
        "sample differences ZooKeeper after vs before its restart": g("zk_compare", "differences"),
    }


def fmt(v: float | None, k: str) -> str:
    if v is None:
        return "n/a"
    if "differences" in k or "busy" in k:
        return f"{v:.0f}"
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"


def table(runs: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    per = [metrics(r) for r in runs]
    what = f"median of {len(runs)} runs (min-max)" if len(runs) > 1 else "one run"
    first = runs[0] if runs else {}
    lines = [f"### {args.znodes:,} leaves of {args.data_bytes} B (fanout {FANOUT}) + {args.set_data:,} setData, "
             f"3 servers; {what}; reference sample {first.get('zabd_compare', {}).get('paths', 'n/a')} paths",
             "", "| metric | value |", "|---|---:|"]  # fmt: skip
    for k in metrics({}):
        vals = [v for m in per if (v := m[k]) is not None]
        if not vals:
            lines.append(f"| {k} | n/a |")
            continue
        cell = fmt(statistics.median(vals), k)
        if len(vals) > 1:
            cell += f" ({fmt(min(vals), k)}-{fmt(max(vals), k)})"
        lines.append(f"| {k} | {cell} |")
    return lines


# ------------------------------------------------------------------ main


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(f"signal {signum}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--znodes", type=int, default=1_000_000, help="leaves of the tree (1000000)")
    p.add_argument("--runs", type=int, default=1, help="runs of everything, each on a fresh ensemble (1)")
    p.add_argument("--work", type=Path, help="work dir (default: a new temporary one); each run in run<k>/ there")
    p.add_argument("--keep", action="store_true", help="keep the run dirs (data, logs, the import's output)")
    p.add_argument("--data-bytes", type=int, default=100, help="bytes per leaf (100)")
    p.add_argument("--set-data", type=int, default=5000, help="setData after the load (5000)")
    p.add_argument("--sample", type=int, default=1000, help="random leaves compared, besides /m and parents (1000)")
    p.add_argument("--seed", type=int, default=40, help="seed of the setData and sample paths (40)")
    p.add_argument("--zk-heap", default="2g", help="ZooKeeper -Xms/-Xmx (2g)")
    p.add_argument("--load-max-seconds", type=float, default=1800.0, help="cap on the tree load (1800)")
    p.add_argument("--import-max-seconds", type=float, default=1800.0, help="cap on the import (1800)")
    p.add_argument("--serve-max-seconds", type=float, default=600.0, help="cap on each start-to-serve (600)")
    p.add_argument("--step-max-seconds", type=float, default=300.0, help="cap on setData and each read (300)")
    p.add_argument("--profile", type=int, default=0, metavar="LINES",
                   help="the first run also runs the import under cProfile (untimed), prints LINES by cumtime")
    p.add_argument("--json", type=Path, help="also write the final JSON to this file")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error(f"--runs {args.runs}: expected at least 1")
    if args.znodes < 1 or args.data_bytes < 0 or args.set_data < 0 or args.sample < 0:
        p.error("--znodes >= 1, --data-bytes >= 0, --set-data >= 0, --sample >= 0")
    try:
        tree_shape(args.znodes, FANOUT)
    except ValueError:
        p.error(f"--znodes {args.znodes}: the tree holds at most 10,000,000 leaves")
    ok, why = available()
    if not ok or not Path(SLF4J).exists() or not Path(TIME).exists():
        missing = why or (f"{SLF4J} missing" if not Path(SLF4J).exists() else f"{TIME} missing (apt-get install time)")
        print(f"zk_import: {missing}", file=sys.stderr)
        return 2
    own_work = args.work is None
    work: Path = Path(tempfile.mkdtemp(prefix="zk-import-")) if args.work is None else args.work
    runs_dirs = [work / f"run{k}" for k in range(args.runs)]
    if any(d.exists() for d in runs_dirs):
        print(f"zk_import: --work {work}: {next(d for d in runs_dirs if d.exists())} exists; "
              "expected a directory without run<k>/ in it", file=sys.stderr)
        return 2
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries are our polls; their warnings are noise
    command = shlex.join([sys.executable, *sys.argv])
    print(f"$ {command}", flush=True)
    print(f"zabd (import and servers) on Python {sys.version.split()[0]}, {compiled.describe()}; "
          f"{os.cpu_count()} cores, load average {load_avg()}", flush=True)
    signal.signal(signal.SIGTERM, _sigterm)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results: list[dict[str, Any]] = []
    try:
        compile_loader(work / "build")
        for k, d in enumerate(runs_dirs):
            d.mkdir(parents=True)
            log(f"run {k + 1}/{args.runs} in {d}: box {busy_pct():.0f}% busy, load average {load_avg()}")
            t0 = time.monotonic()
            r: dict[str, Any] = {}
            try:
                run_once(args, work / "build", d, r, args.profile if k == 0 else 0)
            except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError, ValueError) as e:
                r["error"] = f"{type(e).__name__}: {e}"
                step(f"run {k + 1}: ERROR {r['error']}")
            r["wall_s"] = round(time.monotonic() - t0, 1)
            results.append(r)
            if not args.keep:
                shutil.rmtree(d, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work / "build", ignore_errors=True)
            if own_work:
                shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"Command: `{command}`")
    print()
    print("\n".join(table([r for r in results if "error" not in r] or results, args)))
    for k, r in enumerate(results):
        if "error" in r:
            print(f"\nrun {k + 1}: ERROR {r['error']}")
        if r.get("import", {}).get("output_tail"):
            print(f"\nimport-zookeeper's output, run {k + 1} (tail):")
            print("\n".join(f"    {ln}" for ln in r["import"]["output_tail"]))
        if r.get("profile"):
            print(f"\nimport-zookeeper under cProfile, run {k + 1}:")
            print("\n".join(r["profile"]))
    if args.keep:
        print(f"\nrun dirs kept in {work}")
    out = {"bench": "zk_import", "command": command, "started": started,
           "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cores": os.cpu_count(),
           "zabd_build": compiled.describe(), "config": {k: (str(v) if isinstance(v, Path) else v)
                                                         for k, v in vars(args).items()},
           "results": results}  # fmt: skip
    line = json.dumps(out, separators=(",", ":"), default=str)
    print()
    if args.json:
        args.json.write_text(line + "\n")
    print(line, flush=True)
    bad = any("error" in r or r.get("zabd_compare", {}).get("differences") for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
